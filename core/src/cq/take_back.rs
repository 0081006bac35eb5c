//! Taking a refused submission back. When the pool refuses a
//! completion-queue job, `submit` must get the payload back without running
//! the work or completing it: it calls the refused job once in take-back
//! mode, in which `Job::run` parks its node in a thread-local instead, and
//! the guard here owns that node and restores the thread's state on any
//! exit, unwinds included.

use std::cell::Cell;
use std::sync::atomic::Ordering::AcqRel;

use super::{Inner, Node};

thread_local! {
    /// Armed by [`TakeBack`] for exactly one `Job::run`: the refused job
    /// `submit` calls next on this thread. That run disarms it before
    /// anything else, so no other job (a nested submission's, a
    /// caller-runs one) ever sees it armed.
    pub(super) static TAKE_BACK_ARMED: Cell<bool> = const { Cell::new(false) };
    /// The node that armed run parked: null, or a `Box<Node<T>>` leaked by
    /// `Job::run` for the [`TakeBack`] guard that armed it (the `T` of its
    /// queue). A heap pointer, never the address of a frame: an unwind can
    /// leave no pointer into a dead frame behind.
    pub(super) static TAKE_BACK_NODE: Cell<*mut ()> = const { Cell::new(std::ptr::null_mut()) };
}

/// Takes a refused job's node back: arms [`TAKE_BACK_ARMED`] for the one
/// call of the refused job, then owns whatever that call parked in
/// [`TAKE_BACK_NODE`]. Its drop runs on a normal return and on an unwind
/// alike (the refused job's closure may panic while it is dropped, after
/// its node was parked): it restores both slots to what they held before
/// (a submission made by that drop nests its own guard inside ours), frees
/// a node nobody took, and gives back the submission's counts, so the
/// queue neither leaks a node nor waits for a completion that never comes.
struct TakeBack<'a, T> {
    inner: &'a Inner<T>,
    prev_armed: bool,
    prev_node: *mut (),
}

impl<'a, T> TakeBack<'a, T> {
    fn arm(inner: &'a Inner<T>) -> TakeBack<'a, T> {
        let prev_armed = TAKE_BACK_ARMED.with(|a| a.replace(true));
        let prev_node = TAKE_BACK_NODE.with(|n| n.replace(std::ptr::null_mut()));
        TakeBack { inner, prev_armed, prev_node }
    }

    /// The node the refused job parked (`None` if it parked none).
    fn take(&mut self) -> Option<Box<Node<T>>> {
        let p = TAKE_BACK_NODE.with(|n| n.replace(std::ptr::null_mut()));
        // SAFETY: non-null only as set by the `Job<T>::run` this guard
        // armed (the slot was nulled by `arm`, and a nested guard restores
        // it before its drop returns): a `Box<Node<T>>` leaked for us.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p.cast::<Node<T>>()) })
    }
}

impl<T> Drop for TakeBack<'_, T> {
    fn drop(&mut self) {
        // An unwind out of the refused job: a node it parked is dropped
        // with its payload (the caller gets nothing back from a panic).
        drop(self.take());
        TAKE_BACK_ARMED.with(|a| a.set(self.prev_armed));
        TAKE_BACK_NODE.with(|n| n.set(self.prev_node));
        self.inner.queued.fetch_sub(1, AcqRel);
        self.inner.pending.fetch_sub(1, AcqRel);
    }
}

/// Calls `refused` (a refused `Job<T>`'s closure) in take-back mode and
/// returns the node it parked; its counts are given back. An unwind out of
/// `refused` leaves the thread-locals as they were and the counts given
/// back (the [`TakeBack`] guard).
pub(super) fn take_back<T>(inner: &Inner<T>, refused: impl FnOnce()) -> Box<Node<T>> {
    let mut guard = TakeBack::arm(inner);
    refused();
    guard.take().expect("a refused job hands its node back")
}
