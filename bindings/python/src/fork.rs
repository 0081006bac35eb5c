//! Process and thread lifecycle.
//!
//! Fork: `os.register_at_fork(after_in_child=_after_fork_child)` bumps a
//! generation counter. Every object remembers the generation it was made in;
//! in a child, calls on inherited objects raise `RuntimeError`, and their
//! Rust parts are leaked rather than dropped (dropping would join threads
//! that do not exist in the child).
//!
//! Threads: a worker keeps one Python thread state for its whole life
//! (created on its first Python task, deleted as it exits), so
//! `threading.local` values set by an `initializer` persist like on
//! `ThreadPoolExecutor`'s threads.

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// Bumped in every forked child (see `_after_fork_child`).
pub(crate) static FORK_GEN: AtomicU64 = AtomicU64::new(0);
/// Set by the interpreter-exit hook once pools are drained: from then on no
/// worker touches Python while it exits.
pub(crate) static EXITING: AtomicBool = AtomicBool::new(false);
/// Workers currently deleting their Python thread state (see `release_thread_state`).
pub(crate) static STOPPERS: AtomicUsize = AtomicUsize::new(0);
/// Background threads joining pools whose Python objects were collected.
pub(crate) static REAPERS: AtomicUsize = AtomicUsize::new(0);
/// Workers holding a persistent Python thread state: the interpreter-exit
/// hook waits for them to delete it (see `_atexit`).
pub(crate) static LIVE_TSTATES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The id of the pool this thread is a worker of (0: none).
    pub(crate) static WORKER_OF: Cell<u64> = const { Cell::new(0) };
    /// This worker owns a persistent Python thread state.
    pub(crate) static HAS_TSTATE: Cell<bool> = const { Cell::new(false) };
    /// This worker ran its pool's per-thread init (thread name, initializer).
    pub(crate) static INIT_DONE: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn current_gen() -> u64 {
    FORK_GEN.load(Ordering::Acquire)
}

/// A core object made in one process generation: dropped normally there,
/// leaked in a forked child (whose pool threads were the parent's, so
/// dropping would join threads that do not exist).
pub(crate) struct ForkLocal<T> {
    value: ManuallyDrop<T>,
    pub(crate) gen_: u64,
}

impl<T> ForkLocal<T> {
    pub(crate) fn new(value: T, gen_: u64) -> Self {
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

pub(crate) fn forked_error() -> PyErr {
    PyRuntimeError::new_err(
        "this wspool object was created in the parent process before fork(); its worker threads do not \
         exist in this child process. Create a new wspool.Pool in the child.",
    )
}

pub(crate) fn check_gen(gen_: u64) -> PyResult<()> {
    if gen_ == current_gen() { Ok(()) } else { Err(forked_error()) }
}

// ---------------------------------------------------------------------------
// Worker-side Python thread state
// ---------------------------------------------------------------------------

/// On a worker's first Python task: create a Python thread state that lives
/// as long as the thread, then release the GIL again. Later `Python::attach`
/// calls on this thread reuse it (PyGILState_Ensure finds it), so
/// thread-locals persist and no thread state is created per task.
pub(crate) fn ensure_thread_state() {
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
    LIVE_TSTATES.fetch_add(1, Ordering::SeqCst);
}

/// The pool's `on_thread_stop` hook: delete the thread state made by
/// [`ensure_thread_state`] (and the thread's `threading` entry; deleting the
/// state releases the `threading.Thread`'s sentinel, so `join()` returns).
/// Skipped once the interpreter is exiting: finalization frees it then.
pub(crate) fn release_thread_state() {
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
    LIVE_TSTATES.fetch_sub(1, Ordering::SeqCst);
    STOPPERS.fetch_sub(1, Ordering::SeqCst);
}

/// The init hook registered a `threading.Thread` for this worker: drop it
/// from `threading._active` so retired workers do not accumulate.
fn forget_dummy_thread(py: Python<'_>) -> PyResult<()> {
    let threading = py.import("threading")?;
    let ident = threading.call_method0("get_ident")?;
    let thread = threading.getattr("_active")?.call_method1("pop", (ident, py.None()))?;
    // 3.13+: the thread handle made for this OS thread is not tied to its
    // thread state; marking it done is what makes `join()` return and
    // `is_alive()` false (3.9-3.12: the sentinel, released with the state).
    if let Ok(handle) = thread.getattr("_handle")
        && handle.hasattr("_set_done")?
    {
        handle.call_method0("_set_done")?;
    }
    Ok(())
}

/// Registered with `os.register_at_fork(after_in_child=...)`.
#[pyfunction]
pub(crate) fn _after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
    STOPPERS.store(0, Ordering::SeqCst);
    REAPERS.store(0, Ordering::SeqCst);
    LIVE_TSTATES.store(0, Ordering::SeqCst);
    WORKER_OF.set(0);
}

/// Interpreter exit, after the Python side drained every live pool: wait
/// for pools being joined in the background and for the drained pools'
/// workers to delete their thread states (their `threading.Thread`s are
/// non-daemon: the interpreter would join them next), at most `grace`
/// seconds for the latter (a pool kept alive only by a group or serial
/// queue was not drained; its idle workers never exit), then stop workers
/// from touching Python as they exit. Returns whether every worker was gone.
#[pyfunction]
#[pyo3(signature = (grace = 2.0))]
pub(crate) fn _atexit(py: Python<'_>, grace: f64) -> bool {
    py.detach(|| {
        while REAPERS.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(grace.clamp(0.0, 60.0));
        while LIVE_TSTATES.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let all_gone = LIVE_TSTATES.load(Ordering::SeqCst) == 0;
        EXITING.store(true, Ordering::SeqCst);
        while STOPPERS.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        all_gone
    })
}

/// The stack size a `threading.Thread` gets when `threading.stack_size()`
/// is 0: the platform's default for new threads (glibc: `ulimit -s`, usually
/// 8 MiB), not Rust's 2 MiB.
#[pyfunction]
pub(crate) fn default_stack_size() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `attr` is initialised by pthread_attr_init before it is
        // read and destroyed once; getstacksize on a fresh attr reports the
        // default for new threads (glibc, musl and the BSDs agree).
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_attr_init(&mut attr) != 0 {
                return None;
            }
            let mut size: libc::size_t = 0;
            let rc = libc::pthread_attr_getstacksize(&attr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            (rc == 0 && size > 0).then_some(size)
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
