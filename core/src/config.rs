//! Pool configuration: the builder, the policies, and validation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigError;
use crate::pool::Pool;

/// How the pool adds threads beyond `min_threads`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Growth {
    /// Keep `min_threads`; add threads for declared blocking regions and for
    /// detected starvation, up to `max_threads`; retire extras after
    /// `keep_alive`. The right default for almost everyone.
    #[default]
    Adaptive,
    /// Seed 003's policy: an idle thread takes a task; with none idle and
    /// fewer than `max_threads`, start a thread; at max, queue; queue full,
    /// reject. For bursty blocking work where latency beats thread count.
    ScaleFirst,
    /// Java's `ThreadPoolExecutor`: queue first, grow only when the bounded
    /// queue is full. Needs a `queue_capacity`.
    QueueFirst,
    /// Exactly `min_threads`, never more (`max_threads` is ignored).
    Fixed,
    /// Keep `min_threads` runnable and add a thread only to replace one
    /// blocked in a declared blocking region (or, when no thread at all is
    /// left to run queued work, one parked in a wait), up to `max_threads`;
    /// never for throughput (no starvation monitor). A lent thread retires
    /// as soon as it finds no queued work while the threads outside
    /// blocking regions are more than `min_threads` (no `keep_alive` wait).
    /// The Python package's default, which bounds the calls executing at
    /// once itself: nested waits cannot deadlock there, and threads come
    /// only from waits.
    Compensate,
}

/// What a submission does when the bounded queue is full and the pool
/// cannot grow.
///
/// A submission from one of the pool's own threads never waits for room:
/// with `Block` or `BlockFor` it is refused at once (`Rejected`), because
/// the room it would wait for may be the room only its own thread can make.
/// `CallerRuns` and `DiscardOldest` act the same from any thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reject {
    /// Refuse: the submit call fails with `Rejected` and hands the task back.
    #[default]
    Abort,
    /// Run the task on the submitting thread, now.
    CallerRuns,
    /// Wait for room, as long as it takes (a pool thread: refused at once).
    Block,
    /// Wait for room at most this long, then refuse like `Abort` (a pool
    /// thread: refused at once).
    BlockFor(Duration),
    /// Evict the oldest queued *user task* of the global queue (its cancel
    /// path runs: exactly one task is cancelled per eviction) to make room.
    /// Scope tasks, serial-queue turns and join halves are never evicted;
    /// with no user task to evict, the submission is refused like `Abort`.
    DiscardOldest,
}

pub(crate) type ThreadHook = Arc<dyn Fn(usize) + Send + Sync + 'static>;

/// Hard upper bound on threads, to catch absurd configurations.
pub const MAX_THREADS_LIMIT: usize = 32_768;
/// Default `max_threads` floor.
pub const DEFAULT_MAX_THREADS: usize = 256;
/// Default idle time before a thread above `min_threads` retires.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Default debounce spin cap.
pub const DEFAULT_SPIN_MAX_US: u32 = 500;
/// The smallest stack [`Builder::stack_size`] accepts (64 KiB): less leaves a
/// task too little room once the thread's own frames are on it. The C
/// library's `WSPOOL_STACK_SIZE_MIN` and the Python package use the same value.
pub const STACK_SIZE_MIN: usize = 64 * 1024;
/// Default starvation-monitor interval.
pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_millis(5);

/// Builds a [`Pool`]. Every setter is optional; `build` validates.
#[derive(Clone)]
pub struct Builder {
    pub(crate) name: String,
    pub(crate) min_threads: usize,
    pub(crate) max_threads: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) growth: Growth,
    pub(crate) reject: Reject,
    pub(crate) keep_alive: Duration,
    pub(crate) spin_max_us: u32,
    pub(crate) monitor_interval: Duration,
    pub(crate) stack_size: Option<usize>,
    pub(crate) cpu_parallelism: usize,
    pub(crate) monitor_hint: bool,
    /// Start the monitor thread (always, but for the unit tests that drive
    /// `watch_stall` on their own clock and must be its only caller).
    pub(crate) monitor_thread: bool,
    pub(crate) thread_nice: u32,
    /// What `thread_nice` comes to for this pool's threads (set by `validate`).
    pub(crate) nice_target: Option<i32>,
    pub(crate) on_thread_start: Option<ThreadHook>,
    pub(crate) on_thread_stop: Option<ThreadHook>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            name: "wspool".to_owned(),
            min_threads: 0,
            max_threads: 0,
            queue_capacity: 0,
            growth: Growth::Adaptive,
            reject: Reject::Abort,
            keep_alive: DEFAULT_KEEP_ALIVE,
            spin_max_us: DEFAULT_SPIN_MAX_US,
            monitor_interval: DEFAULT_MONITOR_INTERVAL,
            stack_size: None,
            cpu_parallelism: 0,
            monitor_hint: true,
            monitor_thread: true,
            thread_nice: 0,
            nice_target: None,
            on_thread_start: None,
            on_thread_stop: None,
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("min_threads", &self.min_threads)
            .field("max_threads", &self.max_threads)
            .field("queue_capacity", &self.queue_capacity)
            .field("growth", &self.growth)
            .field("reject", &self.reject)
            .field("keep_alive", &self.keep_alive)
            .field("spin_max_us", &self.spin_max_us)
            .field("monitor_interval", &self.monitor_interval)
            .field("thread_nice", &self.thread_nice)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Thread-name prefix; threads are named `<name>-<index>`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    /// Threads kept alive at all times. 0 = available parallelism (never below 2).
    pub fn min_threads(mut self, n: usize) -> Self {
        self.min_threads = n;
        self
    }
    /// Upper bound on threads. 0 = `max(min_threads, 256)`.
    pub fn max_threads(mut self, n: usize) -> Self {
        self.max_threads = n;
        self
    }
    /// Tasks allowed to wait in the pool; 0 = unbounded (never rejects).
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n;
        self
    }
    /// Growth policy.
    pub fn growth(mut self, g: Growth) -> Self {
        self.growth = g;
        self
    }
    /// Reject policy for a full queue.
    pub fn reject(mut self, r: Reject) -> Self {
        self.reject = r;
        self
    }
    /// Idle time after which threads above `min_threads` retire.
    pub fn keep_alive(mut self, d: Duration) -> Self {
        self.keep_alive = d;
        self
    }
    /// Debounce spin cap in microseconds; 0 disables spinning.
    pub fn spin_max_us(mut self, us: u32) -> Self {
        self.spin_max_us = us;
        self
    }
    /// How often the starvation monitor checks for progress while the pool
    /// is busy (it sleeps while the pool is idle).
    pub fn monitor_interval(mut self, d: Duration) -> Self {
        self.monitor_interval = d;
        self
    }
    /// How many cores the pool's work can use at most (0: available
    /// parallelism). The starvation monitor never adds threads while the
    /// pool's own workers already use this much CPU (measured on their
    /// per-thread CPU clocks; other pools and threads do not count). A
    /// Python binding sets 1: code behind a GIL never fills more than one
    /// core, and threads waiting for the GIL must not look like starvation.
    pub fn cpu_parallelism(mut self, cores: usize) -> Self {
        self.cpu_parallelism = cores;
        self
    }
    /// Whether the starvation monitor reads its workers' CPU clocks (the
    /// hint that tells a blocked worker from a computing one; default true,
    /// and always false where the platform has no per-thread CPU clocks).
    /// Off, the monitor runs its portable rule alone (stalls and
    /// throughput probes; see `docs/growth.md`). For tests of that path.
    #[doc(hidden)]
    pub fn monitor_kernel_hint(mut self, on: bool) -> Self {
        self.monitor_hint = on;
        self
    }
    /// No monitor thread: the test calling this is the only observer.
    #[cfg(test)]
    pub(crate) fn without_monitor_thread(mut self) -> Self {
        self.monitor_thread = false;
        self
    }
    /// Stack size of worker threads (default: the platform's). Below
    /// [`STACK_SIZE_MIN`] `build` returns a [`ConfigError`].
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }
    /// Runs every thread of the pool (workers, threads lent to blocking
    /// regions, the starvation monitor) `steps` nicer than the thread that
    /// builds the pool, at most 19 (0, the default: the same). For a pool
    /// that shares its cores with an event loop: the scheduler then lets the
    /// loop preempt CPU-bound tasks on every wake-up, so the loop keeps
    /// answering (and refusing) requests while the pool is saturated; the
    /// pool gets the CPU the loop leaves. Linux only, where nice is per
    /// thread and raising it needs no privilege; elsewhere it is accepted
    /// and does nothing. See `docs/embedding.md`.
    pub fn thread_nice(mut self, steps: u32) -> Self {
        self.thread_nice = steps;
        self
    }
    /// Runs on each new worker thread before its first task, with its index.
    pub fn on_thread_start(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.on_thread_start = Some(Arc::new(f));
        self
    }
    /// Runs on each worker thread as it exits, with its index.
    pub fn on_thread_stop(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.on_thread_stop = Some(Arc::new(f));
        self
    }

    /// Validates the configuration and starts the pool's threads.
    pub fn build(self) -> Result<Pool, ConfigError> {
        let config = self.validate()?;
        Pool::start(config)
    }

    pub(crate) fn validate(mut self) -> Result<Builder, ConfigError> {
        if self.name.contains('\0') {
            return Err(ConfigError::new("name contains a NUL byte"));
        }
        if self.min_threads == 0 {
            self.min_threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        }
        if self.cpu_parallelism == 0 {
            self.cpu_parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        }
        if self.min_threads > MAX_THREADS_LIMIT {
            return Err(ConfigError::new(format!("min_threads {} exceeds {MAX_THREADS_LIMIT}", self.min_threads)));
        }
        if self.growth == Growth::Fixed {
            self.max_threads = self.min_threads;
        } else if self.max_threads == 0 {
            self.max_threads = self.min_threads.max(DEFAULT_MAX_THREADS);
        }
        if self.max_threads < self.min_threads {
            return Err(ConfigError::new(format!(
                "max_threads ({}) is below min_threads ({})",
                self.max_threads, self.min_threads
            )));
        }
        if self.max_threads > MAX_THREADS_LIMIT {
            return Err(ConfigError::new(format!("max_threads {} exceeds {MAX_THREADS_LIMIT}", self.max_threads)));
        }
        if self.growth == Growth::QueueFirst && self.queue_capacity == 0 {
            return Err(ConfigError::new("QueueFirst grows only when the queue is full: it needs a queue_capacity"));
        }
        if self.keep_alive.is_zero() {
            return Err(ConfigError::new("keep_alive must be positive"));
        }
        if self.spin_max_us > 100_000 {
            return Err(ConfigError::new("spin_max_us above 100000 (0.1 s) is never useful"));
        }
        if self.thread_nice > 19 {
            return Err(ConfigError::new(format!(
                "thread_nice {} is above 19, the largest step between two nice values",
                self.thread_nice
            )));
        }
        self.nice_target = crate::nice::target(self.thread_nice);
        if self.monitor_interval < Duration::from_millis(1) || self.monitor_interval > Duration::from_secs(10) {
            return Err(ConfigError::new("monitor_interval must be between 1 ms and 10 s"));
        }
        if let Some(n) = self.stack_size
            && n < STACK_SIZE_MIN
        {
            return Err(ConfigError::new(format!(
                "stack_size {n} is below the minimum of {STACK_SIZE_MIN} bytes (64 KiB)"
            )));
        }
        if let Reject::BlockFor(d) = self.reject
            && d.is_zero()
        {
            return Err(ConfigError::new("Reject::BlockFor needs a positive timeout (use Abort to never wait)"));
        }
        Ok(self)
    }

    /// Policies that need an exact count of waiting tasks.
    pub(crate) fn tracks_queue(&self) -> bool {
        self.queue_capacity > 0 || matches!(self.growth, Growth::ScaleFirst | Growth::QueueFirst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_sane() {
        let b = Builder::default().validate().unwrap();
        assert!(b.min_threads >= 2);
        assert!(b.max_threads >= 256);
        assert_eq!(b.queue_capacity, 0);
    }

    #[test]
    fn bad_values_are_refused_with_a_message() {
        let e = Builder::default().min_threads(8).max_threads(4).validate().unwrap_err();
        assert!(e.to_string().contains("below min_threads"), "{e}");
        assert!(Builder::default().growth(Growth::QueueFirst).validate().is_err());
        assert!(Builder::default().keep_alive(Duration::ZERO).validate().is_err());
        assert!(Builder::default().name("a\0b").validate().is_err());
        assert!(Builder::default().max_threads(MAX_THREADS_LIMIT + 1).validate().is_err());
        assert!(Builder::default().reject(Reject::BlockFor(Duration::ZERO)).validate().is_err());
    }

    #[test]
    fn fixed_pins_max_to_min() {
        let b = Builder::default().min_threads(3).max_threads(50).growth(Growth::Fixed).validate().unwrap();
        assert_eq!(b.max_threads, 3);
    }
}
