//! `Core` (one `wspool::Pool` and the Python-facing state its tasks share),
//! `Group`, `Serial`, `Stats` and `blocking`.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use wspool::{Growth, Pool, Reject, Shutdown};

use crate::call::{Target, shutdown_error, submit_batch_calls, submit_call};
use crate::fork::{ForkLocal, INIT_DONE, REAPERS, WORKER_OF, check_gen, current_gen, release_thread_state};
use crate::map::{MapIter, start_map};
use crate::permit::{Places, RegionKind, region_enter, region_leave};
use crate::wait::{WaitOn, poll_until, wait_released};

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// What tasks need from their pool. Not the `Pool` itself: a task that held
/// a pool handle could drop the last one on a worker. (Map tasks hold an
/// [`Owner`], whose drop is safe on any thread.)
pub(crate) struct Shared {
    id: u64,
    pub(crate) gen_: u64,
    /// Called once per worker thread, with its index, before its first Python task.
    worker_init: Option<Py<PyAny>>,
    /// Set when `worker_init` raised: the pool is broken, like ThreadPoolExecutor's.
    broken: OnceLock<String>,
    /// Set as `shutdown()` starts: from then on submissions from any thread
    /// (the pool's own included) fail, so a task that resubmits itself
    /// cannot keep a draining pool alive.
    closed: AtomicBool,
    pub(crate) future_cls: Py<PyAny>,
    /// The reject policy can make a submit wait or run the task inline: release the GIL around it.
    pub(crate) submit_may_block: bool,
    pub(crate) queue_capacity: usize,
    /// `growth="compensate"`: one place per call allowed to execute at
    /// once (`max_workers`), see `permit.rs`; None for other policies.
    places: Option<Arc<Places>>,
}

impl Shared {
    pub(crate) fn is_worker_here(&self) -> bool {
        WORKER_OF.get() == self.id
    }

    pub(crate) fn places(&self) -> Option<&Arc<Places>> {
        self.places.as_ref()
    }

    /// What `submit` and `map` check first, in `ThreadPoolExecutor`'s order:
    /// forked, broken, shut down.
    pub(crate) fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        check_gen(self.gen_)?;
        if let Some(err) = self.broken_error(py) {
            return Err(err);
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(shutdown_error());
        }
        if crate::fork::INTERPRETER_SHUTDOWN.load(Ordering::SeqCst) {
            return Err(crate::call::interpreter_shutdown_error());
        }
        Ok(())
    }

    pub(crate) fn broken_error(&self, py: Python<'_>) -> Option<PyErr> {
        let msg = self.broken.get()?;
        Some(match py.import("concurrent.futures.thread").and_then(|m| m.getattr("BrokenThreadPool")) {
            Ok(cls) => match cls.call1((msg.as_str(),)) {
                Ok(exc) => PyErr::from_value(exc),
                Err(e) => e,
            },
            Err(e) => e,
        })
    }

    /// Runs `f` attached to Python on behalf of this pool: on a worker, makes
    /// sure the thread has its persistent state and ran the per-thread init.
    /// Returns false (dropping `f` unrun) if the interpreter is gone.
    pub(crate) fn run_python<F>(&self, inner: bool, awaited: &dyn Fn() -> bool, f: F) -> bool
    where
        F: for<'py> FnOnce(Python<'py>),
    {
        self.run_python_if(inner, awaited, &|| true, f)
    }

    /// As `run_python`, for work that other threads may have done while
    /// this one waited for a place or the GIL (a map's chunks): `wanted()`
    /// is asked before the thread state is made and again once the GIL is
    /// held, and `f` is dropped unrun when it says no. So a worker whose
    /// task came too late neither makes its thread state nor runs the
    /// per-thread init (Python code) for nothing, after the work is over.
    pub(crate) fn run_python_if<F>(
        &self,
        inner: bool,
        awaited: &dyn Fn() -> bool,
        wanted: &dyn Fn() -> bool,
        f: F,
    ) -> bool
    where
        F: for<'py> FnOnce(Python<'py>),
    {
        let attach = || self.attach_if(wanted, f);
        match &self.places {
            // Taken before attaching: a place is never waited for holding
            // the GIL. Only on the pool's threads: a call that
            // reject="caller_runs" runs on the submitting thread is that
            // thread's own work (it must not wait for the pool).
            Some(places) if self.is_worker_here() => places.run(inner, awaited, attach),
            _ => attach(),
        }
    }

    /// Runs `f` attached to Python on behalf of this pool, on a place the
    /// caller holds already (or needs none); as `run_python`.
    pub(crate) fn attach<F>(&self, f: F) -> bool
    where
        F: for<'py> FnOnce(Python<'py>),
    {
        self.attach_if(&|| true, f)
    }

    /// `attach` for work that may be gone by then; as `run_python_if`.
    pub(crate) fn attach_if<F>(&self, wanted: &dyn Fn() -> bool, f: F) -> bool
    where
        F: for<'py> FnOnce(Python<'py>),
    {
        let on_worker = self.is_worker_here();
        // Never once the interpreter is finalizing: CPython ends a thread
        // that takes the GIL then, which Rust frames cannot survive.
        crate::fork::gated(|| {
            if !wanted() {
                return Some(());
            }
            if on_worker {
                crate::fork::ensure_thread_state();
            }
            Python::try_attach(|py| {
                if !wanted() {
                    return;
                }
                if on_worker && !INIT_DONE.get() {
                    INIT_DONE.set(true);
                    self.run_worker_init(py);
                }
                f(py)
            })
        })
        .is_some()
    }

    fn run_worker_init(&self, py: Python<'_>) {
        let Some(init) = &self.worker_init else { return };
        let index = wspool::current_index().unwrap_or(0);
        // The Python side logs the initializer's exception, as ThreadPoolExecutor does.
        if init.bind(py).call1((index,)).is_err() {
            let _ = self.broken.set("A thread initializer failed, the thread pool is not usable anymore".to_owned());
        }
    }
}

/// The pool and its Python-facing state, shared by `Core`, `Group` and
/// `Serial` objects. Dropping the last one shuts the pool down (drain) and
/// joins it on a background thread, never while holding the GIL.
pub(crate) struct Owner {
    pub(crate) pool: ManuallyDrop<Pool>,
    pub(crate) shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: `pool` is taken exactly once, here.
        let pool = unsafe { ManuallyDrop::take(&mut self.pool) };
        if self.shared.gen_ != current_gen() {
            // Inherited through fork(): the threads are gone; never join them.
            std::mem::forget(pool);
            return;
        }
        let _ = pool.shutdown(Shutdown::Drain, Some(Duration::ZERO));
        let pool = ManuallyDrop::new(pool);
        REAPERS.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new().name("wspool-reaper".into()).spawn(move || {
            drop(ManuallyDrop::into_inner(pool));
            REAPERS.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            // No thread to join it on: leak the pool (its threads keep running
            // queued work) rather than block here, possibly holding the GIL.
            REAPERS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Every pool made in this process, for interpreter exit (`fork::_atexit`):
/// a pool kept alive by a group or a serial queue alone is drained too.
/// Behind a pointer so that a forked child starts with a fresh list (a
/// process-wide lock another thread held at the fork stays held in the
/// child; the old list is leaked there, once per fork).
static OWNERS: std::sync::atomic::AtomicPtr<std::sync::Mutex<Vec<std::sync::Weak<Owner>>>> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

fn owners() -> &'static std::sync::Mutex<Vec<std::sync::Weak<Owner>>> {
    let p = OWNERS.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: set once per process generation from a leaked Box, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(std::sync::Mutex::new(Vec::new())));
    match OWNERS.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked, never freed.
        Ok(_) => unsafe { &*fresh },
        Err(current) => {
            // SAFETY: ours lost the race and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above.
            unsafe { &*current }
        }
    }
}

/// In a forked child: a fresh list of pools (see `OWNERS`).
pub(crate) fn forget_owners_after_fork() {
    OWNERS.store(std::ptr::null_mut(), Ordering::Release);
}

fn register_owner(owner: &Arc<Owner>) {
    let mut owners = crate::lock(owners());
    owners.retain(|w| w.strong_count() > 0);
    owners.push(Arc::downgrade(owner));
}

/// At interpreter exit: every live pool of this process stops accepting
/// work and drains (GIL released, as `ThreadPoolExecutor`'s exit hook
/// joins its workers).
pub(crate) fn drain_all_pools(py: Python<'_>) {
    let owners: Vec<Arc<Owner>> = crate::lock(owners()).iter().filter_map(std::sync::Weak::upgrade).collect();
    for owner in &owners {
        if owner.shared.gen_ != current_gen() {
            continue;
        }
        owner.shared.closed.store(true, Ordering::SeqCst);
    }
    py.detach(|| {
        for owner in &owners {
            if owner.shared.gen_ == current_gen() {
                let _ = owner.pool.shutdown(Shutdown::Drain, None);
            }
        }
    });
    // Dropped attached: the last reference to a pool joins it on a reaper.
    drop(owners);
}

fn parse_growth(s: &str) -> PyResult<Growth> {
    Ok(match s {
        "adaptive" => Growth::Adaptive,
        "scale_first" => Growth::ScaleFirst,
        "queue_first" => Growth::QueueFirst,
        "fixed" => Growth::Fixed,
        "compensate" => Growth::Compensate,
        _ => {
            return Err(PyValueError::new_err(format!(
                "growth must be one of 'compensate', 'fixed', 'adaptive', 'scale_first', 'queue_first', not {s:?}"
            )));
        }
    })
}

fn parse_reject(s: &str) -> PyResult<Reject> {
    Ok(match s {
        "abort" => Reject::Abort,
        "caller_runs" => Reject::CallerRuns,
        "block" => Reject::Block,
        "discard_oldest" => Reject::DiscardOldest,
        _ => {
            return Err(PyValueError::new_err(format!(
                "reject must be one of 'abort', 'caller_runs', 'block', 'discard_oldest', not {s:?}"
            )));
        }
    })
}

/// One wspool pool. Use `wspool.Pool`, which wraps it in a `concurrent.futures.Executor`.
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Core {
    pub(crate) owner: Arc<Owner>,
}

impl Core {
    pub(crate) fn live(&self) -> PyResult<&Owner> {
        check_gen(self.owner.shared.gen_)?;
        Ok(&self.owner)
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (*, future_cls, name, min_threads, max_threads, queue_capacity, growth, reject, keep_alive, spin_max_us=None, worker_init=None, stack_size=None, thread_nice=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        future_cls: Py<PyAny>,
        name: String,
        min_threads: usize,
        max_threads: usize,
        queue_capacity: usize,
        growth: &str,
        reject: &str,
        keep_alive: f64,
        spin_max_us: Option<u32>,
        worker_init: Option<Py<PyAny>>,
        stack_size: Option<usize>,
        thread_nice: u32,
    ) -> PyResult<Self> {
        let growth = parse_growth(growth)?;
        let reject = parse_reject(reject)?;
        if !keep_alive.is_finite() || keep_alive <= 0.0 {
            return Err(PyValueError::new_err(format!(
                "keep_alive must be a positive number of seconds, not {keep_alive}"
            )));
        }
        let keep_alive =
            Duration::try_from_secs_f64(keep_alive).map_err(|_| PyValueError::new_err("keep_alive is out of range"))?;
        if let Some(init) = &worker_init
            && !init.bind(py).is_callable()
        {
            return Err(PyTypeError::new_err("worker_init must be callable"));
        }
        let id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
        let mut builder = Pool::builder()
            .name(name)
            .min_threads(min_threads)
            .max_threads(max_threads)
            .queue_capacity(queue_capacity)
            .growth(growth)
            .reject(reject)
            .keep_alive(keep_alive)
            // Python code runs behind the GIL: one core at most. With this
            // cap the starvation monitor stops adding threads once the
            // pool's workers keep a core busy, so threads queued on the GIL
            // do not read as starvation.
            .cpu_parallelism(1)
            .thread_nice(thread_nice)
            .on_thread_start(move |_| WORKER_OF.set(id))
            .on_thread_stop(|_| release_thread_state());
        if let Some(us) = spin_max_us {
            builder = builder.spin_max_us(us);
        }
        if let Some(bytes) = stack_size {
            builder = builder.stack_size(bytes);
        }
        let pool = py.detach(move || builder.build()).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let shared = Arc::new(Shared {
            id,
            gen_: current_gen(),
            worker_init,
            broken: OnceLock::new(),
            closed: AtomicBool::new(false),
            future_cls,
            submit_may_block: matches!(reject, Reject::Block | Reject::BlockFor(_) | Reject::CallerRuns),
            queue_capacity,
            places: (growth == Growth::Compensate).then(|| Places::new(min_threads)),
        });
        let owner = Arc::new(Owner { pool: ManuallyDrop::new(pool), shared });
        register_owner(&owner);
        Ok(Core { owner })
    }

    /// Queues `fn(*args, **kwargs)`; returns its `concurrent.futures.Future`.
    #[pyo3(signature = (fn_, /, *args, **kwargs))]
    fn submit<'py>(
        &self,
        py: Python<'py>,
        fn_: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let owner = self.live()?;
        submit_call(py, &owner.shared, Target::Pool(&owner.pool), None, fn_, args, kwargs)
    }

    /// `Pool.options(...).submit`: queues `fn(*args, **kwargs)` with a
    /// deadline (`deadline`: absolute, on `time.monotonic()`'s clock;
    /// `timeout`: seconds from now; the earlier wins), a priority, and
    /// optionally in `group` and/or on `lane`, labelled `label` (default:
    /// `fn_`'s `__qualname__`); returns its Future.
    #[pyo3(signature = (fn_, args, kwargs, *, deadline=None, timeout=None, priority="normal", group=None, lane=None, label=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit_opts<'py>(
        &self,
        py: Python<'py>,
        fn_: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        deadline: Option<f64>,
        timeout: Option<f64>,
        priority: &str,
        group: Option<PyRef<'py, Group>>,
        lane: Option<PyRef<'py, Serial>>,
        label: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let owner = self.live()?;
        let priority = parse_priority(priority)?;
        let deadline = deadline_of(deadline, timeout)?;
        let count = group.as_deref().map(|g| g.count.clone());
        let opts = wspool::SpawnOptions {
            group: group.as_deref().map(|g| &*g.group),
            serial: lane.as_deref().map(|l| &*l.serial),
            deadline,
            priority,
            label: label.map(crate::label::explicit),
            ..wspool::SpawnOptions::default()
        };
        submit_call(py, &owner.shared, Target::With(&owner.pool, opts), count.as_ref(), fn_, args, kwargs)
    }

    /// Queues `fn(*args)` for each tuple of `arg_tuples` as one batch; returns the futures.
    #[pyo3(signature = (fn_, arg_tuples))]
    fn submit_batch<'py>(
        &self,
        py: Python<'py>,
        fn_: &Bound<'py, PyAny>,
        arg_tuples: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let owner = self.live()?;
        submit_batch_calls(py, &owner.shared, &owner.pool, fn_, arg_tuples)
    }

    /// `Executor.map`: calls `fn(*args)` for each tuple of `arg_tuples`, `chunksize` calls per task.
    #[pyo3(signature = (fn_, arg_tuples, chunksize, timeout))]
    fn map(
        &self,
        py: Python<'_>,
        fn_: Py<PyAny>,
        arg_tuples: &Bound<'_, PyAny>,
        chunksize: usize,
        timeout: Option<f64>,
    ) -> PyResult<MapIter> {
        start_map(py, &self.owner, fn_, arg_tuples, chunksize, timeout)
    }

    /// Stops accepting work. `wait`: block (GIL released, Ctrl-C honoured)
    /// until queued and running tasks finish. `cancel_futures`: drop queued
    /// tasks unrun and cancel their futures.
    #[pyo3(signature = (wait = true, cancel_futures = false))]
    fn shutdown(&self, py: Python<'_>, wait: bool, cancel_futures: bool) -> PyResult<()> {
        if self.owner.shared.gen_ != current_gen() {
            return Ok(()); // nothing of it runs in this process
        }
        self.owner.shared.closed.store(true, Ordering::SeqCst);
        let pool: &Pool = &self.owner.pool;
        let mode = if cancel_futures { Shutdown::Cancel } else { Shutdown::Drain };
        if cancel_futures && !self.owner.shared.is_worker_here() {
            // ThreadPoolExecutor's threads take queued calls as they are
            // submitted, so there `cancel_futures` cancels only what no idle
            // thread could take. Match that: let idle workers, already woken
            // for it, take what they can first (a second at most: a hang guard).
            let taken = || {
                let s = pool.stats();
                s.idle_threads == 0 || s.queued == 0
            };
            wait_released(py, Some(1.0), Some(&taken), |t| poll_until(&taken, t), WaitOn::Foreign, None)?;
        }
        if !wait || self.owner.shared.is_worker_here() {
            // A task cannot wait for its own pool to drain: it would wait for itself.
            let _ = py.detach(|| pool.shutdown(mode, Some(Duration::ZERO)));
            if wait {
                // The shutdown has begun; returning would claim the pool closed with this call
                // (and maybe queued ones) not run yet. ThreadPoolExecutor raises here too.
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "cannot join current thread: shutdown(wait=True) was called from one of the pool's own tasks, \
                     which cannot wait for itself; the pool finishes the queued calls and stops in the background",
                ));
            }
            return Ok(());
        }
        wait_released(py, None, None, |slice| pool.shutdown(mode, slice).is_ok(), WaitOn::Foreign, None).map(|_| ())
    }

    /// A snapshot of the pool's counters.
    fn stats(&self) -> PyResult<Stats> {
        Ok(Stats::from(self.live()?.pool.stats()))
    }

    /// A snapshot of what every pool thread and queue is doing (issue 26).
    fn dump(&self) -> PyResult<PoolDump> {
        Ok(PoolDump::from(self.live()?.pool.dump()))
    }

    /// A task group on this pool.
    fn group(&self) -> PyResult<Group> {
        let owner = self.live()?;
        Ok(Group {
            group: ForkLocal::new(owner.pool.group(), owner.shared.gen_),
            count: Arc::default(),
            owner: self.owner.clone(),
        })
    }

    /// A serial queue on this pool.
    fn serial(&self) -> PyResult<Serial> {
        let owner = self.live()?;
        Ok(Serial {
            serial: ForkLocal::new(owner.pool.serial(), owner.shared.gen_),
            owner: self.owner.clone(),
            priority: wspool::Priority::Normal,
        })
    }

    /// A lane: a FIFO queue running at most `limit` of its tasks at once,
    /// whose turns wait at `priority`.
    #[pyo3(signature = (limit, priority = "normal"))]
    fn lane(&self, limit: usize, priority: &str) -> PyResult<Serial> {
        let owner = self.live()?;
        if limit == 0 {
            return Err(PyValueError::new_err("a lane's limit must be at least 1"));
        }
        let priority = parse_priority(priority)?;
        Ok(Serial {
            serial: ForkLocal::new(owner.pool.lane_with_priority(limit, priority), owner.shared.gen_),
            owner: self.owner.clone(),
            priority,
        })
    }

    /// True on this pool's worker threads.
    fn is_pool_thread(&self) -> bool {
        self.owner.shared.is_worker_here()
    }

    /// True once shutdown started.
    #[getter]
    fn is_shutdown(&self) -> bool {
        self.owner.shared.gen_ != current_gen()
            || self.owner.shared.closed.load(Ordering::SeqCst)
            || self.owner.pool.is_shutdown()
    }

    /// True in a child process that inherited this pool through fork().
    #[getter]
    fn forked(&self) -> bool {
        self.owner.shared.gen_ != current_gen()
    }

    /// Calls executing now outside waits and `blocking()` regions (at most
    /// `max_workers`); None unless growth is "compensate".
    #[getter]
    fn executing(&self) -> Option<usize> {
        self.owner.shared.places.as_ref().map(|p| p.executing())
    }

    /// The message of the pool's BrokenThreadPool, if an initializer failed.
    #[getter]
    fn broken(&self) -> Option<String> {
        self.owner.shared.broken.get().cloned()
    }
}

/// A set of tasks to wait for together (`pool.group()`).
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Group {
    pub(crate) group: ForkLocal<wspool::Group>,
    /// Its calls not finished yet (see `GroupCount`).
    pub(crate) count: Arc<crate::call::GroupCount>,
    owner: Arc<Owner>,
}

#[pymethods]
impl Group {
    /// Queues `fn(*args, **kwargs)` as part of this group; returns its Future.
    #[pyo3(signature = (fn_, /, *args, **kwargs))]
    fn submit<'py>(
        &self,
        py: Python<'py>,
        fn_: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        submit_call(py, &self.owner.shared, Target::Group(&self.group), Some(&self.count), fn_, args, kwargs)
    }

    /// Waits until every task of the group finished; False on timeout.
    /// Never runs other tasks on the waiting thread.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        check_gen(self.owner.shared.gen_)?;
        let group: &wspool::Group = &self.group;
        if timeout.is_none() && group.would_deadlock() {
            // A call of this group waits for its own group (issue 26).
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "wait would deadlock: a call of this group waits for its own group",
            ));
        }
        let shared = &self.owner.shared;
        let on = if shared.is_worker_here() {
            WaitOn::Own { places: shared.places(), core_counts: false }
        } else {
            WaitOn::Foreign
        };
        let count = &self.count;
        if let WaitOn::Own { places: Some(p), .. } = on {
            count.mark_awaited(p);
        }
        wait_released(py, timeout, Some(&|| count.pending() == 0), |t| count.wait_empty(t), on, None)
    }

    /// Tasks of the group not finished yet.
    #[getter]
    fn pending(&self) -> PyResult<usize> {
        check_gen(self.owner.shared.gen_)?;
        Ok(self.count.pending())
    }
}

/// A FIFO queue whose tasks start in order, at most `limit` of them
/// running at once (`pool.serial()`: 1; `pool.lane(n)`: n).
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Serial {
    pub(crate) serial: ForkLocal<wspool::SerialQueue>,
    owner: Arc<Owner>,
    priority: wspool::Priority,
}

#[pymethods]
impl Serial {
    /// Queues `fn(*args, **kwargs)` behind the queue's earlier tasks; returns its Future.
    #[pyo3(signature = (fn_, /, *args, **kwargs))]
    fn submit<'py>(
        &self,
        py: Python<'py>,
        fn_: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        submit_call(py, &self.owner.shared, Target::Serial(&self.serial), None, fn_, args, kwargs)
    }

    /// Tasks queued or running.
    #[getter]
    fn pending(&self) -> PyResult<usize> {
        check_gen(self.owner.shared.gen_)?;
        Ok(self.serial.pending())
    }

    /// Most of its tasks running at once (1 for `pool.serial()`).
    #[getter]
    fn limit(&self) -> usize {
        self.serial.limit()
    }

    /// Where its turns wait: "high", "normal" or "low".
    #[getter]
    fn priority(&self) -> &'static str {
        priority_name(self.priority)
    }
}

pub(crate) fn parse_priority(s: &str) -> PyResult<wspool::Priority> {
    Ok(match s {
        "high" => wspool::Priority::High,
        "normal" => wspool::Priority::Normal,
        "low" => wspool::Priority::Low,
        _ => return Err(PyValueError::new_err(format!("priority must be one of 'high', 'normal', 'low', not {s:?}"))),
    })
}

fn priority_name(p: wspool::Priority) -> &'static str {
    match p {
        wspool::Priority::High => "high",
        wspool::Priority::Low => "low",
        _ => "normal",
    }
}

/// The core's deadline for `deadline` (seconds on `time.monotonic()`'s
/// clock, CLOCK_MONOTONIC on Linux: the one `Instant` reads) and `timeout`
/// (seconds from now): the earlier of the two. A time already past is
/// accepted: the task expires where it would start. A time too far to
/// represent is no deadline.
pub(crate) fn deadline_of(deadline: Option<f64>, timeout: Option<f64>) -> PyResult<Option<std::time::Instant>> {
    use std::time::Instant;
    for (name, v) in [("deadline", deadline), ("timeout", timeout)] {
        if let Some(v) = v
            && v.is_nan()
        {
            return Err(PyValueError::new_err(format!("{name} must be a number of seconds, not nan")));
        }
    }
    // Two clock reads, nanoseconds apart: the same instant on both clocks.
    let (now, now_ns) = (Instant::now(), wspool::monotonic_now_ns());
    let after = |secs: f64| -> Option<Instant> {
        if secs <= 0.0 {
            return Some(now);
        }
        Duration::try_from_secs_f64(secs).ok().and_then(|d| now.checked_add(d))
    };
    let by_deadline = deadline.and_then(|d| after(d - now_ns as f64 / 1e9));
    let by_timeout = timeout.and_then(after);
    Ok(match (by_deadline, by_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// `time.monotonic()`'s clock as the pool reads it, in ns (the C API's
/// `wspool_now_ns`): for checking that both clocks agree.
#[pyfunction]
pub(crate) fn monotonic_ns() -> u64 {
    wspool::monotonic_now_ns()
}

// ---------------------------------------------------------------------------
// Stats, blocking, module functions
// ---------------------------------------------------------------------------

macro_rules! stats_class {
    ($($field:ident : $ty:ty),* $(,)?) => {
        /// A snapshot of a pool's counters (the fields of the C `wspool_stats`).
        #[pyclass(module = "wspool._wspool", frozen, get_all)]
        #[derive(Clone)]
        pub(crate) struct Stats { $($field: $ty),* }

        impl From<wspool::Stats> for Stats {
            fn from(s: wspool::Stats) -> Self {
                Stats { $($field: s.$field),* }
            }
        }

        #[pymethods]
        impl Stats {
            /// The counters as a dict.
            fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                $(d.set_item(stringify!($field), self.$field)?;)*
                Ok(d)
            }

            fn __repr__(&self) -> String {
                let mut s = String::from("wspool.Stats(");
                $(s.push_str(&format!("{}={}, ", stringify!($field), self.$field));)*
                s.truncate(s.len() - 2);
                s.push(')');
                s
            }
        }
    };
}

stats_class!(
    threads: u32,
    idle_threads: u32,
    blocked_threads: u32,
    peak_threads: u32,
    submitted: u64,
    completed: u64,
    rejected: u64,
    cancelled: u64,
    panicked: u64,
    local_pops: u64,
    global_pops: u64,
    steals: u64,
    spin_hits: u64,
    spin_misses: u64,
    spin_threshold_ns: u32,
    threads_started: u64,
    threads_retired: u64,
    starvation_injections: u64,
    queued: u64,
    queue_delay_p50_ns: u64,
    queue_delay_p99_ns: u64,
    queue_delay_max_ns: u64,
    spawn_failures: u64,
    expired: u64,
    stalls: u64,
);

/// `Pool.dump()`: `str()` is the report (docs/diagnosis.md); the records
/// are lists of dicts (`threads`, `queues`, `decisions`), durations in
/// seconds (lower bounds), `None` where unknown.
#[pyclass(module = "wspool._wspool", frozen, get_all)]
pub(crate) struct PoolDump {
    report: String,
    name: String,
    live_threads: usize,
    min_threads: usize,
    max_threads: usize,
    queued: usize,
    stalls: u64,
    threads: Vec<std::collections::BTreeMap<&'static str, DumpValue>>,
    queues: Vec<std::collections::BTreeMap<&'static str, DumpValue>>,
    decisions: Vec<std::collections::BTreeMap<&'static str, DumpValue>>,
}

/// A value of a dump record.
#[derive(IntoPyObject, Clone)]
pub(crate) enum DumpValue {
    Int(u64),
    Float(f64),
    Text(String),
    None(Option<u64>),
}

impl From<wspool::PoolDump> for PoolDump {
    fn from(d: wspool::PoolDump) -> Self {
        use DumpValue::{Float, Int, Text};
        let secs = |v: Option<Duration>| v.map_or(DumpValue::None(None), |d| Float(d.as_secs_f64()));
        let threads = d
            .threads
            .iter()
            .map(|t| {
                let (state, on, holder) = match t.state {
                    wspool::ThreadState::Waiting { on, holder, .. } => (
                        "waiting",
                        Text(format!("{on:?}").to_lowercase()),
                        holder.map_or(DumpValue::None(None), |h| Int(h as u64)),
                    ),
                    s => (state_name(s), DumpValue::None(None), DumpValue::None(None)),
                };
                std::collections::BTreeMap::from([
                    ("index", Int(t.index as u64)),
                    ("os_tid", Int(t.os_tid)),
                    ("state", Text(state.into())),
                    ("waiting_on", on),
                    ("holder", holder),
                    ("for_at_least", secs(t.for_at_least)),
                    ("injected", Int(t.injected as u64)),
                    ("lent", Int(t.lent as u64)),
                    ("parked_in_wait", Int(t.parked_in_wait as u64)),
                    ("deque_len", Int(t.deque_len as u64)),
                    ("inbox_len", Int(t.inbox_len as u64)),
                    ("tasks_taken", Int(t.tasks_taken)),
                    ("label", t.label.map_or(DumpValue::None(None), |l| Text(l.into()))),
                ])
            })
            .collect();
        let queues = d
            .queues
            .iter()
            .map(|q| {
                std::collections::BTreeMap::from([
                    ("name", Text(q.name.clone())),
                    ("len", Int(q.len as u64)),
                    ("running", Int(q.running as u64)),
                    ("oldest_at_least", secs(q.oldest_at_least)),
                ])
            })
            .collect();
        let decisions = d
            .decisions
            .iter()
            .map(|m| {
                std::collections::BTreeMap::from([
                    ("ago", Float(m.ago.as_secs_f64())),
                    ("threads", Int(m.threads as u64)),
                    ("action", Text(m.action.to_string())),
                    ("reason", Text(m.reason.to_string())),
                ])
            })
            .collect();
        PoolDump {
            report: d.to_string(),
            name: d.name,
            live_threads: d.live_threads,
            min_threads: d.min_threads,
            max_threads: d.max_threads,
            queued: d.queued,
            stalls: d.stalls,
            threads,
            queues,
            decisions,
        }
    }
}

fn state_name(s: wspool::ThreadState) -> &'static str {
    match s {
        wspool::ThreadState::Running => "running",
        wspool::ThreadState::Blocking => "blocking",
        wspool::ThreadState::Waiting { .. } => "waiting",
        wspool::ThreadState::Searching => "searching",
        wspool::ThreadState::Spinning => "spinning",
        wspool::ThreadState::Parked => "parked",
        _ => "unknown",
    }
}

#[pymethods]
impl PoolDump {
    fn __str__(&self) -> String {
        self.report.clone()
    }

    fn __repr__(&self) -> String {
        format!("<wspool.PoolDump {:?}: {} threads, {} queued>", self.name, self.live_threads, self.queued)
    }
}

/// `with wspool.blocking(): ...` marks code that blocks for real (I/O, a
/// foreign lock, `time.sleep`): on a pool thread of a pool that may grow
/// (the default, "compensate", included) the pool lends a compensating
/// thread at once, so queued work keeps running, and the call does not
/// count against `max_workers` meanwhile; a fixed pool lends none. Off the
/// pool it does nothing. Nests.
#[pyclass(module = "wspool._wspool", name = "blocking")]
pub(crate) struct Blocking {
    depth: usize,
}

#[pymethods]
impl Blocking {
    #[new]
    fn new() -> Self {
        Blocking { depth: 0 }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        // The place first: the thread the core lends may need it.
        let _ = region_enter(RegionKind::Blocking, None);
        wspool::blocking_begin();
        slf.depth += 1;
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        if self.depth > 0 {
            self.depth -= 1;
            wspool::blocking_end();
            let _ = py;
            region_leave(None);
        }
        false
    }
}

/// A wait on the pool's own work that Python code makes
/// (`concurrent.futures.wait`/`as_completed` on the pool's futures, dask's
/// nested compute): `with WaitRegion(handles): ...`. On a thread of the
/// handles' pool (of the thread's own pool when there are none), the
/// waiting call lends its place to the calls it waits for, which go ahead
/// of calls from outside, and the core counts the thread as waiting;
/// `help()` runs one of those calls on this thread when the pool is at its
/// thread cap. Elsewhere it does nothing.
#[pyclass(module = "wspool._wspool")]
pub(crate) struct WaitRegion {
    handles: Vec<Py<crate::call::Handle>>,
    places: Option<Arc<Places>>,
    /// 0: no region, 1: a lent place, 2: a blocking region (other growth policies).
    entered: u8,
}

#[pymethods]
impl WaitRegion {
    #[new]
    #[pyo3(signature = (handles = Vec::new()))]
    fn new(handles: Vec<Py<crate::call::Handle>>) -> Self {
        WaitRegion { handles, places: None, entered: 0 }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        if slf.entered != 0 || wspool::current_index().is_none() {
            return slf;
        }
        let own = slf.handles.first().map(|h| {
            let h = h.get();
            (h.slot_is_local(), h.own_places().cloned())
        });
        match own {
            Some((false, _)) => {} // another pool's work: the call keeps its place
            Some((true, Some(p))) => {
                for h in &slf.handles {
                    h.get().mark_urgent(&p);
                }
                let _ = region_enter(RegionKind::Wait, Some(&p));
                wspool::waiting_begin();
                slf.places = Some(p);
                slf.entered = 1;
            }
            None if region_enter(RegionKind::Wait, None) => {
                wspool::waiting_begin();
                slf.entered = 1;
            }
            Some((true, None)) | None => {
                wspool::blocking_begin();
                slf.entered = 2;
            }
        }
        slf
    }

    /// At the thread cap: runs one awaited call that has not started on
    /// this thread; True if it did.
    fn help(&self) -> bool {
        let Some(p) = &self.places else { return false };
        self.handles.iter().any(|h| h.get().run_here_at_cap(p))
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, PyTuple>) -> bool {
        match std::mem::replace(&mut self.entered, 0) {
            1 => {
                wspool::waiting_end();
                region_leave(self.places.as_ref());
            }
            2 => wspool::blocking_end(),
            _ => {}
        }
        false
    }
}

#[pyfunction]
pub(crate) fn _interpreter_shutdown() -> bool {
    crate::fork::INTERPRETER_SHUTDOWN.load(Ordering::SeqCst)
}
