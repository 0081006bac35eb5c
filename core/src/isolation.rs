//! Isolation regions: what a waiting thread may run while it helps.
//!
//! Help-while-waiting runs other jobs on the waiting task's stack, so the
//! waiting task cannot continue until they return. Run the wrong job there
//! and the wait deadlocks or observes things it must not (oneTBB's reason
//! for task isolation): a job that needs a lock the waiter holds, the next
//! task of the waiter's own serial queue, unrelated long work while other
//! threads idle. So every job belongs to a *region*, and a waiting thread
//! runs only jobs of its own region:
//!
//! - a job submitted from outside the pool (a foreign thread, or a worker of
//!   another pool) starts a new region;
//! - a job submitted from a pool thread (spawn, submit, group, scope, join,
//!   `SpawnOptions::global` too) belongs to the region of the task that
//!   submitted it, so a fork-join tree is one region and a waiter can steal
//!   back its own subtree from other workers (rayon's behaviour, inside
//!   the tree);
//! - [`isolate`] runs a closure in a fresh region: what it spawns and waits
//!   for is isolated from the rest of the enclosing task's region;
//! - a serial queue's turn belongs to no region: no waiter ever runs one
//!   nested inside its wait (its task runs in a fresh region of its own).
//!
//! A region is a 64-bit number: 32 bits of block, handed out to each thread
//! once per 2^32 regions, and 32 bits counted by the thread itself, so a
//! fresh region costs no shared write.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::job::{TAG_NEVER_HELP, Tag};
use crate::worker::WorkerThread;

static BLOCKS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

fn take_block() -> Tag {
    BLOCKS.fetch_add(1, Relaxed) << 32
}

/// The next region of the block counted in `next` (0: none taken yet).
pub(crate) fn next_region(next: &Cell<u64>) -> Tag {
    let mut v = next.get();
    if v == 0 || v & 0xFFFF_FFFF == 0xFFFF_FFFE {
        v = take_block();
    }
    v += 1;
    next.set(v);
    v
}

/// A region never used before in this process. Never 0 (unassigned) nor
/// `TAG_NEVER_HELP`.
pub(crate) fn fresh_region() -> Tag {
    match WorkerThread::current() {
        Some(worker) => worker.fresh_region(),
        None => NEXT.try_with(next_region).unwrap_or_else(|_| take_block() | 1),
    }
}

impl WorkerThread {
    /// [`fresh_region`] from the worker's own counter: a job from outside
    /// the pool gets its region when it starts, and a thread-local access
    /// per task is a call in a shared library.
    #[inline]
    pub(crate) fn fresh_region(&self) -> Tag {
        next_region(&self.next_region)
    }

    /// The region of a job about to run: its own, or a fresh one for a job
    /// that belongs to none (a serial turn) or was never queued (a job from
    /// outside the pool).
    #[inline]
    pub(crate) fn region_of(&self, tag: Tag) -> Tag {
        match tag {
            0 | TAG_NEVER_HELP => self.fresh_region(),
            tag => tag,
        }
    }
}

/// Runs `f` in a fresh isolation region: a wait inside `f` runs only work
/// spawned inside `f` (and never, for example, a sibling task that needs a
/// lock the caller holds). Off the pool it just calls `f`.
///
/// ```
/// let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
/// let lock = std::sync::Mutex::new(0);
/// pool.scope(|s| {
///     s.spawn(|| {
///         let mut guard = lock.lock().unwrap();
///         // While this thread waits inside, it runs only work forked inside.
///         let sum = wspool::isolate(|| {
///             let (a, b) = wspool::join(|| 1, || 2);
///             a + b
///         });
///         *guard += sum;
///     });
/// });
/// assert_eq!(*lock.lock().unwrap(), 3);
/// ```
pub fn isolate<R>(f: impl FnOnce() -> R) -> R {
    let Some(worker) = WorkerThread::current() else { return f() };
    let outer = worker.region.replace(fresh_region());
    let _restore = RestoreRegion(&worker.region, outer);
    f()
}

/// Puts the enclosing region back, also when `f` unwinds.
pub(crate) struct RestoreRegion<'a>(pub(crate) &'a Cell<Tag>, pub(crate) Tag);

impl Drop for RestoreRegion<'_> {
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_unique_across_threads_and_never_reserved_values() {
        let mut seen: Vec<Tag> = (0..1000).map(|_| fresh_region()).collect();
        let other: Vec<Tag> = std::thread::spawn(|| (0..1000).map(|_| fresh_region()).collect()).join().unwrap();
        seen.extend(other);
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n);
        assert!(!seen.contains(&0) && !seen.contains(&TAG_NEVER_HELP));
    }
}
