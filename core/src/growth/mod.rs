//! Adding and retiring threads: thread creation, blocking regions and their
//! compensation, and the starvation monitor.
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
//! - The monitor adds threads only while queued work exists, no thread is
//!   idle, and the backlog is not shrinking across an interval.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;


pub(crate) mod compensation;

pub(crate) use compensation::Compensation;

use crate::config::Growth;
use crate::registry::{CANCELLING, LocalQueues, RUNNING, Registry};
use crate::sync::lock;
use crate::worker::WorkerThread;

impl Registry {
    /// Starts one worker thread if below `max_threads`. `injected` marks a
    /// thread added by the starvation monitor. Never panics: a failed
    /// `std::thread::spawn` is counted and the pool goes on as it was.
    pub(crate) fn spawn_worker(self: &Arc<Self>, injected: bool) -> bool {
        self.try_spawn_worker(injected).is_ok()
    }

    /// [`Registry::spawn_worker`] that says why no thread started:
    /// `Err(None)` at `max_threads` (or once the pool stopped), `Err(Some(e))`
    /// when the operating system refused the thread.
    pub(crate) fn try_spawn_worker(self: &Arc<Self>, injected: bool) -> Result<(), Option<std::io::Error>> {
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
        let spawned = builder.spawn(move || {
            let queues = lock(&carried).take();
            drop(carried);
            if let Some(queues) = queues {
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

    /// Workers inside a task whose thread is blocked in the kernel right
    /// now (not running, not waiting for a CPU). Sampled once per interval,
    /// the count estimates how many workers' worth of capacity blocking
    /// takes away: a worker blocked a fraction f of the time is caught with
    /// probability f.
    fn blocked_in_task(&self) -> usize {
        let n = self.high_water.load(SeqCst);
        self.slots[..n]
            .iter()
            .filter(|slot| slot.counters.in_task.load(Relaxed) != 0 && thread_blocked(slot.counters.tid.load(Relaxed)))
            .count()
    }

    fn claim_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.occupied.compare_exchange(false, true, SeqCst, SeqCst).is_ok())
    }

    /// A worker's last act: leftover jobs go to the injector (none are lost),
    /// the queues go back to its slot, and the slot is freed.
    pub(crate) fn release_slot(self: Arc<Self>, index: usize, queues: LocalQueues) {
        let mut moved = false;
        while let Some(job) = queues.inbox.pop().or_else(|| queues.deque.pop()) {
            self.injector.push(job);
            moved = true;
        }
        let slot = &self.slots[index];
        *lock(&slot.queues) = Some(queues);
        slot.occupied.store(false, SeqCst);
        self.counters.threads_retired.fetch_add(1, Relaxed);
        if moved {
            self.wake_for_new_work();
        }
        if self.running_threads.fetch_sub(1, SeqCst) == 1 {
            self.exited.notify();
        }
    }

    /// An idle worker past keep-alive asks to retire; refused at `min_threads`.
    pub(crate) fn try_retire(&self) -> bool {
        let min = self.config.min_threads;
        self.threads.fetch_update(SeqCst, SeqCst, |n| (n > min).then(|| n - 1)).is_ok()
    }

    /// The calling pool thread starts blocking (see the module invariants).
    pub(crate) fn enter_blocked(self: &Arc<Self>) -> BlockedGuard {
        self.compensation.enter(|| self.has_visible_work(), || self.sleep.notify_one(), || self.compensate_blocked());
        BlockedGuard { registry: self.clone() }
    }

    /// The calling pool thread parks inside a wait with nothing it may run
    /// (see `wait.rs`): counted as waiting until the guard drops.
    pub(crate) fn enter_waiting(self: &Arc<Self>) -> WaitingGuard<'_> {
        self.compensation.enter_wait(
            || self.has_visible_work(),
            || self.sleep.notify_one(),
            || self.compensate_blocked(),
        );
        WaitingGuard { registry: self }
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
            if !self.spawn_worker(false) {
                break;
            }
        }
    }
}

/// Ends a waiting period when dropped.
pub(crate) struct WaitingGuard<'a> {
    registry: &'a Registry,
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.registry.compensation.leave_wait();
    }
}

/// Ends a blocked period when dropped.
pub(crate) struct BlockedGuard {
    registry: Arc<Registry>,
}

impl Drop for BlockedGuard {
    fn drop(&mut self) {
        self.registry.compensation.leave();
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

/// The starvation monitor: one thread per Adaptive pool, started with it.
///
/// Every `monitor_interval` (default 5 ms) while the pool is busy it counts
/// the workers that are inside a task and whose thread is blocked in the
/// kernel right now (Linux: `/proc/self/task/<tid>/stat` says sleeping, not
/// running nor waiting for a CPU; elsewhere every worker inside a task
/// counts). Those workers hold a thread without using it. The pool is
/// **starving** when work is queued, no worker is idle, fewer than
/// `min_threads` workers are neither blocked so nor in a declared blocking
/// region, and the process is not already using `cpu_parallelism` cores. It
/// then injects `min(queued, threads)` threads (at least one): at most
/// doubling per interval, fast enough to absorb a burst of blocked tasks in
/// a handful of intervals, and bounded by the backlog, so a trickle of
/// blocking work adds a thread or two, not dozens. Computing threads are
/// never counted, whether they run or wait for a CPU on a busy machine, so
/// floods and CPU-bound tasks never grow the pool. Extras retire after
/// `keep_alive` once idle. When every worker is parked and nothing is
/// queued the monitor sleeps until the next wake-up of a worker, so an idle
/// pool wakes nobody.
#[derive(Default)]
pub(crate) struct Monitor {
    state: Mutex<MonitorState>,
    cv: Condvar,
    /// The monitor is (about to be) asleep until kicked; see `pause`.
    idle: std::sync::atomic::AtomicBool,
    handle: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct MonitorState {
    kicked: bool,
    stopped: bool,
}

impl Monitor {
    pub(crate) fn start(registry: &Arc<Registry>) -> std::io::Result<()> {
        if registry.config.growth != Growth::Adaptive || registry.config.max_threads <= registry.config.min_threads {
            return Ok(());
        }
        let weak = Arc::downgrade(registry);
        let interval = registry.config.monitor_interval;
        let handle = std::thread::Builder::new()
            .name(format!("{}-monitor", registry.config.name))
            .spawn(move || monitor_loop(weak, interval))?;
        *lock(&registry.monitor.handle) = Some(handle);
        Ok(())
    }

    /// Called after a worker is woken: wakes an idle monitor.
    #[inline]
    pub(crate) fn kick(&self) {
        if self.idle.load(SeqCst) {
            let mut st = lock(&self.state);
            st.kicked = true;
            self.cv.notify_one();
        }
    }

    pub(crate) fn stop(&self) {
        let mut st = lock(&self.state);
        st.stopped = true;
        self.cv.notify_one();
    }

    pub(crate) fn join(&self) {
        let handle = lock(&self.handle).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }

    /// Sleeps for `interval`; or, while `pool_idle()` holds, until kicked.
    /// `idle` is published before `pool_idle` is checked and `kick` reads it
    /// after waking a worker (both SeqCst), so a kick is never missed.
    /// Returns false when stopped.
    fn pause(&self, interval: Duration, pool_idle: impl Fn() -> bool) -> bool {
        let mut st = lock(&self.state);
        self.idle.store(true, SeqCst);
        if pool_idle() {
            while !st.kicked && !st.stopped {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        }
        self.idle.store(false, SeqCst);
        if !st.kicked && !st.stopped {
            st = self.cv.wait_timeout(st, interval).unwrap_or_else(|p| p.into_inner()).0;
        }
        st.kicked = false;
        !st.stopped
    }
}

fn monitor_loop(weak: std::sync::Weak<Registry>, interval: Duration) {
    let cores = match weak.upgrade() {
        Some(registry) => registry.config.cpu_parallelism,
        None => return,
    };
    let mut last_cpu = process_cpu_time();
    let mut last_tick = std::time::Instant::now();
    loop {
        let Some(registry) = weak.upgrade() else { return };
        let pool_idle = || {
            let (_, sleeping) = registry.sleep.counts();
            sleeping >= registry.live_threads() && registry.queued_now() == 0
        };
        if !registry.monitor.pause(interval, pool_idle) || registry.state() != RUNNING {
            return;
        }
        let now = std::time::Instant::now();
        let cpu = process_cpu_time();
        let used = match (cpu, last_cpu) {
            (Some(c), Some(l)) => Some(c.saturating_sub(l)),
            _ => None,
        };
        let elapsed = now.duration_since(last_tick);
        (last_cpu, last_tick) = (cpu, now);
        let queued = registry.queued_now();
        let (searching, sleeping) = registry.sleep.counts();
        if queued == 0 || searching + sleeping > 0 {
            continue;
        }
        let blocked_in_task = registry.blocked_in_task();
        let threads = registry.live_threads();
        let runnable = threads.saturating_sub(blocked_in_task + registry.compensation.blocked());
        let cpu_saturated = used.is_some_and(|u| u.as_secs_f64() >= 0.9 * cores as f64 * elapsed.as_secs_f64());
        if runnable < registry.config.min_threads && !cpu_saturated {
            for _ in 0..queued.min(threads).max(1) {
                if !registry.spawn_worker(true) {
                    break;
                }
            }
        }
    }
}

/// Is thread `tid` of this process blocked (sleeping in the kernel) rather
/// than running or runnable? Read from `/proc/self/task/<tid>/stat`; where
/// that cannot be read, a long task counts as blocked.
#[cfg(target_os = "linux")]
fn thread_blocked(tid: u64) -> bool {
    if tid == 0 {
        return true;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else { return true };
    // "tid (comm) S ...": the state follows the last ')' (comm may hold any byte).
    match text.rfind(')').and_then(|i| text[i + 1..].split_ascii_whitespace().next()) {
        Some(state) => state != "R",
        None => true,
    }
}

#[cfg(not(target_os = "linux"))]
fn thread_blocked(_tid: u64) -> bool {
    true
}

/// The calling thread's kernel id, 0 where there is none to read.
pub(crate) fn current_tid() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        (unsafe { libc::gettid() }) as u64
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// CPU time used by the whole process so far.
#[cfg(unix)]
fn process_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(not(unix))]
fn process_cpu_time() -> Option<Duration> {
    None
}
