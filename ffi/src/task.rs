//! Task handles from `wspool_submit_ex`: wait, cancel, state, release.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use wspool_core::{TaskHandle, TaskState};

use crate::args::{Handle, reclaim};
use crate::support::{Res, fail, guard, guard_void, tsan};
use crate::{WSPOOL_EBUSY, WSPOOL_ECANCELLED, WSPOOL_EEXPIRED, WSPOOL_OK, check_fork, obj, timed_out, timeout};

/// Task state: queued, not started.
pub const WSPOOL_TASK_PENDING: c_int = 0;
/// Task state: running now.
pub const WSPOOL_TASK_RUNNING: c_int = 1;
/// Task state: ran to the end.
pub const WSPOOL_TASK_DONE: c_int = 2;
/// Task state: dropped unrun. It turns CANCELLED as the cancellation begins: the `on_cancel`
/// call may still be running (`wspool_task_wait` returns only after it has returned).
pub const WSPOOL_TASK_CANCELLED: c_int = 3;
/// Task state: not started by its deadline (`wspool_submit_opts.deadline_ns`), dropped unrun.
/// Like CANCELLED, it turns EXPIRED as the drop begins (`on_cancel` may still be running).
pub const WSPOOL_TASK_EXPIRED: c_int = 4;

/// A handle on one submitted task (opaque); free it with `wspool_task_release`.
pub struct wspool_task {
    pub(crate) handle: TaskHandle<()>,
    pub(crate) fork_gen: u32,
}

impl Handle for wspool_task {
    fn fork_gen(&self) -> u32 {
        self.fork_gen
    }
}

fn task_of<'a>(t: *const wspool_task) -> Res<&'a wspool_task> {
    // SAFETY: a non-null task pointer comes from wspool_submit_ex.
    let t = unsafe { obj(t, "task")? };
    check_fork(t.fork_gen)?;
    Ok(t)
}

/// Waits up to `timeout_ms` (-1 = forever, 0 = poll) for the task: `WSPOOL_OK` once it ran,
/// `WSPOOL_ECANCELLED` once it was cancelled and its `on_cancel` returned, `WSPOOL_EEXPIRED` once
/// it expired (not started by its deadline) and its `on_cancel` returned, `WSPOOL_ETIMEDOUT` if
/// still pending or running. Off the pool, or timed, a wait for a task with a deadline expires it
/// at the deadline if no worker has started it by then. On a pool thread an untimed wait (-1) helps: it runs the task itself if
/// it has not started, else other work of the same isolation region (see docs/helping.md); a timed
/// wait, or any wait inside a blocking region, runs nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_wait(t: *mut wspool_task, timeout_ms: i64) -> c_int {
    guard("wspool_task_wait", || {
        let t = task_of(t)?;
        let d = timeout(timeout_ms)?;
        if d.is_none() && t.handle.would_deadlock() {
            return fail(crate::WSPOOL_EDEADLK, "the task would wait for itself (or a serial task queued behind it)");
        }
        if !t.handle.wait_for(d) {
            return timed_out();
        }
        tsan::acquire_done();
        match t.handle.state() {
            TaskState::Cancelled => fail(WSPOOL_ECANCELLED, "the task was cancelled before it started"),
            TaskState::Expired => fail(WSPOOL_EEXPIRED, "the task was not started by its deadline"),
            _ => Ok(WSPOOL_OK),
        }
    })
}

/// Cancels the task if it has not started. Of all the callers that race to cancel one pending
/// task, exactly one gets `WSPOOL_OK`, and only after the task's `on_cancel(arg)` (called once, by
/// that caller's thread) has returned: that caller may then free `arg`. Every other caller gets
/// `WSPOOL_ECANCELLED` — also when the task was cancelled by a shutdown (CANCEL) or DISCARD_OLDEST —
/// and must not assume `on_cancel` has returned yet (`wspool_task_wait` does). `WSPOOL_EBUSY`: the
/// task is running or done. `WSPOOL_EEXPIRED`: it expired (its deadline passed before it started).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_cancel(t: *mut wspool_task) -> c_int {
    guard("wspool_task_cancel", || {
        let t = task_of(t)?;
        // `cancel()` is true for the single winner of the pending -> cancelled transition, after the
        // closure (and with it `on_cancel`) was dropped on this thread. The state alone cannot hand
        // out OK: it turns Cancelled before `on_cancel` has finished.
        if t.handle.cancel() {
            return Ok(WSPOOL_OK);
        }
        match t.handle.state() {
            TaskState::Cancelled => fail(WSPOOL_ECANCELLED, "the task was already cancelled by another caller"),
            TaskState::Expired => fail(WSPOOL_EEXPIRED, "the task expired: its deadline passed before it started"),
            _ => fail(WSPOOL_EBUSY, "the task has already started"),
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
            TaskState::Expired => WSPOOL_TASK_EXPIRED,
        })
    })
}

/// Frees the handle. The task itself is not affected (it still runs). NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_task_release(t: *mut wspool_task) {
    guard_void("wspool_task_release", || {
        // SAFETY: NULL or a pointer from wspool_submit_ex, released once.
        drop(unsafe { reclaim(t) });
        Ok(())
    })
}

/// The monotonic clock deadlines are measured on, in ns (`CLOCK_MONOTONIC` on Linux, so
/// `clock_gettime(CLOCK_MONOTONIC)` values may be used too): `wspool_now_ns() + 20000000` is 20 ms
/// from now.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_now_ns() -> u64 {
    wspool_core::monotonic_now_ns()
}

/// Inside an `on_cancel` call: `WSPOOL_TASK_EXPIRED` when the task is dropped because its deadline
/// passed before it started, `WSPOOL_TASK_CANCELLED` for every other drop (`wspool_task_cancel`,
/// shutdown CANCEL, DISCARD_OLDEST, a destroyed serial queue's turn cancelled). Elsewhere
/// `WSPOOL_TASK_CANCELLED`. A per-thread answer about the drop in progress: code that the expired
/// task's `on_cancel` calls is told `WSPOOL_TASK_EXPIRED` too.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_cancel_reason() -> c_int {
    if wspool_core::expiring() { WSPOOL_TASK_EXPIRED } else { WSPOOL_TASK_CANCELLED }
}

/// The core's deadline for a C one (`deadline_ns` on `wspool_now_ns`'s clock; 0: none). A time
/// already past becomes "now": the task is accepted and expires where it would start.
pub(crate) fn deadline_of(deadline_ns: u64) -> Option<Instant> {
    if deadline_ns == 0 {
        return None;
    }
    // Two clock reads, nanoseconds apart: the same instant on both clocks, to within that.
    let (now, now_ns) = (Instant::now(), wspool_core::monotonic_now_ns());
    Some(now + Duration::from_nanos(deadline_ns.saturating_sub(now_ns)))
}
