//! Counters cheap enough to leave on.
//!
//! Hot per-task events (tasks run, where they were found, spins) are counted
//! in the running worker's own cache-padded slot with a plain load + store:
//! one writer, no read-modify-write, no shared cache line. Events that happen
//! off the workers (foreign submissions, rejections, cancellations) go to a
//! striped counter indexed by thread, so two submitters rarely share a line.
//! A reader sums everything; the sum is a snapshot, not a transaction.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::sync::lock;

/// A snapshot of a pool's counters. Field names match `wspool_stats` in C.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Live worker threads.
    pub threads: u32,
    /// Threads with nothing to do: parked, searching, spinning, or started
    /// and not yet looking for work.
    pub idle_threads: u32,
    /// Threads inside a blocking region (or parked in a wait with nothing to help).
    pub blocked_threads: u32,
    /// Most threads alive at once.
    pub peak_threads: u32,
    /// Tasks accepted.
    pub submitted: u64,
    /// Tasks run to the end (panicked ones included).
    pub completed: u64,
    /// Submissions refused because the queue was full.
    pub rejected: u64,
    /// Accepted tasks dropped unrun (cancel, `Shutdown::Cancel`, DiscardOldest).
    pub cancelled: u64,
    /// Tasks that panicked.
    pub panicked: u64,
    /// Tasks a worker took from its own deque.
    pub local_pops: u64,
    /// Tasks a worker took from the global queue.
    pub global_pops: u64,
    /// Tasks a worker stole from another worker's deque.
    pub steals: u64,
    /// Debounce spins that found work.
    pub spin_hits: u64,
    /// Debounce spins that gave up and parked.
    pub spin_misses: u64,
    /// Current debounce threshold (the largest among live workers), ns; 0
    /// when every worker has switched spinning off (only probes spin).
    pub spin_threshold_ns: u32,
    /// Threads started over the pool's life (the initial ones included).
    pub threads_started: u64,
    /// Threads retired (idle past keep-alive, or at shutdown).
    pub threads_retired: u64,
    /// Threads added by the starvation monitor.
    pub starvation_injections: u64,
    /// Tasks waiting to start.
    pub queued: u64,
    /// Queue delay (submit to start) over the recent window (one submission
    /// in 64 is timed; the last 256 samples per worker stripe, at most 10 s
    /// old): median, ns.
    pub queue_delay_p50_ns: u64,
    /// Queue delay, 99th percentile, ns.
    pub queue_delay_p99_ns: u64,
    /// Queue delay, largest in the window, ns.
    pub queue_delay_max_ns: u64,
    /// Thread creations that failed (the pool went on with what it had).
    pub spawn_failures: u64,
    /// Tasks that returned inside a blocking region they opened
    /// (`blocking_begin` without `blocking_end`); the pool closed it.
    pub unbalanced_blocking: u64,
    /// Accepted tasks not started by their deadline, dropped unrun (not
    /// counted in `cancelled` nor `completed`).
    pub expired: u64,
    /// Stall episodes: queued work stood still for the stall threshold
    /// while every thread was occupied (`Pool::set_stall_handler`); each
    /// episode is counted once, reported or not.
    pub stalls: u64,
}

/// One worker slot's counters. Only the thread occupying the slot writes.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) completed: AtomicU64,
    pub(crate) local_pops: AtomicU64,
    pub(crate) global_pops: AtomicU64,
    pub(crate) steals: AtomicU64,
    pub(crate) submitted: AtomicU64,
    pub(crate) spin_hits: AtomicU64,
    pub(crate) spin_misses: AtomicU64,
    pub(crate) spin_threshold_ns: AtomicU32,
    /// 1 while the worker runs a task (not while it waits by helping), 2
    /// (`growth::sample::DECLARED`) inside a declared blocking region, else
    /// 0: the monitor samples the CPU clocks of workers in a task only, and
    /// leaves declared ones to the compensation.
    pub(crate) in_task: AtomicU64,
    /// The occupying thread's CPU clock and kernel thread id, for the
    /// monitor's hint (`growth::sample`); 0 when none.
    pub(crate) cpu_clock: AtomicU64,
    pub(crate) tid: AtomicU64,
    /// The isolation region of the worker's current top-level task, so a
    /// waiter of that region knows this worker's deque holds its work.
    pub(crate) region: AtomicU64,
    /// The worker is inside a blocking region or parked in a wait: other
    /// workers take its inbox (global work it has not started) before new
    /// global work, so that work neither waits behind it nor loses its order.
    pub(crate) stalled: std::sync::atomic::AtomicBool,
    /// What an idle worker does (`dump::SEARCHING`, `SPINNING`, `PARKED`):
    /// written only on the idle paths (before and after a spin or a park),
    /// never per task; read by `Pool::dump`.
    pub(crate) activity: std::sync::atomic::AtomicU8,
    /// Set by the monitor's injection (`dump::ORIGIN_*`), once per thread.
    pub(crate) origin: std::sync::atomic::AtomicU8,
    /// What a wait of this worker waits on (`dump::WaitNote`, packed), 0
    /// outside waits: written by a wait once it did not succeed at once.
    pub(crate) wait_note: AtomicU64,
    /// The address of what it waits on (an identity, never dereferenced).
    pub(crate) wait_id: AtomicUsize,
    /// The occupying thread's `Here` address: task handles record their
    /// runner's, and the dump maps it back to a worker index.
    pub(crate) here_addr: AtomicUsize,
    /// Tests only: the slots the occupying worker's queues kept the last
    /// time it parked or gave memory back (`Worker::kept_capacity`).
    #[cfg(test)]
    pub(crate) kept_queue_slots: AtomicUsize,
    /// Tests only: the most `kept_queue_slots` has been.
    #[cfg(test)]
    pub(crate) kept_queue_slots_peak: AtomicUsize,
    /// The id of the innermost labelled task running on the occupying
    /// thread (`label::with_label`), 0 for none: written only around
    /// labelled tasks, never per plain task; read by `Pool::dump`.
    pub(crate) label: std::sync::atomic::AtomicU32,
}

/// Single-writer increment: no locked instruction.
#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

/// Where a running job counts its completion: the running worker's slot,
/// or a pool's off-pool counter (a job run on a caller's thread).
///
/// A job's completion is counted *before* the signal that releases its
/// waiters (a task handle's state and latch, a group's count, a scope's
/// count, a completion queue's done list), so stats read after a wait
/// returned include what it waited for. Whoever runs a job sets the
/// thread's `Here::completion` before and restores the outer value after
/// (runs nest: a wait inside a task helps); a job that signals a waiter
/// counts itself first with [`count_completion_now`], which empties the
/// slot; the runner counts a job whose slot is still full when it returns.
/// Exactly one of the two counts, and a plain task (nobody to signal)
/// costs no more than before.
///
/// One word (a tagged pointer), so that saving, setting and restoring it
/// around every job is a plain load and store each: null is "nothing to
/// count", an even address a worker's counter, an odd one (address | 1) a
/// pool's off-pool counter (both types are 8-aligned).
#[derive(Clone, Copy)]
pub(crate) struct Completion(*const ());

/// The tag of an off-pool counter.
const OFF_POOL: usize = 1;

impl Completion {
    /// Nothing to count: between jobs, or a job that is not a task (the
    /// "cancel runs it" path of scope tasks, join halves).
    pub(crate) const NOWHERE: Completion = Completion(std::ptr::null());

    /// The worker's own `completed`: single-writer, only the worker thread
    /// that owns the slot counts in it.
    #[inline]
    pub(crate) fn worker(counter: &AtomicU64) -> Completion {
        Completion((counter as *const AtomicU64).cast())
    }

    /// A pool's off-pool counter (a job run on a caller's thread).
    #[inline]
    pub(crate) fn off_pool(counter: &StripedCounter) -> Completion {
        const { assert!(std::mem::align_of::<StripedCounter>() > OFF_POOL) };
        Completion((counter as *const StripedCounter).cast::<()>().map_addr(|a| a | OFF_POOL))
    }

    /// Counts one completion where `self` says. The pointers come from the
    /// runner's own registry (a worker slot or its shared counters), which
    /// the runner keeps alive for the whole run, that is for as long as the
    /// value sits in the thread's slot.
    #[inline]
    pub(crate) fn count(self) {
        if self.0.is_null() {
            return;
        }
        if self.0.addr() & OFF_POOL == 0 {
            // SAFETY: see above; a worker's slot is written only by the
            // thread occupying it, which is this one.
            bump(unsafe { &*self.0.cast::<AtomicU64>() });
        } else {
            // SAFETY: see above; the tag is cleared with the pointer's
            // provenance kept.
            unsafe { &*self.0.map_addr(|a| a & !OFF_POOL).cast::<StripedCounter>() }.add(1);
        }
    }

    /// True unless nothing was to be counted: the job left its completion
    /// to the runner.
    #[inline]
    pub(crate) fn is_owed(self) -> bool {
        !self.0.is_null()
    }
}

/// Counts the running job's completion now, before it signals its waiters
/// (see [`Completion`]); a no-op when it was already counted or the job is
/// not a counted task.
#[inline]
pub(crate) fn count_completion_now() {
    crate::here::here().completion.replace(Completion::NOWHERE).count();
}

/// Runs `f` with nothing to count: a job run where it would otherwise take
/// the completion of the job around it (a scope task run by its cancel
/// path, inside a task that cancelled it).
#[inline]
pub(crate) fn uncounted<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Completion);
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::here::here().completion.set(self.0);
        }
    }
    let _restore = Restore(crate::here::here().completion.replace(Completion::NOWHERE));
    f()
}

pub(crate) const STRIPES: usize = 16;

/// A counter many threads add to, striped to avoid one hot cache line.
#[derive(Default)]
pub(crate) struct StripedCounter {
    stripes: [CachePadded<AtomicU64>; STRIPES],
}

impl StripedCounter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.stripes[crate::here::here().stripe()].fetch_add(n, Relaxed);
    }
    pub(crate) fn sum(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Relaxed)).sum()
    }
}

/// Counters for events that happen off the workers or rarely.
#[derive(Default)]
pub(crate) struct SharedCounters {
    pub(crate) submitted: StripedCounter,
    pub(crate) rejected: StripedCounter,
    pub(crate) cancelled: StripedCounter,
    pub(crate) expired: StripedCounter,
    pub(crate) panicked: StripedCounter,
    pub(crate) completed_off_pool: StripedCounter,
    pub(crate) threads_started: AtomicU64,
    pub(crate) threads_retired: AtomicU64,
    pub(crate) starvation_injections: AtomicU64,
    pub(crate) spawn_failures: AtomicU64,
    pub(crate) unbalanced_blocking: AtomicU64,
    pub(crate) peak_threads: AtomicUsize,
}

/// Every 64th submission per thread carries a timestamp.
pub(crate) const DELAY_SAMPLE_EVERY: u32 = 64;
/// Samples kept per ring; one ring per worker stripe.
const DELAY_WINDOW: usize = 256;
/// Samples older than this are not "recent".
const DELAY_MAX_AGE: Duration = Duration::from_secs(10);

/// Recent queue-delay samples: one ring per worker stripe, so workers
/// recording at once do not contend for one lock (a single ring's mutex
/// showed up in a flood's profile).
pub(crate) struct QueueDelay {
    rings: [CachePadded<Mutex<DelayRing>>; STRIPES],
}

#[derive(Default)]
struct DelayRing {
    samples: Vec<(Instant, u64)>,
    next: usize,
}

impl Default for QueueDelay {
    fn default() -> Self {
        QueueDelay { rings: std::array::from_fn(|_| CachePadded::new(Mutex::new(DelayRing::default()))) }
    }
}

impl QueueDelay {
    /// Records a sample taken by worker `index`.
    pub(crate) fn record(&self, index: usize, submitted_at: Instant) {
        let now = Instant::now();
        let ns = now.saturating_duration_since(submitted_at).as_nanos().min(u64::MAX as u128) as u64;
        let mut ring = lock(&self.rings[index % STRIPES]);
        if ring.samples.len() < DELAY_WINDOW {
            ring.samples.push((now, ns));
        } else {
            let i = ring.next;
            ring.samples[i] = (now, ns);
        }
        ring.next = (ring.next + 1) % DELAY_WINDOW;
    }

    /// (p50, p99, max) over recent samples, ns.
    pub(crate) fn percentiles(&self) -> (u64, u64, u64) {
        let now = Instant::now();
        let mut v: Vec<u64> = Vec::new();
        for ring in &self.rings {
            let ring = lock(ring);
            v.extend(
                ring.samples
                    .iter()
                    .filter(|(t, _)| now.saturating_duration_since(*t) <= DELAY_MAX_AGE)
                    .map(|&(_, ns)| ns),
            );
        }
        percentiles_of(&mut v)
    }
}

fn percentiles_of(v: &mut [u64]) -> (u64, u64, u64) {
    if v.is_empty() {
        return (0, 0, 0);
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), v[v.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentiles_of(&mut v), (51, 99, 100));
        assert_eq!(percentiles_of(&mut []), (0, 0, 0));
    }

    #[test]
    fn striped_counter_sums_across_threads() {
        let c = std::sync::Arc::new(StripedCounter::default());
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.add(1)))
            })
            .collect();
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(c.sum(), 4000);
    }

    #[test]
    fn delay_window_keeps_recent_samples() {
        let d = QueueDelay::default();
        let t = Instant::now();
        for i in 0..(DELAY_WINDOW + 10) {
            d.record(3, t);
            d.record(3 + STRIPES, t);
            d.record(i, t);
        }
        let (p50, p99, max) = d.percentiles();
        assert!(p50 <= p99 && p99 <= max);
        assert_eq!(lock(&d.rings[3]).samples.len(), DELAY_WINDOW, "one ring keeps its window");
        assert!(d.rings.iter().all(|r| lock(r).samples.len() <= DELAY_WINDOW));
    }
}
