//! Serial queues: FIFO, at most one task of a queue running at a time.
//!
//! Tasks wait in the queue's own list, not in the pool: only the queue's
//! current turn is a pool job, so a waiting serial task never occupies a
//! worker. Every turn goes through the global queue, so turns of different
//! queues interleave in FIFO order (one task per turn), and no helping
//! waiter ever runs a turn nested inside its wait: a serial task that waits
//! can therefore never end up waiting, on its own stack, for its queue's
//! next task.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::SpawnError;
use crate::group::Group;
use crate::job::{HeapJob, JobRef, JobVTable, Payload};
use crate::registry::{Registry, drop_payload};
use crate::sync::lock;
use crate::task::TaskHandle;

/// A FIFO lane on a pool. Cheap to clone. Dropping it does not drop its
/// pending tasks: they still run, in order.
#[derive(Clone)]
pub struct SerialQueue {
    inner: Arc<SerialInner>,
}

struct SerialInner {
    registry: Arc<Registry>,
    state: Mutex<SerialState>,
}

struct SerialState {
    tasks: VecDeque<JobRef>,
    /// A turn is queued in the pool or running. Invariant: false only when
    /// `tasks` is empty and no turn job exists.
    scheduled: bool,
}

impl SerialInner {
    /// The pool job for one turn: a pointer to the queue. Run, it runs the
    /// next task; dropped unrun (`Shutdown::Cancel`), it cancels every
    /// queued task, each counted once, and is not a task itself.
    const TURN: JobVTable = JobVTable { run: Self::run_turn_job, cancel: Self::cancel_turn_job, evictable: false };

    fn schedule(self: &Arc<Self>) {
        let data = NonNull::new(Arc::into_raw(self.clone()) as *mut ()).expect("Arc pointer is non-null");
        // SAFETY: an Arc reference handed to the job, read back by TURN.
        self.registry.push_turn(unsafe { JobRef::from_pointer(data, &Self::TURN) });
    }

    unsafe fn turn_of(payload: *mut Payload) -> Arc<Self> {
        // SAFETY: built by `schedule`.
        unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Self) }
    }

    unsafe fn run_turn_job(payload: *mut Payload) -> bool {
        // SAFETY: built by `schedule`, consumed once.
        unsafe { Self::turn_of(payload) }.run_turn()
    }

    unsafe fn cancel_turn_job(payload: *mut Payload) -> bool {
        // SAFETY: built by `schedule`, consumed once.
        let inner = unsafe { Self::turn_of(payload) };
        let tasks: Vec<JobRef> = {
            let mut st = lock(&inner.state);
            st.scheduled = false;
            st.tasks.drain(..).collect()
        };
        for job in tasks {
            inner.registry.cancel_job(job);
        }
        false
    }

    /// Runs the next task; true if a task ran (a cancelled task handle
    /// left in the queue is a tombstone: it is counted as cancelled, not
    /// also as completed).
    fn run_turn(self: Arc<Self>) -> bool {
        let job = lock(&self.state).tasks.pop_front();
        let ran = match job.map(|job| catch_unwind(AssertUnwindSafe(|| job.run()))) {
            Some(Ok(ran)) => ran,
            Some(Err(payload)) => {
                self.registry.counters.panicked.add(1);
                drop_payload(payload);
                true
            }
            None => false,
        };
        if ran {
            // Counted before the next turn can start: a task queued behind
            // this one (and whoever waits for it) sees this one counted.
            crate::stats::count_completion_now();
        }
        let more = {
            let mut st = lock(&self.state);
            st.scheduled = !st.tasks.is_empty();
            st.scheduled
        };
        if more {
            self.schedule();
        }
        ran
    }

    fn enqueue(self: &Arc<Self>, job: JobRef) {
        let start = {
            let mut st = lock(&self.state);
            st.tasks.push_back(job);
            !std::mem::replace(&mut st.scheduled, true)
        };
        self.registry.count_submitted(self.registry.current_worker());
        if start {
            self.schedule();
        }
    }
}

impl SerialQueue {
    pub(crate) fn new(registry: Arc<Registry>) -> SerialQueue {
        SerialQueue {
            inner: Arc::new(SerialInner {
                registry,
                state: Mutex::new(SerialState { tasks: VecDeque::new(), scheduled: false }),
            }),
        }
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// Appends `f`; it runs after every task queued before it has finished.
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_in(None, None, f)
    }

    /// `spawn`, counting the task toward `group` too, expiring at `deadline`
    /// unless its turn came before.
    pub(crate) fn spawn_in<F: FnOnce() + Send + 'static>(
        &self,
        group: Option<&Group>,
        deadline: Option<Instant>,
        f: F,
    ) -> Result<(), SpawnError<F>> {
        let registry = &self.inner.registry;
        // Held until the turn is queued: see `Registry::open_submission`.
        let _open = match registry.open_submission(registry.current_worker()) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, f)),
        };
        let job = match group {
            Some(group) => HeapJob::into_job_ref(group.bind(f)),
            None => HeapJob::into_job_ref(f),
        };
        let job = match deadline {
            Some(deadline) => crate::deadline::wrap(job, deadline, registry),
            None => job,
        };
        self.inner.enqueue(job);
        Ok(())
    }

    /// Appends `f` and returns its handle. Waiting on the handle from a pool
    /// thread helps with other work; it never runs the task out of turn.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit_in(None, None, f)
    }

    /// `submit`, counting the task toward `group` too, expiring at
    /// `deadline` unless its turn came before.
    pub(crate) fn submit_in<F, T>(
        &self,
        group: Option<&Group>,
        deadline: Option<Instant>,
        f: F,
    ) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let registry = &self.inner.registry;
        let _open = match registry.open_submission(registry.current_worker()) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, f)),
        };
        let (handle, job) = match group {
            Some(group) => TaskHandle::with_deadline(&self.inner.registry, group.bind_handled(f), false, deadline),
            None => TaskHandle::with_deadline(&self.inner.registry, f, false, deadline),
        };
        self.inner.enqueue(job);
        Ok(handle)
    }

    /// Tasks queued and not yet started.
    pub fn pending(&self) -> usize {
        lock(&self.inner.state).tasks.len()
    }
}

impl std::fmt::Debug for SerialQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialQueue").field("pending", &self.pending()).finish()
    }
}
