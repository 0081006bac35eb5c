//! The hand-off of an async waiter's [`Waker`] to whoever ends a task: the
//! worker that runs it, or the thread that cancels or expires it
//! (`TaskFuture`, `task/future.rs`).
//!
//! One waiter at a time (the future, polled through `&mut`) and one
//! completion, ever. A state word and a cell holding the waker:
//! - `REGISTERING`: the waiter is inside the cell (storing or replacing its
//!   waker on a poll, or taking it out when the future is dropped);
//! - `COMPLETE`: the task has ended; set once, never cleared.
//!
//! Who owns the cell is what the word says. The waiter owns it between its
//! `IDLE -> REGISTERING` exchange and the exchange back to `IDLE`. The
//! completer owns it once its `fetch_or(COMPLETE)` found the word `IDLE`: no
//! registration is in progress, and none can start (the waiter's opening
//! exchange expects `IDLE`). A completion that comes while the waiter is
//! registering (the completer finds `REGISTERING`) leaves the cell, waker
//! and all, to the waiter and does nothing more; the waiter's closing
//! exchange then fails on `COMPLETE` and the poll returns `Ready` itself.
//!
//! So each completion ends the await exactly once: by one wake of the waker
//! stored when it came, or, if it came during a poll's registration, by
//! that poll returning `Ready`; never both (the completer wakes only when
//! it owns the cell), never neither (a registration either closes before
//! the completion, which then finds its waker, or fails to close).
//!
//! A poll stores the waker once and replaces it only when it changes
//! (`Waker::will_wake`): polling again with the same waker neither clones
//! nor allocates. The completer pays one read-modify-write of a word in the
//! task's own cell, whether or not anybody awaits.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::task::Waker;

use crate::sync::{AtomicUsize, UnsafeCell};

const IDLE: usize = 0;
const REGISTERING: usize = 1;
const COMPLETE: usize = 2;

/// A completion's hand-off to at most one waker (module comment).
#[doc(hidden)]
pub struct WakerSlot {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the cell is accessed only by its owner as the state word says
// (module comment); a `Waker` is Send + Sync.
unsafe impl Send for WakerSlot {}
unsafe impl Sync for WakerSlot {}

impl Default for WakerSlot {
    fn default() -> WakerSlot {
        WakerSlot::new()
    }
}

impl WakerSlot {
    /// Not complete, no waker.
    pub fn new() -> WakerSlot {
        WakerSlot { state: AtomicUsize::new(IDLE), waker: UnsafeCell::new(None) }
    }

    /// Has [`WakerSlot::complete`] been called? Acquire: a true answer
    /// makes whatever the completer wrote before (the task's result)
    /// visible.
    #[inline]
    pub fn is_complete(&self) -> bool {
        self.state.load(Acquire) & COMPLETE != 0
    }

    /// The waiter's poll: stores `waker` (unless the stored one
    /// `will_wake` the same task) for the completion to wake, and returns
    /// false; or returns true if the task is complete, having stored
    /// nothing (the caller returns `Ready`). One waiter at a time.
    pub fn register(&self, waker: &Waker) -> bool {
        if self.is_complete() {
            return true;
        }
        // Success: Relaxed. The completer writes the cell only after its
        // fetch_or found IDLE, which also set COMPLETE and so makes this
        // exchange fail: on success there is no completer's write to order
        // after. Earlier registrations were this waiter's own (sequenced
        // before, or handed over with the future by its executor).
        // Failure: Acquire, as in `is_complete` (the word is COMPLETE: the
        // only other bit is the waiter's, and the waiter is the caller).
        if self.state.compare_exchange(IDLE, REGISTERING, Relaxed, Acquire).is_err() {
            return true;
        }
        // SAFETY: REGISTERING: the cell is ours until `close`.
        let stale = self.waker.with_mut(|cell| unsafe {
            match &*cell {
                Some(old) if old.will_wake(waker) => None,
                _ => (*cell).replace(waker.clone()),
            }
        });
        let complete = self.close();
        // Dropped outside the cell's critical section: a waker's drop is
        // the executor's code.
        drop(stale);
        complete
    }

    /// The future is dropped: takes its waker out, so the completion wakes
    /// nobody and the executor's task is not kept alive by the pool.
    pub fn unregister(&self) {
        // Relaxed either way: on success, as in `register`; on failure the
        // task is complete and the completer owns (or took) the waker:
        // nothing is read.
        if self.state.compare_exchange(IDLE, REGISTERING, Relaxed, Relaxed).is_err() {
            return;
        }
        // SAFETY: REGISTERING: the cell is ours until `close`.
        let waker = self.waker.with_mut(|cell| unsafe { (*cell).take() });
        self.close();
        drop(waker);
    }

    /// Ends a registration: back to IDLE, or, if the completion came in
    /// meanwhile, true (the completer left the cell to us: its waker is
    /// dropped here, not woken: the caller's poll returns `Ready`).
    fn close(&self) -> bool {
        // Success: Release, so that the completer's fetch_or (Acquire),
        // which reads this value or a later one of the word (every later
        // change is a read-modify-write, so in this store's release
        // sequence), sees the cell as we leave it. Failure: Acquire, as
        // in `is_complete`: the caller reads the task's result next.
        let closed = if crate::sync::mutant!(wspool_mutant_waker_store_close) {
            // The mutant (`make test-loom`): a plain store, blind to a
            // completion that came in between: the completer found
            // REGISTERING and left the wake to us, and the store erases its
            // COMPLETE.
            self.state.store(IDLE, Release);
            true
        } else {
            self.state.compare_exchange(REGISTERING, IDLE, Release, Acquire).is_ok()
        };
        if closed {
            return false;
        }
        // SAFETY: the completer found REGISTERING and never touches the
        // cell; the word stays REGISTERING | COMPLETE, so nobody else will.
        let left = self.waker.with_mut(|cell| unsafe { (*cell).take() });
        drop(left);
        true
    }

    /// The task ended (ran, panicked, was cancelled or expired): wakes the
    /// stored waker, if any and if no registration is in progress. Call
    /// once, after publishing the result.
    pub fn complete(&self) {
        // AcqRel. Release: the result, written before, is visible to a
        // waiter that sees COMPLETE (`is_complete`, or a failed exchange).
        // Acquire: finding IDLE, the waiter's last `close` (Release)
        // happened before, so the cell holds what it left there.
        let before = self.state.fetch_or(COMPLETE, AcqRel);
        debug_assert_eq!(before & COMPLETE, 0, "a task completes once");
        if before != IDLE {
            // REGISTERING: the waiter's `close` sees COMPLETE and returns
            // Ready; the cell is its.
            return;
        }
        // SAFETY: IDLE before our COMPLETE: no registration in progress
        // and none can start; the cell is ours.
        let waker = self.waker.with_mut(|cell| unsafe { (*cell).take() });
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Unit tests of the hand-off, also run under Miri (`make test-miri`):
    //! each waker counts its clones, drops and wakes, so a leak, a double
    //! drop or a lost or doubled wake-up fails.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::task::{RawWaker, RawWakerVTable, Waker};

    use super::WakerSlot;

    #[derive(Default)]
    struct Counts {
        made: AtomicUsize,
        clones: AtomicUsize,
        drops: AtomicUsize,
        wakes: AtomicUsize,
    }

    impl Counts {
        fn waker(self: &Arc<Self>) -> Waker {
            self.made.fetch_add(1, SeqCst);
            // SAFETY: the vtable's contract: the data is an `Arc<Counts>`
            // reference that each RawWaker owns.
            unsafe { Waker::from_raw(RawWaker::new(Arc::into_raw(self.clone()) as *const (), &VTABLE)) }
        }
        fn wakes(&self) -> usize {
            self.wakes.load(SeqCst)
        }
        fn clones(&self) -> usize {
            self.clones.load(SeqCst)
        }
        /// Every waker made or cloned was dropped exactly once (a wake by
        /// value is a drop).
        fn balanced(&self) -> bool {
            self.made.load(SeqCst) + self.clones.load(SeqCst) == self.drops.load(SeqCst)
        }
    }

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

    unsafe fn clone(data: *const ()) -> RawWaker {
        // SAFETY: `data` is an Arc<Counts> reference (see `Counts::waker`).
        let counts = unsafe { &*(data as *const Counts) };
        counts.clones.fetch_add(1, SeqCst);
        unsafe { Arc::increment_strong_count(data as *const Counts) };
        RawWaker::new(data, &VTABLE)
    }
    unsafe fn wake(data: *const ()) {
        unsafe {
            wake_by_ref(data);
            drop_waker(data);
        }
    }
    unsafe fn wake_by_ref(data: *const ()) {
        // SAFETY: as in `clone`.
        unsafe { &*(data as *const Counts) }.wakes.fetch_add(1, SeqCst);
    }
    unsafe fn drop_waker(data: *const ()) {
        // SAFETY: as in `clone`; this RawWaker's reference is given back.
        let counts = unsafe { Arc::from_raw(data as *const Counts) };
        counts.drops.fetch_add(1, SeqCst);
    }

    #[test]
    fn a_stored_waker_is_woken_once_by_the_completion() {
        let counts = Arc::new(Counts::default());
        let slot = WakerSlot::new();
        let waker = counts.waker();
        assert!(!slot.register(&waker));
        assert_eq!(counts.wakes(), 0);
        slot.complete();
        assert_eq!(counts.wakes(), 1);
        assert!(slot.register(&waker), "complete: the next poll is ready");
        drop((slot, waker));
        assert_eq!(counts.wakes(), 1);
        assert!(counts.balanced());
    }

    #[test]
    fn polling_again_with_the_same_waker_clones_nothing() {
        let counts = Arc::new(Counts::default());
        let slot = WakerSlot::new();
        let waker = counts.waker();
        for _ in 0..5 {
            assert!(!slot.register(&waker));
        }
        assert_eq!(counts.clones(), 1, "stored once, on the first poll");
        // A clone of the same waker wakes the same task: still kept.
        let same = waker.clone();
        assert!(!slot.register(&same));
        assert_eq!(counts.clones(), 2, "the one clone made by the test");
        // A waker of another task replaces it; the old one is dropped.
        let other_counts = Arc::new(Counts::default());
        let other = other_counts.waker();
        assert!(!slot.register(&other));
        slot.complete();
        assert_eq!((counts.wakes(), other_counts.wakes()), (0, 1), "only the current waker is woken");
        drop((slot, waker, same, other));
        assert!(counts.balanced() && other_counts.balanced());
    }

    #[test]
    fn a_dropped_future_is_not_woken() {
        let counts = Arc::new(Counts::default());
        let slot = WakerSlot::new();
        let waker = counts.waker();
        assert!(!slot.register(&waker));
        slot.unregister();
        slot.complete();
        assert_eq!(counts.wakes(), 0);
        drop(waker);
        assert!(counts.balanced(), "the stored clone went with the unregistration");
        // Unregistering after the completion touches nothing.
        slot.unregister();
    }

    #[test]
    fn complete_before_the_first_poll_needs_no_waker() {
        let counts = Arc::new(Counts::default());
        let slot = WakerSlot::new();
        slot.complete();
        let waker = counts.waker();
        assert!(slot.register(&waker));
        drop((slot, waker));
        assert_eq!((counts.wakes(), counts.clones()), (0, 0));
        assert!(counts.balanced());
    }

    /// Registration, re-registration with another waker, and drop, each
    /// racing a completion on another thread. Natively a few hundred
    /// rounds; under Miri (`make test-miri`, several seeds) a few, where
    /// a data race on the cell or a leaked or doubly dropped waker is
    /// reported. loom's models (`tests/loom.rs`, `waker_*`) enumerate
    /// the interleavings.
    #[test]
    fn register_and_drop_race_complete() {
        let rounds = if cfg!(miri) { 6 } else { 300 };
        for round in 0..rounds {
            let first = Arc::new(Counts::default());
            let second = Arc::new(Counts::default());
            let slot = Arc::new(WakerSlot::new());
            let w1 = first.waker();
            let w2 = second.waker();
            assert!(!slot.register(&w1));
            let completer = {
                let slot = slot.clone();
                std::thread::spawn(move || slot.complete())
            };
            match round % 3 {
                0 => {
                    // The same waker again: ready, or pending and woken once.
                    let ready = slot.register(&w1);
                    completer.join().unwrap();
                    if ready {
                        assert!(first.wakes() <= 1, "woken by a completion before the poll, or not at all");
                    } else {
                        assert_eq!(first.wakes(), 1, "pending: woken once");
                    }
                }
                1 => {
                    // Another waker: only the one stored last may be woken.
                    let ready = slot.register(&w2);
                    completer.join().unwrap();
                    if ready {
                        assert_eq!(second.wakes(), 0);
                        assert!(first.wakes() <= 1);
                    } else {
                        assert_eq!((first.wakes(), second.wakes()), (0, 1), "the replaced waker is not woken");
                    }
                }
                _ => {
                    slot.unregister();
                    completer.join().unwrap();
                    assert!(first.wakes() <= 1);
                }
            }
            assert!(slot.register(&w1), "complete after the join");
            drop((slot, w1, w2));
            assert!(first.balanced() && second.balanced(), "round {round}");
        }
    }
}
