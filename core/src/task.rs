//! `submit`: a task with a handle to wait for its result or cancel it.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::time::{Duration, Instant};

use crate::error::TaskError;
use crate::job::{JobRef, JobVTable, Payload};
use crate::latch::{Awaitable, OnceLatch};
use crate::registry::{Registry, drop_payload};
use crate::wait::wait_on;
use crate::waker_slot::WakerSlot;

mod future;
pub use future::TaskFuture;

const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;
const EXPIRED: u8 = 4;

/// Where a submitted task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Queued, not started.
    Pending,
    /// Running now.
    Running,
    /// Finished (returned or panicked).
    Done,
    /// Cancelled before it started; its closure was dropped unrun.
    Cancelled,
    /// Not started by its deadline ([`crate::SpawnOptions::deadline`]): it
    /// never ran, and its closure was dropped unrun with
    /// [`crate::expiring`] true.
    Expired,
}

/// The shared cell behind a [`TaskHandle`]: one allocation holds the
/// closure, the result and the latch.
struct TaskCell<T, F> {
    /// PENDING -> RUNNING -> DONE, or PENDING -> CANCELLED / EXPIRED.
    /// Whoever wins the CAS out of PENDING owns `func`; the latch publishes
    /// `result`.
    state: AtomicU8,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<Result<T, TaskError>>>,
    latch: OnceLatch,
    /// An awaiting future's waker (`task/future.rs`), woken right after
    /// the latch is set.
    waker: WakerSlot,
    registry: Arc<Registry>,
    /// A waiter on a pool thread may run the task itself if it has not
    /// started (false for serial-queue tasks, whose turn is fixed).
    inline_ok: bool,
    /// Not started by then, the task expires instead of running.
    deadline: Option<Instant>,
    /// The `Here` address of the thread that started it (0: not started):
    /// one store per start. Read by a waiter on its own thread only to see
    /// whether it is that thread (its own store, so Relaxed is exact), and
    /// by snapshots as a hint of who runs it.
    runner: AtomicUsize,
    /// The serial queue (a lane of 1) it is queued on, 0 for none: set once
    /// by the queue before the handle is returned (Relaxed: whoever waits
    /// got the handle through a synchronising hand-over).
    serial: AtomicUsize,
}

// SAFETY: `func` and `result` are accessed only by the single owner that
// won the state CAS (writer) and by the handle after the latch (reader).
unsafe impl<T: Send, F: Send> Sync for TaskCell<T, F> {}

impl<T: Send + 'static, F: FnOnce() -> T + Send + 'static> TaskCell<T, F> {
    const VTABLE: JobVTable = JobVTable { run: Self::run_job, cancel: Self::cancel_job, evictable: true };

    fn job_ref(self: &Arc<Self>) -> JobRef {
        let data = NonNull::new(Arc::into_raw(self.clone()) as *mut ()).expect("Arc pointer is non-null");
        // SAFETY: data is an Arc<Self> reference handed to the job.
        unsafe { JobRef::from_pointer(data, &Self::VTABLE) }
    }

    unsafe fn run_job(payload: *mut Payload) -> bool {
        // SAFETY: created by `job_ref`.
        let cell = unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Self) };
        cell.run_if_pending()
    }

    unsafe fn cancel_job(payload: *mut Payload) -> bool {
        // SAFETY: created by `job_ref`.
        let cell = unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Self) };
        // `cancel_if_pending` counts the cancellation itself (it is also
        // reached through `TaskHandle::cancel`); a tombstone counts nothing.
        cell.cancel_if_pending();
        false
    }

    fn run_if_pending(&self) -> bool {
        // The deadline is read where the task would start: an expired task
        // costs whoever reached it one clock read and the drop.
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            self.expire_if_pending();
            return false;
        }
        if self.state.compare_exchange(PENDING, RUNNING, SeqCst, SeqCst).is_err() {
            return false;
        }
        self.runner.store(crate::here::here() as *const crate::here::Here as usize, Relaxed);
        // SAFETY: we won the CAS out of PENDING.
        let func = unsafe { (*self.func.get()).take() }.expect("a pending task has its closure");
        let result = match catch_unwind(AssertUnwindSafe(func)) {
            Ok(v) => Ok(v),
            Err(payload) => {
                self.registry.counters.panicked.add(1);
                Err(TaskError::Panicked(payload))
            }
        };
        // SAFETY: only the CAS winner writes; readers wait for the latch.
        unsafe { *self.result.get() = Some(result) };
        // Before DONE is visible: stats read after a wait include this task.
        crate::stats::count_completion_now();
        self.state.store(DONE, SeqCst);
        self.latch.set();
        self.waker.complete();
        true
    }

    fn cancel_if_pending(&self) -> bool {
        self.drop_if_pending(CANCELLED)
    }

    /// The deadline passed before the task started: it ends expired.
    fn expire_if_pending(&self) -> bool {
        self.drop_if_pending(EXPIRED)
    }

    /// PENDING -> `to` (CANCELLED or EXPIRED): the closure is dropped unrun,
    /// counted, and the waiters released, in that order (a waiter reads
    /// stats that include it, and finds the drop, `on_cancel` included,
    /// over).
    fn drop_if_pending(&self, to: u8) -> bool {
        if self.state.compare_exchange(PENDING, to, SeqCst, SeqCst).is_err() {
            return false;
        }
        let (error, counter) = match to {
            EXPIRED => (TaskError::Expired, &self.registry.counters.expired),
            _ => (TaskError::Cancelled, &self.registry.counters.cancelled),
        };
        // Counted before the drop: dropping the closure is what releases a
        // group's waiter, and stats read after a wait include what it
        // waited for (as `deadline.rs` counts a task without a handle).
        counter.add(1);
        // SAFETY: we won the CAS out of PENDING.
        let func = unsafe { (*self.func.get()).take() };
        let dropped = match to {
            EXPIRED => catch_unwind(AssertUnwindSafe(move || crate::deadline::expire_with(move || drop(func)))),
            _ => catch_unwind(AssertUnwindSafe(move || drop(func))),
        };
        if let Err(p) = dropped {
            drop_payload(p);
        }
        // SAFETY: as in `run_if_pending`.
        unsafe { *self.result.get() = Some(Err(error)) };
        self.latch.set();
        self.waker.complete();
        true
    }
}

/// What a handle needs from its cell, with the closure type erased.
trait TaskControl<T>: Send + Sync {
    fn state(&self) -> TaskState;
    fn latch(&self) -> &OnceLatch;
    fn waker(&self) -> &WakerSlot;
    fn registry(&self) -> &Registry;
    fn run_inline(&self) -> bool;
    fn cancel(&self) -> bool;
    fn expire(&self) -> bool;
    fn deadline(&self) -> Option<Instant>;
    fn take_result(&self) -> Option<Result<T, TaskError>>;
    /// The `Here` address of the thread running it, 0 unless RUNNING.
    fn runner(&self) -> usize;
    /// Its serial queue if it is still PENDING on one, else 0.
    fn pending_on_serial(&self) -> usize;
    fn set_serial(&self, queue: usize);
}

impl<T: Send + 'static, F: FnOnce() -> T + Send + 'static> TaskControl<T> for TaskCell<T, F> {
    fn state(&self) -> TaskState {
        match self.state.load(SeqCst) {
            PENDING => TaskState::Pending,
            RUNNING => TaskState::Running,
            DONE => TaskState::Done,
            EXPIRED => TaskState::Expired,
            _ => TaskState::Cancelled,
        }
    }
    fn latch(&self) -> &OnceLatch {
        &self.latch
    }
    fn waker(&self) -> &WakerSlot {
        &self.waker
    }
    fn registry(&self) -> &Registry {
        &self.registry
    }
    fn run_inline(&self) -> bool {
        self.inline_ok && self.run_if_pending()
    }
    fn cancel(&self) -> bool {
        self.cancel_if_pending()
    }
    fn expire(&self) -> bool {
        self.expire_if_pending()
    }
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
    fn runner(&self) -> usize {
        if self.state.load(SeqCst) == RUNNING { self.runner.load(Relaxed) } else { 0 }
    }
    fn pending_on_serial(&self) -> usize {
        if self.state.load(SeqCst) == PENDING { self.serial.load(Relaxed) } else { 0 }
    }
    fn set_serial(&self, queue: usize) {
        self.serial.store(queue, Relaxed);
    }
    fn take_result(&self) -> Option<Result<T, TaskError>> {
        if !self.latch.probe() {
            return None;
        }
        // SAFETY: the latch is set, so the writer is done; `&self` access to
        // the result is serialised by the handle (see TaskHandle::wait).
        unsafe { (*self.result.get()).take() }
    }
}

/// A handle to a submitted task. Dropping it detaches the task (it still
/// runs). `Send + Sync`: any thread may wait, poll or cancel.
pub struct TaskHandle<T> {
    cell: Arc<dyn TaskControl<T>>,
}

impl<T: Send + 'static> TaskHandle<T> {
    /// Wraps `f` into a task cell; returns the handle and the job to queue.
    pub(crate) fn new<F: FnOnce() -> T + Send + 'static>(registry: &Arc<Registry>, f: F) -> (TaskHandle<T>, JobRef) {
        Self::build(registry, f, true, None)
    }

    /// `new` for a task that expires unless it starts before `deadline`,
    /// whose waiters may run it themselves only if `inline_ok` (false for
    /// a serial queue's task, whose turn is fixed), labelled `label`
    /// (`label.rs`): the label wraps the closure inside the cell, so it is
    /// published whoever runs the task (a worker, or a waiter running it
    /// inline).
    pub(crate) fn labelled<F: FnOnce() -> T + Send + 'static>(
        registry: &Arc<Registry>,
        f: F,
        inline_ok: bool,
        deadline: Option<Instant>,
        label: Option<crate::Label>,
    ) -> (TaskHandle<T>, JobRef) {
        match label {
            Some(label) => Self::build(registry, crate::label::labelled(label, f), inline_ok, deadline),
            None => Self::build(registry, f, inline_ok, deadline),
        }
    }

    fn build<F: FnOnce() -> T + Send + 'static>(
        registry: &Arc<Registry>,
        f: F,
        inline_ok: bool,
        deadline: Option<Instant>,
    ) -> (TaskHandle<T>, JobRef) {
        let cell = Arc::new(TaskCell {
            inline_ok,
            deadline,
            state: AtomicU8::new(PENDING),
            func: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
            latch: OnceLatch::default(),
            waker: WakerSlot::new(),
            registry: registry.clone(),
            runner: AtomicUsize::new(0),
            serial: AtomicUsize::new(0),
        });
        let job = cell.job_ref();
        (TaskHandle { cell }, job)
    }

    /// Waits for the task and returns its value, or why there is none. On
    /// a pool thread this helps: if the task has not started it runs it
    /// right here, otherwise it runs work of its own isolation region (see
    /// [`crate::isolate`]) until the task is done.
    ///
    /// Called from the task itself (a handle that reached its own task, or
    /// a nested task waiting on the task it runs inside of), it returns
    /// `Err(TaskError::WouldDeadlock)` at once: that wait could never end.
    pub fn wait(self) -> Result<T, TaskError> {
        if self.would_deadlock() {
            return Err(TaskError::WouldDeadlock);
        }
        self.wait_for(None);
        self.cell.take_result().unwrap_or(Err(TaskError::Cancelled))
    }

    /// Waits at most `timeout` (`None`: forever). Returns true once the task
    /// is finished (done, cancelled or expired). A timeout leaves the task
    /// untouched. A timed wait runs nothing on the waiting thread (it could
    /// not bound how long that takes); an untimed one helps as
    /// [`TaskHandle::wait`]. A task with a deadline that has not started by
    /// then is expired by its waiter, which does not wait for a worker to
    /// reach it.
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
        let latch = self.cell.latch();
        if latch.probe() {
            return true;
        }
        if timeout.is_none() && self.would_deadlock() {
            // Its own task: `None` would never end (see `wait`).
            return false;
        }
        if let Some(deadline) = self.cell.deadline() {
            return self.wait_with_deadline(timeout, deadline);
        }
        self.wait_unexpiring(timeout)
    }

    /// `wait_for` of a task with a deadline: waits (without helping) until
    /// the deadline, expires the task if it is still pending, and then
    /// waits as any other wait for a task that did start.
    #[cold]
    fn wait_with_deadline(&self, timeout: Option<Duration>, deadline: Instant) -> bool {
        if timeout.is_none() && self.cell.registry().current_worker().is_some() {
            // An untimed wait on a pool thread helps: it runs the task
            // itself if it may (and the run expires it if it is late).
            return self.wait_unexpiring(None);
        }
        let until = timeout.map(|t| Instant::now() + t);
        if until.is_none_or(|u| deadline < u) {
            let latch = self.cell.latch();
            if wait_on(self.cell.registry(), latch, Some(deadline)) {
                return true;
            }
            if self.cell.expire() || latch.probe() {
                return true;
            }
        }
        // Started (or the caller's own limit comes first): wait as usual.
        let left = until.map(|u| u.saturating_duration_since(Instant::now()));
        self.wait_unexpiring(left)
    }

    fn wait_unexpiring(&self, timeout: Option<Duration>) -> bool {
        let latch = self.cell.latch();
        if latch.probe() {
            return true;
        }
        let registry = self.cell.registry();
        if timeout.is_none()
            && let Some(worker) = registry.current_worker()
            && worker.may_run_nested()
        {
            // The task counts itself when it runs (`stats::Completion`); the
            // outer job's slot is put back whether it ran or not.
            let slot = &crate::here::here().completion;
            let outer = slot.replace(crate::stats::Completion::worker(&worker.counters().completed));
            let ran = self.cell.run_inline();
            slot.set(outer);
            if ran {
                return true;
            }
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        wait_on(registry, &TaskWait { latch, runner: self.cell.runner() }, deadline)
    }

    /// Would an untimed wait on this handle, from the calling thread, wait
    /// for itself (`TaskError::WouldDeadlock`)? True when the task is
    /// running on this very thread (further down its stack), or when the
    /// calling task runs a turn of a serial queue (a lane of 1) on which
    /// this task is still queued, behind it.
    pub fn would_deadlock(&self) -> bool {
        let here = crate::here::here();
        let runner = self.cell.runner();
        if runner != 0 {
            return runner == here as *const crate::here::Here as usize;
        }
        // Still queued on the serial queue whose turn this thread runs: it
        // is behind the caller, and the queue starts it only after the
        // caller's task returned.
        let serial = here.lane.get();
        serial != 0 && self.cell.pending_on_serial() == serial
    }

    /// Marks the task as queued on serial queue `queue` (`SerialQueue`).
    pub(crate) fn set_serial(&self, queue: usize) {
        self.cell.set_serial(queue);
    }

    /// Waits at most `d`; true once the task is finished.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        self.wait_for(Some(d))
    }

    /// Cancels the task if it has not started: its closure is dropped
    /// unrun and `wait` returns `Err(Cancelled)`. False if it already
    /// started, finished or was cancelled.
    pub fn cancel(&self) -> bool {
        self.cell.cancel()
    }

    /// The task's state now.
    pub fn state(&self) -> TaskState {
        self.cell.state()
    }

    /// True once the task is done, cancelled or expired.
    pub fn is_finished(&self) -> bool {
        self.cell.latch().probe()
    }
}

/// A task's latch as a waiter sees it, with who runs the task (for
/// snapshots: `dump::task_note`).
struct TaskWait<'a> {
    latch: &'a OnceLatch,
    runner: usize,
}

impl Awaitable for TaskWait<'_> {
    fn probe(&self) -> bool {
        self.latch.probe()
    }
    fn block_until(&self, deadline: Option<Instant>) -> bool {
        self.latch.block_until(deadline)
    }
    fn register_sleeper(&self, registry: &Arc<Registry>, index: usize) {
        self.latch.register_sleeper(registry, index)
    }
    fn unregister_sleeper(&self, index: usize) {
        self.latch.unregister_sleeper(index)
    }
    fn wait_note(&self) -> (u64, usize) {
        (crate::dump::task_note(self.runner), self.latch as *const OnceLatch as usize)
    }
}

impl<T> std::fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle").field("state", &self.cell.state()).finish()
    }
}

#[cfg(test)]
mod tests;
