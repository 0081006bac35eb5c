//! A worker thread: its main loop and where it looks for work. How it
//! waits (help-while-waiting) is in `wait.rs`.
//!
//! Find-task order (crossbeam-deque's idiom, with tokio's searching rule):
//! 1. every 61st task, the global injector first, so a steady stream of
//!    local work can never starve global submissions (seed 000's lesson
//!    turned around: neither queue may outrank the other forever);
//! 2. the worker's own deque (LIFO: hot in cache);
//! 3. global work, oldest first: the worker's own FIFO inbox, then the
//!    inboxes of stalled workers (global work they took in a batch and have
//!    not started, so it is older than anything in the injector), then a
//!    batch from the injector into the inbox. Each batch therefore starts
//!    in submission order, and a worker that blocks holds none of it
//!    hostage (across batches the order is not strict: see
//!    `docs/scheduling.md`);
//! 4. only a worker admitted as a *searcher* (at most half the pool, see
//!    `sleep/README.md`) steals from another worker, starting at a random
//!    victim, retrying while any victim answered `Steal::Retry`: a batch
//!    from its inbox (global work it took and has not started: older, and
//!    nobody waits for it), else one job from its deque (the oldest, the
//!    biggest piece of a fork-join tree, as rayon does), or a batch from a
//!    deque of `BATCH_STEAL_MIN` jobs or more (a flat fan-out).
//!
//! Threads injected by the starvation monitor swap 3 and 4: they take work
//! already in flight before new global work, which is the fix seed 000 asks
//! for (otherwise every injected thread just feeds on the newest requests
//! while the old ones, holding the blocked threads, never finish).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::time::{Duration, Instant};

use crate::deque::{Steal, Worker};

use crate::job::{JobRef, Tag};
use crate::registry::{CANCELLING, DRAINING, LocalQueues, Registry, drop_payload};
use crate::sleep::{Debounce, Wake};
use crate::stats::{Completion, WorkerCounters, bump};

/// A deque at least this long gives a searcher a batch (half of it, at most
/// 32) instead of one job: more than a fork-join tree's depth, so it is a
/// flat fan-out of siblings.
const BATCH_STEAL_MIN: usize = 64;

/// A worker polls the injector first once every this many tasks.
const FAIRNESS_INTERVAL: u32 = 61;

/// How long a parked worker keeps the rings a burst grew before it gives
/// them back (the `deque` module's `BURST_CAP` says which go at once).
/// Back-to-back bursts a few milliseconds apart reuse the memory; an idle
/// pool holds only minimal queues a tenth of a second after its last
/// task, at the cost of one timed wake-up per burst.
const QUEUE_MEMORY_LINGER: Duration = Duration::from_millis(100);
/// The most jobs one visit to the injector moves into the inbox (one CAS
/// per batch: per job halves a flood's throughput).
const MAX_GLOBAL_BATCH: usize = 32;

/// Where a task was found (for the counters).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Local,
    Global,
    Stolen,
}

/// Per-thread worker state. Lives on the worker thread's stack; `CURRENT`
/// points at it while the thread runs.
pub(crate) struct WorkerThread {
    pub(crate) registry: Arc<Registry>,
    pub(crate) index: usize,
    /// This worker's counters in its slot (read on every task: cached
    /// rather than indexed through the registry each time).
    counters: std::ptr::NonNull<WorkerCounters>,
    pub(crate) deque: Worker<JobRef>,
    /// FIFO: global work taken in a batch (see the module comment).
    inbox: Worker<JobRef>,
    /// Injected by the starvation monitor: steal before taking global work.
    steal_first: bool,
    rng: Cell<u64>,
    tick: Cell<u32>,
    /// High-priority jobs taken in a row (`priority.rs`'s bounded bypass).
    high_run: Cell<u32>,
    /// The isolation region of the task running now (0 between tasks);
    /// see `isolation.rs`. Jobs this thread submits inherit it.
    pub(crate) region: Cell<Tag>,
    /// This worker's block of fresh regions (`isolation::next_region`).
    pub(crate) next_region: Cell<u64>,
    /// Nested help-while-waiting frames (a secondary bound; the stack left
    /// is the primary one, see `wait.rs`).
    pub(crate) help_depth: Cell<u32>,
    pub(crate) blocking_depth: Cell<u32>,
    /// The lowest stack address at which a wait may still run a job nested
    /// (the lowest safe address plus the help reserve, see `wait.rs`).
    pub(crate) nested_floor: usize,
    /// Counts the groups placed on this thread (`group/lease.rs`).
    pub(crate) lease: crate::group::LeaseSlot,
    /// This thread's `Here`, read once: `execute` sets where each job counts
    /// its completion without a thread-local lookup per task.
    here: &'static crate::here::Here,
    /// The handle the C API's calls from this thread use
    /// (`Pool::call_handle`): not an owner of the pool.
    pub(crate) thread_handle: crate::Pool,
}

/// Aborts the process if dropped during an unwind: placed where a panic
/// would leave the pool in a state nobody can recover (a worker loop
/// exiting silently, a latch half set). rayon-core's `AbortIfPanic`.
pub(crate) struct AbortOnUnwind(pub(crate) &'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("wspool: fatal: a panic escaped {}; aborting (the pool cannot recover)", self.0);
            std::process::abort();
        }
    }
}

impl WorkerThread {
    /// The worker running on this thread, of any pool.
    #[inline]
    pub(crate) fn current() -> Option<&'static WorkerThread> {
        crate::here::here().worker()
    }

    /// Pushes onto the own deque; offers it to the pool only if the deque
    /// holds nothing else once it is pushed (rayon's rule: otherwise an
    /// earlier push already offered work, and a recursion that keeps its
    /// deque non-empty pays no wake-up check per fork).
    /// `notify_after_local_push` fences between
    /// the push (a Release store) and the read of the sleep state: without
    /// that, push and a parking worker's re-scan can miss each other (store
    /// buffering), and the job then waits out the owner's current task,
    /// forever if that task blocks on it.
    #[inline]
    pub(crate) fn push_and_wake(&self, mut job: JobRef) {
        job.tag_if_unset(|| self.region.get());
        let region = job.tag();
        self.deque.push(job);
        // Rayon's rule (wake only for a push onto an empty deque), with
        // "empty" read after the push: read before it, a thief could empty
        // the deque in between (this thread preempted there) while the
        // worker woken for the earlier job searched and parked, and this
        // job would wait behind this task with nobody woken for it.
        if self.deque.holds_at_most_one() {
            self.offer_pushed_work(region);
        } else {
            self.offer_to_waiter(region);
        }
    }

    /// [`WorkerThread::push_and_wake`] for a new job (untagged: it joins
    /// the running task's region), built by `make` in its deque slot: a
    /// task spawned from a pool thread is never copied on its way there.
    /// The two keep their own copies of rayon's rule: written once, as a
    /// helper taking the push as a closure, it cost 31 more instructions
    /// per W4 task (callgrind, `bench/c/groups_callgrind.sh`: 324.6
    /// against 293.1; the generated code was not traced further).
    #[inline(always)]
    pub(crate) fn push_new_and_wake(&self, make: impl FnOnce() -> JobRef) {
        let region = self.region.get();
        self.deque.push_with(|| make().tagged(region));
        if self.deque.holds_at_most_one() {
            self.offer_pushed_work(region);
        } else {
            self.offer_to_waiter(region);
        }
    }

    fn offer_pushed_work(&self, region: Tag) {
        let woke = self.registry.sleep.notify_after_local_push(region);
        self.registry.after_notify(woke);
    }

    /// A push onto a non-empty deque: idle workers were offered work by an
    /// earlier push (rayon's rule), but a waiter of this region, parked
    /// since, was not, and the job may sit behind this task for as long as
    /// it runs while the waiter, allowed to run it, sleeps (issue 30.5).
    /// One load when no waiter of the region is parked.
    #[inline(always)]
    fn offer_to_waiter(&self, region: Tag) {
        self.registry.sleep.notify_waiter_for_push(region);
    }

    #[inline]
    pub(crate) fn counters(&self) -> &WorkerCounters {
        // SAFETY: points into `registry.slots`, a boxed slice never
        // reallocated, and `self.registry` keeps the registry alive.
        unsafe { self.counters.as_ref() }
    }

    /// Thread entry point.
    pub(crate) fn run(registry: Arc<Registry>, index: usize, queues: LocalQueues, steal_first: bool) {
        let LocalQueues { deque, inbox } = queues;
        let worker = WorkerThread {
            nested_floor: crate::wait::nested_floor(registry.config.stack_size),
            thread_handle: crate::Pool::thread_handle(&registry),
            counters: std::ptr::NonNull::from(&*registry.slots[index].counters),
            registry,
            index,
            deque,
            inbox,
            steal_first,
            rng: Cell::new(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)),
            tick: Cell::new(0),
            high_run: Cell::new(0),
            region: Cell::new(0),
            next_region: Cell::new(0),
            help_depth: Cell::new(0),
            blocking_depth: Cell::new(0),
            lease: Default::default(),
            here: crate::here::here(),
        };
        // A panic outside a task (there should be none: every task, hook and
        // destructor is contained) would leave the pool a thread short with
        // its counters wrong: abort loudly instead of hanging later.
        let guard = AbortOnUnwind("a wspool worker thread outside any task");
        crate::here::here().set_worker(&worker);
        // Once per thread: task handles record the `Here` of their runner,
        // and snapshots map it back to this index.
        worker.counters().here_addr.store(worker.here as *const crate::here::Here as usize, Relaxed);
        if let Some(hook) = &worker.registry.config.on_thread_start
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(index)))
        {
            drop_payload(p);
        }
        worker.main_loop();
        if let Some(hook) = &worker.registry.config.on_thread_stop
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(index)))
        {
            drop_payload(p);
        }
        crate::here::here().set_worker(ptr::null());
        // Groups placed on this thread and not finalised yet keep the
        // registry alive through its lease, past this thread's own count.
        worker.lease.end(&worker.registry);
        let WorkerThread { registry, deque, inbox, .. } = worker;
        registry.release_slot(index, LocalQueues { deque, inbox });
        std::mem::forget(guard);
    }

    fn main_loop(&self) {
        let registry = &*self.registry;
        let spin_max = Duration::from_micros(u64::from(registry.config.spin_max_us));
        let mut debounce = Debounce::new(spin_max);
        self.publish_threshold(&debounce);
        // A new thread counts as searching only now, after its start hook:
        // while a slow hook runs, submitters must still wake somebody else.
        registry.sleep.add_searcher();
        registry.starting.fetch_sub(1, SeqCst);
        let mut searching = true;
        loop {
            if registry.state() == CANCELLING {
                self.cancel_own_deque();
                break;
            }
            if let Some(job) = self.find_task(searching) {
                if searching {
                    searching = false;
                    self.stop_searching();
                }
                self.execute(job);
                if registry.retire_requested() || registry.retire_if_surplus() {
                    return;
                }
                continue;
            }
            // A drained queue whose buffer a burst grew gives it back now,
            // even if this worker never gets to park (one load each).
            if self.deque.holds_burst() || self.inbox.holds_burst() {
                self.release_queue_memory();
            }
            match registry.state() {
                DRAINING if registry.drained() => break,
                // A submission admitted before the queue closed is still on
                // its way: it must be run, so wait for it.
                DRAINING if !registry.has_visible_work() => std::thread::yield_now(),
                _ => {}
            }
            if registry.retire_if_surplus() {
                if searching {
                    self.stop_searching();
                }
                return;
            }
            if !searching && registry.sleep.try_start_searching(registry.live_threads()) {
                searching = true;
                continue;
            }
            // A debounce spin (bounded by its own budget, and only after a
            // quick wake-up) is not counted as searching: counting would be
            // two read-modify-writes on the sleep state per task taken, the
            // very line every submitter reads. It needs no count either: a
            // spinner is not parked, so a submitter that sees nobody
            // searching finds nobody to wake and pays no system call. Only
            // an admitted searcher steals while it spins.
            if let Some(budget) = debounce.spin_budget(Instant::now())
                && let Some(found) = self.spin(budget, searching)
            {
                if let Some(job) = found {
                    debounce.record(true);
                    // A hit is a wake-up without the system call: judge the
                    // next idle moment from here.
                    debounce.woken(Instant::now());
                    bump(&self.counters().spin_hits);
                    self.publish_threshold(&debounce);
                    if searching {
                        searching = false;
                        self.stop_searching();
                    }
                    self.execute(job);
                    continue;
                }
                debounce.record(false);
                bump(&self.counters().spin_misses);
                self.publish_threshold(&debounce);
            }
            let keep_alive =
                (registry.live_threads() > registry.config.min_threads).then_some(registry.config.keep_alive);
            // An idle pool keeps minimal queues (docs/scheduling.md, "What
            // a pool keeps"), but a burst's grown rings are given back only
            // once this worker has slept `QUEUE_MEMORY_LINGER` without
            // being woken: a burst that follows soon reuses them.
            let lingering = self.deque.keeps_grown_memory() || self.inbox.keeps_grown_memory();
            self.publish_kept_slots_for_tests();
            let timeout = match (lingering, keep_alive) {
                (true, Some(keep_alive)) => Some(keep_alive.min(QUEUE_MEMORY_LINGER)),
                (true, None) => Some(QUEUE_MEMORY_LINGER),
                (false, keep_alive) => keep_alive,
            };
            // For snapshots only; idle path, never per task.
            let activity = &self.counters().activity;
            activity.store(crate::dump::PARKED, Relaxed);
            let wake = registry.sleep.park(self.index, searching, timeout, |scan| {
                registry.state() != crate::registry::RUNNING || (scan && registry.has_visible_work())
            });
            activity.store(crate::dump::SEARCHING, Relaxed);
            searching = true;
            match wake {
                // Woken from its own CPU: the waker (the thread likely to
                // submit the next task) was or will be preempted for this
                // worker, and a spin at the next idle moment would keep it
                // off that CPU: the spin could only miss. It is not tried,
                // so such misses neither cost the waker its CPU nor teach
                // the debounce that spinning does not pay where it would.
                Wake::Notified { from_cpu: Some(cpu) } if Some(cpu) == crate::sleep::current_cpu() => {}
                Wake::Notified { .. } => debounce.woken(Instant::now()),
                Wake::TimedOut => {
                    if lingering {
                        self.release_queue_memory();
                    }
                    // A linger shorter than the keep-alive ended: the worker
                    // parks again, now for the keep-alive (which so counts
                    // from the end of the linger).
                    let kept_alive_out = keep_alive.is_some_and(|k| !lingering || k <= QUEUE_MEMORY_LINGER);
                    if kept_alive_out && registry.try_retire() {
                        if let Some(idle) = keep_alive {
                            registry.record_decision(
                                crate::dump::MonitorAction::Retired(1),
                                crate::dump::MonitorReason::IdleRetired { idle },
                            );
                        }
                        self.stop_searching();
                        return;
                    }
                }
            }
        }
        if searching {
            self.stop_searching();
        }
        registry.threads.fetch_sub(1, SeqCst);
    }

    /// Gives back what bursts left in this worker's queues, if they are
    /// drained (`deque::Worker::release_memory`).
    #[cold]
    fn release_queue_memory(&self) {
        self.deque.release_memory();
        self.inbox.release_memory();
        self.publish_kept_slots_for_tests();
    }

    /// What the queues keep, for `growth::retire_tests` (nothing outside tests).
    #[inline(always)]
    fn publish_kept_slots_for_tests(&self) {
        #[cfg(test)]
        {
            let kept = self.deque.kept_capacity() + self.inbox.kept_capacity();
            self.counters().kept_queue_slots.store(kept, Relaxed);
            self.counters().kept_queue_slots_peak.fetch_max(kept, Relaxed);
        }
    }

    fn publish_threshold(&self, debounce: &Debounce) {
        let ns = debounce.threshold().as_nanos().min(u128::from(u32::MAX)) as u32;
        self.counters().spin_threshold_ns.store(ns, Relaxed);
    }

    /// Leaves the searching state; the last searcher out hands the search
    /// on if work is still visible (tokio's rule), so a burst is picked up
    /// by as many workers as it needs, one wake-up at a time.
    pub(crate) fn stop_searching(&self) {
        let registry = &*self.registry;
        // stop_searching is a SeqCst RMW followed by a fence for the last
        // searcher: it orders the scan before notify_one.
        if registry.sleep.stop_searching() && registry.has_visible_work() && registry.sleep.notify_one() {
            registry.monitor.kick();
        }
    }

    /// Spins (scanning the own deque and the injector, and other deques if
    /// `searching`) for at most `budget`. `None`: not allowed to spin, since
    /// half the live workers (at least one) already do
    /// (`Sleep::try_start_spinning`).
    fn spin(&self, budget: Duration, searching: bool) -> Option<Option<JobRef>> {
        let registry = &*self.registry;
        // A spinner never takes the last CPU: with an awake worker on every
        // CPU (this one included) a spin can only find work that a thread
        // it keeps off its CPU makes. On 2 CPUs, 2 workers and a foreign
        // submitter, a worker spinning beside one running tasks found the
        // submitter's tasks one at a time, as they came (16,874 spin hits
        // in one run of `make bench-c`'s W1), and held the flood at about
        // half the rate of runs without it (10 against 18-24 M tasks/s).
        let (_, sleeping) = registry.sleep.counts();
        if registry.live_threads().saturating_sub(sleeping) >= registry.machine_cpus {
            return None;
        }
        if !registry.sleep.try_start_spinning(registry.live_threads()) {
            return None;
        }
        let activity = &self.counters().activity;
        activity.store(crate::dump::SPINNING, Relaxed);
        let found = self.spin_for(budget, searching);
        activity.store(crate::dump::SEARCHING, Relaxed);
        // A global push skips its wake-up while a worker spins: the last
        // spinner out hands it on if it leaves global work behind. One that
        // found nothing parks next, and its park re-scans.
        if registry.sleep.stop_spinning()
            && found.is_some()
            && (!registry.injector.is_empty() || registry.prio.has_work())
            && registry.sleep.notify_global()
        {
            registry.monitor.kick();
        }
        Some(found)
    }

    fn spin_for(&self, budget: Duration, searching: bool) -> Option<JobRef> {
        let start = Instant::now();
        loop {
            for _ in 0..4 {
                std::hint::spin_loop();
            }
            if let Some(job) = self.find_task(searching) {
                return Some(job);
            }
            if self.registry.state() != crate::registry::RUNNING || start.elapsed() >= budget {
                return None;
            }
        }
    }

    fn cancel_own_deque(&self) {
        while let Some(job) = self.deque.pop().or_else(|| self.inbox.pop()) {
            self.registry.on_dequeue();
            self.registry.cancel_job(job);
        }
    }

    /// Runs one job taken from a queue, containing its panic. The job runs
    /// in its own isolation region; a top-level job (not one run while
    /// helping) publishes that region so waiters of the same region know
    /// this worker's deque holds their work.
    #[inline(always)]
    pub(crate) fn execute(&self, mut job: JobRef) {
        let registry = &*self.registry;
        registry.on_dequeue();
        // A job a worker took for itself before a cancelling shutdown began
        // runs, as in a thread pool whose worker already dequeued it; after
        // that the main loop takes no more (it checks first thing). Jobs
        // met while helping are cancelled here instead: the waiter is
        // waiting for them to finish one way or the other.
        if self.region.get() != 0 && registry.state() == CANCELLING {
            registry.cancel_job(job);
            return;
        }
        let counters = self.counters();
        let region = self.region_of(job.tag());
        let outer_region = self.region.replace(region);
        if outer_region == 0 {
            counters.region.store(region, Relaxed);
        }
        let outer_blocking = self.blocking_depth.get();
        // Nested runs (help-while-waiting) restore the outer task's mark.
        let outer = counters.in_task.load(Relaxed);
        counters.in_task.store(1, Relaxed);
        // The job counts its completion here, before it signals a waiter, or
        // leaves it to us (`stats::Completion`).
        let outer_completion = self.here.completion.replace(Completion::worker(&counters.completed));
        // SAFETY: the job is consumed here, and forgotten right after.
        let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { JobRef::run_in_place(&mut job) }));
        std::mem::forget(job);
        let owed = self.here.completion.replace(outer_completion).is_owed();
        counters.in_task.store(outer, Relaxed);
        if self.blocking_depth.get() > outer_blocking {
            // The task left a blocking region open (`blocking_begin` with no
            // `blocking_end`): close it, or the thread stays counted blocked.
            crate::growth::close_unbalanced_blocking(self, outer_blocking);
        }
        self.region.set(outer_region);
        match outcome {
            Ok(true) if owed => bump(&counters.completed),
            Ok(_) => {}
            Err(payload) => {
                if owed {
                    bump(&counters.completed);
                }
                registry.counters.panicked.add(1);
                drop_payload(payload);
            }
        }
    }

    /// Finds a job for the main loop: see the module comment for the order.
    /// Only a searcher steals.
    #[inline(always)]
    fn find_task(&self, searching: bool) -> Option<JobRef> {
        // Prioritized work ready (`priority.rs`): one load, zero while
        // priorities are unused.
        if self.registry.prio.any_ready_hint() {
            return self.find_task_prioritized(searching);
        }
        self.find_ordinary(searching)
    }

    /// [`WorkerThread::find_task`] while high or Low work is ready: the
    /// selection rules of `priority.rs`, around the ordinary look.
    #[cold]
    #[inline(never)]
    fn find_task_prioritized(&self, searching: bool) -> Option<JobRef> {
        let prio = &self.registry.prio;
        if let Some(job) = prio.take_first(&self.high_run) {
            self.count(Source::Global);
            return Some(job);
        }
        loop {
            match self.find_ordinary(searching) {
                // A Low job's place in the queue: reached, and the look goes on.
                Some(job) => match crate::priority::reach_if_low_marker(&self.registry, job) {
                    Some(job) => {
                        prio.took_ordinary(&self.high_run);
                        return Some(job);
                    }
                    None => continue,
                },
                None => {
                    let job = prio.take_rest(&self.high_run);
                    if job.is_some() {
                        self.count(Source::Global);
                    }
                    return job;
                }
            }
        }
    }

    /// The ordinary queues, in the module comment's order.
    #[inline(always)]
    fn find_ordinary(&self, searching: bool) -> Option<JobRef> {
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if tick.is_multiple_of(FAIRNESS_INTERVAL)
            && let Some(job) = self.take_global()
        {
            return Some(job);
        }
        // An empty deque's pop still pays a SeqCst fence; the emptiness
        // check is two plain loads (global work lives in the inbox).
        if !self.deque.is_empty()
            && let Some(job) = self.deque.pop()
        {
            self.count(Source::Local);
            return Some(job);
        }
        let steal = || if searching { self.steal(None) } else { None };
        if self.steal_first { steal().or_else(|| self.take_global()) } else { self.take_global().or_else(steal) }
    }

    pub(crate) fn count_local_pop(&self) {
        self.count(Source::Local);
    }

    pub(crate) fn count_global_pop(&self) {
        self.count(Source::Global);
    }

    fn count(&self, source: Source) {
        let c = self.counters();
        bump(match source {
            Source::Local => &c.local_pops,
            Source::Global => &c.global_pops,
            Source::Stolen => &c.steals,
        });
    }

    /// Global work, oldest first: own inbox, other workers' inboxes, then a
    /// batch from the injector.
    #[inline(always)]
    fn take_global(&self) -> Option<JobRef> {
        if let Some(job) = self.inbox.pop() {
            self.count(Source::Global);
            return Some(job);
        }
        let registry = &*self.registry;
        let n = registry.high_water.load(Acquire);
        loop {
            let mut retry = false;
            // Only a stalled worker's inbox: a busy one is consuming its own,
            // and taking from it would make the consumers of a flood fight
            // over each other's batches.
            let stalled = |&i: &usize| i != self.index && registry.slots[i].counters.stalled.load(Relaxed);
            for victim in (0..n).filter(stalled) {
                match registry.slots[victim].inbox.steal_batch_and_pop(&self.inbox) {
                    Steal::Success(job) => {
                        self.count(Source::Global);
                        return Some(job);
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            match registry.injector.steal_batch_with_limit_and_pop(&self.inbox, MAX_GLOBAL_BATCH) {
                Steal::Success(job) => {
                    self.count(Source::Global);
                    return Some(job);
                }
                Steal::Empty if !retry => return None,
                _ => std::hint::spin_loop(),
            }
        }
    }

    /// Steals from another worker (see the module comment). With `region`, only from
    /// workers whose current top-level task is of that region (a waiter
    /// looking for its own subtree).
    pub(crate) fn steal(&self, region: Option<Tag>) -> Option<JobRef> {
        let registry = &*self.registry;
        let n = registry.high_water.load(Acquire);
        if n <= 1 {
            return None;
        }
        loop {
            let mut retry = false;
            let start = self.next_random(n);
            for i in 0..n {
                let victim = (start + i) % n;
                if victim == self.index {
                    continue;
                }
                let slot = &registry.slots[victim];
                if region.is_some_and(|r| slot.counters.region.load(Relaxed) != r) {
                    continue;
                }
                // A searcher also relieves a busy worker of the global work
                // it took and has not started (a waiter must not: that is
                // other regions' work).
                // From an inbox, a batch: global work, older than anything
                // forked since, and nobody waits for it. From a deque, one
                // job: the oldest, which in a fork-join tree is the biggest
                // piece (rayon's choice); half the deque would take the jobs
                // its owner is about to wait for, and both would then wait
                // on each other's batches. Unless the deque is long: a task
                // that forked many siblings (a loop of spawns) has more than
                // a tree's depth queued, and taking them one steal at a
                // time costs a steal per task (a searcher only: a waiter
                // takes one at a time, as it runs them nested).
                let from_deque = || {
                    if region.is_none() && slot.stealer.len() >= BATCH_STEAL_MIN {
                        slot.stealer.steal_batch_and_pop(&self.deque)
                    } else {
                        slot.stealer.steal()
                    }
                };
                let from_inbox = || {
                    if region.is_none() { slot.inbox.steal_batch_and_pop(&self.inbox) } else { Steal::Empty }
                };
                for attempt in [&from_inbox as &dyn Fn() -> Steal<JobRef>, &from_deque] {
                    match attempt() {
                        Steal::Success(job) => {
                            self.count(Source::Stolen);
                            return Some(job);
                        }
                        Steal::Retry => retry = true,
                        Steal::Empty => {}
                    }
                }
            }
            if !retry {
                return None;
            }
        }
    }

    fn next_random(&self, n: usize) -> usize {
        // xorshift64*
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % n
    }

    /// Marks this worker as stalled (blocked, or parked in a wait) or not:
    /// see `WorkerCounters::stalled`.
    pub(crate) fn set_stalled(&self, stalled: bool) {
        self.counters().stalled.store(stalled, Relaxed);
    }

    /// Done when this thread is about to block, so its queued work does not
    /// wait behind the blocking call: the own deque's jobs move to the
    /// global queue, the inbox stays where other workers take it first (in
    /// order), and the pool is told there is work.
    pub(crate) fn offload_local_work(&self) {
        self.set_stalled(true);
        let mut offered = !self.inbox.is_empty();
        while let Some(job) = self.deque.pop() {
            self.registry.injector.push(job);
            offered = true;
        }
        if offered {
            // Not `wake_for_new_work`: that wakes nobody while a worker
            // spins, and a spinner's hand-on looks only at the injector, not
            // at every stalled worker's inbox (one line per worker, per spin).
            std::sync::atomic::fence(SeqCst);
            let woke = self.registry.sleep.notify_one();
            self.registry.after_notify(woke);
        }
    }
}

/// The index of the calling thread in its pool, if it is a pool worker.
pub fn current_index() -> Option<usize> {
    WorkerThread::current().map(|w| w.index)
}
