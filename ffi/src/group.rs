//! Task groups: tasks waited for together. A group is created on the heap
//! (`wspool_group_create` / `wspool_group_destroy`) or placed in memory the
//! caller provides (`wspool_group_init` / `wspool_group_fini`, no
//! allocation); both are used through the same `wspool_group *`.

use std::ffi::{c_int, c_void};
use std::mem::{align_of, size_of};

use wspool_core::{Group, GroupPlace};

use crate::args::{Handle, reclaim};
use crate::support::{self, CTask, Res, einval, guard, guard_void, tsan};
use crate::{WSPOOL_OK, check_fork, func, obj, out_ptr, pool_of, timed_out, timeout, wspool, wspool_fn};

/// A group of tasks that can be waited for together (opaque).
pub struct wspool_group {
    pub(crate) group: Group,
    pub(crate) fork_gen: u32,
    /// Placed by `wspool_group_init` (finalised by `wspool_group_fini`),
    /// not created by `wspool_group_create` (destroyed by `wspool_group_destroy`).
    placed: bool,
}

impl Handle for wspool_group {
    fn fork_gen(&self) -> u32 {
        self.fork_gen
    }
}

/// Size, in 8-byte words, of `wspool_group_storage`.
pub const WSPOOL_GROUP_STORAGE_WORDS: usize = 24;

/// Memory for a group placed by `wspool_group_init`: declare one (on the stack, in a struct),
/// pass its address to `wspool_group_init`, and keep it, unmoved and untouched, until
/// `wspool_group_fini` returned. Its contents are private to the library.
#[repr(C)]
pub struct wspool_group_storage {
    /// Opaque: never read or written by the caller.
    pub opaque: [u64; WSPOOL_GROUP_STORAGE_WORDS],
}

/// What `wspool_group_init` writes into the storage: the handle first, so
/// the storage's address is the `wspool_group *`.
#[repr(C)]
struct PlacedGroup {
    handle: wspool_group,
    place: GroupPlace,
}

const _: () = assert!(size_of::<PlacedGroup>() <= size_of::<wspool_group_storage>());
const _: () = assert!(align_of::<PlacedGroup>() <= align_of::<wspool_group_storage>());

pub(crate) fn group_of<'a>(g: *const wspool_group) -> Res<&'a wspool_group> {
    // SAFETY: a non-null group pointer comes from wspool_group_create or wspool_group_init.
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
        let g = wspool_group { group: p.pool.group(), fork_gen: p.fork_gen, placed: false };
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(g)) };
        Ok(WSPOOL_OK)
    })
}

/// Places a task group on `pool` in `storage`, without allocating, and stores its handle in
/// `*out` (NULL on failure; the handle is `storage`'s address). Use it like a created group
/// (`wspool_group_submit`, `wspool_submit_ex`'s `opts.group`, `wspool_group_wait`), then call
/// `wspool_group_fini` (never `wspool_group_destroy`) before `storage` goes out of scope, is
/// reused or freed: `storage` must stay where it is and untouched until then. Like a created
/// group, and wherever it was placed (from a task on the pool too, which may return without
/// finalising it), it keeps what it needs of the pool alive until `wspool_group_fini`, so it may
/// outlive its pool: submissions then fail with `WSPOOL_ESHUTDOWN`, and `storage` is the only
/// memory it uses.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_init(
    storage: *mut wspool_group_storage,
    pool: *mut wspool,
    out: *mut *mut wspool_group,
) -> c_int {
    guard("wspool_group_init", || {
        out_ptr(out, "out")?;
        if storage.is_null() {
            return einval("storage is NULL");
        }
        let p = pool_of(pool)?;
        let placed = storage.cast::<PlacedGroup>();
        // SAFETY: `storage` is large and aligned enough (asserted above) and the caller keeps
        // it unmoved until `wspool_group_fini`, which finalises the place exactly once.
        unsafe {
            let group = GroupPlace::init(&raw mut (*placed).place, &p.pool);
            (&raw mut (*placed).handle).write(wspool_group { group, fork_gen: p.fork_gen, placed: true });
            *out = &raw mut (*placed).handle;
        }
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
/// On a pool thread an untimed wait (-1) runs work of the waiter's own isolation region meanwhile:
/// first the newest jobs of its own deque (the group's tasks it just submitted), then the rest of
/// its region (see docs/helping.md); a timed wait, or a wait in a blocking region, runs nothing.
/// A task of the group that waits for it untimed gets `WSPOOL_EDEADLK` at once (it would wait
/// for itself); a timed wait just times out.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_wait(g: *mut wspool_group, timeout_ms: i64) -> c_int {
    guard("wspool_group_wait", || {
        let g = group_of(g)?;
        let d = timeout(timeout_ms)?;
        if d.is_none() && g.group.would_deadlock() {
            return support::fail(crate::WSPOOL_EDEADLK, "a task of this group would wait for its own group");
        }
        if !g.group.wait_for(d) {
            return timed_out();
        }
        tsan::acquire_done();
        Ok(WSPOOL_OK)
    })
}

/// Frees a group made by `wspool_group_create`: at once when none of its tasks is pending, else
/// as the last pending task finishes (they still run). NULL is a no-op; a group placed by
/// `wspool_group_init` is left alone
/// (an error for `wspool_last_error`): finalise it with `wspool_group_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_destroy(g: *mut wspool_group) {
    guard_void("wspool_group_destroy", || {
        // SAFETY: NULL or a live group pointer.
        if unsafe { g.as_ref() }.is_some_and(|g| g.placed) {
            return einval("this group was placed by wspool_group_init: use wspool_group_fini");
        }
        // SAFETY: NULL or a pointer from wspool_group_create, destroyed once.
        drop(unsafe { reclaim(g) });
        Ok(())
    })
}

/// Finalises a group placed by `wspool_group_init`: waits, like an untimed `wspool_group_wait`
/// (helping on a pool thread), until every task of the group has finished (ran, or was cancelled
/// and its `on_cancel` returned), then releases the group. When it returns `WSPOOL_OK` nothing
/// touches the storage any more: it may go out of scope, be reused or freed. Must be called once
/// per `wspool_group_init`, after every other call on the group (a wait or submit on another
/// thread) has returned, and not from a task of the group (it would wait for itself).
/// `WSPOOL_EINVAL` for a group from `wspool_group_create` (use `wspool_group_destroy`);
/// `WSPOOL_EFORKED` in a child of `fork()` for a group placed before it (the storage is then
/// left as it is: the parent's threads are gone, so nothing runs its tasks).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_group_fini(g: *mut wspool_group) -> c_int {
    guard("wspool_group_fini", || {
        let placed = group_of(g)?.placed;
        if !placed {
            return einval("this group was made by wspool_group_create: use wspool_group_destroy");
        }
        let placed = g.cast::<PlacedGroup>();
        // SAFETY: a placed group's handle is the start of its PlacedGroup (repr(C)), initialised
        // by wspool_group_init and finalised once (the caller's contract). The handle is read
        // out once here, and `fini` consumes it.
        unsafe {
            let handle = (&raw mut (*placed).handle).read();
            GroupPlace::fini(&raw mut (*placed).place, handle.group);
        }
        tsan::acquire_done();
        Ok(WSPOOL_OK)
    })
}
