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
/// Set by the interpreter-exit hook first: from then on submissions raise
/// `RuntimeError`, as `ThreadPoolExecutor`'s do.
pub(crate) static INTERPRETER_SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// Threads inside [`gated`]: about to take the GIL, or holding it.
pub(crate) static ATTACHERS: AtomicUsize = AtomicUsize::new(0);
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
/// Runs `f` (which takes the GIL) unless the interpreter is exiting; None
/// then. The exit hook sets `EXITING` and waits, GIL released, until no
/// thread is inside: a thread that took the GIL once finalization had begun
/// would be ended by CPython with `pthread_exit`, whose unwinding through
/// Rust frames aborts the process.
pub(crate) fn gated<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
    ATTACHERS.fetch_add(1, Ordering::SeqCst);
    let r = if EXITING.load(Ordering::SeqCst) { None } else { f() };
    ATTACHERS.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Runs `f` attached under a new Python thread state on this OS thread,
/// then deletes it: a call run on a waiting call's thread sees thread-locals
/// and contextvars of its own and starts at recursion depth 0, as on a
/// thread of its own (`threading.current_thread()` is still this thread).
pub(crate) fn with_fresh_thread_state<R>(py: Python<'_>, f: impl FnOnce(Python<'_>) -> R) -> R {
    struct Restore(*mut ffi::PyThreadState, *mut ffi::PyThreadState);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: `self.1` is the state swapped out below, of this
            // thread; `self.0` was made by us and is no longer current.
            unsafe {
                ffi::PyThreadState_Swap(self.1);
                ffi::PyThreadState_Clear(self.0);
                ffi::PyThreadState_Delete(self.0);
            }
        }
    }
    // SAFETY: the GIL is held (`py`); the new state belongs to this
    // interpreter, is swapped in for the duration of `f` (which runs with
    // the GIL held by this thread) and deleted after the old one is back.
    let _restore = unsafe {
        let interp = ffi::PyInterpreterState_Get();
        let fresh = ffi::PyThreadState_New(interp);
        let old = ffi::PyThreadState_Swap(fresh);
        Restore(fresh, old)
    };
    f(py)
}

/// Whether this thread's stack has room for one more call on top of what
/// runs on it (a wait running the work it waits for at the thread cap).
pub(crate) fn stack_left_for_a_call() -> bool {
    const NEEDED: usize = 256 << 10;
    #[cfg(target_os = "linux")]
    {
        let marker = 0u8;
        let here = std::hint::black_box(&marker) as *const u8 as usize;
        // SAFETY: a zeroed attr is filled by pthread_getattr_np and destroyed
        // after use; out-pointers are valid locals.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
                return true;
            }
            let mut addr: *mut libc::c_void = std::ptr::null_mut();
            let mut size: libc::size_t = 0;
            let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
            libc::pthread_attr_destroy(&mut attr);
            !ok || here.saturating_sub(addr as usize) > NEEDED
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

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
    ATTACHERS.store(0, Ordering::SeqCst);
    REAPERS.store(0, Ordering::SeqCst);
    crate::pool::forget_owners_after_fork();
    LIVE_TSTATES.store(0, Ordering::SeqCst);
    WORKER_OF.set(0);
}

/// Interpreter exit, from the `threading._register_atexit` hook (what
/// `ThreadPoolExecutor` uses), before the interpreter joins non-daemon
/// threads and long before finalization: submissions start raising
/// `RuntimeError`; every live pool of this process (one kept alive by a
/// group or a serial queue alone included) stops accepting work and drains;
/// pools joined in the background are waited for; the drained pools'
/// workers delete their thread states (at most `grace` seconds for that);
/// then no worker touches Python again (`gated`). Returns whether every
/// worker was gone.
#[pyfunction]
#[pyo3(signature = (grace = 10.0))]
pub(crate) fn _atexit(py: Python<'_>, grace: f64) -> bool {
    INTERPRETER_SHUTDOWN.store(true, Ordering::SeqCst);
    crate::pool::drain_all_pools(py);
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
        while STOPPERS.load(Ordering::SeqCst) > 0 || ATTACHERS.load(Ordering::SeqCst) > 0 {
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
