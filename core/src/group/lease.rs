//! What keeps a pool's internals alive for the groups placed on one of its
//! threads ([`super::GroupPlace::init`], the C API's `wspool_group_init`
//! called from a task), without a read-modify-write of the registry's
//! count, which every worker shares, per group.
//!
//! A pool thread holds its own count of the registry while it runs. A state
//! placed on it borrows that count and counts itself in the thread's lease
//! instead: a plain increment, and a plain decrement when it is finalised
//! on the same thread (the fork-join case: init, submit, wait, fini in one
//! task). Only a state finalised on another thread pays one
//! read-modify-write, on the lease, which nobody else writes meanwhile.
//! When the thread exits with states still placed (a task that returned
//! without finalising its group, then the pool destroyed), it hands a count
//! of the registry to the lease, and the last of those states to be
//! finalised drops it: a placed group may outlive its task, its thread and
//! its pool (submissions then fail with `Shutdown`), and never touches
//! freed memory.
//!
//! Counting, in [`Lease::remote`]: finalisations on other threads add 1.
//! At its exit the thread, having placed `local` states not finalised on
//! it, adds `EXITED - local`: the word reaches exactly `EXITED` when the
//! last of them is finalised, by whichever side comes last. Before the
//! exit the word stays at most `local`, far below `EXITED`.

use std::cell::{Cell, UnsafeCell};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::AcqRel;

use crate::registry::Registry;

/// Added at the thread's exit (minus what it still has placed).
const EXITED: u64 = 1 << 62;

pub(crate) struct Lease {
    /// States placed on this thread minus those finalised on it. Only the
    /// thread itself touches it.
    local: Cell<u64>,
    /// Finalisations on other threads, then the exit's share (module
    /// comment).
    remote: AtomicU64,
    /// The registry count the exiting thread leaves to its states; written
    /// once, by the exiting thread, before its read-modify-write of
    /// `remote` publishes it.
    keep: UnsafeCell<Option<Arc<Registry>>>,
}

thread_local! {
    /// This pool thread's lease: null until a state is first placed on it.
    static LEASE: Cell<*const Lease> = const { Cell::new(std::ptr::null()) };
}

impl Lease {
    /// Counts one more state placed on this pool thread (the caller checked
    /// that the thread is a worker of the state's registry) and returns
    /// the lease the state releases when it is finalised.
    pub(super) fn place() -> NonNull<Lease> {
        let mut p = LEASE.with(Cell::get);
        if p.is_null() {
            let lease = Lease { local: Cell::new(0), remote: AtomicU64::new(0), keep: UnsafeCell::new(None) };
            p = Box::into_raw(Box::new(lease));
            LEASE.with(|l| l.set(p));
        }
        // SAFETY: this thread's lease lives until its `end` at the thread's
        // exit, which comes after this call.
        let lease = unsafe { &*p };
        lease.local.set(lease.local.get() + 1);
        NonNull::from(lease)
    }

    /// A state placed through [`Lease::place`] is finalised: it no longer
    /// touches the registry.
    ///
    /// # Safety
    /// Called once per `place`, with its lease, after the state's last use
    /// of the registry.
    pub(super) unsafe fn release(this: NonNull<Lease>) {
        if LEASE.with(Cell::get) == this.as_ptr().cast_const() {
            // On the lease's own thread, before its exit (`end` nulls the
            // slot first): nobody else writes `local`, and the thread's own
            // registry count still holds.
            // SAFETY: our placed state's count keeps the lease alive.
            let lease = unsafe { this.as_ref() };
            lease.local.set(lease.local.get() - 1);
            return;
        }
        // Release: this state's uses of the registry happen before its
        // free, by `end` or by the last release below (which reads this
        // through the read-modify-write chain on `remote`). Acquire: when
        // this is the last, the exit's write of `keep` is visible.
        // SAFETY: our count keeps the lease alive until this exchange.
        let after = unsafe { this.as_ref() }.remote.fetch_add(1, AcqRel).wrapping_add(1);
        if after == EXITED {
            // The thread has exited and this was its last placed state:
            // nothing else refers to the lease.
            // SAFETY: from Box::into_raw in `place`, freed once (here or in `end`).
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// The pool thread that holds `registry` as its own count is exiting:
    /// states still placed on it keep a count of `registry` through its
    /// lease; with none, the lease is freed now.
    pub(crate) fn end(registry: &Arc<Registry>) {
        let p = LEASE.with(|l| l.replace(std::ptr::null()));
        if p.is_null() {
            return;
        }
        // SAFETY: this thread's lease, not freed before this exchange (the
        // word cannot reach `EXITED` before the thread added its share).
        let lease = unsafe { &*p };
        let local = lease.local.get();
        if local > 0 {
            // SAFETY: nobody reads `keep` before the exchange below
            // publishes it.
            unsafe { *lease.keep.get() = Some(registry.clone()) };
        }
        // AcqRel: publishes `keep` to the last remote release, and, if no
        // state is left, orders every earlier remote release's uses of
        // the registry before the free.
        let before = lease.remote.fetch_add(EXITED.wrapping_sub(local), AcqRel);
        if before == local {
            // Every state placed here was finalised (`before` counts those
            // finalised elsewhere, at most `local`): the lease is ours.
            // SAFETY: from Box::into_raw in `place`, freed once.
            drop(unsafe { Box::from_raw(p.cast_mut()) });
        }
    }
}
