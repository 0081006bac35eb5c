//! A worker thread: its main loop, where it looks for work, and how it
//! waits (by helping).
//!
//! Find-task order (crossbeam-deque's idiom):
//! 1. every 61st task, the global injector first, so a steady stream of
//!    local work can never starve global submissions (seed 000's lesson
//!    turned around: neither queue may outrank the other forever);
//! 2. the worker's own deque (LIFO: hot in cache);
//! 3. the injector, taking a batch into the own deque;
//! 4. stealing a batch from another worker, starting at a random victim,
//!    retrying while any victim answered `Steal::Retry`.
//!
//! Threads injected by the starvation monitor swap 3 and 4: they take work
//! already in flight before new global work, which is the fix seed 000 asks
//! for (otherwise every injected thread just feeds on the newest requests
//! while the old ones, holding the blocked threads, never finish).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use crossbeam_deque::{Steal, Worker};

use crate::job::JobRef;
use crate::latch::Awaitable;
use crate::registry::{CANCELLING, DRAINING, Registry, drop_payload};
use crate::sleep::{Debounce, Wake};
use crate::stats::{WorkerCounters, bump};

/// A worker polls the injector first once every this many tasks.
const FAIRNESS_INTERVAL: u32 = 61;
/// Nested help-while-waiting frames allowed before a wait just blocks (each
/// frame runs a task on top of the waiting one's stack).
pub(crate) const MAX_HELP_DEPTH: u32 = 128;

thread_local! {
    static CURRENT: Cell<*const WorkerThread> = const { Cell::new(ptr::null()) };
}

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
    pub(crate) deque: Worker<JobRef>,
    /// Injected by the starvation monitor: steal before taking global work.
    steal_first: bool,
    rng: Cell<u64>,
    tick: Cell<u32>,
    help_depth: Cell<u32>,
    pub(crate) blocking_depth: Cell<u32>,
}

impl WorkerThread {
    /// The worker running on this thread, of any pool.
    #[inline]
    pub(crate) fn current() -> Option<&'static WorkerThread> {
        let p = CURRENT.with(|c| c.get());
        // SAFETY: set only for the lifetime of `run` on this thread, which
        // outlives every use (all uses are on this thread, inside tasks).
        unsafe { p.as_ref() }
    }

    /// Pushes onto the own deque; wakes a sibling only if the deque was
    /// empty (rayon's rule): otherwise an earlier push already offered work,
    /// and a recursion that keeps its deque non-empty pays no wake-up check
    /// per fork. No fence before the check: if the wake-up is missed, the
    /// job is not stranded, because the owner runs its own deque before it
    /// can park, helps from it while waiting, and lends a thread if it
    /// enters a blocking region with it non-empty. A miss costs parallelism
    /// for one job, never progress (rayon makes the same trade).
    #[inline]
    pub(crate) fn push_and_wake(&self, job: JobRef) {
        let was_empty = self.deque.is_empty();
        self.deque.push(job);
        if was_empty {
            self.registry.notify_new_work();
        }
    }

    pub(crate) fn counters(&self) -> &WorkerCounters {
        &self.registry.slots[self.index].counters
    }

    /// Thread entry point.
    pub(crate) fn run(registry: Arc<Registry>, index: usize, deque: Worker<JobRef>, steal_first: bool) {
        let worker = WorkerThread {
            registry,
            index,
            deque,
            steal_first,
            rng: Cell::new(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) * 0xD1B5_4A32_D192_ED03)),
            tick: Cell::new(0),
            help_depth: Cell::new(0),
            blocking_depth: Cell::new(0),
        };
        CURRENT.with(|c| c.set(&worker));
        if let Some(hook) = &worker.registry.config.on_thread_start {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(index))) {
                drop_payload(p);
            }
        }
        worker.main_loop();
        if let Some(hook) = &worker.registry.config.on_thread_stop {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(index))) {
                drop_payload(p);
            }
        }
        CURRENT.with(|c| c.set(ptr::null()));
        let WorkerThread { registry, deque, .. } = worker;
        registry.release_slot(index, deque);
    }

    fn main_loop(&self) {
        let registry = &*self.registry;
        let spin_max = Duration::from_micros(u64::from(registry.config.spin_max_us));
        let mut debounce = Debounce::new(spin_max);
        self.publish_threshold(&debounce);
        // Threads are born searching (see `Registry::spawn_worker`).
        let mut searching = true;
        loop {
            if let Some(job) = self.find_task(false) {
                if searching {
                    searching = false;
                    self.stop_searching();
                }
                self.execute(job);
                if registry.retire_requested() {
                    return;
                }
                continue;
            }
            match registry.state() {
                DRAINING if !registry.has_visible_work() => break,
                CANCELLING => {
                    self.cancel_own_deque();
                    break;
                }
                _ => {}
            }
            if !searching && registry.sleep.try_start_searching(registry.live_threads()) {
                searching = true;
                continue;
            }
            if let Some(budget) = debounce.spin_budget(Instant::now()) {
                if let Some(job) = self.spin(budget) {
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
            let wake = registry.sleep.park(self.index, searching, keep_alive, || {
                registry.state() != crate::registry::RUNNING || registry.has_visible_work()
            });
            searching = true;
            match wake {
                Wake::Notified => debounce.woken(Instant::now()),
                Wake::TimedOut => {
                    if registry.try_retire() {
                        self.stop_searching();
                        return;
                    }
                }
            }
        }
        if searching {
            self.stop_searching();
        }
        registry.threads.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
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
        // stop_searching is a SeqCst RMW: it orders the scan before notify_one.
        if registry.sleep.stop_searching() && registry.has_visible_work() && registry.sleep.notify_one() {
            registry.monitor.kick();
        }
    }

    /// Spins (scanning the queues) for at most `budget`.
    fn spin(&self, budget: Duration) -> Option<JobRef> {
        let start = Instant::now();
        loop {
            for _ in 0..4 {
                std::hint::spin_loop();
            }
            if let Some(job) = self.find_task(false) {
                return Some(job);
            }
            if self.registry.state() != crate::registry::RUNNING || start.elapsed() >= budget {
                return None;
            }
        }
    }

    fn cancel_own_deque(&self) {
        while let Some(job) = self.deque.pop() {
            self.registry.on_dequeue();
            self.registry.cancel_job(job);
        }
    }

    /// Runs one job taken from a queue, containing its panic.
    #[inline]
    pub(crate) fn execute(&self, job: JobRef) {
        let registry = &*self.registry;
        registry.on_dequeue();
        if registry.state() == CANCELLING {
            registry.cancel_job(job);
            return;
        }
        let counters = self.counters();
        // Nested runs (help-while-waiting) restore the outer task's mark.
        let outer = counters.in_task.load(Relaxed);
        counters.in_task.store(1, Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| job.run()));
        counters.in_task.store(outer, Relaxed);
        match outcome {
            Ok(true) => bump(&counters.completed),
            Ok(false) => {}
            Err(payload) => {
                bump(&counters.completed);
                registry.counters.panicked.add(1);
                drop_payload(payload);
            }
        }
    }

    /// Finds a job: see the module comment for the order. `helping` (a
    /// waiting thread) skips the fairness tick: it prefers its own deque.
    pub(crate) fn find_task(&self, helping: bool) -> Option<JobRef> {
        if !helping {
            let tick = self.tick.get().wrapping_add(1);
            self.tick.set(tick);
            if tick % FAIRNESS_INTERVAL == 0
                && let Some(job) = self.take_global()
            {
                return Some(job);
            }
        }
        if let Some(job) = self.deque.pop() {
            self.count(Source::Local);
            return Some(job);
        }
        if self.steal_first {
            self.steal().or_else(|| self.take_global())
        } else {
            self.take_global().or_else(|| self.steal())
        }
    }

    fn count(&self, source: Source) {
        let c = self.counters();
        bump(match source {
            Source::Local => &c.local_pops,
            Source::Global => &c.global_pops,
            Source::Stolen => &c.steals,
        });
    }

    fn take_global(&self) -> Option<JobRef> {
        loop {
            match self.registry.injector.steal_batch_and_pop(&self.deque) {
                Steal::Success(job) => {
                    self.count(Source::Global);
                    return Some(job);
                }
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }

    fn steal(&self) -> Option<JobRef> {
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
                match registry.slots[victim].stealer.steal_batch_and_pop(&self.deque) {
                    Steal::Success(job) => {
                        self.count(Source::Stolen);
                        return Some(job);
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
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

    /// Help-while-waiting: runs other jobs until `latch` is set or the
    /// deadline passes, parking (registered on the latch) only when there is
    /// nothing to run. Returns whether the latch was set.
    ///
    /// What a waiting thread runs, in order of preference: its own deque
    /// (the children it just forked, most likely what it waits for), then
    /// other workers' in-flight work, then the global queue. Past
    /// `MAX_HELP_DEPTH` nested waits it stops helping and blocks, counted
    /// as a blocked thread so the pool compensates.
    pub(crate) fn wait_until(&self, latch: &dyn Awaitable, deadline: Option<Instant>) -> bool {
        if latch.probe() {
            return true;
        }
        let depth = self.help_depth.get();
        if depth >= MAX_HELP_DEPTH {
            let _blocked = self.registry.enter_blocked();
            return latch.block_until(deadline);
        }
        self.help_depth.set(depth + 1);
        let _restore = RestoreDepth(&self.help_depth, depth);
        // A waiting worker is not blocked in its task: it helps or parks.
        // The outer task's mark comes back on return.
        let busy = &self.counters().in_task;
        let outer_busy = busy.swap(0, Relaxed);
        let _restore_busy = RestoreBusy(busy, outer_busy);
        let registry = &*self.registry;
        let mut searching = false;
        let done = loop {
            if latch.probe() {
                break true;
            }
            if let Some(job) = self.find_task(true) {
                if searching {
                    searching = false;
                    self.stop_searching();
                }
                self.execute(job);
                continue;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => break latch.probe(),
                },
            };
            latch.register_sleeper(&self.registry, self.index);
            registry.sleep.park(self.index, searching, timeout, || latch.probe() || registry.has_visible_work());
            latch.unregister_sleeper(self.index);
            searching = true;
        };
        if searching {
            self.stop_searching();
        }
        done
    }
}

struct RestoreBusy<'a>(&'a std::sync::atomic::AtomicU64, u64);

impl Drop for RestoreBusy<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, Relaxed);
    }
}

struct RestoreDepth<'a>(&'a Cell<u32>, u32);

impl Drop for RestoreDepth<'_> {
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}

/// The index of the calling thread in its pool, if it is a pool worker.
pub fn current_index() -> Option<usize> {
    WorkerThread::current().map(|w| w.index)
}

/// Waits for `latch` on any thread: helping on a worker of `registry`,
/// blocking elsewhere.
pub(crate) fn wait_on(registry: &Registry, latch: &dyn Awaitable, deadline: Option<Instant>) -> bool {
    match registry.current_worker() {
        Some(worker) => worker.wait_until(latch, deadline),
        None => latch.block_until(deadline),
    }
}
