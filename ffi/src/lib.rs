//! C ABI of wspool: the functions, types and constants of `include/libwspool.h`
//! (generated from this file by cbindgen; see `cbindgen.toml`).
//!
//! No scheduling logic lives here: every function checks its arguments, maps
//! them onto the `wspool` crate, and maps the result to a status code. Every
//! entry point runs inside `catch_unwind`, so no Rust panic crosses the
//! boundary; a failure sets a thread-local message for `wspool_last_error`.
#![allow(non_camel_case_types)]
// Every entry point has the same safety contract, the C API's: pointers are NULL or come
// from this library and are used before their release; see the header's preamble.
#![allow(clippy::missing_safety_doc)]

mod cq;
mod support;

pub use cq::*;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::{ManuallyDrop, offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::{CTask, Res, SendPtr, einval, fail, guard, guard_void, tsan};
use wspool_core::{Group, Growth, Pool, Reject, SerialQueue, Shutdown, SpawnOptions, TaskHandle, TaskState};

// ------------------------------------------------------------- version ----

/// Major version of the library this header belongs to.
pub const WSPOOL_VERSION_MAJOR: u32 = 0;
/// Minor version of the library this header belongs to.
pub const WSPOOL_VERSION_MINOR: u32 = 1;
/// Patch version of the library this header belongs to.
pub const WSPOOL_VERSION_PATCH: u32 = 0;
/// `(major << 16) | (minor << 8) | patch`: compare with `wspool_version()`.
pub const WSPOOL_VERSION_NUMBER: u32 =
    (WSPOOL_VERSION_MAJOR << 16) | (WSPOOL_VERSION_MINOR << 8) | WSPOOL_VERSION_PATCH;

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}
// The header's version macros must agree with Cargo.toml (checked at compile time).
const _: () = assert!(WSPOOL_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")), "bump WSPOOL_VERSION_MAJOR");
const _: () = assert!(WSPOOL_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")), "bump WSPOOL_VERSION_MINOR");
const _: () = assert!(WSPOOL_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")), "bump WSPOOL_VERSION_PATCH");

// ------------------------------------------------------- status codes -----

/// Success.
pub const WSPOOL_OK: c_int = 0;
/// A NULL pointer or a bad value; `wspool_last_error()` says which.
pub const WSPOOL_EINVAL: c_int = -1;
/// The pool's bounded queue is full and its reject policy refused the task; the caller keeps `arg`.
pub const WSPOOL_EREJECTED: c_int = -2;
/// The pool is shut down (or shutting down); the caller keeps `arg`.
pub const WSPOOL_ESHUTDOWN: c_int = -3;
/// The wait ended before the work finished; the work is left untouched.
pub const WSPOOL_ETIMEDOUT: c_int = -4;
/// The task was cancelled before it started (its `on_cancel` was called).
pub const WSPOOL_ECANCELLED: c_int = -5;
/// The task has already started (or finished): it can no longer be cancelled.
pub const WSPOOL_EBUSY: c_int = -6;
/// Out of memory (reserved: like Rust programs, the library aborts on a failed allocation).
pub const WSPOOL_ENOMEM: c_int = -7;
/// The operating system refused to start a thread.
pub const WSPOOL_ESPAWN: c_int = -8;
/// The object was created before a `fork()` and this is the child: it cannot be used here.
pub const WSPOOL_EFORKED: c_int = -9;
/// An internal error (a bug in wspool was caught before it could cross the C boundary).
pub const WSPOOL_EINTERNAL: c_int = -10;

// ------------------------------------------------------------ policies ----

/// Growth: keep `min_threads`, add threads for blocking regions and detected starvation (default).
pub const WSPOOL_GROWTH_ADAPTIVE: c_int = 0;
/// Growth: start a thread when none is idle, queue only at `max_threads`.
pub const WSPOOL_GROWTH_SCALE_FIRST: c_int = 1;
/// Growth: queue first, grow only when the bounded queue is full (needs `queue_capacity`).
pub const WSPOOL_GROWTH_QUEUE_FIRST: c_int = 2;
/// Growth: exactly `min_threads`, never more.
pub const WSPOOL_GROWTH_FIXED: c_int = 3;

/// Reject: refuse with `WSPOOL_EREJECTED`; the caller keeps `arg` (default).
pub const WSPOOL_REJECT_ABORT: c_int = 0;
/// Reject: run the task on the submitting thread, inside the submit call.
pub const WSPOOL_REJECT_CALLER_RUNS: c_int = 1;
/// Reject: wait for room (at most `block_timeout_ms` when that is non-zero, then `WSPOOL_EREJECTED`).
pub const WSPOOL_REJECT_BLOCK: c_int = 2;
/// Reject: drop the oldest queued task (its `on_cancel` is called) to make room.
pub const WSPOOL_REJECT_DISCARD_OLDEST: c_int = 3;

/// Shutdown: refuse new tasks, run every accepted one, stop the threads.
pub const WSPOOL_SHUTDOWN_DRAIN: c_int = 0;
/// Shutdown: refuse new tasks, cancel the queued ones (their `on_cancel` is called), let running ones finish.
pub const WSPOOL_SHUTDOWN_CANCEL: c_int = 1;

/// Task state: queued, not started.
pub const WSPOOL_TASK_PENDING: c_int = 0;
/// Task state: running now.
pub const WSPOOL_TASK_RUNNING: c_int = 1;
/// Task state: ran to the end.
pub const WSPOOL_TASK_DONE: c_int = 2;
/// Task state: dropped unrun (its `on_cancel` was called).
pub const WSPOOL_TASK_CANCELLED: c_int = 3;

/// Submit flag: push to the pool's global queue even from a pool thread (fairness over locality).
pub const WSPOOL_SUBMIT_GLOBAL: u32 = 1;

// ------------------------------------------------------------- types ------

/// A C task or callback: called with the `arg` given at submission.
pub type wspool_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// A thread hook: called with the config's `hook_ctx` and the worker's index.
pub type wspool_thread_hook = Option<unsafe extern "C" fn(ctx: *mut c_void, index: u32)>;

/// Pool configuration. Fill it with `wspool_config_init()`, then change fields.
/// New fields are only ever added at the end; `struct_size` says which ones the caller knows.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wspool_config {
    /// `sizeof(wspool_config)` as the caller compiled it (set by `wspool_config_init`).
    pub struct_size: usize,
    /// Thread-name prefix, copied (threads are named `<name>-<index>`); NULL = "wspool". UTF-8.
    pub name: *const c_char,
    /// Threads kept alive at all times; 0 = available parallelism, never below 2.
    pub min_threads: u32,
    /// Upper bound on threads; 0 = default (at least `min_threads`, at least 256).
    pub max_threads: u32,
    /// Tasks allowed to wait in the pool; 0 = unbounded (never rejects).
    pub queue_capacity: u32,
    /// One of `WSPOOL_GROWTH_*`.
    pub growth: c_int,
    /// One of `WSPOOL_REJECT_*`: what a submission does when the queue is full and the pool cannot grow.
    pub reject: c_int,
    /// Idle threads above `min_threads` retire after this many ms; 0 = default (10000).
    pub keep_alive_ms: u32,
    /// Debounce spin cap in microseconds (default 500, at most 100000); 0 disables spinning.
    pub spin_max_us: u32,
    /// Optional: runs on each new worker thread before its first task; `index == wspool_current_index()` there.
    pub on_thread_start: wspool_thread_hook,
    /// Optional: runs on each worker thread as it exits.
    pub on_thread_stop: wspool_thread_hook,
    /// Passed as `ctx` to both thread hooks.
    pub hook_ctx: *mut c_void,
    /// Added in 0.1 after the first layout: with `WSPOOL_REJECT_BLOCK`, the longest a submission waits
    /// for room, in ms, before failing with `WSPOOL_EREJECTED`; 0 = as long as it takes.
    pub block_timeout_ms: u32,
}

/// Size of the first published `wspool_config` layout (up to and including `hook_ctx`):
/// the smallest `struct_size` accepted.
pub const WSPOOL_CONFIG_MIN_SIZE: usize = 72;
const _: () = assert!(offset_of!(wspool_config, hook_ctx) + size_of::<*mut c_void>() == WSPOOL_CONFIG_MIN_SIZE);

/// Options for `wspool_submit_ex`. Fill with `wspool_submit_opts_init()`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wspool_submit_opts {
    /// `sizeof(wspool_submit_opts)` as the caller compiled it (set by `wspool_submit_opts_init`).
    pub struct_size: usize,
    /// Bitwise OR of `WSPOOL_SUBMIT_*` flags; unknown bits are `WSPOOL_EINVAL`.
    pub flags: u32,
    /// Optional: the task counts toward this group (which must belong to the same pool).
    pub group: *mut wspool_group,
    /// Optional: called exactly once with `arg` if the accepted task is dropped unrun
    /// (cancel, shutdown CANCEL, DISCARD_OLDEST). Never called for a refused submission.
    pub on_cancel: wspool_fn,
}

/// Size of the first published `wspool_submit_opts` layout: the smallest `struct_size` accepted.
pub const WSPOOL_SUBMIT_OPTS_MIN_SIZE: usize = 32;
const _: () = assert!(size_of::<wspool_submit_opts>() == WSPOOL_SUBMIT_OPTS_MIN_SIZE);

/// A snapshot of a pool's counters. Set `struct_size` before `wspool_stats_get`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct wspool_stats {
    /// Set by the caller: `sizeof(wspool_stats)`; the library writes no byte past it.
    pub struct_size: usize,
    /// Worker threads alive now.
    pub threads: u32,
    /// Of those, parked or spinning with nothing to do.
    pub idle_threads: u32,
    /// Of those, inside a blocking region.
    pub blocked_threads: u32,
    /// Most threads alive at once.
    pub peak_threads: u32,
    /// Tasks accepted.
    pub submitted: u64,
    /// Tasks that ran to the end.
    pub completed: u64,
    /// Submissions refused by the reject policy.
    pub rejected: u64,
    /// Accepted tasks dropped unrun.
    pub cancelled: u64,
    /// Tasks that panicked (Rust tasks; C tasks cannot).
    pub panicked: u64,
    /// Tasks a worker took from its own deque.
    pub local_pops: u64,
    /// Tasks taken from the global queue.
    pub global_pops: u64,
    /// Tasks stolen from another worker's deque.
    pub steals: u64,
    /// Debounce spins that found work.
    pub spin_hits: u64,
    /// Debounce spins that found none.
    pub spin_misses: u64,
    /// Current debounce threshold in ns (seed 004's adaptive threshold).
    pub spin_threshold_ns: u32,
    /// Threads started since creation.
    pub threads_started: u64,
    /// Threads retired since creation.
    pub threads_retired: u64,
    /// Threads added by the starvation monitor.
    pub starvation_injections: u64,
    /// Tasks waiting now.
    pub queued: u64,
    /// Median time from submit to start over a recent window, ns.
    pub queue_delay_p50_ns: u64,
    /// 99th percentile of the same, ns.
    pub queue_delay_p99_ns: u64,
    /// Maximum of the same, ns.
    pub queue_delay_max_ns: u64,
    /// Added in 0.1 after the first layout: times the OS refused to start a thread.
    pub spawn_failures: u64,
}

/// Size of the first published `wspool_stats` layout (up to `queue_delay_max_ns`): the smallest accepted.
pub const WSPOOL_STATS_MIN_SIZE: usize = 168;
const _: () = assert!(offset_of!(wspool_stats, queue_delay_max_ns) + 8 == WSPOOL_STATS_MIN_SIZE);

/// Tags every pool, so a group can be checked against the pool it is used with.
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A thread pool (opaque).
pub struct wspool {
    pool: ManuallyDrop<Pool>,
    id: u64,
    fork_gen: u32,
}

/// A handle on one submitted task (opaque); free it with `wspool_task_release`.
pub struct wspool_task {
    handle: ManuallyDrop<TaskHandle<()>>,
    fork_gen: u32,
}

/// A group of tasks that can be waited for together (opaque).
pub struct wspool_group {
    group: ManuallyDrop<Group>,
    pool_id: u64,
    fork_gen: u32,
}

/// A serial queue: FIFO, at most one of its tasks runs at a time (opaque).
pub struct wspool_serial {
    queue: ManuallyDrop<SerialQueue>,
    fork_gen: u32,
}

// ------------------------------------------------------------ helpers -----

fn check_fork(created_in: u32) -> Res<()> {
    if created_in != support::fork_gen() {
        return fail(WSPOOL_EFORKED, "this object was created before fork(); it cannot be used in the child");
    }
    Ok(())
}

/// # Safety
/// `p` is NULL or a live pointer from this library.
unsafe fn obj<'a, T>(p: *const T, what: &'static str) -> Res<&'a T> {
    // SAFETY: per the contract.
    match unsafe { p.as_ref() } {
        Some(r) => Ok(r),
        None => einval(format!("{what} is NULL")),
    }
}

fn pool_of<'a>(p: *const wspool) -> Res<&'a wspool> {
    // SAFETY: a non-null pool pointer comes from wspool_create.
    let p = unsafe { obj(p, "pool")? };
    check_fork(p.fork_gen)?;
    Ok(p)
}

fn func(f: wspool_fn, what: &'static str) -> Res<support::CFn> {
    match f {
        Some(f) => Ok(f),
        None => einval(format!("{what} is NULL")),
    }
}

fn timeout(ms: i64) -> Res<Option<Duration>> {
    match ms {
        -1 => Ok(None),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
        ms => einval(format!("timeout_ms {ms} is invalid (use -1 to wait forever, 0 to poll)")),
    }
}

fn timed_out<T>() -> Res<T> {
    fail(WSPOOL_ETIMEDOUT, "timed out; the work is left untouched")
}

fn out_ptr<T>(out: *mut *mut T, what: &'static str) -> Res<()> {
    if out.is_null() {
        return einval(format!("{what} is NULL"));
    }
    // SAFETY: non-null out-pointer given by the caller.
    unsafe { *out = ptr::null_mut() };
    Ok(())
}

// ------------------------------------------------- version and errors -----

/// The library's version: `(major << 16) | (minor << 8) | patch` (compare with `WSPOOL_VERSION_NUMBER`).
#[unsafe(no_mangle)]
pub extern "C" fn wspool_version() -> u32 {
    WSPOOL_VERSION_NUMBER
}

/// A static, human-readable description of a status code ("unknown status" for others). Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_strerror(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        WSPOOL_OK => c"success",
        WSPOOL_EINVAL => c"invalid argument",
        WSPOOL_EREJECTED => c"rejected: the pool's queue is full",
        WSPOOL_ESHUTDOWN => c"the pool is shut down",
        WSPOOL_ETIMEDOUT => c"timed out",
        WSPOOL_ECANCELLED => c"the task was cancelled before it started",
        WSPOOL_EBUSY => c"the task has already started",
        WSPOOL_ENOMEM => c"out of memory",
        WSPOOL_ESPAWN => c"the operating system refused to start a thread",
        WSPOOL_EFORKED => c"the object belongs to the parent of fork()",
        WSPOOL_EINTERNAL => c"internal error in wspool",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// The message of the last failed call on the calling thread ("" if none). It stays valid
/// until the next failing call on this thread. Successful calls do not clear it.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_last_error() -> *const c_char {
    support::last_error_ptr()
}

// ------------------------------------------------------ configuration -----

fn default_config() -> wspool_config {
    wspool_config {
        struct_size: size_of::<wspool_config>(),
        name: ptr::null(),
        min_threads: 0,
        max_threads: 0,
        queue_capacity: 0,
        growth: WSPOOL_GROWTH_ADAPTIVE,
        reject: WSPOOL_REJECT_ABORT,
        keep_alive_ms: wspool_core::DEFAULT_KEEP_ALIVE.as_millis() as u32,
        spin_max_us: wspool_core::DEFAULT_SPIN_MAX_US,
        on_thread_start: None,
        on_thread_stop: None,
        hook_ctx: ptr::null_mut(),
        block_timeout_ms: 0,
    }
}

/// Fills `*cfg` with the defaults, `struct_size` included. NULL is ignored (and sets the last error).
/// The header maps `wspool_config_init(cfg)` to `wspool_config_init_sized(cfg, sizeof *(cfg))`,
/// so a program built against an older, shorter struct is never written past.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_config_init(cfg: *mut wspool_config) {
    // SAFETY: forwarded contract.
    unsafe { wspool_config_init_sized(cfg, size_of::<wspool_config>()) };
}

/// Fills the first `size` bytes of `*cfg` with the defaults and sets `cfg->struct_size = size`.
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_CONFIG_MIN_SIZE`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_config_init_sized(cfg: *mut wspool_config, size: usize) -> c_int {
    guard("wspool_config_init", || {
        if cfg.is_null() {
            return einval("cfg is NULL");
        }
        if size < WSPOOL_CONFIG_MIN_SIZE {
            return einval(format!("size {size} is below the smallest layout ({WSPOOL_CONFIG_MIN_SIZE} bytes)"));
        }
        let mut d = default_config();
        let n = size.min(size_of::<wspool_config>());
        d.struct_size = size;
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&d as *const wspool_config).cast::<u8>(), cfg.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}

/// Reads a caller's config: the fields its `struct_size` covers, defaults for the rest.
fn read_config(cfg: *const wspool_config) -> Res<wspool_config> {
    let mut c = default_config();
    if cfg.is_null() {
        return Ok(c);
    }
    // SAFETY: a non-null cfg points to a struct starting with struct_size.
    let size = unsafe { support::struct_size_of(cfg.cast(), WSPOOL_CONFIG_MIN_SIZE, "cfg")? };
    // SAFETY: the caller's struct has `size` readable bytes.
    unsafe { support::copy_prefix(cfg, &mut c, size.min(size_of::<wspool_config>())) };
    if size < offset_of!(wspool_config, block_timeout_ms) + size_of::<u32>() {
        c.block_timeout_ms = 0;
    }
    Ok(c)
}

struct Hook {
    f: unsafe extern "C" fn(*mut c_void, u32),
    ctx: SendPtr,
}

impl Hook {
    fn call(&self, index: usize) {
        // SAFETY: a non-null C hook with the caller's context.
        unsafe { (self.f)(self.ctx.0, index as u32) }
    }
}

fn builder_from(c: &wspool_config) -> Res<wspool_core::Builder> {
    let mut b = Pool::builder();
    if !c.name.is_null() {
        // SAFETY: a non-null name is a NUL-terminated string (documented).
        let name = unsafe { CStr::from_ptr(c.name) };
        match name.to_str() {
            Ok(s) => b = b.name(s),
            Err(_) => return einval("cfg.name is not valid UTF-8"),
        }
    }
    b = b
        .min_threads(c.min_threads as usize)
        .max_threads(c.max_threads as usize)
        .queue_capacity(c.queue_capacity as usize)
        .spin_max_us(c.spin_max_us);
    b = b.growth(match c.growth {
        WSPOOL_GROWTH_ADAPTIVE => Growth::Adaptive,
        WSPOOL_GROWTH_SCALE_FIRST => Growth::ScaleFirst,
        WSPOOL_GROWTH_QUEUE_FIRST => Growth::QueueFirst,
        WSPOOL_GROWTH_FIXED => Growth::Fixed,
        g => return einval(format!("cfg.growth {g} is not a WSPOOL_GROWTH_* value")),
    });
    b = b.reject(match c.reject {
        WSPOOL_REJECT_ABORT => Reject::Abort,
        WSPOOL_REJECT_CALLER_RUNS => Reject::CallerRuns,
        WSPOOL_REJECT_BLOCK if c.block_timeout_ms == 0 => Reject::Block,
        WSPOOL_REJECT_BLOCK => Reject::BlockFor(Duration::from_millis(c.block_timeout_ms.into())),
        WSPOOL_REJECT_DISCARD_OLDEST => Reject::DiscardOldest,
        r => return einval(format!("cfg.reject {r} is not a WSPOOL_REJECT_* value")),
    });
    if c.keep_alive_ms != 0 {
        b = b.keep_alive(Duration::from_millis(c.keep_alive_ms.into()));
    }
    let start = c.on_thread_start.map(|f| Hook { f, ctx: SendPtr(c.hook_ctx) });
    b = b.on_thread_start(move |i| {
        support::mark_worker_thread();
        if let Some(h) = &start {
            h.call(i);
        }
    });
    if let Some(f) = c.on_thread_stop {
        let h = Hook { f, ctx: SendPtr(c.hook_ctx) };
        b = b.on_thread_stop(move |i| h.call(i));
    }
    Ok(b)
}

// ------------------------------------------------------------ lifecycle ---

/// Creates a pool (`cfg` NULL = defaults) and stores it in `*out` (NULL on failure).
/// Bad values are `WSPOOL_EINVAL` with a message; a refused thread start is `WSPOOL_ESPAWN`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_create(cfg: *const wspool_config, out: *mut *mut wspool) -> c_int {
    guard("wspool_create", || {
        out_ptr(out, "out")?;
        support::init_once();
        let c = read_config(cfg)?;
        let pool = match builder_from(&c)?.build() {
            Ok(p) => p,
            Err(e) => {
                let msg = e.to_string();
                let code = if msg.contains("spawn") || msg.contains("thread start") { WSPOOL_ESPAWN } else { WSPOOL_EINVAL };
                return fail(code, msg);
            }
        };
        let w = wspool {
            pool: ManuallyDrop::new(pool),
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            fork_gen: support::fork_gen(),
        };
        // SAFETY: checked non-null by out_ptr.
        unsafe { *out = Box::into_raw(Box::new(w)) };
        Ok(WSPOOL_OK)
    })
}

/// Stops accepting tasks and then, with `WSPOOL_SHUTDOWN_DRAIN`, runs every accepted task, or with
/// `WSPOOL_SHUTDOWN_CANCEL`, cancels the queued ones (calling their `on_cancel`). Waits up to
/// `timeout_ms` (-1 = forever, 0 = do not wait) for the threads to finish: `WSPOOL_ETIMEDOUT` if they
/// have not (the shutdown carries on; call again to wait more). Idempotent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_shutdown(pool: *mut wspool, mode: c_int, timeout_ms: i64) -> c_int {
    guard("wspool_shutdown", || {
        let p = pool_of(pool)?;
        let mode = match mode {
            WSPOOL_SHUTDOWN_DRAIN => Shutdown::Drain,
            WSPOOL_SHUTDOWN_CANCEL => Shutdown::Cancel,
            m => return einval(format!("mode {m} is not a WSPOOL_SHUTDOWN_* value")),
        };
        let t = timeout(timeout_ms)?;
        match p.pool.shutdown(mode, t) {
            Ok(()) => {
                tsan::acquire_done();
                Ok(WSPOOL_OK)
            }
            Err(_) => timed_out(),
        }
    })
}

/// Drains (runs every accepted task), joins the threads and frees the pool. NULL is a no-op.
/// Groups, serial queues and task handles stay valid (their submissions fail with
/// `WSPOOL_ESHUTDOWN`) until released. In a forked child, an inherited pool is freed without
/// touching the parent's threads (its internals are leaked on purpose).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_destroy(pool: *mut wspool) {
    guard_void("wspool_destroy", || {
        if pool.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null pointer from wspool_create, destroyed once.
        let mut w = unsafe { Box::from_raw(pool) };
        if w.fork_gen != support::fork_gen() {
            support::keep_forever(w); // its threads live in the parent: never join them
            return Ok(());
        }
        // On one of the pool's own threads this does not wait for itself (the core returns at
        // once and the threads exit on their own after the current task).
        let _ = w.pool.shutdown(Shutdown::Drain, None);
        tsan::acquire_done();
        // SAFETY: taken once, never used again.
        drop(unsafe { ManuallyDrop::take(&mut w.pool) });
        Ok(())
    })
}

// ---------------------------------------------------------- submission ----

/// Submits `fn(arg)`. On `WSPOOL_OK` the pool owns `arg` until the task runs; on any error the
/// caller keeps it. From a pool thread the task goes to that thread's own deque.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit(pool: *mut wspool, r#fn: wspool_fn, arg: *mut c_void) -> c_int {
    guard("wspool_submit", || {
        let p = pool_of(pool)?;
        let f = func(r#fn, "fn")?;
        p.pool.spawn(CTask::new(f, arg, None).into_closure()).map_err(support::refused)?;
        Ok(WSPOOL_OK)
    })
}

fn default_opts() -> wspool_submit_opts {
    wspool_submit_opts {
        struct_size: size_of::<wspool_submit_opts>(),
        flags: 0,
        group: ptr::null_mut(),
        on_cancel: None,
    }
}

/// Fills `*opts` with the defaults, `struct_size` included. NULL is ignored (and sets the last error).
/// The header maps `wspool_submit_opts_init(opts)` to `wspool_submit_opts_init_sized(opts, sizeof *(opts))`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_opts_init(opts: *mut wspool_submit_opts) {
    // SAFETY: forwarded contract.
    unsafe { wspool_submit_opts_init_sized(opts, size_of::<wspool_submit_opts>()) };
}

/// Fills the first `size` bytes of `*opts` with the defaults and sets `opts->struct_size = size`.
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_SUBMIT_OPTS_MIN_SIZE`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_opts_init_sized(opts: *mut wspool_submit_opts, size: usize) -> c_int {
    guard("wspool_submit_opts_init", || {
        if opts.is_null() {
            return einval("opts is NULL");
        }
        if size < WSPOOL_SUBMIT_OPTS_MIN_SIZE {
            return einval(format!("size {size} is below the smallest layout ({WSPOOL_SUBMIT_OPTS_MIN_SIZE} bytes)"));
        }
        let mut d = default_opts();
        d.struct_size = size;
        let n = size.min(size_of::<wspool_submit_opts>());
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&d as *const wspool_submit_opts).cast::<u8>(), opts.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}

/// Submits `fn(arg)` with options (`opts` NULL = defaults) and, when `out_task` is not NULL,
/// stores a task handle there (NULL on failure) to wait for, cancel or query the task; release it
/// with `wspool_task_release`. Ownership of `arg` as for `wspool_submit`; `opts->on_cancel` is
/// called exactly once if the accepted task is dropped unrun, never for a refused submission.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_ex(
    pool: *mut wspool,
    r#fn: wspool_fn,
    arg: *mut c_void,
    opts: *const wspool_submit_opts,
    out_task: *mut *mut wspool_task,
) -> c_int {
    guard("wspool_submit_ex", || {
        if !out_task.is_null() {
            // SAFETY: non-null out-pointer.
            unsafe { *out_task = ptr::null_mut() };
        }
        let p = pool_of(pool)?;
        let f = func(r#fn, "fn")?;
        let mut o = default_opts();
        if !opts.is_null() {
            // SAFETY: a non-null opts points to a struct starting with struct_size.
            let size = unsafe { support::struct_size_of(opts.cast(), WSPOOL_SUBMIT_OPTS_MIN_SIZE, "opts")? };
            // SAFETY: `size` readable bytes.
            unsafe { support::copy_prefix(opts, &mut o, size.min(size_of::<wspool_submit_opts>())) };
        }
        if o.flags & !WSPOOL_SUBMIT_GLOBAL != 0 {
            return einval(format!("opts.flags {:#x} has unknown bits", o.flags));
        }
        let group = match o.group.is_null() {
            true => None,
            false => {
                // SAFETY: a non-null group from wspool_group_create.
                let g = unsafe { &*o.group };
                check_fork(g.fork_gen)?;
                if g.pool_id != p.id {
                    return einval("opts.group belongs to another pool");
                }
                Some(&*g.group)
            }
        };
        let so = SpawnOptions { global: o.flags & WSPOOL_SUBMIT_GLOBAL != 0, group };
        let task = CTask::new(f, arg, o.on_cancel).into_closure();
        if out_task.is_null() {
            p.pool.spawn_with(so, task).map_err(support::refused)?;
        } else {
            let h = p.pool.submit_with(so, task).map_err(support::refused)?;
            let t = wspool_task { handle: ManuallyDrop::new(h), fork_gen: p.fork_gen };
            // SAFETY: non-null out-pointer.
            unsafe { *out_task = Box::into_raw(Box::new(t)) };
        }
        Ok(WSPOOL_OK)
    })
}

/// Fork-join without allocation: runs `a(arg_a)` on the caller and offers `b(arg_b)` to other
/// workers, running it itself if nobody took it; returns when both are done. On a thread that
/// is not one of the pool's it submits `b` and helps or waits as needed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_join(
    pool: *mut wspool,
    a: wspool_fn,
    arg_a: *mut c_void,
    b: wspool_fn,
    arg_b: *mut c_void,
) -> c_int {
    guard("wspool_join", || {
        let p = pool_of(pool)?;
        let fa = func(a, "a")?;
        let fb = func(b, "b")?;
        if p.pool.is_shutdown() {
            return fail(WSPOOL_ESHUTDOWN, "the pool is shut down");
        }
        let (xa, xb) = (SendPtr(arg_a), SendPtr(arg_b));
        tsan::release_submit();
        p.pool.join(
            move || {
                let xa = xa;
                tsan::acquire_submit();
                // SAFETY: non-null C function with its argument.
                unsafe { fa(xa.0) };
                tsan::release_done();
            },
            move || {
                let xb = xb;
                tsan::acquire_submit();
                // SAFETY: as above.
                unsafe { fb(xb.0) };
                tsan::release_done();
            },
        );
        tsan::acquire_done();
        Ok(WSPOOL_OK)
    })
}

// --------------------------------------------------------------- tasks ----

fn task_of<'a>(t: *const wspool_task) -> Res<&'a wspool_task> {
    // SAFETY: a non-null task pointer comes from wspool_submit_ex.
    let t = unsafe { obj(t, "task")? };
    check_fork(t.fork_gen)?;
    Ok(t)
}

/// Waits up to `timeout_ms` (-1 = forever, 0 = poll) for the task: `WSPOOL_OK` once it ran,
/// `WSPOOL_ECANCELLED` if it was cancelled, `WSPOOL_ETIMEDOUT` if still pending or running.
/// On a pool thread it runs other tasks while waiting.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_wait(t: *mut wspool_task, timeout_ms: i64) -> c_int {
    guard("wspool_task_wait", || {
        let t = task_of(t)?;
        let d = timeout(timeout_ms)?;
        if !t.handle.wait_for(d) {
            return timed_out();
        }
        tsan::acquire_done();
        match t.handle.state() {
            TaskState::Cancelled => fail(WSPOOL_ECANCELLED, "the task was cancelled before it started"),
            _ => Ok(WSPOOL_OK),
        }
    })
}

/// Cancels the task if it has not started: `WSPOOL_OK`, and its `on_cancel(arg)` is called (once,
/// even when cancel is called again); `WSPOOL_EBUSY` if it is running or done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_cancel(t: *mut wspool_task) -> c_int {
    guard("wspool_task_cancel", || {
        let t = task_of(t)?;
        if t.handle.cancel() || t.handle.state() == TaskState::Cancelled {
            Ok(WSPOOL_OK)
        } else {
            fail(WSPOOL_EBUSY, "the task has already started")
        }
    })
}

/// The task's state: one of `WSPOOL_TASK_*`, or a negative status (`WSPOOL_EINVAL` for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_state(t: *const wspool_task) -> c_int {
    guard("wspool_task_state", || {
        let t = task_of(t)?;
        Ok(match t.handle.state() {
            TaskState::Pending => WSPOOL_TASK_PENDING,
            TaskState::Running => WSPOOL_TASK_RUNNING,
            TaskState::Done => WSPOOL_TASK_DONE,
            TaskState::Cancelled => WSPOOL_TASK_CANCELLED,
        })
    })
}

/// Frees the handle. The task itself is not affected (it still runs). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_release(t: *mut wspool_task) {
    guard_void("wspool_task_release", || {
        if !t.is_null() {
            // SAFETY: a pointer from wspool_submit_ex, released once.
            let mut b = unsafe { Box::from_raw(t) };
            if b.fork_gen != support::fork_gen() {
                support::keep_forever(b);
            } else {
                // SAFETY: taken once.
                drop(unsafe { ManuallyDrop::take(&mut b.handle) });
            }
        }
        Ok(())
    })
}

// -------------------------------------------------------------- groups ----

fn group_of<'a>(g: *const wspool_group) -> Res<&'a wspool_group> {
    // SAFETY: a non-null group pointer comes from wspool_group_create.
    let g = unsafe { obj(g, "group")? };
    check_fork(g.fork_gen)?;
    Ok(g)
}

/// Creates a task group on `pool` and stores it in `*out` (NULL on failure).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_create(pool: *mut wspool, out: *mut *mut wspool_group) -> c_int {
    guard("wspool_group_create", || {
        out_ptr(out, "out")?;
        let p = pool_of(pool)?;
        let g = wspool_group { group: ManuallyDrop::new(p.pool.group()), pool_id: p.id, fork_gen: p.fork_gen };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(g)) };
        Ok(WSPOOL_OK)
    })
}

/// Submits `fn(arg)` as part of the group; ownership of `arg` as for `wspool_submit`.
/// (For `on_cancel` use `wspool_submit_ex` with `opts.group`.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_submit(g: *mut wspool_group, r#fn: wspool_fn, arg: *mut c_void) -> c_int {
    guard("wspool_group_submit", || {
        let g = group_of(g)?;
        let f = func(r#fn, "fn")?;
        g.group.spawn(CTask::new(f, arg, None).into_closure()).map_err(support::refused)?;
        Ok(WSPOOL_OK)
    })
}

/// Waits up to `timeout_ms` (-1 = forever, 0 = poll) until every task of the group has finished
/// (`WSPOOL_OK`) or `WSPOOL_ETIMEDOUT`. On a pool thread it runs other tasks while waiting.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_wait(g: *mut wspool_group, timeout_ms: i64) -> c_int {
    guard("wspool_group_wait", || {
        let g = group_of(g)?;
        let d = timeout(timeout_ms)?;
        if !g.group.wait_for(d) {
            return timed_out();
        }
        tsan::acquire_done();
        Ok(WSPOOL_OK)
    })
}

/// Frees the group handle; tasks still pending keep running (the group is freed after the last).
/// NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_destroy(g: *mut wspool_group) {
    guard_void("wspool_group_destroy", || {
        if !g.is_null() {
            // SAFETY: a pointer from wspool_group_create, destroyed once.
            let mut b = unsafe { Box::from_raw(g) };
            if b.fork_gen != support::fork_gen() {
                support::keep_forever(b);
            } else {
                // SAFETY: taken once.
                drop(unsafe { ManuallyDrop::take(&mut b.group) });
            }
        }
        Ok(())
    })
}

// -------------------------------------------------------- serial queues ---

/// Creates a serial queue on `pool` (FIFO, at most one of its tasks running at a time; queued
/// tasks occupy no worker) and stores it in `*out` (NULL on failure).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_create(pool: *mut wspool, out: *mut *mut wspool_serial) -> c_int {
    guard("wspool_serial_create", || {
        out_ptr(out, "out")?;
        let p = pool_of(pool)?;
        let s = wspool_serial { queue: ManuallyDrop::new(p.pool.serial()), fork_gen: p.fork_gen };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(s)) };
        Ok(WSPOOL_OK)
    })
}

/// Appends `fn(arg)` to the serial queue; ownership of `arg` as for `wspool_submit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_submit(s: *mut wspool_serial, r#fn: wspool_fn, arg: *mut c_void) -> c_int {
    guard("wspool_serial_submit", || {
        // SAFETY: a non-null pointer from wspool_serial_create.
        let s = unsafe { obj(s, "serial")? };
        check_fork(s.fork_gen)?;
        let f = func(r#fn, "fn")?;
        s.queue.spawn(CTask::new(f, arg, None).into_closure()).map_err(support::refused)?;
        Ok(WSPOOL_OK)
    })
}

/// Frees the serial queue handle; its pending tasks still run, in order. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_destroy(s: *mut wspool_serial) {
    guard_void("wspool_serial_destroy", || {
        if !s.is_null() {
            // SAFETY: a pointer from wspool_serial_create, destroyed once.
            let mut b = unsafe { Box::from_raw(s) };
            if b.fork_gen != support::fork_gen() {
                support::keep_forever(b);
            } else {
                // SAFETY: taken once.
                drop(unsafe { ManuallyDrop::take(&mut b.queue) });
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------- blocking regions ----

/// Declares that the calling pool thread is about to block (I/O, a foreign lock): the pool lends
/// a compensating thread at once. Pair with `wspool_blocking_end`; regions nest. No-op off the pool.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_blocking_begin() {
    guard_void("wspool_blocking_begin", || {
        if !support::is_stale_worker_thread() {
            wspool_core::blocking_begin();
        }
        Ok(())
    })
}

/// Ends the region opened by `wspool_blocking_begin`; an unmatched end is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_blocking_end() {
    guard_void("wspool_blocking_end", || {
        if !support::is_stale_worker_thread() {
            wspool_core::blocking_end();
        }
        Ok(())
    })
}

// -------------------------------------------------------- observability ---

/// Fills `*out` with a snapshot of the pool's counters. The caller sets `out->struct_size`
/// (`WSPOOL_EINVAL` if 0 or below `WSPOOL_STATS_MIN_SIZE`); no byte past it is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_stats_get(pool: *const wspool, out: *mut wspool_stats) -> c_int {
    guard("wspool_stats_get", || {
        let p = pool_of(pool)?;
        if out.is_null() {
            return einval("out is NULL");
        }
        // SAFETY: non-null, starts with struct_size.
        let size = unsafe { support::struct_size_of(out.cast(), WSPOOL_STATS_MIN_SIZE, "stats")? };
        let s = p.pool.stats();
        let full = wspool_stats {
            struct_size: size,
            threads: s.threads,
            idle_threads: s.idle_threads,
            blocked_threads: s.blocked_threads,
            peak_threads: s.peak_threads,
            submitted: s.submitted,
            completed: s.completed,
            rejected: s.rejected,
            cancelled: s.cancelled,
            panicked: s.panicked,
            local_pops: s.local_pops,
            global_pops: s.global_pops,
            steals: s.steals,
            spin_hits: s.spin_hits,
            spin_misses: s.spin_misses,
            spin_threshold_ns: s.spin_threshold_ns,
            threads_started: s.threads_started,
            threads_retired: s.threads_retired,
            starvation_injections: s.starvation_injections,
            queued: s.queued,
            queue_delay_p50_ns: s.queue_delay_p50_ns,
            queue_delay_p99_ns: s.queue_delay_p99_ns,
            queue_delay_max_ns: s.queue_delay_max_ns,
            spawn_failures: s.spawn_failures,
        };
        // Whole fields only: the first layout, plus each later field the caller's size covers.
        let n = if size >= size_of::<wspool_stats>() { size_of::<wspool_stats>() } else { WSPOOL_STATS_MIN_SIZE };
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&full as *const wspool_stats).cast::<u8>(), out.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}

/// The calling thread's worker index on a pool thread (any pool), else -1.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_current_index() -> c_int {
    if support::is_stale_worker_thread() {
        return -1;
    }
    match std::panic::catch_unwind(wspool_core::current_index) {
        Ok(Some(i)) => i as c_int,
        _ => -1,
    }
}
