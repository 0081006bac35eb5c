//! Groups: fire-and-forget tasks you can wait for together.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{SpawnError, TaskError};
use crate::job::HeapJob;
use crate::latch::CountLatch;
use crate::registry::Registry;
use crate::sync::lock;
use crate::task::TaskHandle;
use crate::worker::wait_on;

/// Tasks counted together: `wait` returns once every task spawned into the
/// group has finished (run, panicked or been cancelled). Cheap to clone; a
/// group outlives its pool safely (spawns then fail with `Shutdown`).
#[derive(Clone)]
pub struct Group {
    pub(crate) inner: Arc<GroupInner>,
}

pub(crate) struct GroupInner {
    registry: Arc<Registry>,
    latch: CountLatch,
    /// First panic since the last `wait`.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// Counts one task of the group; its drop (run, panicked or cancelled)
/// uncounts it, so a cancelled task can never leave a waiter hanging.
pub(crate) struct Member(Arc<GroupInner>);

impl Drop for Member {
    fn drop(&mut self) {
        self.0.latch.decrement();
    }
}

impl Group {
    pub(crate) fn new(registry: Arc<Registry>) -> Group {
        Group { inner: Arc::new(GroupInner { registry, latch: CountLatch::default(), panic: Mutex::new(None) }) }
    }

    pub(crate) fn member(&self) -> Member {
        self.inner.latch.increment();
        Member(self.inner.clone())
    }

    /// Spawns `f` into the group (local deque on a pool thread).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_inner(f, false)
    }

    pub(crate) fn spawn_inner<F: FnOnce() + Send + 'static>(&self, f: F, global: bool) -> Result<(), SpawnError<F>> {
        let registry = self.inner.registry.clone();
        registry.submit_job(f, global, |f| {
            let member = self.member();
            HeapJob::into_job_ref(move || {
                let member = member;
                if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                    let mut slot = lock(&member.0.panic);
                    if slot.is_none() {
                        *slot = Some(payload);
                    }
                    drop(slot);
                    drop(member);
                    // Let the pool count the panic too.
                    resume_unwind(Box::new("group task panicked"));
                }
            })
        })
    }

    /// Submits `f` into the group and returns its handle.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit_inner(f, false)
    }

    pub(crate) fn submit_inner<F, T>(&self, f: F, global: bool) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let registry = self.inner.registry.clone();
        let mut handle = None;
        registry.submit_job(f, global, |f| {
            let member = self.member();
            let (h, job) = TaskHandle::new(&registry, move || {
                let _member = member;
                f()
            });
            handle = Some(h);
            job
        })?;
        Ok(handle.expect("submit_job builds the job when it accepts"))
    }

    /// Waits until the group is empty, helping on a pool thread. Returns the
    /// first panic of a spawned task since the last `wait`, if any.
    pub fn wait(&self) -> Result<(), TaskError> {
        self.wait_for(None);
        match lock(&self.inner.panic).take() {
            Some(p) => Err(TaskError::Panicked(p)),
            None => Ok(()),
        }
    }

    /// Waits at most `timeout` (`None`: forever); true if the group emptied.
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        wait_on(&self.inner.registry, &self.inner.latch, deadline)
    }

    /// Waits at most `d`; true if the group emptied.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        self.wait_for(Some(d))
    }

    /// Tasks spawned and not yet finished.
    pub fn pending(&self) -> usize {
        self.inner.latch.pending()
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("pending", &self.pending()).finish()
    }
}
