//! Adding and retiring threads: thread creation, blocking regions and their
//! compensation, and the starvation monitor (`monitor.rs`, with what it
//! samples in `sample.rs`).
//!
//! Invariants:
//! - `threads` counts reserved-or-running workers and never exceeds
//!   `max_threads`, nor drops below `min_threads` through retirement (both
//!   enforced by CAS loops on `threads` alone).
//! - `blocked` counts pool threads inside a blocking region (or a wait past
//!   the help-depth cap). Entering one while work is visible makes sure some
//!   other thread will run it: a parked worker is woken, or, when fewer than
//!   `min_threads` threads remain runnable, a thread is started (up to max;
//!   see `compensate_blocked`). A submission that finds nobody to wake while
//!   `blocked > 0` does the same, so work that arrives after the region
//!   began is covered too.
//! - The monitor adds threads only while queued work exists and no thread is
//!   idle, and takes back (through `retire_requested`) those whose probe did
//!   not raise the pool's throughput; see `monitor.rs`.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

pub(crate) mod compensation;
mod monitor;
#[cfg(test)]
mod retire_tests;
mod sample;
#[cfg(test)]
mod sim;

/// Only `priority.rs`'s Linux nice values need a thread id outside `growth`.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) use sample::current_tid;

pub(crate) use compensation::Compensation;
pub(crate) use monitor::Monitor;
pub(crate) use sample::{DECLARED, IN_TASK};

use crate::config::Growth;
use crate::registry::{CANCELLING, LocalQueues, Registry};
use crate::sync::lock;
use crate::worker::WorkerThread;

impl Registry {
    /// Starts one worker thread if below `max_threads`. `origin` says why
    /// (`dump::ORIGIN_*`: snapshots show threads injected by the starvation
    /// monitor and threads lent for blocked or waiting ones). Never panics: a failed
    /// `std::thread::spawn` is counted and the pool goes on as it was.
    pub(crate) fn spawn_worker(self: &Arc<Self>, origin: u8) -> bool {
        self.try_spawn_worker(origin).is_ok()
    }

    /// [`Registry::spawn_worker`] that says why no thread started:
    /// `Err(None)` at `max_threads` (or once the pool stopped), `Err(Some(e))`
    /// when the operating system refused the thread.
    pub(crate) fn try_spawn_worker(self: &Arc<Self>, origin: u8) -> Result<(), Option<std::io::Error>> {
        let injected = origin == crate::dump::ORIGIN_INJECTED;
        if self.state() == CANCELLING {
            return Err(None);
        }
        let max = self.config.max_threads;
        let reserved = self.threads.fetch_update(SeqCst, SeqCst, |n| (n < max).then_some(n + 1));
        let Ok(before) = reserved else { return Err(None) };
        let Some(index) = self.claim_slot() else {
            self.threads.fetch_sub(1, SeqCst);
            return Err(None);
        };
        let slot = &self.slots[index];
        let Some(queues) = lock(&slot.queues).take() else {
            // Cannot happen: an unoccupied slot always holds its queues.
            slot.occupied.store(false, SeqCst);
            self.threads.fetch_sub(1, SeqCst);
            return Err(None);
        };
        self.high_water.fetch_max(index + 1, SeqCst);
        self.running_threads.fetch_add(1, SeqCst);
        self.starting.fetch_add(1, SeqCst);
        let registry = self.clone();
        let mut builder = std::thread::Builder::new().name(format!("{}-{}", self.config.name, index));
        if let Some(size) = self.config.stack_size {
            builder = builder.stack_size(size);
        }
        // The queues travel to the thread; on a spawn failure they come back.
        let carrier = Arc::new(Mutex::new(Some(queues)));
        let carried = carrier.clone();
        let spawned = crate::nice::spawn_at(self.config.nice_target, builder, move || {
            let queues = lock(&carried).take();
            drop(carried);
            if let Some(queues) = queues {
                // Before any task: the monitor reads this clock only then.
                let counters = &registry.slots[index].counters;
                counters.tid.store(sample::current_tid(), Relaxed);
                counters.origin.store(origin, Relaxed);
                counters.cpu_clock.store(sample::current_cpu_clock(), Relaxed);
                WorkerThread::run(registry, index, queues, injected);
            }
        });
        match spawned {
            Ok(handle) => {
                let previous = lock(&slot.join).replace(handle);
                if let Some(previous) = previous {
                    // The slot's previous thread has released it: it is done.
                    let _ = previous.join();
                }
                self.counters.threads_started.fetch_add(1, Relaxed);
                self.counters.peak_threads.fetch_max(before + 1, Relaxed);
                if injected {
                    self.counters.starvation_injections.fetch_add(1, Relaxed);
                }
                self.monitor.kick();
                Ok(())
            }
            Err(e) => {
                if let Some(queues) = lock(&carrier).take() {
                    *lock(&slot.queues) = Some(queues);
                }
                slot.occupied.store(false, SeqCst);
                self.threads.fetch_sub(1, SeqCst);
                self.starting.fetch_sub(1, SeqCst);
                if self.running_threads.fetch_sub(1, SeqCst) == 1 {
                    self.exited.notify();
                }
                self.counters.spawn_failures.fetch_add(1, Relaxed);
                Err(Some(e))
            }
        }
    }

    fn claim_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.occupied.compare_exchange(false, true, SeqCst, SeqCst).is_ok())
    }

    /// A worker's last act: leftover jobs go to the injector (none are lost),
    /// the queues go back to its slot with only their idle rings, and the
    /// slot is freed.
    pub(crate) fn release_slot(self: Arc<Self>, index: usize, queues: LocalQueues) {
        let mut moved = false;
        while let Some(job) = queues.inbox.pop().or_else(|| queues.deque.pop()) {
            self.injector.push(job);
            moved = true;
        }
        // Here rather than in the main loop: a thread retires straight
        // after a task (a lent `Compensate` thread, one the monitor takes
        // back) or leaves a closing pool without passing the quiescent
        // point where a parking worker gives back what a burst grew, and a
        // slot nobody occupies again would keep it for the pool's life
        // (190 MiB after a 2 M-task burst). Every exit passes here, with
        // the queues drained. Still the owner: thieves are waited for.
        queues.deque.release_memory_waiting();
        queues.inbox.release_memory_waiting();
        let slot = &self.slots[index];
        slot.counters.cpu_clock.store(0, Relaxed);
        *lock(&slot.queues) = Some(queues);
        slot.occupied.store(false, SeqCst);
        self.counters.threads_retired.fetch_add(1, Relaxed);
        if moved {
            self.wake_for_new_work();
        }
        if self.running_threads.fetch_sub(1, SeqCst) == 1 {
            if self.state() != crate::registry::RUNNING {
                // The last worker of a closing pool: nothing is left to watch
                // (also when nobody waits for the exit, e.g. a pool dropped
                // from its own task).
                self.monitor.stop();
            }
            self.exited.notify();
        }
    }

    /// An idle worker past keep-alive asks to retire; refused at `min_threads`.
    pub(crate) fn try_retire(&self) -> bool {
        let min = self.config.min_threads;
        self.threads.fetch_update(SeqCst, SeqCst, |n| (n > min).then(|| n - 1)).is_ok()
    }

    /// A worker between two tasks asks whether the monitor wants it gone
    /// (a probe that did not pay); true when it is retired and must exit
    /// (`threads` is already decremented).
    #[inline]
    pub(crate) fn retire_requested(&self) -> bool {
        self.monitor.retire_pending() && self.monitor.claim_retirement() && self.try_retire()
    }

    /// `Growth::Compensate`: called by a worker between two tasks (or about
    /// to park); true when it is a lent thread no blocking region needs any
    /// more and finds no queued work, and is retired (`threads` already
    /// decremented), so it must exit. While work is queued it keeps taking
    /// it (a burst of blocking tasks keeps its threads instead of retiring
    /// and starting one per task). One load of each counter when there is
    /// nothing to retire.
    #[inline]
    pub(crate) fn retire_if_surplus(&self) -> bool {
        self.config.growth == Growth::Compensate && self.retire_surplus()
    }

    #[cold]
    fn retire_surplus(&self) -> bool {
        let min = self.config.min_threads;
        // Surplus: after this thread leaves, `min_threads` stay outside
        // blocking regions, and one at least is not parked in a wait.
        let surplus = |n: usize, blocked: usize, waiting: usize| n > min + blocked && n - 1 > blocked + waiting;
        let (blocked, waiting) = (self.compensation.blocked(), self.compensation.waiting());
        if !surplus(self.threads.load(SeqCst), blocked, waiting) || self.has_visible_work() {
            return false;
        }
        if self.threads.fetch_update(SeqCst, SeqCst, |n| surplus(n, blocked, waiting).then(|| n - 1)).is_err() {
            return false;
        }
        // A thread may have entered a region between the load of `blocked`
        // and the decrement, and read the old `threads` in
        // `compensate_blocked`: it lent nobody, counting on this thread.
        // Both sides write their own counter (SeqCst RMW) and then read the
        // other's (SeqCst), so in the single order of SeqCst operations one
        // of them sees the other: either it saw the decrement and lends, or
        // this re-check sees its `blocked` and this thread stays. (Both may
        // see each other: one extra thread, retired at its next look.)
        let n = self.threads.load(SeqCst);
        let (blocked, waiting) = (self.compensation.blocked(), self.compensation.waiting());
        if !surplus(n + 1, blocked, waiting) {
            let max = self.config.max_threads;
            // Undone under `max_threads`: a thread started meanwhile in the
            // freed count serves the region instead.
            if self.threads.fetch_update(SeqCst, SeqCst, |n| (n < max).then_some(n + 1)).is_ok() {
                return false;
            }
        }
        true
    }

    /// The calling pool thread starts blocking (see the module invariants).
    /// Its worker is marked `DECLARED` meanwhile, so the monitor does not
    /// count it a second time as blocked inside a task.
    pub(crate) fn enter_blocked(self: &Arc<Self>) -> BlockedGuard {
        let mark = self.current_worker().map(|w| (w.index, w.counters().in_task.swap(sample::DECLARED, Relaxed)));
        self.compensation.enter(|| self.has_visible_work(), || self.sleep.notify_one(), || self.compensate_blocked());
        BlockedGuard { registry: self.clone(), mark }
    }

    /// The calling pool thread parks inside a wait with nothing it may run
    /// (see `wait.rs`): counted as waiting until the guard drops.
    /// Its worker's `activity` says `PARKED` meanwhile (snapshots: "parked:
    /// counted for lending").
    pub(crate) fn enter_waiting(self: &Arc<Self>) -> WaitingGuard<'_> {
        let mark = self.current_worker().map(|w| (w.index, w.counters().activity.swap(crate::dump::PARKED, Relaxed)));
        self.compensation.enter_wait(
            || self.has_visible_work(),
            || self.sleep.notify_one(),
            || self.compensate_blocked(),
        );
        WaitingGuard { registry: self, mark }
    }

    /// Lends threads so that at least `min_threads` stay runnable while
    /// others block in declared regions: one replacement per blocked thread,
    /// started at once. A burst of blocking tasks therefore grows the pool
    /// as fast as threads can start (each new thread that blocks lends the
    /// next), and CPU-bound work queued behind a few blocked threads gets
    /// exactly the capacity it lost, not more. Threads parked in waits are
    /// compensated only when no thread at all is left to run queued work:
    /// a waiter usually waits for work another thread is running, and a
    /// thread lent for it would just compete with that one. A draining pool
    /// still lends (its queued work must finish); a cancelling one does not.
    #[cold]
    pub(crate) fn compensate_blocked(self: &Arc<Self>) {
        if self.config.growth == Growth::Fixed || self.state() == CANCELLING {
            return;
        }
        let threads = self.threads.load(SeqCst);
        let blocked = self.compensation.blocked();
        let stuck = blocked + self.compensation.waiting();
        let short_for_blocked = self.config.min_threads.saturating_sub(threads.saturating_sub(blocked));
        let short_for_waiters = usize::from(stuck >= threads);
        for _ in 0..short_for_blocked.max(short_for_waiters).min(2) {
            if !self.spawn_worker(crate::dump::ORIGIN_LENT) {
                break;
            }
        }
    }
}

/// Ends a waiting period when dropped.
pub(crate) struct WaitingGuard<'a> {
    registry: &'a Registry,
    /// The worker's slot and its `activity` before the wait parked.
    mark: Option<(usize, u8)>,
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.registry.compensation.leave_wait();
        if let Some((index, outer)) = self.mark {
            self.registry.slots[index].counters.activity.store(outer, Relaxed);
        }
    }
}

/// Ends a blocked period when dropped.
pub(crate) struct BlockedGuard {
    registry: Arc<Registry>,
    /// The worker's slot and its `in_task` mark before the region.
    mark: Option<(usize, u64)>,
}

impl Drop for BlockedGuard {
    fn drop(&mut self) {
        self.registry.compensation.leave();
        let registry = &self.registry;
        if registry.config.growth == Growth::Compensate
            && registry.threads.load(SeqCst) > registry.config.min_threads + registry.compensation.blocked()
        {
            // A thread lent for this region may be parked idle: woken, it
            // finds itself surplus and retires now rather than after
            // `keep_alive` (a busy one retires after its task).
            registry.sleep.notify_one();
        }
        if let Some((index, outer)) = self.mark {
            self.registry.slots[index].counters.in_task.store(outer, Relaxed);
        }
    }
}

thread_local! {
    static BLOCKING: std::cell::RefCell<Vec<BlockedGuard>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks the start of a blocking region on the calling thread (a pool
/// worker; elsewhere this does nothing). While inside, the pool treats the
/// thread as unavailable and lends another one if work is waiting. Regions
/// nest; each `blocking_begin` needs one [`blocking_end`].
pub fn blocking_begin() {
    let Some(worker) = WorkerThread::current() else {
        return;
    };
    let depth = worker.blocking_depth.get();
    worker.blocking_depth.set(depth + 1);
    if depth == 0 {
        // Work queued on this thread's deque must not wait behind the
        // blocking call: hand it to the others first.
        worker.offload_local_work();
        let guard = worker.registry.enter_blocked();
        BLOCKING.with(|b| b.borrow_mut().push(guard));
    }
}

/// A task returned with `depth` regions still open: closes them, and counts
/// it (`Stats::unbalanced_blocking`), so the thread does not stay counted
/// as blocked for the rest of its life.
pub(crate) fn close_unbalanced_blocking(worker: &WorkerThread, depth: u32) {
    worker.blocking_depth.set(depth);
    if depth == 0 {
        worker.set_stalled(false);
        BLOCKING.with(|b| drop(b.borrow_mut().pop()));
    }
    worker.registry.counters.unbalanced_blocking.fetch_add(1, Relaxed);
}

/// Ends a blocking region. An unbalanced call is ignored.
pub fn blocking_end() {
    let Some(worker) = WorkerThread::current() else {
        return;
    };
    let depth = worker.blocking_depth.get();
    if depth == 0 {
        return;
    }
    worker.blocking_depth.set(depth - 1);
    if depth == 1 {
        worker.set_stalled(false);
        BLOCKING.with(|b| drop(b.borrow_mut().pop()));
    }
}

/// Runs `f` as a blocking region: use it around code that waits for
/// something other than the pool (I/O, sleeps, foreign locks). On a pool
/// thread the pool lends a compensating thread at once if work is waiting;
/// off the pool it just calls `f`.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            blocking_end();
        }
    }
    blocking_begin();
    let _end = End;
    f()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use crate::worker::WorkerThread;

    /// The monitor must not count a worker in a declared blocking region a
    /// second time (issue 11, defect 2): inside `blocking`, and only there,
    /// the worker's slot says `DECLARED`, which the sampler passes over
    /// (`growth::sim::tests::declared_blocking_is_counted_once`).
    #[test]
    fn a_blocking_region_marks_its_worker_declared() {
        let pool = crate::Pool::builder().min_threads(1).build().unwrap();
        let mark = || WorkerThread::current().map(|w| w.counters().in_task.load(Relaxed));
        let (inside, outside) = pool.submit(move || (crate::blocking(mark), mark())).unwrap().wait().unwrap();
        assert_eq!((inside, outside), (Some(super::sample::DECLARED), Some(super::sample::IN_TASK)));
    }
}
