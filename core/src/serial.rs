//! Serial queues and lanes: FIFO, at most `limit` tasks of a queue running
//! at a time (a serial queue is a lane of 1; `Pool::lane(n)` makes one of n).
//!
//! Tasks wait in the queue's own list, not in the pool: only the queue's
//! turns are pool jobs, at most `limit` of them at once, so a waiting task
//! never occupies a worker. A turn runs one task and then, if tasks are
//! left, goes back to the tail of the global queue: turns of different
//! queues interleave in FIFO order (one task per turn), so no lane runs more
//! than its share in a row. A task holds its turn until it returns, also
//! while it blocks (declared or not): blocking inside a lane counts against
//! the lane, whatever threads the pool lends meanwhile. No helping waiter
//! ever runs a turn nested inside its wait: a lane's task that waits can
//! therefore never end up waiting, on its own stack, for its queue's next
//! task.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::SpawnError;
use crate::group::Group;
use crate::job::{HeapJob, JobRef, JobVTable, Payload};
use crate::priority::Priority;
use crate::registry::{Registry, drop_payload};
use crate::sync::lock;
use crate::task::TaskHandle;

/// A FIFO lane on a pool: its tasks start in submission order, at most
/// [`SerialQueue::limit`] of them running at a time (one for
/// [`crate::Pool::serial`], n for [`crate::Pool::lane`]). Cheap to clone.
/// Dropping it does not drop its pending tasks: they still run, in order.
#[derive(Clone)]
pub struct SerialQueue {
    inner: Arc<SerialInner>,
}

struct SerialInner {
    registry: Arc<Registry>,
    /// Where the turns wait (`Pool::lane_with_priority`).
    priority: Priority,
    state: Mutex<SerialState>,
}

struct SerialState {
    tasks: VecDeque<JobRef>,
    /// Turn jobs queued in the pool, not yet started: each will take one
    /// task. Invariant (under the lock): `queued + running <= limit`, and
    /// `queued >= min(tasks.len(), limit - running)`: a queued task always
    /// has a turn coming while the lane has room.
    queued: usize,
    /// Turns running a task now.
    running: usize,
    /// Most tasks of this queue running at once (1: a serial queue).
    limit: usize,
    /// Tasks started so far (a progress mark for snapshots, `dump.rs`).
    started: u64,
}

impl SerialInner {
    /// The pool job for one turn: a pointer to the queue. Run, it runs the
    /// next task; dropped unrun (`Shutdown::Cancel`), it cancels every
    /// queued task, each counted once, and is not a task itself.
    const TURN: JobVTable = JobVTable { run: Self::run_turn_job, cancel: Self::cancel_turn_job, evictable: false };

    fn schedule(self: &Arc<Self>) {
        let data = NonNull::new(Arc::into_raw(self.clone()) as *mut ()).expect("Arc pointer is non-null");
        // SAFETY: an Arc reference handed to the job, read back by TURN.
        self.registry.push_turn_at(unsafe { JobRef::from_pointer(data, &Self::TURN) }, self.priority);
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
        // A cancelled turn (`Shutdown::Cancel`) takes every queued task
        // with it: no other turn of this queue will run either.
        let tasks: Vec<JobRef> = {
            let mut st = lock(&inner.state);
            st.queued -= 1;
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
        let job = {
            let mut st = lock(&self.state);
            st.queued -= 1;
            let job = st.tasks.pop_front();
            st.running += job.is_some() as usize;
            st.started += job.is_some() as u64;
            // A serial queue's task marks its thread, so that its untimed
            // wait on a task queued behind it fails (`TaskHandle::would_deadlock`).
            (job, if st.limit == 1 { Arc::as_ptr(&self) as usize } else { 0 })
        };
        let (job, serial) = job;
        let took = job.is_some();
        let here = crate::here::here();
        let outer_lane = here.lane.replace(serial);
        let ran = job.map(|job| catch_unwind(AssertUnwindSafe(|| job.run())));
        here.lane.set(outer_lane);
        let ran = match ran {
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
        // The turn goes on (back to the global queue's tail, behind the
        // other queues' turns) if a task left is owed no queued turn.
        let more = {
            let mut st = lock(&self.state);
            st.running -= took as usize;
            let more = st.queued < st.tasks.len() && st.queued + st.running < st.limit;
            st.queued += more as usize;
            more
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
            // A new turn if the lane has room and every queued turn is owed
            // to an earlier task.
            let start = st.queued < st.tasks.len() && st.queued + st.running < st.limit;
            st.queued += start as usize;
            start
        };
        self.registry.count_submitted(self.registry.current_worker());
        if start {
            self.schedule();
        }
    }
}

impl crate::dump::LaneProbe for SerialInner {
    fn probe(&self) -> (usize, usize, usize, u64) {
        let st = lock(&self.state);
        (st.tasks.len(), st.running, st.limit, st.started)
    }
}

impl SerialQueue {
    pub(crate) fn new(registry: Arc<Registry>, limit: usize, priority: Priority) -> SerialQueue {
        debug_assert!(limit >= 1);
        let inner = Arc::new(SerialInner {
            registry,
            priority,
            state: Mutex::new(SerialState { tasks: VecDeque::new(), queued: 0, running: 0, limit, started: 0 }),
        });
        // Listed for snapshots while alive (`Pool::dump`).
        let probe: std::sync::Weak<dyn crate::dump::LaneProbe> = Arc::downgrade(&inner) as _;
        inner.registry.diag.add_lane(probe);
        SerialQueue { inner }
    }

    /// Most tasks of this queue that run at once (1 for [`crate::Pool::serial`]).
    pub fn limit(&self) -> usize {
        lock(&self.inner.state).limit
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// Appends `f`; it runs after every task queued before it has finished.
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_in(None, None, None, f)
    }

    /// `spawn`, counting the task toward `group` too, expiring at `deadline`
    /// unless its turn came before, labelled `label`.
    pub(crate) fn spawn_in<F: FnOnce() + Send + 'static>(
        &self,
        group: Option<&Group>,
        deadline: Option<Instant>,
        label: Option<crate::Label>,
        f: F,
    ) -> Result<(), SpawnError<F>> {
        let registry = &self.inner.registry;
        // Held until the turn is queued: see `Registry::open_submission`.
        let _open = match registry.open_submission(registry.current_worker()) {
            Ok(open) => open,
            Err(kind) => return Err(SpawnError::new(kind, f)),
        };
        // Wrapped only once accepted: a refusal hands back `f` itself.
        match label {
            Some(label) => self.enqueue_task(group, deadline, crate::label::labelled(label, f)),
            None => self.enqueue_task(group, deadline, f),
        }
        Ok(())
    }

    /// The accepted task `f` queued (see `spawn_in`).
    fn enqueue_task<F: FnOnce() + Send + 'static>(&self, group: Option<&Group>, deadline: Option<Instant>, f: F) {
        let registry = &self.inner.registry;
        let job = match group {
            Some(group) => HeapJob::into_job_ref(group.bind(f)),
            None => HeapJob::into_job_ref(f),
        };
        let job = match deadline {
            Some(deadline) => crate::deadline::wrap(job, deadline, registry),
            None => job,
        };
        self.inner.enqueue(job);
    }

    /// Appends `f` and returns its handle. Waiting on the handle from a pool
    /// thread helps with other work; it never runs the task out of turn.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit_in(None, None, None, f)
    }

    /// `submit`, counting the task toward `group` too, expiring at
    /// `deadline` unless its turn came before, labelled `label`.
    pub(crate) fn submit_in<F, T>(
        &self,
        group: Option<&Group>,
        deadline: Option<Instant>,
        label: Option<crate::Label>,
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
            Some(group) => TaskHandle::labelled(&self.inner.registry, group.bind_handled(f), false, deadline, label),
            None => TaskHandle::labelled(&self.inner.registry, f, false, deadline, label),
        };
        if lock(&self.inner.state).limit == 1 {
            handle.set_serial(Arc::as_ptr(&self.inner) as usize);
        }
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

#[cfg(test)]
mod tests;
