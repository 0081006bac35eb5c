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

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;
    use std::sync::{Arc, Weak};

    use super::Lease;
    use crate::registry::Registry;

    /// A registry with no thread; the `Weak` sees it freed.
    fn threadless() -> (Arc<Registry>, Weak<Registry>) {
        let config = crate::Pool::builder().min_threads(1).growth(crate::Growth::Fixed).validate().unwrap();
        let registry = Arc::new(Registry::new(config));
        let weak = Arc::downgrade(&registry);
        (registry, weak)
    }

    /// On a thread standing for a pool thread that holds `registry` as its
    /// own count: places `placed` states, finalises `local` of them there,
    /// hands the rest out (as addresses), then exits as a worker does.
    fn pool_thread(registry: Arc<Registry>, placed: usize, local: usize) -> Vec<usize> {
        std::thread::spawn(move || {
            let mut leases: Vec<NonNull<Lease>> = (0..placed).map(|_| Lease::place()).collect();
            for lease in leases.drain(..local) {
                // SAFETY: placed above, released once.
                unsafe { Lease::release(lease) };
            }
            Lease::end(&registry);
            leases.into_iter().map(|l| l.as_ptr() as usize).collect()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_thread_whose_states_were_all_finalised_frees_its_lease_at_exit() {
        let (registry, weak) = threadless();
        assert!(pool_thread(registry, 3, 3).is_empty());
        assert!(weak.upgrade().is_none(), "nothing kept the registry");
    }

    #[test]
    fn states_left_at_exit_keep_the_registry_until_the_last_is_finalised() {
        // Issue 30, item 7: a state placed by a task that returned without
        // finalising it, used after its thread and pool are gone.
        let (registry, weak) = threadless();
        let left = pool_thread(registry, 3, 1);
        assert_eq!(left.len(), 2);
        assert!(weak.upgrade().is_some(), "the exited thread's lease keeps the registry");
        // SAFETY: placed by `pool_thread`, released once each.
        unsafe { Lease::release(NonNull::new(left[0] as *mut Lease).unwrap()) };
        assert!(weak.upgrade().is_some(), "one state is still placed");
        // SAFETY: as above.
        unsafe { Lease::release(NonNull::new(left[1] as *mut Lease).unwrap()) };
        assert!(weak.upgrade().is_none(), "the last state dropped the registry with the lease");
    }

    #[test]
    fn finalisations_elsewhere_race_the_threads_exit() {
        // Remote releases before, during and after the exit: the lease and
        // the registry are freed once (Miri, with several seeds, sees a
        // double free, a use after free or a leak).
        let rounds = if cfg!(miri) { 3 } else { 200 };
        for _ in 0..rounds {
            let (registry, weak) = threadless();
            let (tx, rx) = std::sync::mpsc::channel::<usize>();
            let releaser = std::thread::spawn(move || {
                for addr in rx {
                    // SAFETY: placed by the thread below, released once.
                    unsafe { Lease::release(NonNull::new(addr as *mut Lease).unwrap()) };
                }
            });
            std::thread::spawn(move || {
                for _ in 0..3 {
                    tx.send(Lease::place().as_ptr() as usize).unwrap();
                }
                let mine = Lease::place();
                // SAFETY: placed just above, released once, on this thread.
                unsafe { Lease::release(mine) };
                Lease::end(&registry);
            })
            .join()
            .unwrap();
            releaser.join().unwrap();
            assert!(weak.upgrade().is_none());
        }
    }
}
