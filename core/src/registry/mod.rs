//! The pool's shared state: queues, worker slots, queries. Submission and
//! admission are in `submit.rs`, shutdown in `shutdown.rs`.
//!
//! Worker slots are allocated once for `max_threads`; each holds the stealer
//! half of a deque for its whole life, and the owner half while a thread
//! occupies the slot. Threads come and go (growth, retirement) without ever
//! reallocating what thieves read, so stealing needs no lock.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::deque::{Stealer, Worker};
use crossbeam_utils::CachePadded;

use crate::config::Builder;
use crate::growth::{Compensation, Monitor};
use crate::injector::Injector;
use crate::job::JobRef;
use crate::latch::Signal;
use crate::sleep::Sleep;
use crate::stats::{QueueDelay, SharedCounters, Stats, WorkerCounters};
use crate::worker::WorkerThread;

mod batch;
mod shutdown;
mod submit;

use submit::InFlight;

pub(crate) const RUNNING: u8 = 0;
pub(crate) const DRAINING: u8 = 1;
pub(crate) const CANCELLING: u8 = 2;

/// One worker position. See the module comment.
pub(crate) struct Slot {
    /// Thieves' half of the worker's LIFO deque (work its tasks spawned).
    pub(crate) stealer: Stealer<JobRef>,
    /// Thieves' half of the worker's FIFO inbox: global work it took in a
    /// batch and has not started. Other workers take from it before the
    /// injector (it is older) once that worker is stalled, so a batch
    /// starts in submission order even when the worker that took it
    /// blocks (across batches, see `docs/scheduling.md`).
    pub(crate) inbox: Stealer<JobRef>,
    /// The owner halves, parked here while no thread occupies the slot.
    pub(crate) queues: Mutex<Option<LocalQueues>>,
    /// A thread holds this slot (set before its thread starts, cleared
    /// after it stops touching the slot).
    pub(crate) occupied: AtomicBool,
    pub(crate) counters: CachePadded<WorkerCounters>,
    pub(crate) join: Mutex<Option<JoinHandle<()>>>,
}

/// A worker's own queues, which travel to its thread and back to its slot.
pub(crate) struct LocalQueues {
    pub(crate) deque: Worker<JobRef>,
    pub(crate) inbox: Worker<JobRef>,
}

/// How a submission is to be carried out, once admitted.
pub(crate) enum Admission {
    Queue,
    RunOnCaller,
}

pub(crate) struct Registry {
    pub(crate) config: Builder,
    /// Cached `config.tracks_queue()`.
    tracks_queue: bool,
    pub(crate) injector: Injector<JobRef>,
    /// Jobs submitted at a priority other than normal (`priority.rs`).
    pub(crate) prio: crate::priority::PrioQueues,
    pub(crate) slots: Box<[Slot]>,
    pub(crate) sleep: Sleep,
    /// Live worker threads (reserved before spawn, released at retirement).
    pub(crate) threads: AtomicUsize,
    /// Slots `[0, high_water)` may hold a thread; thieves scan only those.
    pub(crate) high_water: AtomicUsize,
    /// Threads in a blocking region, and the handshake that lends threads.
    pub(crate) compensation: Compensation,
    /// Threads started and not yet looking for work (their start hook may
    /// still run). Admission counts them as about to take a task, although
    /// the sleep state does not count them as searching yet.
    pub(crate) starting: AtomicUsize,
    /// Worker threads that have not finished exiting (shutdown waits on it).
    pub(crate) running_threads: AtomicUsize,
    pub(crate) exited: Signal,
    /// RUNNING, DRAINING or CANCELLING.
    pub(crate) state: AtomicU8,
    /// Tasks waiting in the queues, kept exact only when `tracks_queue`.
    queued: AtomicUsize,
    /// Foreign submissions between their open-check and their push; see
    /// [`InFlight`].
    inflight: InFlight,
    /// Submitters waiting for room (Reject::Block).
    room: Signal,
    pub(crate) counters: SharedCounters,
    pub(crate) delay: QueueDelay,
    pub(crate) monitor: Monitor,
    /// Snapshots, stall reports, the monitor's decisions (`dump.rs`).
    pub(crate) diag: crate::dump::Diagnostics,
    /// The process that created the pool (a forked child must not join).
    pub(crate) pid: u32,
    /// CPUs this process may run on (`available_parallelism`), read once:
    /// a debounce spin never takes the last of them (`WorkerThread::spin`).
    pub(crate) machine_cpus: usize,
}

impl Registry {
    pub(crate) fn new(config: Builder) -> Registry {
        let max = config.max_threads;
        let slots = (0..max)
            .map(|_| {
                let deque = Worker::new_lifo();
                let inbox = Worker::new_fifo();
                Slot {
                    stealer: deque.stealer(),
                    inbox: inbox.stealer(),
                    queues: Mutex::new(Some(LocalQueues { deque, inbox })),
                    occupied: AtomicBool::new(false),
                    counters: CachePadded::new(WorkerCounters::default()),
                    join: Mutex::new(None),
                }
            })
            .collect();
        Registry {
            machine_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            tracks_queue: config.tracks_queue(),
            config,
            injector: Injector::new(),
            prio: Default::default(),
            slots,
            sleep: Sleep::new(max),
            threads: AtomicUsize::new(0),
            high_water: AtomicUsize::new(0),
            compensation: Compensation::default(),
            starting: AtomicUsize::new(0),
            running_threads: AtomicUsize::new(0),
            exited: Signal::default(),
            state: AtomicU8::new(RUNNING),
            queued: AtomicUsize::new(0),
            inflight: InFlight::default(),
            room: Signal::default(),
            counters: SharedCounters::default(),
            delay: QueueDelay::default(),
            monitor: Monitor::default(),
            diag: crate::dump::Diagnostics::default(),
            pid: std::process::id(),
        }
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load(Acquire)
    }

    pub(crate) fn live_threads(&self) -> usize {
        self.threads.load(SeqCst)
    }

    /// The worker this thread is, if it belongs to this pool.
    #[inline]
    pub(crate) fn current_worker(&self) -> Option<&WorkerThread> {
        self.worker_at(crate::here::here())
    }

    /// [`Registry::current_worker`] from the thread's state already read.
    #[inline]
    pub(crate) fn worker_at(&self, here: &crate::here::Here) -> Option<&'static WorkerThread> {
        here.worker().filter(|w| std::ptr::eq(Arc::as_ptr(&w.registry), self))
    }

    // ------------------------------------------------------------- queries

    /// Is there a job any worker could take right now?
    pub(crate) fn has_visible_work(&self) -> bool {
        if !self.injector.is_empty() || self.prio.has_work() {
            return true;
        }
        let n = self.high_water.load(Acquire);
        self.slots[..n].iter().any(|s| !s.stealer.is_empty() || !s.inbox.is_empty())
    }

    /// A draining pool is done: no foreign submission is on its way (read
    /// first: such a one pushes before it leaves) and no job is visible.
    pub(crate) fn drained(&self) -> bool {
        self.inflight.is_empty() && !self.has_visible_work()
    }

    pub(crate) fn queued_now(&self) -> usize {
        if self.tracks_queue {
            return self.queued.load(SeqCst);
        }
        let n = self.high_water.load(Acquire);
        self.injector.len()
            + self.prio.len()
            + self.slots[..n].iter().map(|s| s.stealer.len() + s.inbox.len()).sum::<usize>()
    }

    pub(crate) fn stats(&self) -> Stats {
        let n = self.high_water.load(Acquire);
        let mut st = Stats::default();
        let sum = |f: fn(&WorkerCounters) -> u64| self.slots[..n].iter().map(|s| f(&s.counters)).sum::<u64>();
        st.completed = sum(|c| c.completed.load(Relaxed)) + self.counters.completed_off_pool.sum();
        st.local_pops = sum(|c| c.local_pops.load(Relaxed));
        st.global_pops = sum(|c| c.global_pops.load(Relaxed));
        st.steals = sum(|c| c.steals.load(Relaxed));
        st.spin_hits = sum(|c| c.spin_hits.load(Relaxed));
        st.spin_misses = sum(|c| c.spin_misses.load(Relaxed));
        st.submitted = sum(|c| c.submitted.load(Relaxed)) + self.counters.submitted.sum() + self.inflight.submitted();
        st.spin_threshold_ns = self.slots[..n]
            .iter()
            .filter(|s| s.occupied.load(Relaxed))
            .map(|s| s.counters.spin_threshold_ns.load(Relaxed))
            .max()
            .unwrap_or(0);
        let threads = self.live_threads();
        st.threads = threads as u32;
        st.idle_threads = self.idle_or_starting().min(threads) as u32;
        st.blocked_threads = (self.compensation.blocked() + self.compensation.waiting()) as u32;
        st.peak_threads = self.counters.peak_threads.load(Relaxed) as u32;
        st.rejected = self.counters.rejected.sum();
        st.cancelled = self.counters.cancelled.sum();
        st.expired = self.counters.expired.sum();
        st.panicked = self.counters.panicked.sum();
        st.threads_started = self.counters.threads_started.load(Relaxed);
        st.threads_retired = self.counters.threads_retired.load(Relaxed);
        st.starvation_injections = self.counters.starvation_injections.load(Relaxed);
        st.spawn_failures = self.counters.spawn_failures.load(Relaxed);
        st.unbalanced_blocking = self.counters.unbalanced_blocking.load(Relaxed);
        st.stalls = self.diag.stalls.load(Relaxed);
        st.queued = self.queued_now() as u64;
        (st.queue_delay_p50_ns, st.queue_delay_p99_ns, st.queue_delay_max_ns) = self.delay.percentiles();
        st
    }
}

/// Drops a panic payload, whose own destructor might panic.
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(p);
    }
}
