//! What keeps a pool's internals alive for the groups placed on one of its
//! threads ([`super::GroupPlace::init`], the C API's `wspool_group_init`
//! called from a task), without a read-modify-write of the registry's
//! count, which every worker shares, per group.
//!
//! A pool thread holds its own count of the registry while it runs. A state
//! placed on it borrows that count and counts itself in the thread's lease
//! instead: a plain increment at `init` (the lease hangs off the thread's
//! `WorkerThread`, already at hand), and one read-modify-write at `fini`,
//! on the lease, a line nobody else writes in the fork-join case (init,
//! submit, wait, fini in one task), wherever `fini` runs. When the thread
//! exits with states still placed (a task that returned without
//! finalising its group, then the pool destroyed), it hands a count of the
//! registry to the lease, and the last of those states to be finalised
//! drops it: a placed group may outlive its task, its thread and its pool
//! (submissions then fail with `Shutdown`), and never touches freed memory.
//!
//! Counting: `Lease::placed` counts the states placed on the thread (only
//! the thread writes it); `Lease::done` counts finalisations, plus, at the
//! thread's exit, `EXITED - placed`. It reaches exactly `EXITED` when the
//! thread has exited and every state placed on it was finalised, whichever
//! comes last, and whoever makes it so frees the lease. Before the exit it
//! stays at most `placed`, far below `EXITED`.

use std::cell::{Cell, UnsafeCell};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::AcqRel;

use crate::registry::Registry;

/// Added at the thread's exit (minus what it placed).
const EXITED: u64 = 1 << 62;

pub(crate) struct Lease {
    /// States placed on this thread. Only the thread itself touches it.
    placed: Cell<u64>,
    /// Finalisations, then the exit's share (module comment).
    done: AtomicU64,
    /// The registry count the exiting thread leaves to its states; written
    /// once, by the exiting thread, before its read-modify-write of `done`
    /// publishes it.
    keep: UnsafeCell<Option<Arc<Registry>>>,
}

/// A pool thread's lease, in its `WorkerThread`: none until a state is
/// first placed on the thread.
#[derive(Default)]
pub(crate) struct LeaseSlot(Cell<Option<NonNull<Lease>>>);

impl LeaseSlot {
    /// Counts one more state placed on this slot's thread (the caller runs
    /// on it) and returns the lease the state releases when finalised.
    pub(super) fn place(&self) -> NonNull<Lease> {
        let lease = match self.0.get() {
            Some(lease) => lease,
            None => self.first(),
        };
        // SAFETY: the thread's lease lives at least until the thread's
        // `end`, which comes after this call; `placed` is the thread's own.
        let l = unsafe { lease.as_ref() };
        l.placed.set(l.placed.get() + 1);
        lease
    }

    #[cold]
    fn first(&self) -> NonNull<Lease> {
        let lease = Lease { placed: Cell::new(0), done: AtomicU64::new(0), keep: UnsafeCell::new(None) };
        // SAFETY: Box::into_raw never returns null.
        let lease = unsafe { NonNull::new_unchecked(Box::into_raw(Box::new(lease))) };
        self.0.set(Some(lease));
        lease
    }

    /// The pool thread that owns this slot, and holds `registry` as its own
    /// count, is exiting: states still placed on it keep a count of
    /// `registry` through the lease; with none, the lease is freed now.
    pub(crate) fn end(&self, registry: &Arc<Registry>) {
        let Some(lease) = self.0.take() else { return };
        // SAFETY: not freed before the exchange below: `done` cannot reach
        // `EXITED` before the thread added its share.
        let l = unsafe { lease.as_ref() };
        let placed = l.placed.get();
        if l.done.load(std::sync::atomic::Ordering::Relaxed) != placed {
            // Some state may still be placed. Nobody reads `keep` before
            // the exchange below publishes it.
            // SAFETY: as above.
            unsafe { *l.keep.get() = Some(registry.clone()) };
        }
        // AcqRel: publishes `keep` to the last release, and, if every state
        // was finalised, makes their releases (and their uses of the
        // registry before them) happen before the free.
        let before = l.done.fetch_add(EXITED.wrapping_sub(placed), AcqRel);
        if before == placed {
            // Every state placed here was finalised: the lease is ours.
            // SAFETY: from Box::into_raw in `first`, freed once (here or in
            // the last `release`).
            drop(unsafe { Box::from_raw(lease.as_ptr()) });
        }
    }
}

impl Lease {
    /// A state placed through [`LeaseSlot::place`] is finalised: it no
    /// longer touches the registry.
    ///
    /// # Safety
    /// Called once per `place`, with its lease, after the state's last use
    /// of the registry.
    pub(super) unsafe fn release(this: NonNull<Lease>) {
        // Release: this state's uses of the registry happen before the
        // lease's free and the registry count's drop, by `end` or by the
        // last release (which reads this through the read-modify-write
        // chain on `done`). Acquire: when this is the last, the exit's
        // write of `keep` is visible.
        // SAFETY: our count keeps the lease alive until this exchange.
        let after = unsafe { this.as_ref() }.done.fetch_add(1, AcqRel).wrapping_add(1);
        if after == EXITED {
            // The thread has exited and this was its last placed state:
            // nothing else refers to the lease.
            // SAFETY: from Box::into_raw in `first`, freed once (here or in `end`).
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;
    use std::sync::{Arc, Weak};

    use super::{Lease, LeaseSlot};
    use crate::registry::Registry;

    /// A lease handed to another thread, keeping its provenance (an address
    /// cast to `usize` and back would not: Miri would then have to guess).
    struct Placed(NonNull<Lease>);
    // SAFETY: a lease is released from any thread (that is its purpose).
    unsafe impl Send for Placed {}

    /// A registry with no thread; the `Weak` sees it freed.
    fn threadless() -> (Arc<Registry>, Weak<Registry>) {
        let config = crate::Pool::builder().min_threads(1).growth(crate::Growth::Fixed).validate().unwrap();
        let registry = Arc::new(Registry::new(config));
        let weak = Arc::downgrade(&registry);
        (registry, weak)
    }

    /// On a thread standing for a pool thread that holds `registry` as its
    /// own count: places `placed` states, finalises `local` of them there,
    /// hands the rest out, then exits as a worker does.
    fn pool_thread(registry: Arc<Registry>, placed: usize, local: usize) -> Vec<Placed> {
        std::thread::spawn(move || {
            let slot = LeaseSlot::default();
            let mut leases: Vec<NonNull<Lease>> = (0..placed).map(|_| slot.place()).collect();
            for lease in leases.drain(..local) {
                // SAFETY: placed above, released once.
                unsafe { Lease::release(lease) };
            }
            slot.end(&registry);
            leases.into_iter().map(Placed).collect()
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
        unsafe { Lease::release(left[0].0) };
        assert!(weak.upgrade().is_some(), "one state is still placed");
        // SAFETY: as above.
        unsafe { Lease::release(left[1].0) };
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
            let (tx, rx) = std::sync::mpsc::channel::<Placed>();
            let releaser = std::thread::spawn(move || {
                for placed in rx {
                    // SAFETY: placed by the thread below, released once.
                    unsafe { Lease::release(placed.0) };
                }
            });
            std::thread::spawn(move || {
                let slot = LeaseSlot::default();
                for _ in 0..3 {
                    tx.send(Placed(slot.place())).unwrap();
                }
                let mine = slot.place();
                // SAFETY: placed just above, released once, on this thread.
                unsafe { Lease::release(mine) };
                slot.end(&registry);
            })
            .join()
            .unwrap();
            releaser.join().unwrap();
            assert!(weak.upgrade().is_none());
        }
    }
}
