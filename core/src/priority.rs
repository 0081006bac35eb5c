//! Task priorities: where a prioritized job waits and which one a worker
//! takes next.
//!
//! The promises (docs/scheduling.md, "Priorities") are invariants of how
//! jobs are queued here, not of bookkeeping, and a reference model checks
//! them (`core/tests/priorities.rs`):
//!
//! - **High** jobs wait in their own FIFO, outside the global queue. A
//!   worker takes one before any ordinary work (its deque, the global
//!   queue, stealing), except that after [`HIGH_BURST`] high jobs in a row
//!   it takes ordinary work whenever there is some: a high stream slows
//!   ordinary work down but cannot stop it.
//! - **Low** jobs enter the global queue at their place, as a *marker* that
//!   wraps the job. A worker that reaches the marker has taken every
//!   normal job queued before it (the global queue is FIFO), and moves the
//!   job to the ready-low FIFO. From there the front job runs once
//!   [`LOW_MAX_OVERTAKES`] other jobs (ordinary or high) were taken since it
//!   became the front, or as soon as nothing else is queued. A high stream
//!   counts as overtakes like any other work, so it cannot starve Low; and
//!   one Low job never spends another's aging.
//! - Nothing queued here is bookkeeping: each entry is one task, so
//!   `Stats::queued` and the dump count tasks.
//!
//! The rules are written once, in [`Levels`], generic over what is queued,
//! so the unit tests below drive them against an independent model with
//! plain numbers; the worker (`worker.rs`, `find_task_prioritized`) calls
//! them in this order: [`PrioQueues::take_first`], then the ordinary
//! queues (a Low marker met there is reached at once, see
//! [`reach_if_low_marker`]), then [`PrioQueues::took_ordinary`] or, with
//! nothing ordinary to take, [`PrioQueues::take_rest`].
//!
//! Visibility: every protocol that asks "is there work?" (parking's
//! re-scan, drain, a searcher's hand-on) reads [`PrioQueues::has_work`]
//! beside the global queue, and shutdown takes what is left here
//! ([`PrioQueues::take_any`]). A Low job still at its place is a job of
//! the global queue and needs nothing more.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

use crossbeam_utils::CachePadded;

use crate::job::{JobRef, JobVTable, Payload};
use crate::registry::Registry;
use crate::sync::lock;

/// A submission's priority ([`crate::SpawnOptions::priority`]): three
/// levels, folly's `PriorityThreadPoolExecutor` HI/MID/LO or GCD's
/// user-interactive / default / utility classes.
///
/// `High` work is taken before any other queued work, by every worker at
/// its next look for work, with a bounded bypass: after [`HIGH_BURST`]
/// high tasks in a row a worker takes ordinary work whenever there is
/// some, so a flood of high work slows normal work down but cannot stop
/// it. A `Low` task starts after every normal task queued before it,
/// whatever other low tasks are queued, and once its place in the queue
/// is reached at most [`LOW_MAX_OVERTAKES`] later tasks (normal or high)
/// start before it: aging that no stream of work can reset, so Low is
/// never starved. Low tasks start in the order they were submitted.
///
/// Priority applies where a task waits in the pool's shared queues: to
/// submissions from outside the pool (an event loop's, a completion
/// queue's) and to a lane's turns ([`crate::Pool::lane_with_priority`]). A
/// task submitted from a pool thread keeps the ordinary order (its deque is
/// its parent's fork-join order, and a waiter of its region must be able to
/// find it), and a task on a lane takes the lane's priority.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Behind the normal work queued before it, aged so it is never starved.
    Low,
    /// The default: the pool's ordinary queues.
    #[default]
    Normal,
    /// Before everything queued, with a bounded bypass.
    High,
}

/// High tasks a worker takes in a row before it takes ordinary work
/// (whenever there is some).
pub const HIGH_BURST: u32 = 16;
/// Aging of a Low task, in bursts: once its place in the queue is reached,
/// a Low task lets at most `LOW_DEFERS` × [`HIGH_BURST`] later tasks start
/// before it ([`LOW_MAX_OVERTAKES`]).
pub const LOW_DEFERS: u8 = 2;
/// The most tasks (normal or high) that start before a Low task once its
/// place in the queue was reached and it is the oldest Low task waiting.
pub const LOW_MAX_OVERTAKES: u32 = LOW_DEFERS as u32 * HIGH_BURST;

/// The selection rules over what waits at each level; `T` is a job in the
/// pool and a plain number in the unit tests' model run.
struct Levels<T> {
    high: VecDeque<T>,
    /// Low jobs whose place in the global queue was reached, oldest first.
    low: VecDeque<T>,
    /// Takes of other work since `low`'s front became the front.
    overtakes: u32,
    /// Low jobs still at their place in the global queue (for snapshots).
    low_at_place: usize,
    /// Jobs taken from each level so far: the snapshots' progress marks
    /// (`dump.rs`: a queue whose count does not move while it holds work).
    high_taken: u64,
    low_taken: u64,
}

impl<T> Default for Levels<T> {
    fn default() -> Self {
        Levels {
            high: VecDeque::new(),
            low: VecDeque::new(),
            overtakes: 0,
            low_at_place: 0,
            high_taken: 0,
            low_taken: 0,
        }
    }
}

impl<T> Levels<T> {
    fn ready(&self) -> usize {
        self.high.len() + self.low.len()
    }

    fn pop_high(&mut self, high_run: &Cell<u32>) -> Option<T> {
        let job = self.high.pop_front()?;
        self.high_taken += 1;
        high_run.set(high_run.get().saturating_add(1));
        self.overtaken();
        Some(job)
    }

    fn pop_low(&mut self, high_run: &Cell<u32>) -> Option<T> {
        let job = self.low.pop_front()?;
        self.low_taken += 1;
        // The next Low job's aging starts now: it was behind this one.
        self.overtakes = 0;
        high_run.set(0);
        Some(job)
    }

    /// Another job was taken while Low work is ready.
    fn overtaken(&mut self) {
        if !self.low.is_empty() {
            self.overtakes = self.overtakes.saturating_add(1);
        }
    }

    /// Before the ordinary queues: a Low job whose aging ran out, else a
    /// high job unless the worker's burst ran out.
    fn take_first(&mut self, high_run: &Cell<u32>) -> Option<T> {
        if !self.low.is_empty() && self.overtakes >= LOW_MAX_OVERTAKES {
            return self.pop_low(high_run);
        }
        if self.high.is_empty() {
            high_run.set(0);
            return None;
        }
        if high_run.get() < HIGH_BURST {
            return self.pop_high(high_run);
        }
        None
    }

    /// The worker took an ordinary job instead.
    fn took_ordinary(&mut self, high_run: &Cell<u32>) {
        high_run.set(0);
        self.overtaken();
    }

    /// Nothing ordinary was queued: high first, then Low.
    fn take_rest(&mut self, high_run: &Cell<u32>) -> Option<T> {
        self.pop_high(high_run).or_else(|| self.pop_low(high_run))
    }

    /// A Low job's place was reached.
    fn low_reached(&mut self, job: T) {
        self.low_at_place -= 1;
        if self.low.is_empty() {
            self.overtakes = 0;
        }
        self.low.push_back(job);
    }
}

/// The pool's priority levels: [`Levels`] behind a lock, with the count of
/// jobs ready here readable without it.
#[derive(Default)]
pub(crate) struct PrioQueues {
    /// Jobs a worker can take from here now (high, and Low whose place was
    /// reached): every worker's look for work reads it once (zero while
    /// priorities are unused), written only with the lock held. SeqCst:
    /// a push stores it before its wake-up's fence and read of the sleep
    /// state, and a parking worker's re-scan (`has_work`) reads it after
    /// announcing itself, so one of the two sees the other (the same
    /// argument as for the global queue's push).
    ready: CachePadded<AtomicUsize>,
    levels: Mutex<Levels<JobRef>>,
}

/// One level's state for a snapshot.
pub(crate) struct LevelProbe {
    pub(crate) len: usize,
    pub(crate) taken: u64,
}

impl PrioQueues {
    /// Is a job ready here? A hint for the worker's look for work (one
    /// relaxed load): a push racing it is found at the next look, which its
    /// wake-up guarantees.
    #[inline(always)]
    pub(crate) fn any_ready_hint(&self) -> bool {
        self.ready.load(Relaxed) != 0
    }

    /// Is a job ready here? The ordered read of the visibility protocols.
    pub(crate) fn has_work(&self) -> bool {
        self.ready.load(SeqCst) != 0
    }

    /// Jobs ready here (a Low job still at its place counts in the global
    /// queue instead).
    pub(crate) fn len(&self) -> usize {
        self.ready.load(SeqCst)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Levels<JobRef>) -> R) -> R {
        let mut levels = lock(&self.levels);
        let r = f(&mut levels);
        self.ready.store(levels.ready(), SeqCst);
        r
    }

    /// See [`Levels::take_first`]; `high_run` is the worker's count of high
    /// jobs taken in a row.
    pub(crate) fn take_first(&self, high_run: &Cell<u32>) -> Option<JobRef> {
        self.with(|l| l.take_first(high_run))
    }

    /// See [`Levels::took_ordinary`].
    pub(crate) fn took_ordinary(&self, high_run: &Cell<u32>) {
        let mut levels = lock(&self.levels);
        levels.took_ordinary(high_run);
    }

    /// See [`Levels::take_rest`].
    pub(crate) fn take_rest(&self, high_run: &Cell<u32>) -> Option<JobRef> {
        self.with(|l| l.take_rest(high_run))
    }

    /// Any job ready here, high first: what shutdown runs or cancels.
    pub(crate) fn take_any(&self) -> Option<JobRef> {
        self.with(|l| l.take_rest(&Cell::new(0)))
    }

    /// (high, low, Low tasks still at their place in the global queue) for
    /// a snapshot; `None` while priorities were never used. A snapshot
    /// lists a Low task under its level wherever it waits, so it subtracts
    /// the third from the global queue's length.
    pub(crate) fn probe(&self) -> Option<(LevelProbe, LevelProbe, usize)> {
        let l = lock(&self.levels);
        if l.high_taken + l.low_taken == 0 && l.high.is_empty() && l.low.is_empty() && l.low_at_place == 0 {
            return None;
        }
        Some((
            LevelProbe { len: l.high.len(), taken: l.high_taken },
            LevelProbe { len: l.low.len() + l.low_at_place, taken: l.low_taken },
            l.low_at_place,
        ))
    }
}

impl Registry {
    /// Queues `job` at `priority` (not `Normal`). The caller holds an open
    /// submission (a foreign one: its ticket is released only after the job
    /// is visible, the closing point's rule) and has counted the job in
    /// `queued` if the pool tracks it.
    pub(crate) fn push_prio(self: &Arc<Self>, job: JobRef, priority: Priority) {
        match priority {
            Priority::High => {
                self.prio.with(|l| l.high.push_back(job));
                self.wake_for_new_work();
            }
            _ => {
                self.prio.with(|l| l.low_at_place += 1);
                let vtable = if job.evictable() { &MARKER_EVICTABLE } else { &MARKER_PINNED };
                let marker = Box::new(LowMarker { job, registry: self.clone() });
                let data = std::ptr::NonNull::from(Box::leak(marker)).cast::<()>();
                // SAFETY: a leaked Box<LowMarker>, read back once by its own
                // vtable; LowMarker is Send (a JobRef and an Arc). A marker
                // is plumbing no helping waiter may run.
                let marker = unsafe { JobRef::from_pointer(data, vtable) }.never_help();
                self.injector.push(marker);
                self.notify_new_work(None);
            }
        }
    }
}

/// A Low job at its place in the global queue ([`PrioQueues`]). Evicted,
/// cancelled or counted as the job it wraps: it is that task.
struct LowMarker {
    job: JobRef,
    registry: Arc<Registry>,
}

// Statics, not consts: `reach_if_low_marker` recognises a marker by its
// vtable's address, and only a static has one address.
static MARKER_EVICTABLE: JobVTable = JobVTable { run: LowMarker::reached, cancel: LowMarker::cancel, evictable: true };
static MARKER_PINNED: JobVTable = JobVTable { run: LowMarker::reached, cancel: LowMarker::cancel, evictable: false };

impl LowMarker {
    /// "Running" the marker: its place was reached. The job moves to the
    /// ready-low FIFO; nothing ran, so no completion is counted.
    unsafe fn reached(payload: *mut Payload) -> bool {
        // SAFETY: built by `push_prio`, consumed once.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<LowMarker>().as_ptr()) };
        let LowMarker { job, registry } = *this;
        // The dequeue that reached the marker was the job's; it is still
        // queued.
        registry.count_queued_uncounted();
        let was_ready = registry.prio.has_work();
        registry.prio.with(|l| l.low_reached(job));
        if !was_ready {
            // Whoever reached it may be about to run something long: an
            // idle worker can take the job once it is due.
            registry.wake_for_new_work();
        }
        false
    }

    unsafe fn cancel(payload: *mut Payload) -> bool {
        // SAFETY: as in `reached`.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<LowMarker>().as_ptr()) };
        let LowMarker { job, registry } = *this;
        registry.prio.with(|l| l.low_at_place -= 1);
        // The job's own answer: a user task is counted by `cancel_job`.
        job.cancel()
    }
}

/// If `job` is a Low job's marker, reaches it (see [`LowMarker::reached`])
/// and returns `None`; otherwise gives `job` back. For a worker that took
/// it from the ordinary queues while looking for work: a marker is a place
/// in the queue, not work, so the look goes on.
pub(crate) fn reach_if_low_marker(registry: &Registry, job: JobRef) -> Option<JobRef> {
    if !job.has_vtable(&MARKER_EVICTABLE) && !job.has_vtable(&MARKER_PINNED) {
        return Some(job);
    }
    // As if executed: the dequeue, then `reached` (which counts the job as
    // queued again).
    registry.on_dequeue();
    let ran = job.run();
    debug_assert!(!ran, "a marker runs no task");
    None
}

#[cfg(test)]
mod tests;
