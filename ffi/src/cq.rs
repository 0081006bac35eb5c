//! Completion queues in C (`wspool_cq_*`), the overload flag and the
//! OpenMetrics export: thin mappings onto `wspool_core::CompletionQueue`
//! and `Pool::openmetrics`, like the rest of this crate.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use wspool_core::{CloseMode, CompletionQueue, CqEvent, CqOptions, CqRefusal, CqSignal, CqStatus};

use crate::support::{self, CFn, Res, SendPtr, einval, fail, guard, tsan};
use crate::{
    WSPOOL_EINVAL, WSPOOL_EREJECTED, WSPOOL_ESHUTDOWN, WSPOOL_OK, check_fork, func, pool_of, timed_out, wspool,
};

/// Completion status: the work function ran.
pub const WSPOOL_CQ_RAN: c_int = 0;
/// Completion status: the work never ran (pool shutdown CANCEL, DISCARD_OLDEST, `wspool_cq_close` CANCEL, or
/// `wspool_task_cancel` on the handle of `wspool_cq_submit_task`).
pub const WSPOOL_CQ_CANCELLED: c_int = 1;
/// Completion status: the work panicked (Rust or Python work only: a C function cannot).
pub const WSPOOL_CQ_PANICKED: c_int = 2;
/// Completion status: the work never ran: it had not started by its deadline
/// (`wspool_submit_opts.deadline_ns`, given to `wspool_cq_submit_ex`).
pub const WSPOOL_CQ_EXPIRED: c_int = 3;

/// Signal: pending submissions reached `high_water`; stop taking new requests.
pub const WSPOOL_CQ_SIGNAL_HIGH_WATER: c_int = 1;
/// Signal: pending submissions fell back to `low_water`; take requests again.
pub const WSPOOL_CQ_SIGNAL_LOW_WATER: c_int = 2;
/// Signal: queue delay stayed above `overload_target_us` for `overload_interval_us`; shed load.
pub const WSPOOL_CQ_SIGNAL_OVERLOADED: c_int = 3;
/// Signal: queue delay is below the target again, or the queue ran empty.
pub const WSPOOL_CQ_SIGNAL_RECOVERED: c_int = 4;

/// Close: let every accepted submission run; each `done` gets `WSPOOL_CQ_RAN`.
pub const WSPOOL_CQ_CLOSE_DRAIN: c_int = 0;
/// Close: submissions not yet started do not run; their `done` gets `WSPOOL_CQ_CANCELLED`.
pub const WSPOOL_CQ_CLOSE_CANCEL: c_int = 1;

/// `wspool_cq_opts.flags`: submit through the pool's global queue even from a pool thread.
pub const WSPOOL_CQ_GLOBAL: u32 = 1;

/// Runs on the draining thread, exactly once per accepted submission, with its `arg` and a
/// `WSPOOL_CQ_*` status. It must return normally (no unwinding; see the header's preamble).
pub type wspool_cq_done_fn = Option<unsafe extern "C" fn(arg: *mut c_void, status: c_int)>;
/// Runs on the draining thread with `signal_ctx` and a `WSPOOL_CQ_SIGNAL_*` value. It must return
/// normally (no unwinding; see the header's preamble).
pub type wspool_cq_signal_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, signal: c_int)>;
/// Wakes the loop (e.g. `uv_async_send`); runs on a pool thread or the submitting/draining thread.
/// It must return normally (no unwinding; see the header's preamble).
pub type wspool_cq_wake_fn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// Completion-queue options. Fill with `wspool_cq_opts_init()`, then change fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wspool_cq_opts {
    /// `sizeof(wspool_cq_opts)` as the caller compiled it (set by `wspool_cq_opts_init`).
    pub struct_size: usize,
    /// Most pending submissions (queued, running, or completed but not drained); 0 = unbounded.
    /// Past it `wspool_cq_submit` returns `WSPOOL_EREJECTED`.
    pub cap: u32,
    /// `WSPOOL_CQ_SIGNAL_HIGH_WATER` when pending reaches this; 0 = `cap` (never when unbounded).
    pub high_water: u32,
    /// `WSPOOL_CQ_SIGNAL_LOW_WATER` when pending falls back to this; 0 = `high_water / 2`.
    pub low_water: u32,
    /// Overload target: queue delay (submit to start) in µs; 0 turns the overload signal off.
    /// Default 5000 (CoDel's 5 ms).
    pub overload_target_us: u32,
    /// Overload interval: how long the delay must stay above the target, µs. Default 100000.
    pub overload_interval_us: u32,
    /// Bitwise OR of `WSPOOL_CQ_*` flags; unknown bits are `WSPOOL_EINVAL`.
    pub flags: u32,
    /// Optional: wake the loop by calling this instead of through `wspool_cq_fd()`. Called once per
    /// batch (when the queue goes from empty to non-empty) and after a bounded drain that left work.
    pub wake: wspool_cq_wake_fn,
    /// Passed to `wake`.
    pub wake_ctx: *mut c_void,
    /// Optional: receives `WSPOOL_CQ_SIGNAL_*` values, on the draining thread, in order with the
    /// completions.
    pub on_signal: wspool_cq_signal_fn,
    /// Passed to `on_signal`.
    pub signal_ctx: *mut c_void,
}

/// Size of the first published `wspool_cq_opts` layout: the smallest `struct_size` accepted.
pub const WSPOOL_CQ_OPTS_MIN_SIZE: usize = 64;
const _: () = assert!(offset_of!(wspool_cq_opts, signal_ctx) + size_of::<*mut c_void>() == WSPOOL_CQ_OPTS_MIN_SIZE);

/// One C submission: travels to the pool and back as the queue's payload.
struct CItem {
    work: CFn,
    done: unsafe extern "C" fn(*mut c_void, c_int),
    arg: SendPtr,
}

type Cq = CompletionQueue<CItem>;

/// A completion queue bound to a pool (opaque). Free it with `wspool_cq_close`.
pub struct wspool_cq {
    cq: Arc<Cq>,
    /// Its pool's list of queues, which it leaves when closed (the pool may be gone by then).
    listed_in: Arc<PoolQueues>,
    on_signal: Option<(unsafe extern "C" fn(*mut c_void, c_int), SendPtr)>,
    fork_gen: u32,
}

/// The queues of one pool, for `wspool_overloaded(pool)`: kept in the pool's handle, not in a
/// process-wide list, so its lock is never one a forked child could inherit held while it needs it
/// (a child cannot use the parent's pools, and its own pools have their own lists).
#[derive(Default)]
pub(crate) struct PoolQueues(Mutex<Vec<Weak<Cq>>>);

impl PoolQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Cq>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn default_cq_opts() -> wspool_cq_opts {
    wspool_cq_opts {
        struct_size: size_of::<wspool_cq_opts>(),
        cap: 0,
        high_water: 0,
        low_water: 0,
        overload_target_us: wspool_core::DEFAULT_OVERLOAD_TARGET.as_micros() as u32,
        overload_interval_us: wspool_core::DEFAULT_OVERLOAD_INTERVAL.as_micros() as u32,
        flags: 0,
        wake: None,
        wake_ctx: ptr::null_mut(),
        on_signal: None,
        signal_ctx: ptr::null_mut(),
    }
}

/// Fills `*opts` with the defaults, `struct_size` included. NULL is ignored (and sets the last error).
/// The header maps `wspool_cq_opts_init(opts)` to `wspool_cq_opts_init_sized(opts, sizeof *(opts))`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_opts_init(opts: *mut wspool_cq_opts) {
    // SAFETY: forwarded contract.
    unsafe { wspool_cq_opts_init_sized(opts, size_of::<wspool_cq_opts>()) };
}

/// Fills the first `size` bytes of `*opts` with the defaults and sets `opts->struct_size = size`.
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_CQ_OPTS_MIN_SIZE` or above
/// `WSPOOL_STRUCT_SIZE_MAX`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_opts_init_sized(opts: *mut wspool_cq_opts, size: usize) -> c_int {
    guard("wspool_cq_opts_init", || {
        if opts.is_null() {
            return einval("opts is NULL");
        }
        if size > crate::WSPOOL_STRUCT_SIZE_MAX {
            return crate::support::check_struct_size(size, WSPOOL_CQ_OPTS_MIN_SIZE, &"size", "wspool_cq_opts_init")
                .map(|()| 0);
        }
        if size < WSPOOL_CQ_OPTS_MIN_SIZE {
            return einval(format!("size {size} is below the smallest layout ({WSPOOL_CQ_OPTS_MIN_SIZE} bytes)"));
        }
        let mut d = default_cq_opts();
        d.struct_size = size;
        let n = size.min(size_of::<wspool_cq_opts>());
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&d as *const wspool_cq_opts).cast::<u8>(), opts.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}

/// Creates a completion queue on `pool` (`opts` NULL = defaults) and stores it in `*out` (NULL on
/// failure). Without a `wake` callback the queue has a file descriptor to poll: `wspool_cq_fd`.
/// Free it with `wspool_cq_close`, before or after the pool's shutdown: a shutdown completes every
/// accepted submission (DRAIN: they run; CANCEL: `done` gets `WSPOOL_CQ_CANCELLED`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_create(
    pool: *mut wspool,
    opts: *const wspool_cq_opts,
    out: *mut *mut wspool_cq,
) -> c_int {
    guard("wspool_cq_create", || {
        if out.is_null() {
            return einval("out is NULL");
        }
        // SAFETY: non-null out-pointer.
        unsafe { *out = ptr::null_mut() };
        let p = pool_of(pool)?;
        let mut o = default_cq_opts();
        if !opts.is_null() {
            // SAFETY: a non-null opts points to a struct starting with struct_size.
            let size = unsafe {
                support::struct_size_of(opts.cast(), WSPOOL_CQ_OPTS_MIN_SIZE, "opts", "wspool_cq_opts_init")?
            };
            // SAFETY: `size` readable bytes.
            unsafe { support::copy_prefix(opts, &mut o, size.min(size_of::<wspool_cq_opts>())) };
        }
        if o.flags & !WSPOOL_CQ_GLOBAL != 0 {
            return einval(format!("opts.flags has unknown bits {:#x}", o.flags & !WSPOOL_CQ_GLOBAL));
        }
        let wake: Option<Box<dyn Fn() + Send + Sync>> = o.wake.map(|f| {
            let ctx = SendPtr(o.wake_ctx);
            Box::new(move || {
                let ctx = ctx;
                // SAFETY: the caller's wake callback with its context (documented thread rules).
                unsafe { f(ctx.0) }
            }) as Box<dyn Fn() + Send + Sync>
        });
        let core_opts = CqOptions {
            cap: o.cap as usize,
            high_water: o.high_water as usize,
            low_water: o.low_water as usize,
            overload_target: (o.overload_target_us != 0).then(|| Duration::from_micros(o.overload_target_us.into())),
            overload_interval: Duration::from_micros(o.overload_interval_us.into()),
            wake,
            global: o.flags & WSPOOL_CQ_GLOBAL != 0,
        };
        let cq = match CompletionQueue::new(&p.pool, core_opts) {
            Ok(cq) => Arc::new(cq),
            Err(e) => return fail(WSPOOL_EINVAL, format!("cannot create the wake-up fd: {e}")),
        };
        p.queues.lock().push(Arc::downgrade(&cq));
        let on_signal = o.on_signal.map(|f| (f, SendPtr(o.signal_ctx)));
        let h = wspool_cq { cq, listed_in: p.queues.clone(), on_signal, fork_gen: support::fork_gen() };
        // SAFETY: checked non-null above.
        unsafe { *out = Box::into_raw(Box::new(h)) };
        Ok(WSPOOL_OK)
    })
}

fn cq_of<'a>(cq: *const wspool_cq) -> Res<&'a wspool_cq> {
    // SAFETY: a non-null queue pointer comes from wspool_cq_create and is not yet closed.
    match unsafe { cq.as_ref() } {
        Some(c) => {
            check_fork(c.fork_gen)?;
            Ok(c)
        }
        None => einval("cq is NULL"),
    }
}

/// Submits `work(arg)` to the queue's pool; afterwards `done(arg, status)` runs exactly once, on
/// the thread that calls `wspool_cq_drain` (or `wspool_cq_close`). On any error nothing was
/// accepted and `done` will not run: `WSPOOL_EREJECTED` (the queue's `cap` is reached, or the
/// pool's bounded queue refused), `WSPOOL_ESHUTDOWN` (queue closed or pool shut down).
/// Allocation-free once the queue has warmed up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_submit(
    cq: *mut wspool_cq,
    work: crate::wspool_fn,
    done: wspool_cq_done_fn,
    arg: *mut c_void,
) -> c_int {
    guard("wspool_cq_submit", || cq_submit(cq, work, done, arg, None, None))
}

/// `wspool_cq_submit` with submission options (`opts` NULL = defaults): `deadline_ns` (a submission
/// not started by then never runs and its `done` gets `WSPOOL_CQ_EXPIRED`), `group` (the work
/// counts toward it), `serial` (the work runs on that serial queue), `WSPOOL_SUBMIT_GLOBAL`.
/// `on_cancel` must be NULL (`WSPOOL_EINVAL`): `done` reports every ending. Same errors and
/// ownership rules as `wspool_cq_submit`; a group or serial queue of another pool is
/// `WSPOOL_EINVAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_submit_ex(
    cq: *mut wspool_cq,
    work: crate::wspool_fn,
    done: wspool_cq_done_fn,
    arg: *mut c_void,
    opts: *const crate::wspool_submit_opts,
) -> c_int {
    guard("wspool_cq_submit_ex", || cq_submit(cq, work, done, arg, Some(opts), None))
}

/// `wspool_cq_submit_ex` that also stores a task handle in `*out_task` (NULL on failure; must not
/// be NULL), for cancelling a submission whose result nobody wants any more (a client that hung
/// up). `wspool_task_cancel` before the work starts returns `WSPOOL_OK`: the work never runs and
/// `done(arg, WSPOOL_CQ_CANCELLED)` comes at the next drain (the cancelling call completes it; no
/// pool thread has to reach it first). Once the work started it returns `WSPOOL_EBUSY` and `done`
/// reports the work as usual; after an expiry, `WSPOOL_EEXPIRED`. `done` still runs exactly once
/// in every case, and `arg` stays owned by the queue until it does. `wspool_task_state` follows the
/// work; the completion is queued from inside the task, so `done` may run a moment before the state
/// reads `WSPOOL_TASK_DONE` (`WSPOOL_TASK_RUNNING` until then). Release the handle with
/// `wspool_task_release`, before or after `done`; do not wait on it from the loop thread (a wait
/// may run the work there). One allocation per call, which `wspool_cq_submit_ex` does not make.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_submit_task(
    cq: *mut wspool_cq,
    work: crate::wspool_fn,
    done: wspool_cq_done_fn,
    arg: *mut c_void,
    opts: *const crate::wspool_submit_opts,
    out_task: *mut *mut crate::wspool_task,
) -> c_int {
    guard("wspool_cq_submit_task", || {
        if out_task.is_null() {
            return einval("out_task is NULL: use wspool_cq_submit_ex without a handle");
        }
        // SAFETY: non-null out-pointer.
        unsafe { *out_task = ptr::null_mut() };
        cq_submit(cq, work, done, arg, Some(opts), Some(out_task))
    })
}

fn cq_submit(
    cq: *mut wspool_cq,
    work: crate::wspool_fn,
    done: wspool_cq_done_fn,
    arg: *mut c_void,
    opts: Option<*const crate::wspool_submit_opts>,
    out_task: Option<*mut *mut crate::wspool_task>,
) -> Res<c_int> {
    let c = cq_of(cq)?;
    let work = func(work, "work")?;
    let Some(done) = done else { return einval("done is NULL") };
    let so = match opts {
        None => wspool_core::SpawnOptions::default(),
        Some(opts) => {
            let o = crate::submit::read_opts(opts)?;
            if o.on_cancel.is_some() {
                return einval("opts.on_cancel must be NULL for a completion queue: `done` reports every ending");
            }
            crate::submit::spawn_options(&o)?
        }
    };
    // Copied before publishing: nothing of the caller's handle is read after the work is queued
    // (the rule every entry point keeps; see wspool_destroy).
    let fork_gen = c.fork_gen;
    tsan::release_submit();
    let item = CItem { work, done, arg: SendPtr(arg) };
    let work = |it: &mut CItem| {
        tsan::acquire_submit();
        // SAFETY: the caller's work function with its arg (the submit contract).
        unsafe { (it.work)(it.arg.0) };
        tsan::release_done();
    };
    let submitted = match out_task {
        None => c.cq.submit_with(so, item, work),
        Some(out) => c.cq.submit_cancellable(so, item, work).map(|handle| {
            let t = crate::wspool_task { handle, fork_gen };
            // SAFETY: non-null out-pointer (checked by the caller).
            unsafe { *out = Box::into_raw(Box::new(t)) };
        }),
    };
    match submitted {
        Ok(()) => Ok(WSPOOL_OK),
        Err(e) => match e.kind {
            CqRefusal::Full => fail(WSPOOL_EREJECTED, "the completion queue holds `cap` pending submissions"),
            CqRefusal::Rejected => fail(WSPOOL_EREJECTED, "task rejected: the pool's queue is full"),
            CqRefusal::Closed => fail(WSPOOL_ESHUTDOWN, "the completion queue is closed"),
            CqRefusal::Shutdown => fail(WSPOOL_ESHUTDOWN, "task refused: the pool is shut down"),
            CqRefusal::WrongPool => einval("opts names a group or serial queue of another pool"),
        },
    }
}

/// The file descriptor to poll for readability (epoll/libevent/libuv), or -1 (and
/// `WSPOOL_EINVAL` in the last error) for a queue with a `wake` callback or a NULL `cq`.
/// Level-triggered: readable while there is something to drain (and, briefly, after a drain that
/// raced a completion's wake-up: the waking thread clears that itself; a loop woken by it drains
/// nothing). Never read it yourself: `wspool_cq_drain` clears it, and no wake-up can be lost.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_fd(cq: *const wspool_cq) -> c_int {
    let r = guard("wspool_cq_fd", || {
        let c = cq_of(cq)?;
        match c.cq.fd() {
            Some(fd) => Ok(fd),
            None => einval("this queue wakes its loop through its wake callback: it has no fd"),
        }
    });
    if r < 0 { -1 } else { r }
}

fn status_code(s: CqStatus) -> c_int {
    match s {
        CqStatus::Ran => WSPOOL_CQ_RAN,
        CqStatus::Cancelled => WSPOOL_CQ_CANCELLED,
        CqStatus::Panicked => WSPOOL_CQ_PANICKED,
        CqStatus::Expired => WSPOOL_CQ_EXPIRED,
    }
}

fn signal_code(s: CqSignal) -> c_int {
    match s {
        CqSignal::HighWater => WSPOOL_CQ_SIGNAL_HIGH_WATER,
        CqSignal::LowWater => WSPOOL_CQ_SIGNAL_LOW_WATER,
        CqSignal::Overloaded => WSPOOL_CQ_SIGNAL_OVERLOADED,
        CqSignal::Recovered => WSPOOL_CQ_SIGNAL_RECOVERED,
    }
}

fn deliver(c: &wspool_cq) -> impl FnMut(CqEvent<CItem>) + '_ {
    move |e| match e {
        CqEvent::Done(it, s) => {
            tsan::acquire_done();
            // SAFETY: the caller's done callback with its arg, once per accepted submission.
            unsafe { (it.done)(it.arg.0, status_code(s)) }
        }
        CqEvent::Signal(s) => {
            if let Some((f, ctx)) = c.on_signal {
                // SAFETY: the caller's signal callback with its context.
                unsafe { f(ctx.0, signal_code(s)) }
            }
        }
    }
}

/// Runs up to `max` (0 = no bound) `done` callbacks on the calling thread, in completion order,
/// plus any pending `on_signal` calls, and clears the fd when the queue is left empty. Returns
/// how many `done` callbacks ran (>= 0), or a negative status. Call it from one thread (the
/// loop's); callbacks may call `wspool_cq_submit`, not `wspool_cq_close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_drain(cq: *mut wspool_cq, max: u32) -> c_int {
    guard("wspool_cq_drain", || {
        let c = cq_of(cq)?;
        let max = if max == 0 { c_int::MAX as usize } else { (max as usize).min(c_int::MAX as usize) };
        Ok(c.cq.drain(max, deliver(c)) as c_int)
    })
}

/// Accepted submissions whose `done` has not run yet (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_pending(cq: *const wspool_cq) -> usize {
    // SAFETY: NULL or a live queue (the contract).
    match unsafe { cq.as_ref() } {
        Some(c) => c.cq.pending(),
        None => 0,
    }
}

/// The overload signal's admission test: 1 while the queue is overloaded (from
/// `WSPOOL_CQ_SIGNAL_OVERLOADED` to `WSPOOL_CQ_SIGNAL_RECOVERED`) *and* a submission made now would
/// wait at least `overload_target_us` by the queue's estimate, else 0 (0 for NULL). Refusing work
/// exactly while it is 1 keeps the standing queue near the target. A few atomic loads and a clock
/// read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_overloaded(cq: *const wspool_cq) -> c_int {
    // SAFETY: NULL or a live queue (the contract).
    match unsafe { cq.as_ref() } {
        Some(c) => c.cq.overloaded() as c_int,
        None => 0,
    }
}

/// 1 while `wspool_cq_overloaded` is 1 for any completion queue of `pool`, else 0 (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_overloaded(pool: *const wspool) -> c_int {
    // SAFETY: NULL or a live pool (the contract).
    let Some(p) = (unsafe { pool.as_ref() }) else {
        return 0;
    };
    if crate::check_fork(p.fork_gen).is_err() {
        return 0;
    }
    p.queues.lock().iter().any(|w| w.upgrade().is_some_and(|cq| cq.overloaded())) as c_int
}

/// Closes the queue: no new submissions; with `WSPOOL_CQ_CLOSE_DRAIN` the accepted ones run, with
/// `WSPOOL_CQ_CLOSE_CANCEL` those not yet started are skipped. Every remaining `done` runs here, on
/// the calling thread, exactly once; waits up to `timeout_ms` (-1 = forever) for work in flight.
/// On `WSPOOL_OK` the queue is freed. On `WSPOOL_ETIMEDOUT` it stays closed and allocated: drain
/// it or call again. Never call it from a `done` or signal callback, nor on a pool thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_cq_close(cq: *mut wspool_cq, mode: c_int, timeout_ms: i64) -> c_int {
    guard("wspool_cq_close", || {
        let c = cq_of(cq)?;
        let mode = match mode {
            WSPOOL_CQ_CLOSE_DRAIN => CloseMode::Drain,
            WSPOOL_CQ_CLOSE_CANCEL => CloseMode::Cancel,
            m => return einval(format!("mode {m} is not a WSPOOL_CQ_CLOSE_* value")),
        };
        let t = crate::timeout(timeout_ms)?;
        if c.cq.close(mode, t, deliver(c)).is_err() {
            return timed_out();
        }
        c.listed_in.lock().retain(|w| !ptr::eq(w.as_ptr(), Arc::as_ptr(&c.cq)));
        // SAFETY: a live queue from wspool_cq_create, freed exactly once here.
        drop(unsafe { Box::from_raw(cq) });
        Ok(WSPOOL_OK)
    })
}

/// Writes the pool's stats as OpenMetrics text (ending in `# EOF\n`) into `buf`, NUL-terminated
/// and truncated to `cap - 1` bytes, and returns the full length without the NUL: when it is
/// `>= cap`, call again with a buffer of at least that + 1. `buf` may be NULL when `cap` is 0.
/// Returns a negative status on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_stats_openmetrics(pool: *const wspool, buf: *mut std::ffi::c_char, cap: usize) -> i64 {
    let mut len: i64 = 0;
    let rc = guard("wspool_stats_openmetrics", || {
        let p = pool_of(pool)?;
        if buf.is_null() && cap != 0 {
            return einval("buf is NULL with a non-zero cap");
        }
        let mut s = String::with_capacity(2048);
        p.pool.openmetrics(&mut s);
        if cap > 0 {
            let n = s.len().min(cap - 1);
            // SAFETY: the caller's buffer has `cap` bytes; we write n + 1 <= cap.
            unsafe {
                ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        len = s.len() as i64;
        Ok(WSPOOL_OK)
    });
    if rc < 0 { rc as i64 } else { len }
}
