//! asyncio on a completion queue: the Rust half of `await Pool.run(fn, *args)`.
//!
//! `Completions` wraps a `wspool::CompletionQueue` on the pool. `submit`
//! sends `fn(*args)` to the pool with the asyncio future as its payload; the
//! loop watches `fileno()` with `loop.add_reader` and calls `drain()`, which
//! resolves every finished future on the loop's thread: one loop wake-up per
//! batch of completions, not one `call_soon_threadsafe` per future.

use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use wspool::{CloseMode, CompletionQueue, CqEvent, CqOptions, CqStatus};

use crate::fork::check_gen;
use crate::pool::{Core, Owner};

/// One `run` call: its asyncio future, the call, and (once run) its outcome.
struct Item {
    future: Py<PyAny>,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    result: Option<PyResult<Py<PyAny>>>,
}

/// A completion queue for one asyncio loop (use `wspool.Pool.run`).
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Completions {
    cq: CompletionQueue<Item>,
    owner: Arc<Owner>,
}

fn resolve(py: Python<'_>, it: Item, status: CqStatus) -> PyResult<()> {
    let fut = it.future.bind(py);
    // The awaiting task may have been cancelled meanwhile: nothing to resolve.
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match (status, it.result) {
        (CqStatus::Ran, Some(Ok(v))) => fut.call_method1("set_result", (v,))?,
        (CqStatus::Ran, Some(Err(e))) => fut.call_method1("set_exception", (e.into_value(py),))?,
        (CqStatus::Panicked, _) => {
            fut.call_method1("set_exception", (PyRuntimeError::new_err("the task panicked").into_value(py),))?
        }
        // Cancelled by a pool shutdown, or never run because the interpreter is exiting.
        _ => fut.call_method0("cancel")?,
    };
    Ok(())
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
        Ok(Completions { cq, owner })
    }

    /// The fd to give `loop.add_reader`; readable while completions wait.
    fn fileno(&self) -> PyResult<i32> {
        self.cq.fd().ok_or_else(|| PyRuntimeError::new_err("no fd"))
    }

    /// Runs `fn_(*args)` on the pool; `drain` will resolve `future` with its outcome.
    fn submit(&self, future: Py<PyAny>, fn_: Py<PyAny>, args: Py<PyTuple>) -> PyResult<()> {
        let shared = self.owner.shared.clone();
        check_gen(shared.gen_)?;
        let item = Item { future, func: fn_, args, result: None };
        self.cq
            .submit(item, move |it| {
                shared.run_python(|py| {
                    it.result = Some(it.func.bind(py).call1(it.args.bind(py)).map(Bound::unbind));
                });
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot schedule the call: {:?}", e.kind)))
    }

    /// Resolves every finished future (on this, the loop's, thread); returns how many.
    fn drain(&self, py: Python<'_>) -> PyResult<usize> {
        let mut first_err = None;
        let n = self.cq.drain(usize::MAX, |e| {
            if let CqEvent::Done(it, status) = e
                && let Err(err) = resolve(py, it, status)
            {
                first_err.get_or_insert(err);
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
