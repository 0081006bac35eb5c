//! Pool configuration: `wspool_config`, its defaults and its mapping onto the
//! core's `Builder`.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::{align_of, offset_of, size_of};
use std::ptr;
use std::time::Duration;

use wspool_core::{Growth, Pool, Reject};

use crate::WSPOOL_OK;
use crate::support::{self, Res, SendPtr, einval, guard};

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
/// A submission from one of the pool's own threads never waits: it gets `WSPOOL_EREJECTED` at once,
/// since the room it would wait for may be room only its own thread can make.
pub const WSPOOL_REJECT_BLOCK: c_int = 2;
/// Reject: drop the oldest queued user task of the global queue (its `on_cancel` is called: exactly
/// one task per eviction) to make room; with none to drop, refuse like `WSPOOL_REJECT_ABORT`. Serial
/// queues' turns and join halves are never evicted.
pub const WSPOOL_REJECT_DISCARD_OLDEST: c_int = 3;

// -------------------------------------------------------------- config ----

/// A thread hook: called with the config's `hook_ctx` and the worker's index. It must return
/// normally: no C++ exception, `longjmp` or thread cancellation may leave it (see the header's
/// preamble).
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
    /// Added in 0.1 after the first layout: stack size of each worker thread in bytes; 0 = the
    /// default (Rust's, 2 MiB). Tasks run on it, and so do the tasks a waiting task runs while it
    /// helps. Values below `WSPOOL_STACK_SIZE_MIN` are `WSPOOL_EINVAL`; a size the operating system
    /// cannot provide makes `wspool_create` fail with `WSPOOL_ESPAWN`.
    pub stack_size: usize,
    /// Added in 0.1 after the second layout: every thread of the pool (workers, threads lent to
    /// blocking regions, the monitor) runs this many steps nicer than the thread that creates the
    /// pool, at most 19; 0 = the same (default). For a pool sharing its cores with an event loop:
    /// the loop then preempts CPU-bound tasks on each wake-up. Linux only (nice is per thread
    /// there); elsewhere accepted and ignored. Above 19 is `WSPOOL_EINVAL`.
    pub thread_nice: u32,
}

/// Size of the first published `wspool_config` layout (up to and including `hook_ctx`):
/// the smallest `struct_size` accepted.
pub const WSPOOL_CONFIG_MIN_SIZE: usize = 72;
const _: () = assert!(offset_of!(wspool_config, hook_ctx) + size_of::<*mut c_void>() == WSPOOL_CONFIG_MIN_SIZE);

/// The end of each published `wspool_config` layout, oldest first.
const CONFIG_LAYOUTS: [usize; 4] = [
    WSPOOL_CONFIG_MIN_SIZE,
    offset_of!(wspool_config, block_timeout_ms) + size_of::<u32>(),
    offset_of!(wspool_config, stack_size) + size_of::<usize>(),
    offset_of!(wspool_config, thread_nice) + size_of::<u32>(),
];
// The last layout ends at the struct's end, bar its trailing padding.
const _: () = assert!(size_of::<wspool_config>() - CONFIG_LAYOUTS[3] < align_of::<wspool_config>());

/// The largest `struct_size` accepted for any versioned struct (`wspool_config`,
/// `wspool_submit_opts`, `wspool_stats`, `wspool_cq_opts`), and the largest `size` their
/// `_init_sized` functions take; a larger one is `WSPOOL_EINVAL`, naming the `_init` function. Every struct
/// is far smaller and grows by a few fields per release; a size past this is
/// not a layout but stack garbage (a struct never given to its `_init`
/// function), and reading the fields it claims would follow garbage pointers.
pub const WSPOOL_STRUCT_SIZE_MAX: usize = 4096;

/// The smallest non-zero `stack_size` accepted (64 KiB): less leaves a task
/// too little room once the thread's own frames are on it.
pub const WSPOOL_STACK_SIZE_MIN: usize = 64 * 1024;
const _: () = assert!(WSPOOL_STACK_SIZE_MIN == wspool_core::STACK_SIZE_MIN, "one stack minimum in every language");

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
        stack_size: 0,
        thread_nice: 0,
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
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_CONFIG_MIN_SIZE` or above
/// `WSPOOL_STRUCT_SIZE_MAX`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_config_init_sized(cfg: *mut wspool_config, size: usize) -> c_int {
    guard("wspool_config_init", || {
        if cfg.is_null() {
            return einval("cfg is NULL");
        }
        if size > crate::WSPOOL_STRUCT_SIZE_MAX {
            return crate::support::check_struct_size(size, WSPOOL_CONFIG_MIN_SIZE, &"size", "wspool_config_init")
                .map(|()| 0);
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
pub(crate) fn read_config(cfg: *const wspool_config) -> Res<wspool_config> {
    let mut c = default_config();
    if cfg.is_null() {
        return Ok(c);
    }
    // SAFETY: a non-null cfg points to a struct starting with struct_size.
    let size = unsafe { support::struct_size_of(cfg.cast(), WSPOOL_CONFIG_MIN_SIZE, "cfg", "wspool_config_init")? };
    // SAFETY: the caller's struct has `size` readable bytes, at least the copied prefix.
    unsafe { support::copy_prefix(cfg, &mut c, support::whole_fields(size, &CONFIG_LAYOUTS)) };
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

pub(crate) fn builder_from(c: &wspool_config) -> Res<wspool_core::Builder> {
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
        .spin_max_us(c.spin_max_us)
        .thread_nice(c.thread_nice);
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
    match c.stack_size {
        0 => {}
        n if n < WSPOOL_STACK_SIZE_MIN => {
            return einval(format!(
                "cfg.stack_size {n} is below WSPOOL_STACK_SIZE_MIN ({WSPOOL_STACK_SIZE_MIN} bytes)"
            ));
        }
        n => b = b.stack_size(n),
    }
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
