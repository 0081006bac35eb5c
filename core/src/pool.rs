//! The public handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Builder;
use crate::error::{BatchError, ConfigError, ShutdownError, SpawnError, SubmitErrorKind};
use crate::group::Group;
use crate::growth::Monitor;
use crate::job::{HeapJob, JobRef};
use crate::join::{join_foreign, join_on_worker};
use crate::priority::Priority;
use crate::registry::Registry;
use crate::scope::{Scope, run_scope};
use crate::serial::SerialQueue;
use crate::stats::Stats;
use crate::task::TaskHandle;

/// How [`Pool::shutdown`] treats work that is queued but not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Run everything already queued (and what it spawns), then stop.
    Drain,
    /// Drop everything no worker has taken yet (each task's cancel path
    /// runs), let running tasks finish, then stop.
    Cancel,
}

/// Where a submission goes. Every submission kind takes the same options:
/// a task may run on a serial queue *and* count toward a group.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpawnOptions<'a> {
    /// Skip the submitting worker's own deque and use the global queue, so
    /// the task is ordered fairly with foreign submissions. (Serial tasks
    /// always take their turn through the global queue.)
    pub global: bool,
    /// Count the task toward this group. It must belong to the same pool,
    /// else the submission fails with `SubmitErrorKind::WrongPool`.
    pub group: Option<&'a Group>,
    /// Run the task on this serial queue (FIFO, one at a time). It must
    /// belong to the same pool, else `SubmitErrorKind::WrongPool`.
    pub serial: Option<&'a SerialQueue>,
    /// A task not started by this instant (monotonic clock) never runs: it
    /// ends as expired ([`TaskState::Expired`](crate::TaskState::Expired),
    /// [`TaskError::Expired`](crate::TaskError::Expired),
    /// [`CqStatus::Expired`](crate::CqStatus::Expired), counted in
    /// `Stats::expired`), its closure dropped unrun with
    /// [`crate::expiring`] true. It is checked where the task would start,
    /// so an expired task costs a worker the pop that finds it; a waiter on
    /// its handle (off the pool, or timed) expires it at the deadline
    /// itself. A deadline already past is accepted and expires.
    pub deadline: Option<Instant>,
    /// Where the task waits relative to other queued work ([`Priority`]:
    /// `High` before, `Low` behind with aging). Applies to submissions from
    /// outside the pool; a pool thread's submission keeps the ordinary
    /// order, and a lane's task takes the lane's priority
    /// ([`Pool::lane_with_priority`]).
    pub priority: Priority,
    /// What the task "is", for snapshots ([`Pool::dump`] shows it on the
    /// thread running, blocking or waiting inside the task): see
    /// [`Label`](crate::Label), meant as a small set of names. A labelled
    /// task takes the out-of-line submission path and is wrapped in
    /// [`with_label`](crate::with_label) (its closure grows by 4 bytes,
    /// which may box it); an unlabelled one pays nothing.
    pub label: Option<crate::Label>,
}

/// A work-stealing thread pool. Cheap to clone; when the last clone is
/// dropped the pool drains its queue and joins its threads (unless that
/// happens on one of its own threads, which then exit on their own).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

/// Owns the shutdown-on-drop; tasks, groups and queues hold the registry
/// directly so they never keep a pool alive.
struct PoolInner {
    registry: Arc<Registry>,
    /// False for a pool thread's own handle ([`Pool::call_handle`]): it
    /// neither keeps the pool running nor shuts it down when dropped.
    owner: bool,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let registry = &self.registry;
        if !self.owner || registry.pid != std::process::id() {
            // A forked child: the parent's threads do not exist here.
            return;
        }
        registry.begin_shutdown(false);
        if registry.current_worker().is_none() {
            registry.wait_for_exit(None);
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.inner.registry.config.name)
            .field("threads", &self.inner.registry.live_threads())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A builder with every default.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A pool with every default.
    pub fn new() -> Result<Pool, ConfigError> {
        Builder::default().build()
    }

    pub(crate) fn start(config: Builder) -> Result<Pool, ConfigError> {
        let min = config.min_threads;
        let registry = Arc::new(Registry::new(config));
        let pool = Pool { inner: Arc::new(PoolInner { registry: registry.clone(), owner: true }) };
        // A pool that cannot start `min_threads` fails here, with the OS's
        // reason, rather than running short from its first task on. The
        // threads already started are stopped when `pool` drops.
        for started in 0..min {
            if let Err(e) = registry.try_spawn_worker(crate::dump::ORIGIN_STARTED) {
                let why = e.map_or_else(|| "no free worker slot".to_owned(), |e| e.to_string());
                return Err(ConfigError::spawn(format!("started {started} of {min} worker threads: {why}")));
            }
        }
        if let Err(e) = Monitor::start(&registry) {
            return Err(ConfigError::spawn(format!("could not start the monitor thread: {e}")));
        }
        Ok(pool)
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// A worker thread's own handle to its pool (kept in its
    /// `WorkerThread`): see [`Pool::call_handle`].
    pub(crate) fn thread_handle(registry: &Arc<Registry>) -> Pool {
        Pool { inner: Arc::new(PoolInner { registry: registry.clone(), owner: false }) }
    }

    /// A handle to this pool for the length of one call, to be dropped with
    /// [`Pool::drop_without_join`] (the C API's entry points that publish
    /// tasks: see there). From one of this pool's own threads it is a clone
    /// of that thread's own handle, whose count no other thread touches:
    /// cloning the shared handle there made every pool thread's submission
    /// two read-modify-writes on one cache line that all of them write
    /// (200 roots submitting 1,000 detached children each through
    /// `wspool_submit` ran at about half the rate of the same loop in Rust,
    /// and at the Rust rate without the clone). A thread's own handle
    /// never shuts the pool down: it is not one of the pool's owners, and
    /// the thread holding it outlives the call. Anywhere else it is
    /// `self.clone()`.
    #[doc(hidden)]
    #[inline]
    pub fn call_handle(&self) -> Pool {
        match self.registry().current_worker() {
            Some(worker) => worker.thread_handle.clone(),
            None => self.clone(),
        }
    }

    /// Runs `f` on the pool, fire and forget. From a pool thread it goes to
    /// that thread's deque (LIFO, stealable); from elsewhere to the global
    /// queue. On refusal the task comes back in the error.
    #[inline]
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_with(SpawnOptions::default(), f)
    }

    /// Like `spawn`, always through the global queue (fairness).
    pub fn spawn_global<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_with(SpawnOptions { global: true, ..SpawnOptions::default() }, f)
    }

    /// `spawn` with options.
    // Inlined so that default options fold to the plain submission: the C
    // API's `wspool_submit` paid a second frame per task for these checks
    // while the compiler kept this out of line (`#[inline]` alone did not
    // change that: 228 instructions per C submission either way, 210 with
    // `#[inline(always)]`; docs/benchmarks.md has the later counts).
    #[inline(always)]
    pub fn spawn_with<F: FnOnce() + Send + 'static>(&self, opts: SpawnOptions<'_>, f: F) -> Result<(), SpawnError<F>> {
        if let Err(kind) = self.check_owner(&opts) {
            return Err(SpawnError::new(kind, f));
        }
        if opts.deadline.is_some() || opts.priority != Priority::Normal || opts.label.is_some() {
            return self.spawn_special(opts, f);
        }
        match (opts.serial, opts.group) {
            (Some(serial), group) => serial.spawn_in(group, None, None, f),
            (None, Some(group)) => group.spawn_inner(f, opts.global),
            (None, None) => self.registry().submit_job(f, opts.global, HeapJob::into_job_ref),
        }
    }

    /// `spawn_with` of a task with a deadline (its job is wrapped to
    /// expire, `deadline.rs`), a priority (`priority.rs`) or a label
    /// (`label.rs`: its closure is wrapped, only once accepted, so a
    /// refusal still hands back the caller's own closure). Out of line:
    /// the plain paths never see it.
    #[inline(never)]
    fn spawn_special<F: FnOnce() + Send + 'static>(&self, opts: SpawnOptions<'_>, f: F) -> Result<(), SpawnError<F>> {
        let registry = self.registry();
        let expiring = |job| match opts.deadline {
            Some(deadline) => crate::deadline::wrap(job, deadline, registry),
            None => job,
        };
        // The job of a task (or a group's bound task): labelled only when
        // asked, so an unlabelled task keeps its own, smaller closure.
        fn heap_job<G: FnOnce() + Send + 'static>(label: Option<crate::Label>, g: G) -> JobRef {
            match label {
                Some(label) => HeapJob::into_job_ref(crate::label::labelled(label, g)),
                None => HeapJob::into_job_ref(g),
            }
        }
        match (opts.serial, opts.group) {
            (Some(serial), group) => serial.spawn_in(group, opts.deadline, opts.label, f),
            (None, Some(group)) => {
                registry.submit_job_at(f, opts.global, opts.priority, |f| expiring(heap_job(opts.label, group.bind(f))))
            }
            (None, None) => {
                registry.submit_job_at(f, opts.global, opts.priority, |f| expiring(heap_job(opts.label, f)))
            }
        }
    }

    /// Runs every task of `tasks` on the pool, fire and forget, like as
    /// many `spawn` calls but with one admission ticket, one counter update
    /// and one wake-up for the whole batch (what that saves per task is in
    /// `docs/benchmarks.md`, "Instruction counts"). Tasks enter the queue in
    /// iteration order, from a pool thread into its own deque, from
    /// elsewhere into the global queue. The iterator is collected before
    /// the pool is touched, so it may do anything, the pool's own calls
    /// included.
    ///
    /// Errors: the batch is accepted in order up to its first refused task
    /// (the pool is shut down, or a bounded queue's reject policy refused
    /// it). [`BatchError::accepted`] tasks were accepted and are treated
    /// like any accepted task; the refused one and all after it come back
    /// unrun in [`BatchError::into_rest`]. With the default unbounded queue
    /// a batch is refused only as a whole, by a shutdown that began before
    /// the call.
    pub fn spawn_batch<I>(&self, tasks: I) -> Result<(), BatchError<I::Item>>
    where
        I: IntoIterator,
        I::Item: FnOnce() + Send + 'static,
    {
        self.spawn_batch_with(SpawnOptions::default(), tasks)
    }

    /// `spawn_batch` with options, applied to every task. With a group or a
    /// serial queue the tasks are submitted one by one (same error rules,
    /// no shared wake-up): their own bookkeeping is per task anyway.
    pub fn spawn_batch_with<I>(&self, opts: SpawnOptions<'_>, tasks: I) -> Result<(), BatchError<I::Item>>
    where
        I: IntoIterator,
        I::Item: FnOnce() + Send + 'static,
    {
        let tasks: Vec<I::Item> = tasks.into_iter().collect();
        if let Err(kind) = self.check_owner(&opts) {
            return Err(BatchError::new(kind, Vec::new(), tasks));
        }
        if opts.group.is_none()
            && opts.serial.is_none()
            && opts.deadline.is_none()
            && opts.priority == Priority::Normal
            && opts.label.is_none()
        {
            let into_job = |f| (HeapJob::into_job_ref(f), ());
            return self.registry().submit_batch(tasks, opts.global, into_job).map(drop);
        }
        let mut tasks = tasks.into_iter();
        let mut accepted = Vec::new();
        while let Some(task) = tasks.next() {
            if let Err(e) = self.spawn_with(opts, task) {
                let kind = e.kind();
                let rest = std::iter::once(e.into_task()).chain(tasks).collect();
                return Err(BatchError::new(kind, accepted, rest));
            }
            accepted.push(());
        }
        Ok(())
    }

    /// `spawn_batch` with a handle per task, like as many `submit` calls:
    /// the handles come back in batch order. On a refusal the accepted
    /// tasks' handles are in the error ([`BatchError::into_parts`]), with
    /// the refused tasks.
    #[allow(clippy::type_complexity)]
    pub fn submit_batch<I, F, T>(&self, tasks: I) -> Result<Vec<TaskHandle<T>>, BatchError<F, TaskHandle<T>>>
    where
        I: IntoIterator<Item = F>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let tasks: Vec<F> = tasks.into_iter().collect();
        let registry = self.registry();
        registry.submit_batch(tasks, false, |f| {
            let (handle, job) = TaskHandle::new(registry, f);
            (job, handle)
        })
    }

    /// Refuses a group or serial queue of another pool: its tasks would run
    /// on, and be counted by, the wrong pool.
    #[inline]
    fn check_owner(&self, opts: &SpawnOptions<'_>) -> Result<(), SubmitErrorKind> {
        let mine = |r: &Arc<Registry>| Arc::ptr_eq(r, self.registry());
        if opts.group.is_some_and(|g| !mine(g.registry())) || opts.serial.is_some_and(|q| !mine(q.registry())) {
            return Err(SubmitErrorKind::WrongPool);
        }
        Ok(())
    }

    /// Runs `f` on the pool and returns a handle to its result.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit_with(SpawnOptions::default(), f)
    }

    /// `submit` with options.
    pub fn submit_with<F, T>(&self, opts: SpawnOptions<'_>, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if let Err(kind) = self.check_owner(&opts) {
            return Err(SpawnError::new(kind, f));
        }
        let registry = self.registry();
        let special = opts.deadline.is_some() || opts.priority != Priority::Normal || opts.label.is_some();
        match (opts.serial, opts.group, special) {
            (Some(serial), group, _) => return serial.submit_in(group, opts.deadline, opts.label, f),
            (None, Some(group), false) => return group.submit_inner(f, opts.global),
            (None, Some(group), true) => {
                let mut handle = None;
                registry.submit_job_at(f, opts.global, opts.priority, |f| {
                    let (h, job) =
                        TaskHandle::labelled(registry, group.bind_handled(f), true, opts.deadline, opts.label);
                    handle = Some(h);
                    job
                })?;
                return Ok(handle.expect("submit_job builds the job when it accepts"));
            }
            (None, None, true) => {
                let mut handle = None;
                registry.submit_job_at(f, opts.global, opts.priority, |f| {
                    let (h, job) = TaskHandle::labelled(registry, f, true, opts.deadline, opts.label);
                    handle = Some(h);
                    job
                })?;
                return Ok(handle.expect("submit_job builds the job when it accepts"));
            }
            (None, None, false) => {}
        }
        let mut handle = None;
        registry.submit_job(f, opts.global, |f| {
            let (h, job) = TaskHandle::new(registry, f);
            handle = Some(h);
            job
        })?;
        Ok(handle.expect("submit_job builds the job when it accepts"))
    }

    /// Runs `a` and `b`, potentially in parallel; returns when both are
    /// done. On a thread of this pool, `b` is offered to thieves without a
    /// heap allocation and `a` runs here; a panic in either is re-raised
    /// after both finished.
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        match self.registry().current_worker() {
            Some(worker) => join_on_worker(worker, a, b),
            None => join_foreign(self.registry(), a, b),
        }
    }

    /// Structured parallelism with borrowing: every task spawned on the scope
    /// finishes before `scope` returns (the caller helps while it waits).
    pub fn scope<'env, F, R>(&self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        run_scope(self.registry(), f)
    }

    /// A new, empty group on this pool.
    pub fn group(&self) -> Group {
        Group::new(self.registry().clone())
    }

    /// A new serial queue on this pool: a lane of 1.
    pub fn serial(&self) -> SerialQueue {
        SerialQueue::new(self.registry().clone(), 1, Priority::Normal)
    }

    /// A new lane on this pool: a serial queue that runs up to `limit` of
    /// its tasks at once (0 is taken as 1). Its tasks start in submission
    /// order; queued ones occupy no worker; one that blocks keeps its place
    /// in the limit; lanes take turns with each other through the global
    /// queue, one task per turn. Submit to it like to a serial queue
    /// ([`SpawnOptions::serial`], [`SerialQueue::spawn`]).
    pub fn lane(&self, limit: usize) -> SerialQueue {
        SerialQueue::new(self.registry().clone(), limit.max(1), Priority::Normal)
    }

    /// [`Pool::lane`] whose turns wait at `priority` (see [`Priority`]):
    /// a `High` lane's next task goes before other queued work, a `Low`
    /// one's behind it (aged). Its tasks' own `SpawnOptions::priority` is
    /// not used: the lane's applies.
    pub fn lane_with_priority(&self, limit: usize, priority: Priority) -> SerialQueue {
        SerialQueue::new(self.registry().clone(), limit.max(1), priority)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.registry().stats()
    }

    /// A snapshot of what every thread and queue is doing now, and the
    /// monitor's recent decisions; `to_string()` gives the human report
    /// (`docs/diagnosis.md`). The pool keeps running while it is taken: it
    /// is a sample (see [`PoolDump`](crate::PoolDump)), and durations in it
    /// are lower bounds.
    pub fn dump(&self) -> crate::PoolDump {
        self.registry().dump()
    }

    /// Reports stalls to `handler`: when queued work has not moved for
    /// `after` (default [`DEFAULT_STALL_AFTER`](crate::DEFAULT_STALL_AFTER))
    /// while every thread is occupied, the pool calls `handler` with a
    /// snapshot, once per episode (the episode ends when work moves again
    /// or the queues empty), from its monitor thread; every episode is
    /// counted in [`Stats::stalls`]. `None` removes the handler: the report
    /// then goes to standard error if the environment variable
    /// `WSPOOL_STALL_REPORT` was set (not `0`) when the pool was built, else
    /// nowhere. Every pool watches for stalls (its monitor thread does,
    /// whatever the growth policy; on a pool that does not grow it only
    /// watches), so episodes are counted whether or not anyone listens.
    #[allow(clippy::type_complexity)] // spelt out: what a caller passes, in the signature they read
    pub fn set_stall_handler(&self, after: Duration, handler: Option<Box<dyn Fn(&crate::PoolDump) + Send + Sync>>) {
        self.registry().diag.set_stall_handler(after, handler.map(std::sync::Arc::from));
    }

    /// Stops the pool: no new work is accepted (`SubmitErrorKind::Shutdown`),
    /// queued work is run (`Drain`) or dropped unrun (`Cancel`), and the
    /// threads are joined, waiting at most `timeout` (`None`: forever) for
    /// them and for submissions racing the shutdown from other threads to
    /// land. `Ok` is a closing point: every task the pool accepted has run
    /// (`Drain`) or been dropped unrun (`Cancel`). On
    /// [`ShutdownError::TimedOut`] the shutdown carries on; calling it
    /// again, or dropping the last handle (which waits without limit),
    /// finishes it. Idempotent; `Cancel` after a timed-out `Drain` upgrades
    /// it. Called on one of the pool's own threads it cannot wait for itself
    /// (its own task is still running): it tells the others to stop and
    /// returns [`ShutdownError::OnPoolThread`] at once, whatever the timeout.
    pub fn shutdown(&self, mode: Shutdown, timeout: Option<Duration>) -> Result<(), ShutdownError> {
        let registry = self.registry();
        registry.begin_shutdown(mode == Shutdown::Cancel);
        if registry.current_worker().is_some() {
            return Err(ShutdownError::OnPoolThread);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        if registry.wait_for_exit(deadline) { Ok(()) } else { Err(ShutdownError::TimedOut) }
    }

    /// Drops this handle without waiting: when it is the last one, the pool
    /// shuts down (drains) as on a plain drop, but this thread does not wait
    /// for the pool's threads, which finish the queued work and exit on
    /// their own. For a caller that holds a handle only for the length of a
    /// call (the C API's entry points, which must not read the caller's
    /// handle after publishing a task: that task may destroy it), and so
    /// must not turn that call into a join.
    #[doc(hidden)]
    pub fn drop_without_join(self) {
        if let Some(inner) = Arc::into_inner(self.inner) {
            let inner = std::mem::ManuallyDrop::new(inner);
            if inner.owner && inner.registry.pid == std::process::id() {
                inner.registry.begin_shutdown(false);
            }
            // SAFETY: `inner` is never dropped (ManuallyDrop), so its
            // registry is read out exactly once, here.
            drop(unsafe { std::ptr::read(&inner.registry) });
        }
    }

    /// True once `shutdown` began (or the pool is being dropped).
    pub fn is_shutdown(&self) -> bool {
        self.registry().state() != crate::registry::RUNNING
    }

    /// True on the worker threads of this pool.
    pub fn is_pool_thread(&self) -> bool {
        self.registry().current_worker().is_some()
    }

    /// The configured minimum number of threads.
    pub fn min_threads(&self) -> usize {
        self.registry().config.min_threads
    }

    /// The configured maximum number of threads.
    pub fn max_threads(&self) -> usize {
        self.registry().config.max_threads
    }
}
