//! Submission: `wspool_submit`, `wspool_submit_ex` with its options (group,
//! serial queue, `on_cancel`, a task handle) and `wspool_join`.

use std::ffi::c_void;
use std::ffi::{CStr, c_char, c_int};
use std::mem::{offset_of, size_of};
use std::ptr;

use wspool_core::SpawnOptions;

use crate::args::held_pool;
use crate::support::{self, CTask, Res, SendPtr, einval, fail, guard, tsan};
use crate::{WSPOOL_ESHUTDOWN, WSPOOL_OK, func, group_of, serial_of, wspool, wspool_group, wspool_serial, wspool_task};

/// A C task or callback (`on_cancel` too): called with the `arg` given at submission. It must
/// return normally: no C++ exception, `longjmp` or thread cancellation may leave it (see the
/// header's preamble).
pub type wspool_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// Submit flag: push to the pool's global queue even from a pool thread (fairness over locality).
pub const WSPOOL_SUBMIT_GLOBAL: u32 = 1;

/// Options for `wspool_submit_ex`, the same for every kind of submission. Fill with
/// `wspool_submit_opts_init()`. New fields are only ever added at the end.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wspool_submit_opts {
    /// `sizeof(wspool_submit_opts)` as the caller compiled it (set by `wspool_submit_opts_init`).
    pub struct_size: usize,
    /// Bitwise OR of `WSPOOL_SUBMIT_*` flags; unknown bits are `WSPOOL_EINVAL`.
    pub flags: u32,
    /// Optional: the task counts toward this group, which must have been created on the same
    /// pool (else `WSPOOL_EINVAL`).
    pub group: *mut wspool_group,
    /// Optional: called exactly once with `arg` if the accepted task is dropped unrun
    /// (`wspool_task_cancel`, shutdown CANCEL, DISCARD_OLDEST), on the thread that drops it, and
    /// the pool's ownership of `arg` ends when it returns. Never called for a refused submission.
    pub on_cancel: wspool_fn,
    /// Added in 0.1 after the first layout. Optional: the task runs on this serial queue (FIFO,
    /// one at a time), which must have been created on the same pool (else `WSPOOL_EINVAL`).
    /// It may be combined with `group`. `WSPOOL_SUBMIT_GLOBAL` changes nothing for it: serial
    /// tasks always take their turn through the global queue.
    pub serial: *mut wspool_serial,
    /// Added with deadlines. 0: none. Otherwise an absolute time on the monotonic clock
    /// (`CLOCK_MONOTONIC` on Linux), in ns, as `wspool_now_ns()` returns it: a task not started by
    /// then never runs. It ends *expired*: its `on_cancel` is called exactly once (inside it,
    /// `wspool_cancel_reason()` returns `WSPOOL_TASK_EXPIRED`), its handle's state is
    /// `WSPOOL_TASK_EXPIRED` and `wspool_task_wait` returns `WSPOOL_EEXPIRED`, a completion queue's
    /// `done` gets `WSPOOL_CQ_EXPIRED`, and `wspool_stats.expired` counts it. The deadline is read
    /// where the task would start (a worker pays the pop that finds it), and by a waiter on its
    /// handle, which expires it at the deadline. A deadline already past is accepted and expires.
    pub deadline_ns: u64,
    /// Added with priorities: `WSPOOL_PRIORITY_NORMAL` (0, the default),
    /// `WSPOOL_PRIORITY_HIGH` (before every queued task; after `WSPOOL_PRIORITY_HIGH_BURST` in a
    /// row a worker takes ordinary work whenever there is some) or `WSPOOL_PRIORITY_LOW` (starts
    /// after every normal task queued before it; once its place in the queue is reached, at most
    /// `WSPOOL_PRIORITY_LOW_MAX_OVERTAKES` later tasks, normal or high, start before it, so it is
    /// never starved); anything else is `WSPOOL_EINVAL`. It applies to
    /// submissions from threads that are not the pool's (a pool thread's task keeps its deque's
    /// order); a task on a lane takes the lane's priority (`wspool_lane_create`).
    pub priority: c_int,
    /// Added with task labels. NULL: none. Otherwise a NUL-terminated name for what the
    /// task "is", shown by `wspool_dump` on the thread running, blocking or waiting inside it. It
    /// is copied at submission (the string need not outlive the call; invalid UTF-8 is replaced,
    /// not refused) into a process-wide table of names that is never freed and holds at most
    /// 65,536 of them (later new names all show as "(too many labels)"): labels are meant as a
    /// small set of names, like metric labels, not per-task data. A known name costs a lookup in
    /// a per-thread cache; a task without a label pays nothing.
    pub label: *const c_char,
}

/// `wspool_submit_opts.priority`: behind the normal work queued before it, aged so it is never
/// starved.
pub const WSPOOL_PRIORITY_LOW: c_int = -1;
/// `wspool_submit_opts.priority`: the default, the pool's ordinary queues.
pub const WSPOOL_PRIORITY_NORMAL: c_int = 0;
/// `wspool_submit_opts.priority`: before every queued task, with a bounded bypass.
pub const WSPOOL_PRIORITY_HIGH: c_int = 1;
/// High-priority tasks a worker takes in a row before it takes ordinary work (when there is
/// some).
pub const WSPOOL_PRIORITY_HIGH_BURST: u32 = 16;
/// A low-priority task's aging, in bursts: `WSPOOL_PRIORITY_LOW_MAX_OVERTAKES` is this times
/// `WSPOOL_PRIORITY_HIGH_BURST`.
pub const WSPOOL_PRIORITY_LOW_DEFERS: u32 = 2;
/// The most tasks (normal or high) that start before a low-priority task once its place in the
/// queue was reached and it is the oldest low-priority task waiting.
pub const WSPOOL_PRIORITY_LOW_MAX_OVERTAKES: u32 = 32;
const _: () = assert!(WSPOOL_PRIORITY_HIGH_BURST == wspool_core::HIGH_BURST);
const _: () = assert!(WSPOOL_PRIORITY_LOW_DEFERS == wspool_core::LOW_DEFERS as u32);
const _: () = assert!(WSPOOL_PRIORITY_LOW_MAX_OVERTAKES == wspool_core::LOW_MAX_OVERTAKES);

/// The core's priority for a C one.
pub(crate) fn priority_of(p: c_int) -> Res<wspool_core::Priority> {
    match p {
        WSPOOL_PRIORITY_LOW => Ok(wspool_core::Priority::Low),
        WSPOOL_PRIORITY_NORMAL => Ok(wspool_core::Priority::Normal),
        WSPOOL_PRIORITY_HIGH => Ok(wspool_core::Priority::High),
        _ => einval(format!("priority {p} is not one of WSPOOL_PRIORITY_LOW, _NORMAL, _HIGH")),
    }
}

/// Size of the first published `wspool_submit_opts` layout (up to `on_cancel`): the smallest
/// `struct_size` accepted.
pub const WSPOOL_SUBMIT_OPTS_MIN_SIZE: usize = 32;
const _: () =
    assert!(offset_of!(wspool_submit_opts, on_cancel) + size_of::<wspool_fn>() == WSPOOL_SUBMIT_OPTS_MIN_SIZE);

/// The end of each published `wspool_submit_opts` layout, oldest first.
const OPTS_LAYOUTS: [usize; 5] = [WSPOOL_SUBMIT_OPTS_MIN_SIZE, 40, 48, 52, 64];
const _: () = assert!(offset_of!(wspool_submit_opts, serial) + size_of::<usize>() == OPTS_LAYOUTS[1]);
const _: () = assert!(offset_of!(wspool_submit_opts, deadline_ns) + size_of::<u64>() == OPTS_LAYOUTS[2]);
const _: () = assert!(offset_of!(wspool_submit_opts, priority) + size_of::<c_int>() == OPTS_LAYOUTS[3]);
const _: () = assert!(offset_of!(wspool_submit_opts, label) + size_of::<usize>() == OPTS_LAYOUTS[4]);

/// Submits `fn(arg)`. On `WSPOOL_OK` the pool owns `arg` until `fn(arg)` returns; on any error the
/// caller keeps it and `fn` is never called. From a pool thread the task goes to that thread's
/// own deque. (For an `on_cancel`, a task handle, a group or a serial queue use `wspool_submit_ex`.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit(pool: *mut wspool, r#fn: wspool_fn, arg: *mut c_void) -> c_int {
    guard("wspool_submit", || {
        let p = held_pool(pool)?;
        let f = func(r#fn, "fn")?;
        p.spawn(CTask::new(f, arg, None).into_closure()).map_err(support::refused)?;
        Ok(WSPOOL_OK)
    })
}

fn default_opts() -> wspool_submit_opts {
    wspool_submit_opts {
        struct_size: size_of::<wspool_submit_opts>(),
        flags: 0,
        group: ptr::null_mut(),
        on_cancel: None,
        serial: ptr::null_mut(),
        deadline_ns: 0,
        priority: WSPOOL_PRIORITY_NORMAL,
        label: ptr::null(),
    }
}

/// The caller's options (NULL = defaults), read up to its `struct_size`, flags checked.
pub(crate) fn read_opts(opts: *const wspool_submit_opts) -> Res<wspool_submit_opts> {
    let mut o = default_opts();
    if !opts.is_null() {
        // SAFETY: a non-null opts points to a struct starting with struct_size.
        let size = unsafe {
            support::struct_size_of(opts.cast(), WSPOOL_SUBMIT_OPTS_MIN_SIZE, "opts", "wspool_submit_opts_init")?
        };
        // SAFETY: the caller's struct has `size` readable bytes, at least the copied prefix.
        unsafe { support::copy_prefix(opts, &mut o, support::whole_fields(size, &OPTS_LAYOUTS)) };
    }
    if o.flags & !WSPOOL_SUBMIT_GLOBAL != 0 {
        return einval(format!("opts.flags {:#x} has unknown bits", o.flags));
    }
    Ok(o)
}

/// The core's options for `o`. The core refuses a group or serial queue of another pool
/// (WrongPool -> `WSPOOL_EINVAL`).
pub(crate) fn spawn_options<'a>(o: &wspool_submit_opts) -> Res<SpawnOptions<'a>> {
    let group = match o.group.is_null() {
        true => None,
        false => Some(&group_of(o.group)?.group),
    };
    let serial = match o.serial.is_null() {
        true => None,
        false => Some(&serial_of(o.serial)?.queue),
    };
    let deadline = crate::task::deadline_of(o.deadline_ns);
    let priority = priority_of(o.priority)?;
    let label = match o.label.is_null() {
        true => None,
        // SAFETY: a non-null label is a NUL-terminated string, readable for the call (the
        // header's contract); it is copied (interned) before the call returns.
        false => Some(wspool_core::Label::intern(&unsafe { CStr::from_ptr(o.label) }.to_string_lossy())),
    };
    Ok(SpawnOptions { global: o.flags & WSPOOL_SUBMIT_GLOBAL != 0, group, serial, deadline, priority, label })
}

/// Fills `*opts` with the defaults, `struct_size` included. NULL is ignored (and sets the last error).
/// The header maps `wspool_submit_opts_init(opts)` to `wspool_submit_opts_init_sized(opts, sizeof *(opts))`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_opts_init(opts: *mut wspool_submit_opts) {
    // SAFETY: forwarded contract.
    unsafe { wspool_submit_opts_init_sized(opts, size_of::<wspool_submit_opts>()) };
}

/// Fills the first `size` bytes of `*opts` with the defaults and sets `opts->struct_size = size`.
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_SUBMIT_OPTS_MIN_SIZE` or above
/// `WSPOOL_STRUCT_SIZE_MAX`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_opts_init_sized(opts: *mut wspool_submit_opts, size: usize) -> c_int {
    guard("wspool_submit_opts_init", || {
        if opts.is_null() {
            return einval("opts is NULL");
        }
        if size > crate::WSPOOL_STRUCT_SIZE_MAX {
            return crate::support::check_struct_size(
                size,
                WSPOOL_SUBMIT_OPTS_MIN_SIZE,
                &"size",
                "wspool_submit_opts_init",
            )
            .map(|()| 0);
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

/// Submits `fn(arg)` with options (`opts` NULL = defaults): on the pool, on `opts->serial`, and/or
/// counted in `opts->group`. When `out_task` is not NULL it stores a task handle there (NULL on
/// failure) to wait for, cancel or query the task; release it with `wspool_task_release`.
///
/// Ownership of `arg`: on `WSPOOL_OK` the pool owns it until either `fn(arg)` or
/// `opts->on_cancel(arg)` returns — exactly one of the two is called, once, whatever happens later
/// (cancel, shutdown in either mode, DISCARD_OLDEST). On any error the caller keeps it and neither
/// is called. A task accepted without `on_cancel` that is dropped unrun leaves `arg` to the caller.
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
        let p = held_pool(pool)?;
        let f = func(r#fn, "fn")?;
        let o = read_opts(opts)?;
        let so = spawn_options(&o)?;
        let task = CTask::new(f, arg, o.on_cancel).into_closure();
        if out_task.is_null() {
            p.spawn_with(so, task).map_err(support::refused)?;
        } else {
            let h = p.submit_with(so, task).map_err(support::refused)?;
            let t = wspool_task { handle: h, fork_gen: p.fork_gen };
            // SAFETY: non-null out-pointer.
            unsafe { *out_task = Box::into_raw(Box::new(t)) };
        }
        Ok(WSPOOL_OK)
    })
}

/// One task of a batch (`wspool_submit_batch`): `fn(arg)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wspool_batch_item {
    /// The task's function; must not be NULL.
    pub r#fn: wspool_fn,
    /// Its argument, owned by the pool once the task is accepted (as for `wspool_submit`).
    pub arg: *mut c_void,
}

/// Submits `n` tasks in one call: like `n` calls of `wspool_submit_ex` with the same `opts` (NULL
/// = defaults; `opts->on_cancel` applies to every task, no task handles), but with one admission
/// ticket, one counter update and one wake-up for the batch. Tasks enter the queue in array order.
/// With `opts->group` or `opts->serial` the tasks are submitted one by one (same rules, no shared
/// wake-up).
///
/// `*accepted` (required) receives how many tasks, from the start of the array, were accepted. A
/// batch is accepted in order up to its first refused task: `WSPOOL_OK` means all `n` were (and
/// `*accepted == n`); otherwise the status says why task `*accepted` was refused (`WSPOOL_ESHUTDOWN`,
/// `WSPOOL_EREJECTED`, `WSPOOL_EINVAL` for a group or serial queue of another pool). Ownership
/// follows each task: the pool owns the `arg` of `items[0 .. *accepted)` exactly as for an
/// accepted `wspool_submit_ex` (its `fn` or `on_cancel` is called exactly once); the caller keeps
/// the `arg` of `items[*accepted .. n)`, and neither function is called for them. Every `fn` is
/// checked before anything is submitted: one NULL `fn` (or `items` NULL with `n > 0`) is
/// `WSPOOL_EINVAL` with `*accepted == 0`. `n == 0` is `WSPOOL_OK`. The array is only read during
/// the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_submit_batch(
    pool: *mut wspool,
    items: *const wspool_batch_item,
    n: usize,
    opts: *const wspool_submit_opts,
    accepted: *mut usize,
) -> c_int {
    guard("wspool_submit_batch", || {
        if accepted.is_null() {
            return einval("accepted is NULL");
        }
        // SAFETY: non-null out-pointer.
        unsafe { *accepted = 0 };
        let p = held_pool(pool)?;
        if n == 0 {
            return Ok(WSPOOL_OK);
        }
        if items.is_null() {
            return einval("items is NULL");
        }
        // SAFETY: the caller passes an array of `n` items, read-only during the call.
        let items = unsafe { std::slice::from_raw_parts(items, n) };
        if let Some(i) = items.iter().position(|it| it.r#fn.is_none()) {
            return einval(format!("items[{i}].fn is NULL"));
        }
        let o = read_opts(opts)?;
        let so = spawn_options(&o)?;
        // Every fn was checked above; `func` cannot fail here.
        let tasks: Vec<_> = items
            .iter()
            .map(|it| CTask::new(it.r#fn.expect("checked above"), it.arg, o.on_cancel).into_closure())
            .collect();
        match p.spawn_batch_with(so, tasks) {
            Ok(()) => {
                // SAFETY: as above.
                unsafe { *accepted = n };
                Ok(WSPOOL_OK)
            }
            Err(e) => {
                // SAFETY: as above.
                unsafe { *accepted = e.accepted() };
                let kind = e.kind();
                // The refused tasks are forgotten, not dropped: their `arg` is still the
                // caller's and no `on_cancel` may run (`CTask`'s drop would call it).
                for t in e.into_rest() {
                    std::mem::forget(t);
                }
                Err(support::refused_kind(kind))
            }
        }
    })
}

/// Fork-join without allocation: runs `a(arg_a)` on the caller and offers `b(arg_b)` to other
/// workers, running it itself if nobody took it; returns when both are done. On a thread that
/// is not one of the pool's it submits `b` and helps or waits as needed. `arg_a` and `arg_b`
/// stay the caller's: both calls have returned when `wspool_join` returns. Once the pool is shut
/// down it returns `WSPOOL_ESHUTDOWN` and calls neither function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_join(
    pool: *mut wspool,
    a: wspool_fn,
    arg_a: *mut c_void,
    b: wspool_fn,
    arg_b: *mut c_void,
) -> c_int {
    guard("wspool_join", || {
        let p = held_pool(pool)?;
        let fa = func(a, "a")?;
        let fb = func(b, "b")?;
        if p.is_shutdown() {
            return fail(WSPOOL_ESHUTDOWN, "the pool is shut down");
        }
        let (xa, xb) = (SendPtr(arg_a), SendPtr(arg_b));
        tsan::release_submit();
        p.join(
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
