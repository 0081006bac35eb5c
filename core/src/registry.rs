//! The pool's shared state: queues, worker slots, admission, shutdown.
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
use std::time::Instant;

use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;

use crate::config::{Builder, Growth, Reject};
use crate::error::{SpawnError, SubmitErrorKind};
use crate::growth::{Compensation, Monitor};
use crate::job::{JobRef, JobVTable, Payload, Tag};
use crate::latch::Signal;
use crate::sleep::Sleep;
use crate::stats::{self, QueueDelay, SharedCounters, Stats, WorkerCounters, bump};
use crate::sync::lock;
use crate::worker::WorkerThread;

pub(crate) const RUNNING: u8 = 0;
pub(crate) const DRAINING: u8 = 1;
pub(crate) const CANCELLING: u8 = 2;

/// One worker position. See the module comment.
pub(crate) struct Slot {
    /// Thieves' half of the worker's LIFO deque (work its tasks spawned).
    pub(crate) stealer: Stealer<JobRef>,
    /// Thieves' half of the worker's FIFO inbox: global work it took in a
    /// batch and has not started. Other workers take from it before the
    /// injector (it is older), so global work starts in submission order
    /// even when the worker that took it blocks.
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
    /// Workers in a debounce spin: idle, but neither searching nor parked
    /// (see `sleep/README.md`, rule 5). Kept apart from the sleep state so
    /// submitters never read this line.
    pub(crate) spinning: AtomicUsize,
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
    /// The process that created the pool (a forked child must not join).
    pub(crate) pid: u32,
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
            tracks_queue: config.tracks_queue(),
            config,
            injector: Injector::new(),
            slots,
            sleep: Sleep::new(max),
            threads: AtomicUsize::new(0),
            high_water: AtomicUsize::new(0),
            compensation: Compensation::default(),
            starting: AtomicUsize::new(0),
            spinning: AtomicUsize::new(0),
            running_threads: AtomicUsize::new(0),
            exited: Signal::default(),
            state: AtomicU8::new(RUNNING),
            queued: AtomicUsize::new(0),
            inflight: InFlight::default(),
            room: Signal::default(),
            counters: SharedCounters::default(),
            delay: QueueDelay::default(),
            monitor: Monitor::default(),
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
    pub(crate) fn current_worker(&self) -> Option<&WorkerThread> {
        WorkerThread::current().filter(|w| std::ptr::eq(Arc::as_ptr(&w.registry), self))
    }

    // ---------------------------------------------------------------- submit

    /// Opens a submission: refused once shutdown began, except for pool
    /// threads of a draining pool (what they add is part of what is being
    /// drained). A foreign submitter holds an [`InFlight`] ticket until its
    /// job is pushed (the returned guard), which is what makes closing the
    /// pool atomic: see [`InFlight`].
    pub(crate) fn open_submission(&self, worker: Option<&WorkerThread>) -> Result<Admitted<'_>, SubmitErrorKind> {
        let admitted = Admitted { registry: self, stripe: worker.is_none().then(|| self.inflight.enter()) };
        match self.state() {
            RUNNING => Ok(admitted),
            DRAINING if worker.is_some() => Ok(admitted),
            _ => Err(SubmitErrorKind::Shutdown),
        }
    }

    /// Counts one accepted task: in the submitting worker's own counters,
    /// or in the striped counter for foreign threads.
    pub(crate) fn count_submitted(&self, worker: Option<&WorkerThread>) {
        match worker {
            Some(worker) => bump(&worker.counters().submitted),
            None => self.counters.submitted.add(1),
        }
    }

    /// Decides whether a submission may enter the pool (capacity and reject
    /// policy). Runs before the task is boxed, so a refusal can hand the
    /// caller its task back.
    fn admit(self: &Arc<Self>, worker: Option<&WorkerThread>) -> Result<Admission, SubmitErrorKind> {
        if !self.tracks_queue {
            return Ok(Admission::Queue);
        }
        self.admit_counted(worker)
    }

    #[cold]
    fn admit_counted(self: &Arc<Self>, worker: Option<&WorkerThread>) -> Result<Admission, SubmitErrorKind> {
        let capacity = self.config.queue_capacity;
        let deadline = match self.config.reject {
            Reject::BlockFor(d) => Some(Instant::now() + d),
            _ => None,
        };
        loop {
            // Tasks an idle (searching or parked) thread is about to take
            // are not waiting for room; only the excess occupies the queue.
            let waiting = self.queued.fetch_add(1, SeqCst) + 1;
            let excess = waiting.saturating_sub(self.idle_or_starting());
            let grew = self.grow_for_submission(excess);
            if capacity == 0 || excess <= capacity || grew {
                return Ok(Admission::Queue);
            }
            match self.config.reject {
                Reject::Abort => {}
                Reject::CallerRuns => {
                    self.queued.fetch_sub(1, SeqCst);
                    return Ok(Admission::RunOnCaller);
                }
                Reject::DiscardOldest => {
                    if self.discard_oldest() {
                        return Ok(Admission::Queue);
                    }
                }
                Reject::Block | Reject::BlockFor(_) => {
                    self.queued.fetch_sub(1, SeqCst);
                    // A pool thread is refused at once: it must not wait for
                    // room that it may be the one to make (documented rule).
                    if worker.is_none()
                        && self.room.wait_until(|| self.has_room() || self.state() != RUNNING, deadline)
                    {
                        if self.state() != RUNNING {
                            return Err(SubmitErrorKind::Shutdown);
                        }
                        continue;
                    }
                    self.counters.rejected.add(1);
                    return Err(SubmitErrorKind::Rejected);
                }
            }
            self.queued.fetch_sub(1, SeqCst);
            self.counters.rejected.add(1);
            return Err(SubmitErrorKind::Rejected);
        }
    }

    fn has_room(&self) -> bool {
        self.queued.load(SeqCst).saturating_sub(self.idle_or_starting()) < self.config.queue_capacity
    }

    /// Threads with nothing to do, about to take a task: starting (their
    /// start hook may still run), searching, spinning or parked idle.
    fn idle_or_starting(&self) -> usize {
        let (searching, sleeping) = self.sleep.counts();
        searching + sleeping + self.spinning.load(SeqCst) + self.starting.load(SeqCst)
    }

    /// ScaleFirst / QueueFirst growth at submission time. `excess` is how
    /// many queued tasks no idle thread is about to take. Returns true when a
    /// thread was started for this task.
    fn grow_for_submission(self: &Arc<Self>, excess: usize) -> bool {
        let want = match self.config.growth {
            Growth::ScaleFirst => excess > 0,
            Growth::QueueFirst => excess > self.config.queue_capacity,
            Growth::Adaptive | Growth::Fixed => false,
        };
        want && self.spawn_worker(false)
    }

    /// Evicts the oldest *user task* in the global queue to make room; its
    /// cancel path runs, and exactly one task is cancelled. Plumbing met on
    /// the way (a serial queue's turn, a foreign join's half) and scope tasks
    /// are never evicted: they go back to the global queue. Deque tasks are
    /// never evicted: they belong to running work.
    fn discard_oldest(self: &Arc<Self>) -> bool {
        /// How far past pinned jobs to look for a task to evict.
        const LOOK_PAST: usize = 64;
        let mut pinned = Vec::new();
        let evicted = loop {
            match self.injector.steal() {
                Steal::Success(job) if job.evictable() => break Some(job),
                Steal::Success(job) => {
                    pinned.push(job);
                    if pinned.len() >= LOOK_PAST {
                        break None;
                    }
                }
                Steal::Empty => break None,
                Steal::Retry => continue,
            }
        };
        if !pinned.is_empty() {
            for job in pinned {
                self.injector.push(job);
            }
            self.wake_for_new_work();
        }
        match evicted {
            Some(job) => {
                self.on_dequeue();
                self.cancel_job(job);
                true
            }
            None => false,
        }
    }

    /// Admission, then the push. `into_job` boxes the task only once it is
    /// admitted.
    pub(crate) fn submit_job<F>(
        self: &Arc<Self>,
        task: F,
        global: bool,
        into_job: impl FnOnce(F) -> JobRef,
    ) -> Result<(), SpawnError<F>> {
        let worker = self.current_worker();
        let open = match self.open_submission(worker) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, task)),
        };
        match self.admit(worker) {
            Err(kind) => Err(SpawnError::new(kind, task)),
            Ok(Admission::RunOnCaller) => {
                // Not queued: the ticket must not hold a closing pool up for
                // as long as the task runs.
                drop(open);
                self.count_submitted(worker);
                self.run_on_caller(into_job(task));
                Ok(())
            }
            Ok(Admission::Queue) => {
                let job = into_job(task);
                let job = if stats::should_sample_delay() { sampled(job) } else { job };
                self.count_submitted(worker);
                self.enqueue(worker, job, global);
                Ok(())
            }
        }
    }

    /// Pushes a job that bypasses admission (the second half of a `join`):
    /// it must run, so it cannot be refused. The caller holds an open
    /// submission if it is a foreign thread.
    pub(crate) fn push_internal(self: &Arc<Self>, job: JobRef) {
        self.push_uncounted(self.current_worker(), job, false);
    }

    /// A serial queue's turn: always through the global queue, so turns of
    /// different queues interleave in FIFO order, and never run by a
    /// helping waiter (see `isolation.rs`).
    pub(crate) fn push_turn(self: &Arc<Self>, job: JobRef) {
        self.push_uncounted(self.current_worker(), job.never_help(), true);
    }

    /// `push_internal` for a caller that knows it is `worker` of this pool.
    #[inline]
    pub(crate) fn push_local(self: &Arc<Self>, worker: &WorkerThread, job: JobRef) {
        self.push_uncounted(Some(worker), job, false);
    }

    #[inline]
    fn push_uncounted(self: &Arc<Self>, worker: Option<&WorkerThread>, job: JobRef, global: bool) {
        if self.tracks_queue {
            self.queued.fetch_add(1, SeqCst);
        }
        self.enqueue(worker, job, global);
    }

    /// The one place a job enters a queue: the calling worker's own deque
    /// unless `global` (or the caller is not a worker of this pool), else the
    /// injector. The job joins the submitting task's isolation region, or a
    /// fresh one from outside the pool. The injector's push reserves its
    /// slot with a SeqCst CAS, which orders it before `notify_one`'s read
    /// like a fence; a local push fences explicitly
    /// (`WorkerThread::push_and_wake`).
    #[inline]
    fn enqueue(self: &Arc<Self>, worker: Option<&WorkerThread>, mut job: JobRef, global: bool) {
        match worker {
            Some(worker) if !global => worker.push_and_wake(job),
            Some(worker) => {
                job.tag_if_unset(|| worker.region.get());
                let region = job.tag();
                self.injector.push(job);
                self.notify_new_work(Some(region));
            }
            None => {
                job.tag_if_unset(crate::isolation::fresh_region);
                self.injector.push(job);
                self.notify_new_work(None);
            }
        }
    }

    /// After work was published by other means than a push (jobs moved back
    /// to the injector by a retiring thread): fence, then notify.
    #[inline]
    pub(crate) fn wake_for_new_work(self: &Arc<Self>) {
        std::sync::atomic::fence(SeqCst);
        self.notify_new_work(None);
    }

    /// Wakes one idle worker if nobody searches (the caller has ordered its
    /// publication first) or, for work of a pool thread's `region`, a waiter
    /// of that region; lends a thread if every runner is blocked.
    #[inline]
    pub(crate) fn notify_new_work(self: &Arc<Self>, region: Option<Tag>) {
        let woke = match region {
            Some(region) => self.sleep.notify_for_push(region),
            None => self.sleep.notify_one(),
        };
        self.after_notify(woke);
    }

    /// What follows a submission's wake-up attempt: the monitor learns the
    /// pool is busy, and if nobody was woken while threads are blocked, the
    /// pool may lend one.
    #[inline]
    pub(crate) fn after_notify(self: &Arc<Self>, woke: bool) {
        if woke {
            self.monitor.kick();
        }
        self.compensation.after_submit(woke, || self.compensate_blocked());
    }

    /// Every job taken out of a queue passes here exactly once.
    #[inline]
    pub(crate) fn on_dequeue(&self) {
        if self.tracks_queue {
            self.queued.fetch_sub(1, SeqCst);
            self.room.notify();
        }
    }

    /// Runs a job on a thread that is not (necessarily) a worker.
    pub(crate) fn run_on_caller(&self, job: JobRef) {
        match catch_unwind(AssertUnwindSafe(|| job.run())) {
            Ok(_) => self.counters.completed_off_pool.add(1),
            Err(payload) => {
                self.counters.completed_off_pool.add(1);
                self.counters.panicked.add(1);
                drop_payload(payload);
            }
        }
    }

    // ------------------------------------------------------------- queries

    /// Is there a job any worker could take right now?
    pub(crate) fn has_visible_work(&self) -> bool {
        if !self.injector.is_empty() {
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
        self.injector.len() + self.slots[..n].iter().map(|s| s.stealer.len() + s.inbox.len()).sum::<usize>()
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
        st.submitted = sum(|c| c.submitted.load(Relaxed)) + self.counters.submitted.sum();
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
        st.panicked = self.counters.panicked.sum();
        st.threads_started = self.counters.threads_started.load(Relaxed);
        st.threads_retired = self.counters.threads_retired.load(Relaxed);
        st.starvation_injections = self.counters.starvation_injections.load(Relaxed);
        st.spawn_failures = self.counters.spawn_failures.load(Relaxed);
        st.unbalanced_blocking = self.counters.unbalanced_blocking.load(Relaxed);
        st.queued = self.queued_now() as u64;
        (st.queue_delay_p50_ns, st.queue_delay_p99_ns, st.queue_delay_max_ns) = self.delay.percentiles();
        st
    }

    // ------------------------------------------------------------ shutdown

    /// Moves to DRAINING or CANCELLING (never back), wakes everyone. A
    /// draining pool keeps every growth mechanism (blocking regions lend
    /// threads, the monitor watches) until its queues are empty; a
    /// cancelling one stops growing.
    pub(crate) fn begin_shutdown(self: &Arc<Self>, cancel: bool) {
        let target = if cancel { CANCELLING } else { DRAINING };
        self.state.fetch_max(target, SeqCst);
        if cancel {
            self.cancel_global_queue();
            self.monitor.stop();
        }
        self.sleep.notify_all();
        self.room.notify();
    }

    pub(crate) fn cancel_global_queue(&self) {
        loop {
            match self.injector.steal() {
                Steal::Success(job) => {
                    self.on_dequeue();
                    self.cancel_job(job);
                }
                Steal::Empty => break,
                Steal::Retry => continue,
            }
        }
    }

    /// Drops a job unrun (a panicking destructor is contained); counts it
    /// if it was a user task that does not count itself.
    pub(crate) fn cancel_job(&self, job: JobRef) {
        match catch_unwind(AssertUnwindSafe(move || job.cancel())) {
            Ok(true) => self.counters.cancelled.add(1),
            Ok(false) => {}
            Err(payload) => {
                self.counters.cancelled.add(1);
                drop_payload(payload);
            }
        }
    }

    /// Waits for every worker thread to exit, then joins them. On success
    /// the pool is closed for good: every accepted job ran (drain) or was
    /// cancelled (cancel).
    pub(crate) fn wait_for_exit(&self, deadline: Option<Instant>) -> bool {
        if !self.exited.wait_until(|| self.running_threads.load(SeqCst) == 0, deadline) {
            return false;
        }
        self.monitor.stop();
        for slot in self.slots.iter() {
            if let Some(handle) = lock(&slot.join).take() {
                let _ = handle.join();
            }
        }
        self.monitor.join();
        // Workers exit only once no admitted foreign submission is on its
        // way, so nothing normally remains. What does (a job pushed by a
        // pool thread of this pool after the last worker's final look; a
        // worker that retired with jobs) is handled here, as the mode says.
        while !self.inflight.is_empty() {
            std::thread::yield_now();
        }
        loop {
            match self.injector.steal() {
                Steal::Success(job) if self.state() == CANCELLING => {
                    self.on_dequeue();
                    self.cancel_job(job);
                }
                Steal::Success(job) => {
                    self.on_dequeue();
                    self.run_on_caller(job);
                }
                Steal::Empty => break,
                Steal::Retry => continue,
            }
        }
        true
    }
}

/// Foreign submissions in flight: between the check that the pool is open
/// and the push that makes the job visible. Striped per thread, like the
/// counters, so concurrent submitters do not share a cache line.
///
/// Closing protocol (every access SeqCst): a submitter increments its
/// stripe, then reads `state`; shutdown writes `state`, and a worker about
/// to exit reads every stripe, then scans the queues. Either the
/// submitter's read comes after the write in the single total order (it
/// sees the pool closed and backs out), or its increment comes before the
/// exiting worker's read of that stripe (the worker waits for it to reach
/// zero, which happens only after the push, which its scan then sees). So
/// no job is pushed after the last worker looked, and every accepted job is
/// run (drain) or cancelled (cancel) before shutdown returns. Pool threads
/// take no ticket: they are alive and run their own deque before exiting.
#[derive(Default)]
struct InFlight {
    stripes: [CachePadded<AtomicUsize>; stats::STRIPES],
}

impl InFlight {
    fn enter(&self) -> usize {
        let stripe = stats::my_stripe();
        self.stripes[stripe].fetch_add(1, SeqCst);
        stripe
    }

    fn leave(&self, stripe: usize) {
        self.stripes[stripe].fetch_sub(1, SeqCst);
    }

    /// Each stripe only counts its own threads' open submissions, so it is
    /// never negative, and all-zero means none is open.
    fn is_empty(&self) -> bool {
        self.stripes.iter().all(|s| s.load(SeqCst) == 0)
    }
}

/// An open submission ([`Registry::open_submission`]); leaving it releases
/// the foreign submitter's ticket.
pub(crate) struct Admitted<'a> {
    registry: &'a Registry,
    stripe: Option<usize>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(stripe) = self.stripe {
            self.registry.inflight.leave(stripe);
        }
    }
}

/// A job whose queue delay is measured (one submission in 64 per thread).
struct Sampled {
    job: JobRef,
    submitted_at: Instant,
}

impl Sampled {
    // The wrapper answers `evictable` like the job it wraps.
    const EVICTABLE: JobVTable = JobVTable { run: Self::run, cancel: Self::cancel, evictable: true };
    const PINNED: JobVTable = JobVTable { run: Self::run, cancel: Self::cancel, evictable: false };

    unsafe fn run(payload: *mut Payload) -> bool {
        // SAFETY: a leaked Box<Sampled>, consumed once.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<Sampled>().as_ptr()) };
        if let Some(worker) = WorkerThread::current() {
            worker.registry.delay.record(this.submitted_at);
        }
        // The inner job's answer: a tombstone stays uncounted.
        this.job.run()
    }

    unsafe fn cancel(payload: *mut Payload) -> bool {
        // SAFETY: as in run; the inner job's answer stands.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<Sampled>().as_ptr()) };
        this.job.cancel()
    }
}

#[cold]
fn sampled(job: JobRef) -> JobRef {
    let vtable = if job.evictable() { &Sampled::EVICTABLE } else { &Sampled::PINNED };
    let boxed = Box::new(Sampled { job, submitted_at: Instant::now() });
    let data = std::ptr::NonNull::from(Box::leak(boxed)).cast::<()>();
    // SAFETY: a leaked Box<Sampled> with its own vtable; Sampled is Send.
    unsafe { JobRef::from_pointer(data, vtable) }
}

/// Drops a panic payload, whose own destructor might panic.
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(p);
    }
}
