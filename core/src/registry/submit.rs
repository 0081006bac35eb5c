//! Submission: the open-check and its in-flight ticket (what makes shutdown
//! a closing point), admission against the queue capacity and the reject
//! policy, and where a submitted job enters a queue.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use crate::deque::Steal;
use crossbeam_utils::CachePadded;

use super::{Admission, DRAINING, RUNNING, Registry, drop_payload};
use crate::config::{Growth, Reject};
use crate::error::{SpawnError, SubmitErrorKind};
use crate::here::{Here, here};
use crate::job::{JobRef, JobVTable, Payload, Tag};
use crate::priority::Priority;
use crate::stats::{self, bump};
use crate::worker::WorkerThread;

impl Registry {
    /// Opens a submission: refused once shutdown began, except for pool
    /// threads of a draining pool (what they add is part of what is being
    /// drained). A foreign submitter holds an [`InFlight`] ticket until its
    /// job is pushed (the returned guard), which is what makes closing the
    /// pool atomic: see [`InFlight`].
    #[inline]
    pub(crate) fn open_submission(&self, worker: Option<&WorkerThread>) -> Result<Admitted<'_>, SubmitErrorKind> {
        self.open_submission_at(here(), worker)
    }

    /// [`Registry::open_submission`] for a caller that has already read its
    /// thread's state.
    #[inline]
    pub(crate) fn open_submission_at(
        &self,
        here: &Here,
        worker: Option<&WorkerThread>,
    ) -> Result<Admitted<'_>, SubmitErrorKind> {
        let admitted =
            Admitted { registry: self, stripe: worker.is_none().then(|| self.inflight.enter(here)), counted: false };
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
    #[inline]
    pub(super) fn admit(self: &Arc<Self>, worker: Option<&WorkerThread>) -> Result<Admission, SubmitErrorKind> {
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
                    if worker.is_none() && self.room.wait_until(|| self.has_room() || self.state() != RUNNING, deadline)
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
    pub(crate) fn idle_or_starting(&self) -> usize {
        let (searching, sleeping) = self.sleep.counts();
        searching + sleeping + self.sleep.spinners() + self.starting.load(SeqCst)
    }

    /// ScaleFirst / QueueFirst growth at submission time. `excess` is how
    /// many queued tasks no idle thread is about to take. Returns true when a
    /// thread was started for this task.
    fn grow_for_submission(self: &Arc<Self>, excess: usize) -> bool {
        let want = match self.config.growth {
            Growth::ScaleFirst => excess > 0,
            Growth::QueueFirst => excess > self.config.queue_capacity,
            Growth::Adaptive | Growth::Fixed | Growth::Compensate => false,
        };
        want && self.spawn_worker(crate::dump::ORIGIN_STARTED)
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
    #[inline(always)]
    pub(crate) fn submit_job<F>(
        self: &Arc<Self>,
        task: F,
        global: bool,
        into_job: impl FnOnce(F) -> JobRef,
    ) -> Result<(), SpawnError<F>> {
        // One thread-local access for the whole submission (a call each
        // in a shared library): which worker, which stripe, whether to time.
        let here = here();
        let worker = self.worker_at(here);
        let mut open = match self.open_submission_at(here, worker) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, task)),
        };
        match self.admit(worker) {
            Err(kind) => Err(SpawnError::new(kind, task)),
            Ok(Admission::RunOnCaller) => {
                // Not queued: the ticket must not hold a closing pool up for
                // as long as the task runs.
                open.count_task(worker);
                drop(open);
                self.run_on_caller(into_job(task));
                Ok(())
            }
            Ok(Admission::Queue) => {
                open.count_task(worker);
                // Two calls rather than one with a chosen job: choosing made
                // the 48-byte job take three trips through the stack, with
                // misaligned halves that stall store forwarding (seen with
                // `perf annotate` on the C flood's submitter).
                if here.should_sample_delay() {
                    self.enqueue_sampled(worker, into_job(task), global);
                } else {
                    match worker {
                        Some(worker) if !global => worker.push_new_and_wake(|| into_job(task)),
                        Some(_) => self.enqueue(worker, into_job(task), true),
                        None => self.enqueue(None, into_job(task), global),
                    }
                }
                Ok(())
            }
        }
    }

    /// [`Registry::submit_job`] at a priority. `Normal`, or a submission
    /// from one of the pool's own threads, is `submit_job` itself (see
    /// `Priority` for why a pool thread's submission keeps the ordinary
    /// order); otherwise the admitted job waits in the priority queues.
    #[inline(always)]
    pub(crate) fn submit_job_at<F>(
        self: &Arc<Self>,
        task: F,
        global: bool,
        priority: Priority,
        into_job: impl FnOnce(F) -> JobRef,
    ) -> Result<(), SpawnError<F>> {
        if priority == Priority::Normal {
            return self.submit_job(task, global, into_job);
        }
        self.submit_prioritized(task, global, priority, into_job)
    }

    #[inline(never)]
    fn submit_prioritized<F>(
        self: &Arc<Self>,
        task: F,
        global: bool,
        priority: Priority,
        into_job: impl FnOnce(F) -> JobRef,
    ) -> Result<(), SpawnError<F>> {
        let here = here();
        let worker = self.worker_at(here);
        if worker.is_some() {
            return self.submit_job(task, global, into_job);
        }
        let mut open = match self.open_submission_at(here, None) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, task)),
        };
        match self.admit(None) {
            Err(kind) => Err(SpawnError::new(kind, task)),
            Ok(Admission::RunOnCaller) => {
                open.count_task(None);
                drop(open);
                self.run_on_caller(into_job(task));
                Ok(())
            }
            Ok(Admission::Queue) => {
                open.count_task(None);
                // The ticket (`open`) is given back after the job is
                // visible (`push_prio`).
                self.push_prio(into_job(task), priority);
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

    /// A prioritized lane's turn: counted like any turn, queued at the
    /// lane's priority. A foreign caller holds an open submission (the
    /// lane's `enqueue`) or is a turn itself (a pool thread).
    pub(crate) fn push_turn_at(self: &Arc<Self>, job: JobRef, priority: Priority) {
        if priority == Priority::Normal {
            return self.push_turn(job);
        }
        self.count_queued_uncounted();
        self.push_prio(job.never_help(), priority);
    }

    /// `push_internal` of a new job for a caller that knows it is `worker`
    /// of this pool: `make`'s job is built in its deque slot.
    #[inline(always)]
    pub(crate) fn push_local(self: &Arc<Self>, worker: &WorkerThread, make: impl FnOnce() -> JobRef) {
        self.count_queued_uncounted();
        worker.push_new_and_wake(make);
    }

    #[inline]
    fn push_uncounted(self: &Arc<Self>, worker: Option<&WorkerThread>, job: JobRef, global: bool) {
        self.count_queued_uncounted();
        self.enqueue(worker, job, global);
    }

    /// A job that bypassed admission still occupies the queue while it
    /// waits there (`on_dequeue` takes it off).
    #[inline(always)]
    pub(crate) fn count_queued_uncounted(&self) {
        if self.tracks_queue {
            self.queued.fetch_add(1, SeqCst);
        }
    }

    /// Where a submitted job enters a queue (a new job from a pool thread
    /// goes through `WorkerThread::push_new_and_wake` instead, built in
    /// its slot, and a batch through `batch.rs`'s `Pusher`, under the same
    /// rules): the calling worker's own deque unless `global` (or the
    /// caller is not a worker of this pool), else the injector. The job
    /// joins the submitting task's isolation region; a job from outside
    /// the pool keeps tag 0 and gets a fresh region when it starts
    /// (`WorkerThread::region_of`), which no waiter can take it before:
    /// a waiter takes from the injector only jobs of its own region, never
    /// 0 (`wait.rs`, `look_in_global_queue`). The injector's push reserves its
    /// slot with a SeqCst CAS, which orders it before `notify_one`'s read
    /// like a fence; a local push fences explicitly
    /// (`WorkerThread::push_and_wake`).
    #[inline(always)]
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
                self.injector.push(job);
                self.notify_new_work(None);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn enqueue_sampled(self: &Arc<Self>, worker: Option<&WorkerThread>, job: JobRef, global: bool) {
        self.enqueue(worker, sampled(job), global);
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
    #[inline(always)]
    pub(crate) fn notify_new_work(self: &Arc<Self>, region: Option<Tag>) {
        let woke = match region {
            Some(region) => self.sleep.notify_for_push(region),
            None => self.sleep.notify_global(),
        };
        self.after_notify(woke);
    }

    /// What follows a submission's wake-up attempt: the monitor learns the
    /// pool is busy, and if nobody was woken while threads are blocked, the
    /// pool may lend one. The monitor is kicked whether or not a worker was
    /// woken: a burst whose first tasks a searching or spinning worker took
    /// wakes nobody, and if those tasks then block (undeclared) no later
    /// submission wakes anybody either, so a monitor asleep until a wake-up
    /// would never look (seen: 0 injections for 100 undeclared sleeps, 1 in
    /// 10 runs). `kick` reads one flag the monitor writes only when it goes
    /// idle or wakes.
    #[inline]
    pub(crate) fn after_notify(self: &Arc<Self>, woke: bool) {
        self.monitor.kick();
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
        // Counted before the job signals a waiter, or by us (`stats::Completion`).
        let here = here();
        let outer = here.completion.replace(stats::Completion::off_pool(&self.counters.completed_off_pool));
        let outcome = catch_unwind(AssertUnwindSafe(|| job.run()));
        let owed = here.completion.replace(outer).is_owed();
        match outcome {
            // A tombstone or plumbing (false) ran no task.
            Ok(true) if owed => self.counters.completed_off_pool.add(1),
            Ok(_) => {}
            Err(payload) => {
                if owed {
                    self.counters.completed_off_pool.add(1);
                }
                self.counters.panicked.add(1);
                drop_payload(payload);
            }
        }
    }
}

/// Foreign submissions in flight: between the check that the pool is open
/// and the push that makes the job visible. Striped per thread, like the
/// counters, so concurrent submitters do not share a cache line.
///
/// Each stripe counts tickets taken (`entered`) and given back (`left`),
/// both only ever growing, so in flight = entered - left. A ticket that
/// carried a counted task (`Admitted::count_task`) is the pool's count of
/// foreign submissions too: `left - uncounted`. So a foreign submission
/// pays two read-modify-writes for both the closing point and its count.
///
/// Closing protocol (every access SeqCst): a submitter increments
/// `entered`, then reads `state`; shutdown writes `state`, and a worker
/// about to exit reads each stripe's `left` and then its `entered`, then
/// scans the queues. Either the submitter's read comes after the write in
/// the single total order (it sees the pool closed and backs out), or its
/// increment comes before the exiting worker's read of `entered` (the
/// worker sees entered > left, since `left` was read earlier and counts
/// only tickets given back by then, and waits; the ticket is given back
/// only after the push, which its scan then sees). So no job is pushed
/// after the last worker looked, and every accepted job is run (drain) or
/// cancelled (cancel) before shutdown returns. Pool threads take no
/// ticket: they are alive and run their own deque before exiting.
#[derive(Default)]
pub(super) struct InFlight {
    stripes: [CachePadded<Tickets>; stats::STRIPES],
}

#[derive(Default)]
struct Tickets {
    entered: AtomicU64,
    left: AtomicU64,
    /// Tickets given back without a counted task (refused, or plumbing).
    uncounted: AtomicU64,
}

impl InFlight {
    #[inline]
    pub(super) fn enter(&self, here: &Here) -> usize {
        let stripe = here.stripe();
        self.stripes[stripe].entered.fetch_add(1, SeqCst);
        stripe
    }

    #[inline]
    pub(super) fn leave(&self, stripe: usize, counted: bool) {
        let tickets = &self.stripes[stripe];
        if !counted {
            tickets.uncounted.fetch_add(1, Relaxed);
        }
        tickets.left.fetch_add(1, SeqCst);
    }

    /// No submission is open. `left` first: see the protocol above.
    pub(super) fn is_empty(&self) -> bool {
        self.stripes.iter().all(|t| {
            let left = t.left.load(SeqCst);
            t.entered.load(SeqCst) == left
        })
    }

    /// Counted foreign submissions whose ticket was given back.
    pub(super) fn submitted(&self) -> u64 {
        let left: u64 = self.stripes.iter().map(|t| t.left.load(SeqCst)).sum();
        let uncounted: u64 = self.stripes.iter().map(|t| t.uncounted.load(Relaxed)).sum();
        left.saturating_sub(uncounted)
    }
}

/// An open submission ([`Registry::open_submission`]); leaving it releases
/// the foreign submitter's ticket.
pub(crate) struct Admitted<'a> {
    registry: &'a Registry,
    stripe: Option<usize>,
    counted: bool,
}

impl Admitted<'_> {
    /// The submission carries a task the pool counts as submitted: in the
    /// worker's own counters, or (foreign) in the ticket itself.
    #[inline]
    pub(crate) fn count_task(&mut self, worker: Option<&WorkerThread>) {
        if worker.is_none() && self.stripe.is_some() {
            self.counted = true;
        } else {
            self.registry.count_submitted(worker);
        }
    }
}

impl Drop for Admitted<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(stripe) = self.stripe {
            self.registry.inflight.leave(stripe, self.counted);
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
        if let Some(worker) = here().worker() {
            worker.registry.delay.record(worker.index, this.submitted_at);
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
pub(super) fn sampled(job: JobRef) -> JobRef {
    let vtable = if job.evictable() { &Sampled::EVICTABLE } else { &Sampled::PINNED };
    let boxed = Box::new(Sampled { job, submitted_at: Instant::now() });
    let data = std::ptr::NonNull::from(Box::leak(boxed)).cast::<()>();
    // SAFETY: a leaked Box<Sampled> with its own vtable; Sampled is Send.
    unsafe { JobRef::from_pointer(data, vtable) }
}
