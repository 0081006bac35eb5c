//! `submit`: a task with a handle to wait for its result or cancel it.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use crate::error::TaskError;
use crate::job::{JobRef, JobVTable, Payload};
use crate::latch::{Awaitable, OnceLatch};
use crate::registry::{Registry, drop_payload};
use crate::wait::wait_on;

const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;

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
}

/// The shared cell behind a [`TaskHandle`]: one allocation holds the
/// closure, the result and the latch.
struct TaskCell<T, F> {
    /// PENDING -> RUNNING -> DONE, or PENDING -> CANCELLED. Whoever wins the
    /// CAS out of PENDING owns `func`; the latch publishes `result`.
    state: AtomicU8,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<Result<T, TaskError>>>,
    latch: OnceLatch,
    registry: Arc<Registry>,
    /// A waiter on a pool thread may run the task itself if it has not
    /// started (false for serial-queue tasks, whose turn is fixed).
    inline_ok: bool,
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
        if self.state.compare_exchange(PENDING, RUNNING, SeqCst, SeqCst).is_err() {
            return false;
        }
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
        true
    }

    fn cancel_if_pending(&self) -> bool {
        if self.state.compare_exchange(PENDING, CANCELLED, SeqCst, SeqCst).is_err() {
            return false;
        }
        // SAFETY: we won the CAS out of PENDING.
        let func = unsafe { (*self.func.get()).take() };
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(func))) {
            drop_payload(p);
        }
        // SAFETY: as in `run_if_pending`.
        unsafe { *self.result.get() = Some(Err(TaskError::Cancelled)) };
        self.registry.counters.cancelled.add(1);
        self.latch.set();
        true
    }
}

/// What a handle needs from its cell, with the closure type erased.
trait TaskControl<T>: Send + Sync {
    fn state(&self) -> TaskState;
    fn latch(&self) -> &OnceLatch;
    fn registry(&self) -> &Registry;
    fn run_inline(&self) -> bool;
    fn cancel(&self) -> bool;
    fn take_result(&self) -> Option<Result<T, TaskError>>;
}

impl<T: Send + 'static, F: FnOnce() -> T + Send + 'static> TaskControl<T> for TaskCell<T, F> {
    fn state(&self) -> TaskState {
        match self.state.load(SeqCst) {
            PENDING => TaskState::Pending,
            RUNNING => TaskState::Running,
            DONE => TaskState::Done,
            _ => TaskState::Cancelled,
        }
    }
    fn latch(&self) -> &OnceLatch {
        &self.latch
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
        Self::build(registry, f, true)
    }

    /// Like `new`, for a task whose waiters must never run it themselves.
    pub(crate) fn new_detached<F: FnOnce() -> T + Send + 'static>(
        registry: &Arc<Registry>,
        f: F,
    ) -> (TaskHandle<T>, JobRef) {
        Self::build(registry, f, false)
    }

    fn build<F: FnOnce() -> T + Send + 'static>(
        registry: &Arc<Registry>,
        f: F,
        inline_ok: bool,
    ) -> (TaskHandle<T>, JobRef) {
        let cell = Arc::new(TaskCell {
            inline_ok,
            state: AtomicU8::new(PENDING),
            func: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
            latch: OnceLatch::default(),
            registry: registry.clone(),
        });
        let job = cell.job_ref();
        (TaskHandle { cell }, job)
    }

    /// Waits for the task and returns its value, or why there is none. On
    /// a pool thread this helps: if the task has not started it runs it
    /// right here, otherwise it runs work of its own isolation region (see
    /// [`crate::isolate`]) until the task is done.
    pub fn wait(self) -> Result<T, TaskError> {
        self.wait_for(None);
        self.cell.take_result().unwrap_or(Err(TaskError::Cancelled))
    }

    /// Waits at most `timeout` (`None`: forever). Returns true once the task
    /// is finished (done or cancelled). A timeout leaves the task untouched.
    /// A timed wait runs nothing on the waiting thread (it could not bound
    /// how long that takes); an untimed one helps as [`TaskHandle::wait`].
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
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
            let counter = NonNull::from(&worker.counters().completed);
            let outer = slot.replace(crate::stats::Completion::Worker(counter));
            let ran = self.cell.run_inline();
            slot.set(outer);
            if ran {
                return true;
            }
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        wait_on(registry, latch, deadline)
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

    /// True once the task is done or cancelled.
    pub fn is_finished(&self) -> bool {
        self.cell.latch().probe()
    }
}

impl<T> std::fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle").field("state", &self.cell.state()).finish()
    }
}
