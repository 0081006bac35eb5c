//! Serial queues and lanes: FIFO, at most one (a lane: `limit`) of a queue's tasks running at a
//! time.

use std::ffi::{c_int, c_void};

use wspool_core::SerialQueue;

use crate::args::{Handle, reclaim};
use crate::support::{self, CTask, Res, guard, guard_void};
use crate::{WSPOOL_OK, check_fork, func, obj, out_ptr, pool_of, wspool, wspool_fn};

/// A serial queue or lane: FIFO, at most one (a lane: its `limit`) of its tasks runs at a time
/// (opaque).
pub struct wspool_serial {
    pub(crate) queue: SerialQueue,
    pub(crate) fork_gen: u32,
}

impl Handle for wspool_serial {
    fn fork_gen(&self) -> u32 {
        self.fork_gen
    }
}

pub(crate) fn serial_of<'a>(s: *const wspool_serial) -> Res<&'a wspool_serial> {
    // SAFETY: a non-null serial pointer comes from wspool_serial_create.
    let s = unsafe { obj(s, "serial")? };
    check_fork(s.fork_gen)?;
    Ok(s)
}

/// Creates a serial queue on `pool` (FIFO, at most one of its tasks running at a time; queued
/// tasks occupy no worker) and stores it in `*out` (NULL on failure).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_create(pool: *mut wspool, out: *mut *mut wspool_serial) -> c_int {
    guard("wspool_serial_create", || {
        out_ptr(out, "out")?;
        let p = pool_of(pool)?;
        let s = wspool_serial { queue: p.pool.serial(), fork_gen: p.fork_gen };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(s)) };
        Ok(WSPOOL_OK)
    })
}

/// Creates a lane on `pool`: a serial queue that runs up to `limit` of its tasks at once (1 is
/// `wspool_serial_create`), whose turns wait at `priority` (`WSPOOL_PRIORITY_*`; its tasks' own
/// `opts.priority` is not used). Its tasks start in submission order, queued ones occupy no
/// worker, a task that blocks keeps its place in the limit, and lanes take turns with each other
/// through the pool's global queue, one task per turn. It is a `wspool_serial` in every other
/// respect: submit with `wspool_serial_submit` or `opts.serial`, free with
/// `wspool_serial_destroy`. `limit` 0 or an unknown priority is `WSPOOL_EINVAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_lane_create(
    pool: *mut wspool,
    limit: u32,
    priority: c_int,
    out: *mut *mut wspool_serial,
) -> c_int {
    guard("wspool_lane_create", || {
        out_ptr(out, "out")?;
        let p = pool_of(pool)?;
        if limit == 0 {
            return support::einval("limit is 0: a lane runs at least one task at a time");
        }
        let priority = crate::submit::priority_of(priority)?;
        let s = wspool_serial { queue: p.pool.lane_with_priority(limit as usize, priority), fork_gen: p.fork_gen };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(s)) };
        Ok(WSPOOL_OK)
    })
}

/// Appends `fn(arg)` to the serial queue: shorthand for `wspool_submit_ex` with `opts.serial = s`
/// and no `on_cancel`. Ownership of `arg` as for `wspool_submit`: on `WSPOOL_OK` the pool owns it
/// until `fn(arg)` returns; on any error the caller keeps it. A task accepted here and dropped
/// unrun (shutdown CANCEL) leaves `arg` to the caller: use `wspool_submit_ex` with
/// `opts.on_cancel` to be told.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_submit(s: *mut wspool_serial, r#fn: wspool_fn, arg: *mut c_void) -> c_int {
    guard("wspool_serial_submit", || {
        let s = serial_of(s)?;
        let f = func(r#fn, "fn")?;
        s.queue.spawn(CTask::new(f, arg, None).into_closure()).map_err(support::refused)?;
        Ok(WSPOOL_OK)
    })
}

/// Frees the serial queue handle; its pending tasks still run, in order. NULL is a no-op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_serial_destroy(s: *mut wspool_serial) {
    guard_void("wspool_serial_destroy", || {
        // SAFETY: NULL or a pointer from wspool_serial_create, destroyed once.
        drop(unsafe { reclaim(s) });
        Ok(())
    })
}
