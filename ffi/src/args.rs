//! Argument checks shared by the entry points: NULL pointers, objects
//! inherited through fork(), timeouts and out-pointers.

use std::ptr;
use std::time::Duration;

use crate::support::{self, Res, einval, fail};
use crate::{WSPOOL_EFORKED, WSPOOL_ETIMEDOUT, wspool, wspool_fn};

#[inline]
pub(crate) fn check_fork(created_in: u32) -> Res<()> {
    if created_in != support::fork_gen() {
        return forked();
    }
    Ok(())
}

// The failure paths are out of line, so that the entry points' success
// path does not set up their messages (`make bench-callgrind`).
#[cold]
#[inline(never)]
fn forked<T>() -> Res<T> {
    fail(WSPOOL_EFORKED, "this object was created before fork(); it cannot be used in the child")
}

#[cold]
#[inline(never)]
fn null_arg<T>(what: &'static str) -> Res<T> {
    einval(format!("{what} is NULL"))
}

/// # Safety
/// `p` is NULL or a live pointer from this library.
pub(crate) unsafe fn obj<'a, T>(p: *const T, what: &'static str) -> Res<&'a T> {
    // SAFETY: per the contract.
    match unsafe { p.as_ref() } {
        Some(r) => Ok(r),
        None => null_arg(what),
    }
}

pub(crate) fn pool_of<'a>(p: *const wspool) -> Res<&'a wspool> {
    // SAFETY: a non-null pool pointer comes from wspool_create.
    let p = unsafe { obj(p, "pool")? };
    check_fork(p.fork_gen)?;
    Ok(p)
}

/// A pool's handle held by an entry point for the length of the call, taken
/// before it publishes any task: a published task may run at once and
/// `wspool_destroy` its own pool (allowed), freeing the caller's `wspool`
/// while this call is still returning, so nothing after the publication
/// may read `*pool`. This clone keeps the pool's shared state alive, and
/// its drop never joins: if the task's destroy left it the last handle,
/// the pool's threads finish and exit on their own, as they would have.
/// On one of the pool's own threads it is that thread's own handle
/// (`Pool::call_handle`: no count shared with the other threads).
pub(crate) struct Held {
    pool: std::mem::ManuallyDrop<wspool_core::Pool>,
    /// The fork generation of the handle, copied for the same reason.
    pub(crate) fork_gen: u32,
}

impl std::ops::Deref for Held {
    type Target = wspool_core::Pool;
    fn deref(&self) -> &wspool_core::Pool {
        &self.pool
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `pool` is not used after.
        unsafe { std::mem::ManuallyDrop::take(&mut self.pool) }.drop_without_join();
    }
}

/// `pool_of`, then a [`Held`] clone of its pool for a call that publishes tasks.
pub(crate) fn held_pool(p: *const wspool) -> Res<Held> {
    let w = pool_of(p)?;
    Ok(Held { pool: std::mem::ManuallyDrop::new(w.pool.call_handle()), fork_gen: w.fork_gen })
}

pub(crate) fn func(f: wspool_fn, what: &'static str) -> Res<support::CFn> {
    match f {
        Some(f) => Ok(f),
        None => null_arg(what),
    }
}

pub(crate) fn timeout(ms: i64) -> Res<Option<Duration>> {
    match ms {
        -1 => Ok(None),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
        ms => einval(format!("timeout_ms {ms} is invalid (use -1 to wait forever, 0 to poll)")),
    }
}

pub(crate) fn timed_out<T>() -> Res<T> {
    fail(WSPOOL_ETIMEDOUT, "timed out; the work is left untouched")
}

pub(crate) fn out_ptr<T>(out: *mut *mut T, what: &'static str) -> Res<()> {
    if out.is_null() {
        return einval(format!("{what} is NULL"));
    }
    // SAFETY: non-null out-pointer given by the caller.
    unsafe { *out = ptr::null_mut() };
    Ok(())
}

/// An object handed to C as a raw `Box` pointer, tagged with the fork
/// generation it was created in.
pub(crate) trait Handle: Send + 'static {
    fn fork_gen(&self) -> u32;
}

/// Takes back a handle from `Box::into_raw` for the caller to drop (None for
/// NULL). One inherited through fork() is kept forever instead: dropping it
/// could wait for the parent's threads or take a lock one of them held.
///
/// # Safety
/// `p` is NULL or a pointer this library made with `Box::into_raw`, taken back once.
pub(crate) unsafe fn reclaim<T: Handle>(p: *mut T) -> Option<Box<T>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let b = unsafe { Box::from_raw(p) };
    if b.fork_gen() != support::fork_gen() {
        support::keep_forever(b);
        return None;
    }
    Some(b)
}
