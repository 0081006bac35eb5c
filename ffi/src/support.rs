//! Plumbing shared by every entry point: the status/error channel, panic
//! containment, fork detection, the C task wrapper and the ThreadSanitizer
//! happens-before annotations. No scheduling logic lives here.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char, c_int, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::{WSPOOL_EINTERNAL, WSPOOL_EINVAL, WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN, WSPOOL_STRUCT_SIZE_MAX};

/// A failed call: its status code and the message `wspool_last_error` returns.
pub(crate) struct Fail {
    pub(crate) code: c_int,
    pub(crate) msg: Cow<'static, str>,
}

pub(crate) type Res<T = c_int> = Result<T, Fail>;

pub(crate) fn fail<T>(code: c_int, msg: impl Into<Cow<'static, str>>) -> Res<T> {
    Err(Fail { code, msg: msg.into() })
}

pub(crate) fn einval<T>(msg: impl Into<Cow<'static, str>>) -> Res<T> {
    fail(WSPOOL_EINVAL, msg)
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    /// The fork generation a worker thread was started in (u32::MAX: not a worker).
    static WORKER_GEN: Cell<u32> = const { Cell::new(u32::MAX) };
}

pub(crate) fn set_last_error(func: &str, msg: &str) {
    let text = format!("{func}: {msg}").replace('\0', " ");
    let c = CString::new(text).unwrap_or_default();
    // try_with: a call during thread teardown must not panic.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = Some(c));
}

pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|e| e.borrow().as_ref().map(|c| c.as_ptr())).ok().flatten().unwrap_or(c"".as_ptr())
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(String::as_str)).unwrap_or("?")
}

/// Runs an entry point's body: a failure becomes its status code plus the
/// thread-local message, and a panic becomes `WSPOOL_EINTERNAL` (never an
/// unwind across the C boundary).
#[inline]
pub(crate) fn guard(func: &str, body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(f)) => {
            set_last_error(func, &f.msg);
            f.code
        }
        Err(p) => {
            set_last_error(func, &format!("internal error (a Rust panic was caught): {}", panic_text(&*p)));
            WSPOOL_EINTERNAL
        }
    }
}

/// `guard` for entry points that return nothing (destroy/release/blocking).
#[inline]
pub(crate) fn guard_void(func: &str, body: impl FnOnce() -> Res<()>) {
    guard(func, || body().map(|()| 0));
}

// ---------------------------------------------------------------- fork ----

/// Bumped in every child of `fork()` (pthread_atfork child handler, which only
/// does this async-signal-safe atomic add). Objects remember the generation
/// they were created in; a mismatch means "inherited through fork".
static FORK_GEN: AtomicU32 = AtomicU32::new(0);
static INIT: Once = Once::new();

unsafe extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

unsafe extern "C" fn on_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

/// One-time library setup, done before the first pool exists: the fork
/// handler and the optional TSan hooks.
pub(crate) fn init_once() {
    INIT.call_once(|| {
        // SAFETY: registering a handler that only touches an atomic.
        unsafe {
            pthread_atfork(None, None, Some(on_fork_child));
        }
        tsan::init();
    });
}

#[inline]
pub(crate) fn fork_gen() -> u32 {
    FORK_GEN.load(Ordering::Relaxed)
}

/// Objects inherited through fork() and released in the child: never dropped
/// (that could wait for the parent's threads or take a lock one of them held),
/// but kept reachable so leak checkers see them as "still reachable", not lost.
/// A lock-free stack: a lock could have been held across the fork.
struct Leaked {
    _item: Box<dyn Send>,
    next: *mut Leaked,
}
static LEAKED: std::sync::atomic::AtomicPtr<Leaked> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Keeps `item` alive, unreachable to the program, for the rest of the process.
pub(crate) fn keep_forever(item: Box<dyn Send>) {
    let node = Box::into_raw(Box::new(Leaked { _item: item, next: std::ptr::null_mut() }));
    let mut head = LEAKED.load(Ordering::Relaxed);
    loop {
        // SAFETY: `node` is ours until published by the CAS.
        unsafe { (*node).next = head };
        match LEAKED.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

/// Marks the calling thread as a worker started in the current generation.
pub(crate) fn mark_worker_thread() {
    let _ = WORKER_GEN.try_with(|g| g.set(fork_gen()));
}

/// True on a thread that was a pool worker before a fork (the thread that
/// called fork inside a task): in the child it belongs to no live pool.
pub(crate) fn is_stale_worker_thread() -> bool {
    WORKER_GEN.try_with(|g| g.get()).map(|g| g != u32::MAX && g != fork_gen()).unwrap_or(false)
}

// ---------------------------------------------------------------- tasks ---

/// The C function type as Rust sees it (non-null).
pub(crate) type CFn = unsafe extern "C" fn(arg: *mut c_void);

/// A C task: `f(arg)` when run; `on_cancel(arg)` when dropped unrun. Moved
/// into the closure handed to the core, so the core's "drop the closure
/// unrun" paths (cancel, shutdown CANCEL, DISCARD_OLDEST) call `on_cancel`
/// exactly once, and a refused submission is `mem::forget`-ed (the caller
/// keeps `arg`, no `on_cancel`).
pub(crate) struct CTask {
    f: CFn,
    arg: *mut c_void,
    on_cancel: Option<CFn>,
}

// SAFETY: the C caller hands `arg` to the pool to be used on another thread;
// that is the documented contract of every submit function.
unsafe impl Send for CTask {}

impl CTask {
    #[inline]
    pub(crate) fn new(f: CFn, arg: *mut c_void, on_cancel: Option<CFn>) -> Self {
        tsan::release_submit();
        CTask { f, arg, on_cancel }
    }

    #[inline]
    pub(crate) fn run(self) {
        let t = ManuallyDrop::new(self);
        tsan::acquire_submit();
        // SAFETY: `f` is a non-null C function given to us with `arg`.
        unsafe { (t.f)(t.arg) };
        tsan::release_done();
    }

    /// The closure given to the core.
    #[inline]
    pub(crate) fn into_closure(self) -> impl FnOnce() + Send + 'static {
        move || self.run()
    }
}

impl Drop for CTask {
    fn drop(&mut self) {
        if let Some(cancel) = self.on_cancel {
            tsan::acquire_submit();
            // SAFETY: as for `f`.
            unsafe { cancel(self.arg) };
            tsan::release_done();
        }
    }
}

/// A `Send` wrapper for a raw pointer handed over by C.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut c_void);
// SAFETY: see `CTask`.
unsafe impl Send for SendPtr {}
// SAFETY: see `CTask`.
unsafe impl Sync for SendPtr {}

/// Maps a refused submission to its status. The closure comes back unrun and
/// is forgotten, not dropped: the caller still owns `arg`, no `on_cancel`.
#[cold]
pub(crate) fn refused<F>(e: wspool_core::SpawnError<F>) -> Fail {
    let kind = e.kind();
    std::mem::forget(e.into_task());
    refused_kind(kind)
}

/// The status and message of a refusal.
#[cold]
pub(crate) fn refused_kind(kind: wspool_core::SubmitErrorKind) -> Fail {
    match kind {
        wspool_core::SubmitErrorKind::Rejected => {
            Fail { code: WSPOOL_EREJECTED, msg: "task rejected: the pool's queue is full".into() }
        }
        wspool_core::SubmitErrorKind::Shutdown => {
            Fail { code: WSPOOL_ESHUTDOWN, msg: "task refused: the pool is shut down".into() }
        }
        wspool_core::SubmitErrorKind::WrongPool => {
            Fail { code: WSPOOL_EINVAL, msg: "the group or serial queue belongs to another pool".into() }
        }
    }
}

// ---------------------------------------------------------------- tsan ----

/// ThreadSanitizer support. The Rust library is not instrumented (stable Rust
/// cannot build an instrumented std), so TSan cannot see the synchronisation
/// inside it. When the process carries the TSan runtime (a C program built
/// with -fsanitize=thread), the library tells TSan about the happens-before
/// edges its API guarantees, through `__tsan_release`/`__tsan_acquire`:
/// submit -> task start, task end -> any wait/join/shutdown/destroy return.
/// The edges are coarse (one key for all submissions, one for all
/// completions): they can hide a race between tasks, never invent one.
/// Without TSan each hook is one relaxed load and a predictable branch.
pub(crate) mod tsan {
    use super::*;

    static ACQUIRE: AtomicUsize = AtomicUsize::new(0);
    static RELEASE: AtomicUsize = AtomicUsize::new(0);
    static SUBMIT_KEY: u8 = 0;
    static DONE_KEY: u8 = 0;

    type Hook = unsafe extern "C" fn(*mut c_void);

    pub(crate) fn init() {
        // SAFETY: dlsym with RTLD_DEFAULT (null) and NUL-terminated names.
        unsafe {
            let a = dlsym(std::ptr::null_mut(), c"__tsan_acquire".as_ptr());
            let r = dlsym(std::ptr::null_mut(), c"__tsan_release".as_ptr());
            if !a.is_null() && !r.is_null() {
                ACQUIRE.store(a as usize, Ordering::Relaxed);
                RELEASE.store(r as usize, Ordering::Relaxed);
            }
        }
    }

    #[inline]
    fn call(hook: &AtomicUsize, key: &'static u8) {
        let f = hook.load(Ordering::Relaxed);
        if f != 0 {
            // SAFETY: a non-zero value is the address of the TSan runtime's
            // `void fn(void *)` found by `init`.
            unsafe {
                let f: Hook = std::mem::transmute::<usize, Hook>(f);
                f(key as *const u8 as *mut c_void);
            }
        }
    }

    #[inline]
    pub(crate) fn release_submit() {
        call(&RELEASE, &SUBMIT_KEY)
    }
    #[inline]
    pub(crate) fn acquire_submit() {
        call(&ACQUIRE, &SUBMIT_KEY)
    }
    #[inline]
    pub(crate) fn release_done() {
        call(&RELEASE, &DONE_KEY)
    }
    #[inline]
    pub(crate) fn acquire_done() {
        call(&ACQUIRE, &DONE_KEY)
    }
}

// ------------------------------------------------------ versioned structs --

/// Reads the `struct_size` a caller put in the first field of a versioned
/// struct and checks it against the first published layout and
/// [`WSPOOL_STRUCT_SIZE_MAX`]. `init` names the function that fills it, for
/// the message.
///
/// # Safety
/// `p` is non-null and points to at least a `usize`.
pub(crate) unsafe fn struct_size_of(p: *const c_void, min: usize, what: &str, init: &str) -> Res<usize> {
    // SAFETY: per the contract.
    let size = unsafe { p.cast::<usize>().read() };
    check_struct_size(size, min, &format_args!("{what}.struct_size"), init)?;
    Ok(size)
}

/// The checks on a size given for a versioned struct, by `struct_size` or
/// to an `_init_sized` function (`what` names it in the message).
pub(crate) fn check_struct_size(size: usize, min: usize, what: &dyn std::fmt::Display, init: &str) -> Res<()> {
    if size == 0 {
        return einval(format!("{what} is 0 (call {init} first)"));
    }
    if size > WSPOOL_STRUCT_SIZE_MAX {
        return bad_size(format!(
            "{what} {size} is larger than any layout (WSPOOL_STRUCT_SIZE_MAX is {WSPOOL_STRUCT_SIZE_MAX}): \
             the struct was not initialised; call {init} first"
        ));
    }
    if size < min {
        return einval(format!("{what} {size} is below the smallest layout ({min} bytes): call {init} first"));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_size<T>(msg: String) -> Res<T> {
    einval(msg)
}

/// Copies the first `n` bytes of `*src` over `*dst` (the caller's struct may
/// be shorter than ours: we never read past its `struct_size`).
///
/// # Safety
/// `src` is readable for `n` bytes, `n <= size_of::<T>()`.
pub(crate) unsafe fn copy_prefix<T>(src: *const T, dst: &mut T, n: usize) {
    debug_assert!(n <= std::mem::size_of::<T>());
    // SAFETY: per the contract; `dst` is a valid T of at least n bytes.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), (dst as *mut T).cast::<u8>(), n) };
}

/// How many bytes of a caller's versioned struct to read or write: the end of
/// the last whole field its `size` covers. `field_ends` lists, in order, the
/// end of each published layout (the first is the smallest accepted size), so
/// a field is never half-copied whatever size a caller passes.
pub(crate) fn whole_fields(size: usize, field_ends: &[usize]) -> usize {
    field_ends.iter().copied().take_while(|&end| end <= size).last().unwrap_or(0)
}
