//! Task groups: tasks waited for together.

use std::ffi::{c_int, c_void};

use wspool_core::Group;

use crate::args::{Handle, reclaim};
use crate::support::{self, CTask, Res, guard, guard_void, tsan};
use crate::{WSPOOL_OK, check_fork, func, obj, out_ptr, pool_of, timed_out, timeout, wspool, wspool_fn};

/// A group of tasks that can be waited for together (opaque).
pub struct wspool_group {
    pub(crate) group: Group,
    pub(crate) fork_gen: u32,
}

impl Handle for wspool_group {
    fn fork_gen(&self) -> u32 {
        self.fork_gen
    }
}

pub(crate) fn group_of<'a>(g: *const wspool_group) -> Res<&'a wspool_group> {
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
        let g = wspool_group { group: p.pool.group(), fork_gen: p.fork_gen };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(g)) };
        Ok(WSPOOL_OK)
    })
}

/// Submits `fn(arg)` to the group's pool, counted in the group: shorthand for `wspool_submit_ex`
/// with `opts.group = g` and no `on_cancel`. Ownership of `arg` as for `wspool_submit`: on
/// `WSPOOL_OK` the pool owns it until `fn(arg)` returns; on any error the caller keeps it. A task
/// accepted here and dropped unrun (shutdown CANCEL, DISCARD_OLDEST) leaves `arg` to the caller:
/// use `wspool_submit_ex` with `opts.on_cancel` to be told.
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
/// (ran, or was cancelled and its `on_cancel` returned): `WSPOOL_OK`, else `WSPOOL_ETIMEDOUT`.
/// On a pool thread an untimed wait (-1) runs work of the waiter's own isolation region meanwhile (the
/// group's tasks it forked, see docs/helping.md); a timed wait, or a wait in a blocking region, runs
/// nothing.
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
        // SAFETY: NULL or a pointer from wspool_group_create, destroyed once.
        drop(unsafe { reclaim(g) });
        Ok(())
    })
}
