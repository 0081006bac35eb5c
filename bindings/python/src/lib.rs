//! `wspool._wspool`: the Rust half of the Python package `wspool`.
//!
//! The Python half (`python/wspool/__init__.py`) wraps these objects in a
//! `concurrent.futures.Executor`. What lives here:
//!
//! * [`Core`]: one `wspool::Pool`. `submit` builds a real
//!   `concurrent.futures.Future` (the subclass the Python side hands us),
//!   queues a closure that fills it, and stores the task's [`Handle`] on the
//!   future so `Future.result()` can help instead of parking a worker.
//! * [`MapIter`]: `Executor.map` without a `Future` per item. A few tasks
//!   claim chunks in order; a task that holds the GIL runs further chunks of
//!   the same map while it has it (bounded), which is what makes `map` fast
//!   under the GIL, and keeps a few more tasks queued while chunks remain.
//! * [`Group`], [`Serial`], [`Stats`], [`Blocking`] (`wspool.blocking()`).
//!
//! GIL discipline: every wait (task, group, map chunk, shutdown, a blocking
//! submit) runs inside `Python::detach`; workers attach only to run Python
//! code. A worker keeps one Python thread state for its whole life (created
//! on its first Python task, deleted as it exits), so `threading.local`
//! values set by an `initializer` persist like on `ThreadPoolExecutor`'s
//! threads. Waits on a non-pool thread run in short slices and check for
//! signals between them, so Ctrl-C interrupts them.
//!
//! Fork: `os.register_at_fork(after_in_child=_after_fork_child)` bumps a
//! generation counter. Every object remembers the generation it was made in;
//! in a child, calls on inherited objects raise `RuntimeError`, and their
//! Rust parts are leaked rather than dropped (dropping would join threads
//! that do not exist in the child).

mod cq;

use std::cell::Cell;
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{create_exception, ffi, intern};

use wspool::{Growth, Pool, Reject, Shutdown, SubmitErrorKind, TaskHandle};

create_exception!(
    wspool,
    RejectedError,
    PyRuntimeError,
    "A task was refused because the pool's bounded queue is full (reject=\"abort\")."
);

/// How long one slice of an interruptible wait lasts: the bound on how late
/// Ctrl-C is noticed by a thread waiting on the pool.
const SIGNAL_SLICE: Duration = Duration::from_millis(50);
/// A map task that holds the GIL runs at most this many further chunks...
const MAP_RUN_AHEAD: usize = 256;
/// ...and stops taking more after this long, so long items spread out.
const MAP_RUN_AHEAD_TIME: Duration = Duration::from_micros(500);
/// While chunks remain, a map keeps up to this many tasks queued: enough for
/// lent or injected threads to join in at once, few enough that a long map
/// is not a backlog of thousands of tasks in the pool's queue.
const MAP_QUEUED: usize = 4;

/// Bumped in every forked child (see `_after_fork_child`).
static FORK_GEN: AtomicU64 = AtomicU64::new(0);
/// Set by the interpreter-exit hook once pools are drained: from then on no
/// worker touches Python while it exits.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Workers currently deleting their Python thread state (see `release_thread_state`).
static STOPPERS: AtomicUsize = AtomicUsize::new(0);
/// Background threads joining pools whose Python objects were collected.
static REAPERS: AtomicUsize = AtomicUsize::new(0);
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);
/// Bumped whenever a Python thread releases the GIL to wait on the pool
/// (see `handoff_debounce`).
static WAIT_EPOCH: AtomicU64 = AtomicU64::new(0);
/// One worker at a time may debounce the GIL hand-off.
static HANDOFF_SPINNER: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The id of the pool this thread is a worker of (0: none).
    static WORKER_OF: Cell<u64> = const { Cell::new(0) };
    /// This worker owns a persistent Python thread state.
    static HAS_TSTATE: Cell<bool> = const { Cell::new(false) };
    /// This worker ran its pool's per-thread init (thread name, initializer).
    static INIT_DONE: Cell<bool> = const { Cell::new(false) };
}

fn current_gen() -> u64 {
    FORK_GEN.load(Ordering::Acquire)
}

/// A core object made in one process generation: dropped normally there,
/// leaked in a forked child (whose pool threads were the parent's, so
/// dropping would join threads that do not exist).
struct ForkLocal<T> {
    value: ManuallyDrop<T>,
    gen_: u64,
}

impl<T> ForkLocal<T> {
    fn new(value: T, gen_: u64) -> Self {
        ForkLocal { value: ManuallyDrop::new(value), gen_ }
    }
}

impl<T> std::ops::Deref for ForkLocal<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        if self.gen_ == current_gen() {
            // SAFETY: dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}

fn forked_error() -> PyErr {
    PyRuntimeError::new_err(
        "this wspool object was created in the parent process before fork(); its worker threads do not \
         exist in this child process. Create a new wspool.Pool in the child.",
    )
}

fn check_gen(gen_: u64) -> PyResult<()> {
    if gen_ == current_gen() { Ok(()) } else { Err(forked_error()) }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Converts a Python timeout (seconds, None = forever) to a deadline.
fn deadline_of(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() => Err(PyValueError::new_err("timeout must be a number, not NaN")),
        Some(t) if t <= 0.0 => Ok(Some(Instant::now())),
        Some(t) => Ok(Instant::now().checked_add(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX))),
    }
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

// ---------------------------------------------------------------------------
// Worker-side Python thread state
// ---------------------------------------------------------------------------

/// On a worker's first Python task: create a Python thread state that lives
/// as long as the thread, then release the GIL again. Later `Python::attach`
/// calls on this thread reuse it (PyGILState_Ensure finds it), so
/// thread-locals persist and no thread state is created per task.
fn ensure_thread_state() {
    if HAS_TSTATE.get() || EXITING.load(Ordering::SeqCst) {
        return;
    }
    // SAFETY: called on a pool worker outside any attach (the pool calls
    // tasks without the GIL; nested tasks run inside `detach`, after this
    // thread already has its state). Ensure attaches with a new thread state
    // whose gilstate counter stays at 1; SaveThread then releases the GIL
    // while keeping the state as this thread's.
    unsafe {
        if ffi::Py_IsInitialized() == 0 {
            return;
        }
        let _ = ffi::PyGILState_Ensure();
        let _ = ffi::PyEval_SaveThread();
    }
    HAS_TSTATE.set(true);
}

/// The pool's `on_thread_stop` hook: delete the thread state made by
/// [`ensure_thread_state`] (and the thread's `threading._DummyThread` entry).
/// Skipped once the interpreter is exiting: finalization frees it then.
fn release_thread_state() {
    WORKER_OF.set(0);
    if !HAS_TSTATE.replace(false) {
        return;
    }
    STOPPERS.fetch_add(1, Ordering::SeqCst);
    if !EXITING.load(Ordering::SeqCst) {
        // SAFETY: this thread owns a thread state with gilstate counter 1 and
        // is not attached. Ensure attaches (counter 2); Release(LOCKED) drops
        // the counter to 1 keeping the GIL; Release(UNLOCKED) drops it to 0,
        // which clears and deletes the thread state and releases the GIL.
        unsafe {
            let _ = ffi::PyGILState_Ensure();
            Python::attach(|py| {
                let _ = forget_dummy_thread(py);
            });
            ffi::PyGILState_Release(ffi::PyGILState_STATE::PyGILState_LOCKED);
            ffi::PyGILState_Release(ffi::PyGILState_STATE::PyGILState_UNLOCKED);
        }
    }
    STOPPERS.fetch_sub(1, Ordering::SeqCst);
}

/// `threading.current_thread()` registered a `_DummyThread` for this worker
/// (the init hook names it); drop it so retired workers do not accumulate.
fn forget_dummy_thread(py: Python<'_>) -> PyResult<()> {
    let threading = py.import("threading")?;
    let ident = threading.call_method0("get_ident")?;
    threading.getattr("_active")?.call_method1("pop", (ident, py.None()))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Pool state shared with tasks
// ---------------------------------------------------------------------------

/// What tasks need from their pool. Not the `Pool` itself: a task that held
/// a pool handle could drop the last one on a worker. (Map tasks hold an
/// [`Owner`], whose drop is safe on any thread.)
struct Shared {
    id: u64,
    gen_: u64,
    /// Called once per worker thread, with its index, before its first Python task.
    worker_init: Option<Py<PyAny>>,
    /// Set when `worker_init` raised: the pool is broken, like ThreadPoolExecutor's.
    broken: OnceLock<String>,
    future_cls: Py<PyAny>,
    /// The reject policy can make a submit wait or run the task inline: release the GIL around it.
    submit_may_block: bool,
    queue_capacity: usize,
}

impl Shared {
    fn is_worker_here(&self) -> bool {
        WORKER_OF.get() == self.id
    }

    fn broken_error(&self, py: Python<'_>) -> Option<PyErr> {
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
    fn run_python<F>(&self, f: F) -> bool
    where
        F: for<'py> FnOnce(Python<'py>),
    {
        let on_worker = self.is_worker_here();
        if on_worker {
            ensure_thread_state();
        }
        Python::try_attach(|py| {
            if on_worker && !INIT_DONE.get() {
                INIT_DONE.set(true);
                self.run_worker_init(py);
            }
            f(py)
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
struct Owner {
    pool: ManuallyDrop<Pool>,
    shared: Arc<Shared>,
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

fn submit_error(shared: &Shared, kind: SubmitErrorKind) -> PyErr {
    match kind {
        SubmitErrorKind::Rejected => RejectedError::new_err(format!(
            "task rejected: the pool's queue is full (queue_capacity={})",
            shared.queue_capacity
        )),
        SubmitErrorKind::Shutdown => PyRuntimeError::new_err("cannot schedule new futures after shutdown"),
    }
}

/// Waits with the GIL released until `done(slice)` says the awaited thing
/// finished or the deadline passes. On a worker of `helping_pool` the wait
/// helps (the core runs other tasks meanwhile) and is not sliced. Elsewhere
/// it runs in slices and checks for signals between them (Ctrl-C); on a
/// worker of some other pool it is declared a blocking region, so that
/// pool lends a thread while this one waits.
fn wait_released<F>(
    py: Python<'_>,
    helping_pool: Option<u64>,
    timeout: Option<f64>,
    probe: Option<&(dyn Fn() -> bool + Sync)>,
    done: F,
) -> PyResult<bool>
where
    F: Fn(Option<Duration>) -> bool + Sync,
{
    let deadline = deadline_of(timeout)?;
    if helping_pool.is_some_and(|id| WORKER_OF.get() == id) {
        return Ok(py.detach(|| done(remaining(deadline))));
    }
    let declare = wspool::current_index().is_some();
    if !declare && let Some(probe) = probe
        && py.detach(|| {
            WAIT_EPOCH.fetch_add(1, Ordering::SeqCst);
            spin_until(probe, remaining(deadline))
        })
    {
        return Ok(true);
    }
    loop {
        let slice = remaining(deadline).map_or(SIGNAL_SLICE, |r| r.min(SIGNAL_SLICE));
        let finished = py.detach(|| {
            WAIT_EPOCH.fetch_add(1, Ordering::SeqCst);
            if declare {
                wspool::blocking(|| done(Some(slice)))
            } else {
                done(Some(slice))
            }
        });
        if finished {
            return Ok(true);
        }
        py.check_signals()?;
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return Ok(false);
        }
    }
}

/// The longest a waiting thread spins (GIL released) before it parks. A
/// round trip to a spinning worker takes a few microseconds; parking and
/// being woken costs tens (much more when the CPU has gone idle), so short
/// tasks are awaited spinning. `WSPOOL_WAIT_SPIN_US` overrides it (0: never).
fn spin_limit() -> Duration {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let us = std::env::var("WSPOOL_WAIT_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(50u64);
        Duration::from_micros(us)
    })
}

/// Whether waiters spin at all, learnt like the core's debounce (seed 004):
/// the outcomes of the last 16 spins (1 = the task finished while we spun).
/// A spin only pays when the awaited worker runs on another CPU at the same
/// time; when both share one (a loaded machine), spinning just delays it.
/// So more than four misses among the last 16 turn spinning off; then one
/// wait in 32 still spins, to notice when spinning would pay again.
static SPIN_RING: AtomicU32 = AtomicU32::new(u32::MAX);
static SPIN_TRIES: AtomicU32 = AtomicU32::new(0);

fn spin_worthwhile() -> bool {
    (!SPIN_RING.load(Ordering::Relaxed) & 0xffff).count_ones() <= 4
        || SPIN_TRIES.fetch_add(1, Ordering::Relaxed) % 32 == 0
}

fn record_spin(hit: bool) {
    // Racy read-modify-write on purpose: an occasional lost update only
    // nudges a heuristic.
    let ring = SPIN_RING.load(Ordering::Relaxed);
    SPIN_RING.store((ring << 1) | u32::from(hit), Ordering::Relaxed);
}

/// GIL hand-off debounce. A worker picks up a freshly submitted task in
/// about a microsecond, while the submitting thread still holds the GIL on
/// its way to `result()`. Attaching at once would put the worker to sleep on
/// the GIL's condition variable and cost a full wake-up when the submitter
/// releases it a moment later. So a worker that got a task submitted within
/// the last few microseconds first spins (one worker at a time, bounded)
/// until some thread enters a pool wait, which happens right after that
/// thread released the GIL.
fn handoff_debounce(submitted: Instant, epoch: u64, submit_cpu: i32) {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    let limit = *LIMIT.get_or_init(|| {
        let us = std::env::var("WSPOOL_HANDOFF_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(20u64);
        Duration::from_micros(us)
    });
    if submitted.elapsed() >= limit || WAIT_EPOCH.load(Ordering::SeqCst) != epoch {
        return;
    }
    if submit_cpu >= 0 && current_cpu() == submit_cpu {
        // Woken onto the submitter's own CPU: spinning would only keep the
        // submitter from reaching its wait.
        return;
    }
    if HANDOFF_SPINNER.swap(true, Ordering::Acquire) {
        return;
    }
    while WAIT_EPOCH.load(Ordering::SeqCst) == epoch && submitted.elapsed() < limit {
        for _ in 0..16 {
            std::hint::spin_loop();
        }
    }
    HANDOFF_SPINNER.store(false, Ordering::Release);
}

/// The CPU this thread runs on now, or -1 where that is unknown.
fn current_cpu() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no arguments, no memory touched; -1 on failure.
        unsafe { libc::sched_getcpu() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        -1
    }
}

/// Spins (GIL released by the caller) until `probe()` or the spin limit.
fn spin_until(probe: &(dyn Fn() -> bool + Sync), left: Option<Duration>) -> bool {
    let limit = left.map_or(spin_limit(), |l| l.min(spin_limit()));
    if limit.is_zero() || !spin_worthwhile() {
        return false;
    }
    let hit = spin_for(probe, limit);
    record_spin(hit);
    hit
}

fn spin_for(probe: &(dyn Fn() -> bool + Sync), limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..32 {
            std::hint::spin_loop();
        }
        if probe() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
    }
}

// ---------------------------------------------------------------------------
// submit: a Python call that fills a concurrent.futures.Future
// ---------------------------------------------------------------------------

struct Call {
    shared: Arc<Shared>,
    /// When, at which `WAIT_EPOCH` and on which CPU it was submitted (`handoff_debounce`).
    submitted: Instant,
    epoch: u64,
    cpu: i32,
    future: Py<PyAny>,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    kwargs: Option<Py<PyDict>>,
}

impl Call {
    fn execute(self, py: Python<'_>) {
        let fut = self.future.bind(py);
        match fut.call_method0(intern!(py, "set_running_or_notify_cancel")) {
            Ok(v) if v.is_truthy().unwrap_or(false) => {}
            Ok(_) => return, // cancelled before it started
            Err(e) => return e.write_unraisable(py, Some(fut)),
        }
        let outcome = match self.shared.broken_error(py) {
            Some(err) => Err(err),
            None => self.func.bind(py).call(self.args.bind(py), self.kwargs.as_ref().map(|k| k.bind(py))),
        };
        // Every BaseException (SystemExit and KeyboardInterrupt included)
        // goes into the future; the worker carries on.
        let set = match outcome {
            Ok(v) => fut.call_method1(intern!(py, "set_result"), (v,)),
            Err(e) => fut.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
        };
        if let Err(e) = set {
            e.write_unraisable(py, Some(fut));
        }
    }

    /// The task was dropped without running (cancelled, shut down with
    /// cancel_futures, evicted by discard_oldest, or refused): the future
    /// ends up cancelled, and waiters of `concurrent.futures.wait` are told.
    fn cancel_unrun(self) {
        let Call { future, func, args, kwargs, .. } = self;
        let attached = Python::try_attach(|py| {
            let fut = future.bind(py);
            // The base class's cancel: wspool.Future.cancel would cancel this task again.
            if let Ok(cls) = base_future_class(py) {
                let _ = cls.call_method1(intern!(py, "cancel"), (fut,));
            }
            let _ = fut.call_method0(intern!(py, "set_running_or_notify_cancel"));
        });
        if attached.is_none() {
            // The interpreter is gone: nothing can be released safely.
            std::mem::forget((future, func, args, kwargs));
        }
    }
}

fn cancelled_error(py: Python<'_>, msg: &str) -> PyErr {
    match py.import("concurrent.futures").and_then(|m| m.getattr("CancelledError")) {
        Ok(cls) => match cls.call1((msg,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

fn base_future_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    CLS.get_or_try_init(py, || Ok::<_, PyErr>(py.import("concurrent.futures")?.getattr("Future")?.unbind()))
        .map(|c| c.bind(py))
}

/// Owns a [`Call`] until it runs; dropped unrun, it cancels the future.
struct Job(Option<Call>);

impl Job {
    fn run(mut self) {
        if let Some(call) = self.0.take() {
            if call.shared.is_worker_here() {
                handoff_debounce(call.submitted, call.epoch, call.cpu);
            }
            let shared = call.shared.clone();
            let mut slot = Some(call);
            let ran = shared.run_python(|py| {
                if let Some(c) = slot.take() {
                    c.execute(py)
                }
            });
            if !ran && let Some(c) = slot.take() {
                std::mem::forget(c);
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            call.cancel_unrun();
        }
    }
}

/// Where a submission goes.
enum Target<'a> {
    Pool(&'a Pool),
    Group(&'a wspool::Group),
    Serial(&'a wspool::SerialQueue),
}

fn submit_call<'py>(
    py: Python<'py>,
    shared: &Arc<Shared>,
    target: Target<'_>,
    func: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    check_gen(shared.gen_)?;
    if let Some(err) = shared.broken_error(py) {
        return Err(err);
    }
    let future = shared.future_cls.bind(py).call0()?;
    let job = Job(Some(Call {
        shared: shared.clone(),
        submitted: Instant::now(),
        epoch: WAIT_EPOCH.load(Ordering::SeqCst),
        cpu: current_cpu(),
        future: future.clone().unbind(),
        func: func.clone().unbind(),
        args: args.clone().unbind(),
        kwargs: kwargs.map(|k| k.clone().unbind()),
    }));
    let task = move || job.run();
    let submit = move || match target {
        Target::Pool(p) => p.submit(task).map_err(|e| e.kind()),
        Target::Group(g) => g.submit(task).map_err(|e| e.kind()),
        Target::Serial(s) => s.submit(task).map_err(|e| e.kind()),
    };
    // A refused task comes back inside the error and is dropped here: its
    // future, never handed out, is cancelled on the way.
    let result = if shared.submit_may_block { py.detach(submit) } else { submit() };
    let handle = result.map_err(|kind| submit_error(shared, kind))?;
    let handle = Handle { task: ForkLocal::new(handle, shared.gen_), pool_id: shared.id };
    future.setattr(intern!(py, "_ws_handle"), Bound::new(py, handle)?)?;
    Ok(future)
}

// ---------------------------------------------------------------------------
// Python classes
// ---------------------------------------------------------------------------

fn parse_growth(s: &str) -> PyResult<Growth> {
    Ok(match s {
        "adaptive" => Growth::Adaptive,
        "scale_first" => Growth::ScaleFirst,
        "queue_first" => Growth::QueueFirst,
        "fixed" => Growth::Fixed,
        _ => {
            return Err(PyValueError::new_err(format!(
                "growth must be one of 'adaptive', 'scale_first', 'queue_first', 'fixed', not {s:?}"
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
struct Core {
    owner: Arc<Owner>,
}

impl Core {
    fn live(&self) -> PyResult<&Owner> {
        check_gen(self.owner.shared.gen_)?;
        Ok(&self.owner)
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (*, future_cls, name, min_threads, max_threads, queue_capacity, growth, reject, keep_alive, spin_max_us=None, worker_init=None))]
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
    ) -> PyResult<Self> {
        let growth = parse_growth(growth)?;
        let reject = parse_reject(reject)?;
        if !keep_alive.is_finite() || keep_alive <= 0.0 {
            return Err(PyValueError::new_err(format!("keep_alive must be a positive number of seconds, not {keep_alive}")));
        }
        let keep_alive = Duration::try_from_secs_f64(keep_alive)
            .map_err(|_| PyValueError::new_err("keep_alive is out of range"))?;
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
            // process keeps a core busy, so threads queued on the GIL do
            // not read as starvation.
            .cpu_parallelism(1)
            .on_thread_start(move |_| WORKER_OF.set(id))
            .on_thread_stop(|_| release_thread_state());
        if let Some(us) = spin_max_us {
            builder = builder.spin_max_us(us);
        }
        let pool = py.detach(move || builder.build()).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let shared = Arc::new(Shared {
            id,
            gen_: current_gen(),
            worker_init,
            broken: OnceLock::new(),
            future_cls,
            submit_may_block: matches!(reject, Reject::Block | Reject::BlockFor(_) | Reject::CallerRuns),
            queue_capacity,
        });
        Ok(Core { owner: Arc::new(Owner { pool: ManuallyDrop::new(pool), shared }) })
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
        submit_call(py, &owner.shared, Target::Pool(&owner.pool), fn_, args, kwargs)
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
        let owner = self.live()?;
        if chunksize == 0 {
            return Err(PyValueError::new_err("chunksize must be >= 1."));
        }
        let deadline = deadline_of(timeout)?;
        if let Some(err) = owner.shared.broken_error(py) {
            return Err(err);
        }
        let mut chunks: Vec<Mutex<Chunk>> = Vec::new();
        let mut cur: Vec<Py<PyAny>> = Vec::with_capacity(chunksize);
        let mut total = 0usize;
        for item in arg_tuples.try_iter()? {
            cur.push(item?.unbind());
            total += 1;
            if cur.len() == chunksize {
                chunks.push(Mutex::new(Chunk::Pending(std::mem::replace(&mut cur, Vec::with_capacity(chunksize)))));
            }
        }
        if !cur.is_empty() {
            chunks.push(Mutex::new(Chunk::Pending(cur)));
        }
        let n = chunks.len();
        let state = Arc::new(MapState {
            owner: self.owner.clone(),
            func: fn_,
            done: (0..n).map(|_| AtomicBool::new(false)).collect(),
            chunks,
            next: AtomicUsize::new(0),
            cancelled: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            queued: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
        });
        // A few tasks to start; each keeps one more queued while chunks
        // remain (see `Ticket`). Queueing never needs the GIL, and with
        // reject="block" it may wait for room.
        let first = n.min(owner.pool.min_threads().max(1));
        if let Err(kind) = py.detach(|| (0..first).try_for_each(|_| spawn_ticket(&state))) {
            state.cancel(py);
            return Err(submit_error(&owner.shared, kind));
        }
        Ok(MapIter { state, next_chunk: 0, buf: VecDeque::new(), deadline, finished: n == 0, total })
    }

    /// Stops accepting work. `wait`: block (GIL released, Ctrl-C honoured)
    /// until queued and running tasks finish. `cancel_futures`: drop queued
    /// tasks unrun and cancel their futures.
    #[pyo3(signature = (wait = true, cancel_futures = false))]
    fn shutdown(&self, py: Python<'_>, wait: bool, cancel_futures: bool) -> PyResult<()> {
        if self.owner.shared.gen_ != current_gen() {
            return Ok(()); // nothing of it runs in this process
        }
        let pool: &Pool = &self.owner.pool;
        let mode = if cancel_futures { Shutdown::Cancel } else { Shutdown::Drain };
        if !wait || self.owner.shared.is_worker_here() {
            // A task cannot wait for its own pool to drain: it would wait for itself.
            let _ = py.detach(|| pool.shutdown(mode, Some(Duration::ZERO)));
            return Ok(());
        }
        wait_released(py, None, None, None, |slice| pool.shutdown(mode, slice).is_ok()).map(|_| ())
    }

    /// A snapshot of the pool's counters.
    fn stats(&self) -> PyResult<Stats> {
        Ok(Stats::from(self.live()?.pool.stats()))
    }

    /// A task group on this pool.
    fn group(&self) -> PyResult<Group> {
        let owner = self.live()?;
        Ok(Group { group: ForkLocal::new(owner.pool.group(), owner.shared.gen_), owner: self.owner.clone() })
    }

    /// A serial queue on this pool.
    fn serial(&self) -> PyResult<Serial> {
        let owner = self.live()?;
        Ok(Serial { serial: ForkLocal::new(owner.pool.serial(), owner.shared.gen_), owner: self.owner.clone() })
    }

    /// True on this pool's worker threads.
    fn is_pool_thread(&self) -> bool {
        self.owner.shared.is_worker_here()
    }

    /// True once shutdown started.
    #[getter]
    fn is_shutdown(&self) -> bool {
        self.owner.shared.gen_ != current_gen() || self.owner.pool.is_shutdown()
    }

    /// True in a child process that inherited this pool through fork().
    #[getter]
    fn forked(&self) -> bool {
        self.owner.shared.gen_ != current_gen()
    }

    /// The message of the pool's BrokenThreadPool, if an initializer failed.
    #[getter]
    fn broken(&self) -> Option<String> {
        self.owner.shared.broken.get().cloned()
    }
}

/// The task behind a `wspool.Future`: `Future.result()` waits on it, which
/// on a worker of the same pool runs other tasks instead of parking.
#[pyclass(module = "wspool._wspool", frozen)]
struct Handle {
    task: ForkLocal<TaskHandle<()>>,
    pool_id: u64,
}

#[pymethods]
impl Handle {
    /// Waits until the task finished or was cancelled; False on timeout.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        if self.task.is_finished() {
            return Ok(true);
        }
        let task: &TaskHandle<()> = &self.task;
        wait_released(py, Some(self.pool_id), timeout, Some(&|| task.is_finished()), |t| task.wait_for(t))
    }

    /// Drops the task unrun if it has not started (its future is cancelled).
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        // Dropping the task's closure needs the GIL (it cancels the future):
        // we hold it, and the core drops it on this thread.
        let _ = py;
        Ok(self.task.cancel())
    }

    /// True once the task finished (ran or was cancelled).
    fn done(&self) -> bool {
        self.task.gen_ == current_gen() && self.task.is_finished()
    }
}

/// A set of tasks to wait for together (`pool.group()`).
#[pyclass(module = "wspool._wspool", frozen)]
struct Group {
    group: ForkLocal<wspool::Group>,
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
        submit_call(py, &self.owner.shared, Target::Group(&self.group), fn_, args, kwargs)
    }

    /// Waits until every task of the group finished; False on timeout.
    /// On a worker of the pool it runs tasks while it waits.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        check_gen(self.owner.shared.gen_)?;
        let group: &wspool::Group = &self.group;
        wait_released(py, Some(self.owner.shared.id), timeout, Some(&|| group.pending() == 0), |t| {
            group.wait_for(t)
        })
    }

    /// Tasks of the group not finished yet.
    #[getter]
    fn pending(&self) -> PyResult<usize> {
        check_gen(self.owner.shared.gen_)?;
        Ok(self.group.pending())
    }
}

/// A FIFO queue whose tasks run one at a time, in order (`pool.serial()`).
#[pyclass(module = "wspool._wspool", frozen)]
struct Serial {
    serial: ForkLocal<wspool::SerialQueue>,
    owner: Arc<Owner>,
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
        submit_call(py, &self.owner.shared, Target::Serial(&self.serial), fn_, args, kwargs)
    }

    /// Tasks queued or running.
    #[getter]
    fn pending(&self) -> PyResult<usize> {
        check_gen(self.owner.shared.gen_)?;
        Ok(self.serial.pending())
    }
}

// ---------------------------------------------------------------------------
// map
// ---------------------------------------------------------------------------

enum Chunk {
    Pending(Vec<Py<PyAny>>),
    Running,
    Done(Vec<PyResult<Py<PyAny>>>),
    Taken,
    /// Never ran: the pool dropped the map's tasks (shutdown with cancel_futures).
    Aborted,
}

struct MapState {
    /// Tickets spawn successors on this pool (an `Owner`, so that dropping
    /// the last reference anywhere never joins the pool in place).
    owner: Arc<Owner>,
    func: Py<PyAny>,
    chunks: Vec<Mutex<Chunk>>,
    done: Vec<AtomicBool>,
    /// Next chunk to claim; chunks are claimed in order.
    next: AtomicUsize,
    cancelled: AtomicBool,
    /// The consumer sleeps on `cv` (under `lock`).
    waiting: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
    /// Tickets queued and not started / not finished.
    queued: AtomicUsize,
    live: AtomicUsize,
}

impl MapState {
    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    fn claimable(&self) -> bool {
        !self.cancelled.load(Ordering::Relaxed) && self.next.load(Ordering::Relaxed) < self.chunks.len()
    }

    /// Claims and runs the next chunk; false if none was left.
    fn run_next(&self, py: Python<'_>) -> bool {
        if self.cancelled.load(Ordering::Relaxed) {
            return false;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.chunks.len() {
            return false;
        }
        let args = match std::mem::replace(&mut *lock(&self.chunks[i]), Chunk::Running) {
            Chunk::Pending(a) => a,
            other => {
                *lock(&self.chunks[i]) = other;
                return true;
            }
        };
        let mut out = Vec::with_capacity(args.len());
        let func = self.func.bind(py);
        for a in args {
            let r = match self.shared().broken_error(py) {
                Some(e) => Err(e),
                None => match a.bind(py).cast::<PyTuple>() {
                    Ok(t) => func.call1(t).map(Bound::unbind),
                    Err(_) => func.call1((a.bind(py),)).map(Bound::unbind),
                },
            };
            let failed = r.is_err();
            out.push(r);
            if failed {
                break; // like a loop over the chunk: an exception ends it
            }
        }
        *lock(&self.chunks[i]) = Chunk::Done(out);
        self.mark_done(i);
        true
    }

    fn mark_done(&self, i: usize) {
        self.done[i].store(true, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) {
            let _g = lock(&self.lock);
            self.cv.notify_all();
        }
    }

    /// The last task of the map was dropped unrun (the pool was shut down
    /// with cancel_futures=True): the calls nobody will run end as cancelled.
    fn abort(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let from = self.next.fetch_add(self.chunks.len(), Ordering::SeqCst);
        for i in from.min(self.chunks.len())..self.chunks.len() {
            *lock(&self.chunks[i]) = Chunk::Aborted;
            self.mark_done(i);
        }
    }

    /// Stops the map: unclaimed chunks never run and their arguments are released.
    fn cancel(&self, _py: Python<'_>) {
        self.cancelled.store(true, Ordering::SeqCst);
        let from = self.next.fetch_add(self.chunks.len(), Ordering::SeqCst);
        for c in self.chunks.iter().skip(from) {
            let mut g = lock(c);
            if matches!(*g, Chunk::Pending(_)) {
                *g = Chunk::Taken;
            }
        }
    }
}

fn spawn_ticket(state: &Arc<MapState>) -> Result<(), SubmitErrorKind> {
    state.queued.fetch_add(1, Ordering::SeqCst);
    state.live.fetch_add(1, Ordering::SeqCst);
    let ticket = Ticket { state: state.clone(), started: false };
    // A refused ticket comes back in the error and is dropped: its Drop
    // undoes the counts (and aborts the map only if no other task is left).
    state.owner.pool.spawn(move || ticket.run()).map_err(|e| e.kind())
}

/// One task of a map. It runs the next chunk and, while it holds the GIL
/// anyway, further chunks (at most `MAP_RUN_AHEAD`, for at most
/// `MAP_RUN_AHEAD_TIME`). While chunks remain it keeps up to `MAP_QUEUED`
/// tickets queued, so idle, lent (`blocking()`) or injected threads join in,
/// and the pool's queue never holds more than that per map: a long map does
/// not look like a backlog to the starvation monitor.
struct Ticket {
    state: Arc<MapState>,
    started: bool,
}

impl Ticket {
    fn run(mut self) {
        self.started = true;
        let st = &self.state;
        st.queued.fetch_sub(1, Ordering::SeqCst);
        if !st.claimable() {
            return;
        }
        st.shared().run_python(|py| {
            let start = Instant::now();
            let mut alone = false;
            for ran in 0.. {
                let queued = st.queued.load(Ordering::SeqCst);
                if !alone
                    && queued < MAP_QUEUED
                    && st.next.load(Ordering::SeqCst) + queued + 1 < st.chunks.len()
                    && spawn_ticket(st).is_err()
                {
                    alone = true; // no successor: this task runs the rest
                }
                if !st.run_next(py) {
                    break;
                }
                if !alone && (ran + 1 >= MAP_RUN_AHEAD || start.elapsed() >= MAP_RUN_AHEAD_TIME) {
                    break;
                }
            }
        });
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let st = &self.state;
        if !self.started {
            st.queued.fetch_sub(1, Ordering::SeqCst);
        }
        if st.live.fetch_sub(1, Ordering::SeqCst) == 1 && st.claimable() {
            st.abort();
        }
    }
}

/// The iterator `Pool.map` returns: results in order; the first exception
/// is raised in its place and the rest of the map is cancelled; a timeout
/// raises TimeoutError. Dropping it early cancels what has not started.
#[pyclass(module = "wspool._wspool")]
struct MapIter {
    state: Arc<MapState>,
    next_chunk: usize,
    buf: VecDeque<PyResult<Py<PyAny>>>,
    deadline: Option<Instant>,
    finished: bool,
    total: usize,
}

impl MapIter {
    fn finish(&mut self, py: Python<'_>) {
        if !self.finished {
            self.finished = true;
            self.state.cancel(py);
        }
        self.buf.clear();
    }

    /// Waits until chunk `i` is done. On a worker of the pool it runs
    /// chunks of this map itself meanwhile.
    fn wait_chunk(&self, py: Python<'_>, i: usize) -> PyResult<bool> {
        let st = &self.state;
        if st.shared().is_worker_here() {
            // Run this map's unclaimed chunks here (not a busy wait: each
            // iteration runs a chunk, and the loop ends when none is left).
            while !st.done[i].load(Ordering::SeqCst) {
                if !st.run_next(py) {
                    break;
                }
            }
        }
        if st.done[i].load(Ordering::SeqCst) {
            return Ok(true);
        }
        let timeout = remaining(self.deadline).map(|d| d.as_secs_f64());
        let done = |slice: Option<Duration>| {
            let deadline = slice.map(|s| Instant::now() + s);
            let mut g = lock(&st.lock);
            st.waiting.store(true, Ordering::SeqCst);
            while !st.done[i].load(Ordering::SeqCst) {
                match deadline {
                    None => g = st.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        g = st.cv.wait_timeout(g, d - now).unwrap_or_else(|e| e.into_inner()).0;
                    }
                }
            }
            st.waiting.store(false, Ordering::SeqCst);
            st.done[i].load(Ordering::SeqCst)
        };
        // The chunks left are all claimed by running tasks: plain waiting is
        // safe on a worker too (nothing of this map is stuck in a queue).
        wait_released(py, None, timeout, Some(&|| st.done[i].load(Ordering::SeqCst)), done)
    }
}

impl Drop for MapIter {
    fn drop(&mut self) {
        if !self.finished {
            self.state.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

#[pymethods]
impl MapIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        check_gen(self.state.shared().gen_)?;
        loop {
            if let Some(r) = self.buf.pop_front() {
                return match r {
                    Ok(v) => Ok(Some(v)),
                    Err(e) => {
                        self.finish(py);
                        Err(e)
                    }
                };
            }
            if self.finished || self.next_chunk >= self.state.chunks.len() {
                self.finished = true;
                return Ok(None);
            }
            let i = self.next_chunk;
            if !self.wait_chunk(py, i)? {
                self.finish(py);
                return Err(PyTimeoutError::new_err("map() timed out"));
            }
            let taken = std::mem::replace(&mut *lock(&self.state.chunks[i]), Chunk::Taken);
            match taken {
                Chunk::Done(results) => self.buf.extend(results),
                Chunk::Aborted => {
                    self.finish(py);
                    return Err(cancelled_error(py, "map() stopped: the pool shut down before these calls ran"));
                }
                _ => {}
            }
            self.next_chunk += 1;
        }
    }

    /// Stops the map: calls that have not started never run.
    fn close(&mut self, py: Python<'_>) {
        self.finish(py);
    }

    /// How many calls the map has (a hint for `list()`; not a length: it
    /// is an iterator, and like a generator it is always true).
    fn __length_hint__(&self) -> usize {
        self.total
    }
}

// ---------------------------------------------------------------------------
// Stats, blocking, module functions
// ---------------------------------------------------------------------------

macro_rules! stats_class {
    ($($field:ident : $ty:ty),* $(,)?) => {
        /// A snapshot of a pool's counters (the fields of the C `wspool_stats`).
        #[pyclass(module = "wspool._wspool", frozen, get_all)]
        #[derive(Clone)]
        struct Stats { $($field: $ty),* }

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
);

/// `with wspool.blocking(): ...` marks code that blocks for real (I/O, a
/// foreign lock, `time.sleep`): on a pool thread the pool lends a
/// compensating thread at once, so queued work keeps running. Off the pool
/// it does nothing. Nests.
#[pyclass(module = "wspool._wspool", name = "blocking")]
struct Blocking {
    depth: usize,
}

#[pymethods]
impl Blocking {
    #[new]
    fn new() -> Self {
        Blocking { depth: 0 }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        wspool::blocking_begin();
        slf.depth += 1;
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, PyTuple>) -> bool {
        if self.depth > 0 {
            self.depth -= 1;
            wspool::blocking_end();
        }
        false
    }
}

/// The worker index of the calling thread on a wspool pool, else None.
#[pyfunction]
fn current_index() -> Option<usize> {
    wspool::current_index()
}

/// Registered with `os.register_at_fork(after_in_child=...)`.
#[pyfunction]
fn _after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
    STOPPERS.store(0, Ordering::SeqCst);
    REAPERS.store(0, Ordering::SeqCst);
    WORKER_OF.set(0);
}

/// Interpreter exit, after the Python side drained every live pool: wait
/// for pools being joined in the background, then stop workers from
/// touching Python as they exit.
#[pyfunction]
fn _atexit(py: Python<'_>) {
    py.detach(|| {
        while REAPERS.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        EXITING.store(true, Ordering::SeqCst);
        while STOPPERS.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Rust half of the `wspool` package.
#[pymodule(gil_used = true)]
fn _wspool(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RejectedError", m.py().get_type::<RejectedError>())?;
    m.add_class::<Core>()?;
    m.add_class::<Handle>()?;
    m.add_class::<Group>()?;
    m.add_class::<Serial>()?;
    m.add_class::<MapIter>()?;
    m.add_class::<Stats>()?;
    m.add_class::<Blocking>()?;
    m.add_class::<cq::Completions>()?;
    m.add_function(wrap_pyfunction!(current_index, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_child, m)?)?;
    m.add_function(wrap_pyfunction!(_atexit, m)?)?;
    m.add("SIGNAL_SLICE_SECONDS", SIGNAL_SLICE.as_secs_f64())?;
    Ok(())
}
