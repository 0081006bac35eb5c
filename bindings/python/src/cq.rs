//! asyncio on a completion queue: the Rust half of `await Pool.run(fn, *args)`.
//!
//! `Completions` wraps a `wspool::CompletionQueue` on the pool. `submit`
//! sends `fn(*args)` to the pool with the asyncio future as its payload; the
//! loop watches `fileno()` with `loop.add_reader` and calls `drain()`, which
//! resolves every finished future on the loop's thread: one loop wake-up per
//! batch of completions, not one `call_soon_threadsafe` per future.
//!
//! An await at a time (nothing else in flight on the queue) of a quick call
//! takes a shorter path. Measured on the 2-core VM, such an await cost ~36
//! µs, of which ~14 µs went into the system call that wakes an idle worker
//! and ~12 µs into that worker sleeping on the GIL the loop still held:
//!
//! - `submit` hands the call to the pool with the GIL released, so the
//!   worker it wakes runs the call at once instead of waiting for the GIL
//!   until the loop next goes idle;
//! - it then waits for the call's Python part to return, GIL still released,
//!   for at most the spin limit (`wait::yield_until`), and resolves the
//!   future itself: the task goes on without the loop sleeping in its
//!   selector and being woken through the fd. A call not back by then comes
//!   through the fd as usual.
//!
//! Whether calls are quick is learnt (`wait::loop_wait_worthwhile`: more
//! than 4 misses among the last 16 turn the wait off) from the waits and,
//! while the wait is off, from how long each call submitted alone took to
//! come back (`wait::loop_learn`), so no call is waited for just to find
//! out. Without a wait `submit` keeps the GIL: released, it would go to the
//! worker at once, and the loop would wait to get it back, up to the
//! interpreter's switch interval (5 ms) behind a Python-heavy call.
//!
//! Such an await returns without a trip through the loop, as asyncio's own
//! awaits of something already available do; one in `FAST_STREAK` in a row
//! still yields to the loop (the Python side's `sleep(0)`), so a loop of
//! quick calls cannot starve other tasks and I/O. With other calls in
//! flight every completion is left to the fd: a burst is submitted without
//! a GIL hand-off per call and drained as one batch.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use wspool::{CloseMode, CompletionQueue, CqEvent, CqOptions, CqStatus, SpawnOptions};

use crate::fork::check_gen;
use crate::pool::{Core, Group, Owner, Serial, deadline_of, parse_priority};
use crate::wait::{loop_learn, loop_wait_worthwhile, yield_until};

/// One `run` call: its asyncio future, the call, and (once run) its outcome.
struct Item {
    future: Py<PyAny>,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    result: Option<PyResult<Py<PyAny>>>,
    /// Set for a call submitted alone without a wait: when it was
    /// submitted, and (once run) how long its Python part took from there,
    /// for the loop's learner (`wait::loop_learn`).
    learn: Option<Instant>,
    took: Option<Duration>,
}

/// A completion queue for one asyncio loop (use `wspool.Pool.run`).
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Completions {
    cq: CompletionQueue<Item>,
    owner: Arc<Owner>,
    /// Calls whose Python part has returned, counted on the worker after it
    /// released the GIL: `submit` watches it for its own call.
    finished: Arc<AtomicU64>,
    /// Futures `submit` resolved in a row (touched on the loop's thread only).
    streak: AtomicU64,
}

/// One await in this many, when each resolved in `submit`, yields to the loop.
const FAST_STREAK: u64 = 16;

fn resolve(py: Python<'_>, it: Item, status: CqStatus) -> PyResult<()> {
    let fut = it.future.bind(py);
    // The awaiting task may have been cancelled meanwhile: nothing to resolve.
    if fut.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    let set_exception = intern!(py, "set_exception");
    match (status, it.result) {
        (CqStatus::Ran, Some(Ok(v))) => fut.call_method1(intern!(py, "set_result"), (v,))?,
        (CqStatus::Ran, Some(Err(e))) => fut.call_method1(set_exception, (e.into_value(py),))?,
        // Not started by its deadline (`Pool.options(...).run`).
        (CqStatus::Expired, _) => fut.call_method1(set_exception, (crate::call::deadline_exceeded(py)?,))?,
        (CqStatus::Panicked, _) => {
            fut.call_method1(set_exception, (PyRuntimeError::new_err("the task panicked").into_value(py),))?
        }
        // Cancelled by a pool shutdown, or never run because the interpreter is exiting.
        _ => fut.call_method0(intern!(py, "cancel"))?,
    };
    Ok(())
}

/// Whether `future` was cancelled (an error reading it counts as not: the call runs).
fn awaited_cancelled(py: Python<'_>, future: &Py<PyAny>) -> bool {
    future.bind(py).call_method0(intern!(py, "cancelled")).and_then(|c| c.is_truthy()).unwrap_or(false)
}

#[pymethods]
impl Completions {
    #[new]
    fn new(core: &Core) -> PyResult<Self> {
        core.live()?;
        let owner = core.owner.clone();
        // No overload signal: asyncio callers await, they do not shed load.
        let opts = CqOptions { overload_target: None, ..CqOptions::default() };
        let cq = CompletionQueue::new(&owner.pool, opts)
            .map_err(|e| PyRuntimeError::new_err(format!("cannot create the completion queue's fd: {e}")))?;
        Ok(Completions { cq, owner, finished: Arc::default(), streak: AtomicU64::new(0) })
    }

    /// The fd to give `loop.add_reader`; readable while completions wait.
    fn fileno(&self) -> PyResult<i32> {
        self.cq.fd().ok_or_else(|| PyRuntimeError::new_err("no fd"))
    }

    /// Runs `fn_(*args)` on the pool; `drain` resolves `future` with its
    /// outcome, unless this call already did (alone on the queue and quick:
    /// see the module documentation). Returns True when the awaiting task
    /// should yield to the loop once before it goes on. The keywords are
    /// `Pool.options`' (a call not started by its deadline resolves
    /// `future` with `wspool.DeadlineExceeded`).
    #[pyo3(signature = (future, fn_, args, *, deadline=None, timeout=None, priority="normal", group=None, lane=None, label=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
        future: Py<PyAny>,
        fn_: Py<PyAny>,
        args: Py<PyTuple>,
        deadline: Option<f64>,
        timeout: Option<f64>,
        priority: &str,
        group: Option<PyRef<'_, Group>>,
        lane: Option<PyRef<'_, Serial>>,
        label: Option<&str>,
    ) -> PyResult<bool> {
        let shared = self.owner.shared.clone();
        check_gen(shared.gen_)?;
        // Published by the work itself, below (`label.rs`).
        let label = match label {
            Some(name) => Some(crate::label::explicit(name)),
            None => crate::label::label_of(py, fn_.bind(py)),
        };
        let opts = SpawnOptions {
            group: group.as_deref().map(|g| &*g.group),
            serial: lane.as_deref().map(|l| &*l.serial),
            deadline: deadline_of(deadline, timeout)?,
            priority: parse_priority(priority)?,
            ..SpawnOptions::default()
        };
        // Waiting pays for quick calls only; for the others, submitting
        // without the GIL would only hand it to the worker at once and have
        // the loop wait to get it back (up to the switch interval, 5 ms).
        let alone = self.cq.pending() == 0;
        let wait = alone && loop_wait_worthwhile();
        let before = self.finished.load(Acquire);
        let finished = self.finished.clone();
        let learn = (alone && !wait).then(Instant::now);
        let item = Item { future, func: fn_, args, result: None, learn, took: None };
        // Counted in the group's calls until the work ran or was dropped.
        let ticket = group.as_deref().map(|g| g.count.enter());
        let submit = move || {
            self.cq
                .submit_with(opts, item, move |it| {
                    let _ticket = ticket;
                    let mut call = || {
                        shared.run_python(false, &|| false, |py| {
                            // The awaiting task was cancelled while the call
                            // waited (asyncio cancels the future it awaited):
                            // the call is dropped unrun; `drain` finds the
                            // future done and leaves it. A read of the
                            // future's state, under the GIL, as the loop's
                            // own writes are.
                            if awaited_cancelled(py, &it.future) {
                                it.learn = None;
                                return;
                            }
                            it.result = Some(it.func.bind(py).call1(it.args.bind(py)).map(Bound::unbind));
                        })
                    };
                    match label {
                        Some(label) => wspool::with_label(label, call),
                        None => call(),
                    };
                    it.took = it.learn.map(|t| t.elapsed());
                    finished.fetch_add(1, Release);
                })
                // Boxed: a refused item comes back to be dropped with the GIL.
                .map_err(Box::new)
        };
        let over = || self.finished.load(Acquire) != before;
        // A pool with reject="block" may wait for room: never with the GIL
        // its workers need to make some.
        let quick = if wait || self.owner.shared.submit_may_block {
            py.detach(|| submit().map(|()| wait && yield_until(&over)))
        } else {
            submit().map(|()| false)
        };
        let quick = quick.map_err(|e| PyRuntimeError::new_err(format!("cannot schedule the call: {:?}", e.kind)))?
            // Run inside `submit` (reject="caller_runs") without a wait.
            || (alone && over());
        // The completion is queued just after `finished` moves: if this drain
        // comes first, it is left to the fd.
        if quick && self.drain(py)? > 0 && self.cq.pending() == 0 {
            let n = self.streak.fetch_add(1, Relaxed) + 1;
            return Ok(n.is_multiple_of(FAST_STREAK));
        }
        self.streak.store(0, Relaxed);
        Ok(false)
    }

    /// Resolves every finished future (on this, the loop's, thread); returns how many.
    fn drain(&self, py: Python<'_>) -> PyResult<usize> {
        let mut first_err = None;
        let n = self.cq.drain(usize::MAX, |e| {
            if let CqEvent::Done(it, status) = e {
                if let Some(took) = it.took {
                    loop_learn(took);
                }
                if let Err(err) = resolve(py, it, status) {
                    first_err.get_or_insert(err);
                }
            }
        });
        match first_err {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Calls not yet resolved by `drain`.
    fn pending(&self) -> usize {
        self.cq.pending()
    }

    /// Stops accepting calls, lets the pool skip those not started, waits for
    /// the rest (without holding the GIL, which they need) and cancels or
    /// resolves every future still pending.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut left = Vec::new();
        let _ = py.detach(|| self.cq.close(CloseMode::Cancel, None, |e| left.push(e)));
        for e in left {
            if let CqEvent::Done(it, status) = e {
                resolve(py, it, status)?;
            }
        }
        Ok(())
    }
}
