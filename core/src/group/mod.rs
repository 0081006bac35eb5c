//! Groups: fire-and-forget tasks you can wait for together.
//!
//! Three owners of the same state (`state.rs`):
//! - [`Group`]: a cloneable handle to a heap state, freed with the last
//!   handle or pending task, whichever goes last;
//! - [`LocalGroup`] ([`crate::Pool::group_scope`]): the state lives on the
//!   caller's stack, and the scope waits for every task before it returns:
//!   no allocation, no reference counting of the state;
//! - [`GroupPlace`]: the state lives in memory the caller provides and must
//!   keep until [`GroupPlace::fini`] returned (the C API's
//!   `wspool_group_init`).
//!
//! Tasks spawned into any of them cost the same: the closure and its
//! membership travel inline in the deque slot when they fit (a C task
//! does), and the count is touched once at spawn and once at finish.

mod future;
mod lease;
mod local;
mod state;

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{SpawnError, TaskError};
use crate::job::HeapJob;
use crate::registry::Registry;
use crate::task::TaskHandle;

pub use future::GroupFuture;
pub(crate) use lease::LeaseSlot;
pub use local::{GroupPlace, LocalGroup};
use state::{GroupInner, HANDLE, Member, RegistryRef};

/// Tasks counted together: `wait` returns once every task spawned into the
/// group has finished (run, panicked or been cancelled). Cheap to clone; a
/// group outlives its pool safely (spawns then fail with `Shutdown`), and
/// its pending tasks outlive the group (they still run).
pub struct Group {
    inner: NonNull<GroupInner>,
}

// SAFETY: GroupInner is Sync and freed only when the last reference goes.
unsafe impl Send for Group {}
unsafe impl Sync for Group {}

/// A group's task and its membership. Fields drop in declaration order, so
/// a task dropped unrun releases its captures before its count.
struct GroupTask<F> {
    f: F,
    member: Member,
}

impl<F> GroupTask<F> {
    fn call(self)
    where
        F: FnOnce(),
    {
        let GroupTask { f, member } = self;
        // Marks the member for a self-wait check (`GroupInner::wait_result`);
        // restored after `f`, which a panic cannot skip (it is caught).
        let here = crate::here::here();
        let outer = here.group.replace(member.group_ptr());
        let ran = catch_unwind(AssertUnwindSafe(f));
        here.group.set(outer);
        match ran {
            Ok(()) => {
                // Counted before the member's release can end a wait.
                crate::stats::count_completion_now();
                drop(member)
            }
            Err(payload) => {
                member.record_panic(payload);
                crate::stats::count_completion_now();
                drop(member);
                // Let the pool (or the task handle) count the panic too.
                resume_unwind(Box::new("group task panicked"))
            }
        }
    }
}

/// What every owner of a group state offers; the public types forward here.
impl GroupInner {
    /// Binds `f` to the group: the returned closure counts as one pending
    /// task until it has run or been dropped unrun. Either way `f` and its
    /// captures are dropped *before* the count is released, so `wait`
    /// never returns while a task's destructors (a C task's `on_cancel`)
    /// still run.
    /// A panic is recorded for `wait` and re-raised for the pool to count.
    fn bind<F: FnOnce() + Send + 'static>(&self, f: F) -> impl FnOnce() + Send + 'static {
        let task = GroupTask { f, member: self.member() };
        move || task.call()
    }

    /// [`GroupInner::bind`] for a task with a handle: the handle reports
    /// its panic, with the original payload.
    fn bind_handled<T, F: FnOnce() -> T + Send + 'static>(&self, f: F) -> impl FnOnce() -> T + Send + 'static {
        let task = GroupTask { f, member: self.member() };
        move || {
            let GroupTask { f, member } = task;
            let here = crate::here::here();
            let outer = here.group.replace(member.group_ptr());
            // Counted before the member's release can end a wait, also when
            // `f` panics (the handle's cell catches that panic, after this).
            let value = catch_unwind(AssertUnwindSafe(f));
            here.group.set(outer);
            crate::stats::count_completion_now();
            drop(member);
            value.unwrap_or_else(|payload| resume_unwind(payload))
        }
    }

    fn spawn<F: FnOnce() + Send + 'static>(&self, f: F, global: bool) -> Result<(), SpawnError<F>> {
        self.registry.submit_job(f, global, |f| HeapJob::into_job_ref(self.bind(f)))
    }

    fn submit<F, T>(&self, f: F, global: bool) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let registry = &self.registry;
        let mut handle = None;
        registry.submit_job(f, global, |f| {
            let (h, job) = TaskHandle::new(registry, self.bind_handled(f));
            handle = Some(h);
            job
        })?;
        Ok(handle.expect("submit_job builds the job when it accepts"))
    }

    /// Waits until empty; then the first panic since the last `wait`.
    fn wait_result(&self) -> Result<(), TaskError> {
        if self.waited_by_member() {
            return Err(TaskError::WouldDeadlock);
        }
        self.wait(None);
        match self.take_panic() {
            Some(p) => Err(TaskError::Panicked(p)),
            None => Ok(()),
        }
    }

    fn wait_for(&self, timeout: Option<Duration>) -> bool {
        if timeout.is_none() && self.waited_by_member() {
            return false;
        }
        self.wait(timeout.map(|t| Instant::now() + t))
    }

    /// Is the caller a task of this group (the innermost group task running
    /// on its thread)? Its untimed wait could never end: the group counts
    /// the caller itself as pending. Read on the wait path only.
    fn waited_by_member(&self) -> bool {
        std::ptr::eq(crate::here::here().group.get(), self as *const GroupInner as *const ())
    }
}

impl Clone for Group {
    fn clone(&self) -> Group {
        self.inner().add_handle();
        Group { inner: self.inner }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: a Group holds one handle reference.
        unsafe { GroupInner::release(self.inner, HANDLE) }
    }
}

impl Group {
    pub(crate) fn new(registry: Arc<Registry>) -> Group {
        Group { inner: GroupInner::boxed(RegistryRef::counted(registry)) }
    }

    fn inner(&self) -> &GroupInner {
        // SAFETY: our handle reference keeps it live.
        unsafe { self.inner.as_ref() }
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner().registry
    }

    pub(crate) fn bind<F: FnOnce() + Send + 'static>(&self, f: F) -> impl FnOnce() + Send + 'static {
        self.inner().bind(f)
    }

    pub(crate) fn bind_handled<T, F: FnOnce() -> T + Send + 'static>(
        &self,
        f: F,
    ) -> impl FnOnce() -> T + Send + 'static {
        self.inner().bind_handled(f)
    }

    /// Spawns `f` into the group (local deque on a pool thread).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.inner().spawn(f, false)
    }

    pub(crate) fn spawn_inner<F: FnOnce() + Send + 'static>(&self, f: F, global: bool) -> Result<(), SpawnError<F>> {
        self.inner().spawn(f, global)
    }

    /// Submits `f` into the group and returns its handle.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.inner().submit(f, false)
    }

    pub(crate) fn submit_inner<F, T>(&self, f: F, global: bool) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.inner().submit(f, global)
    }

    /// Waits until the group is empty, helping on a pool thread. Returns the
    /// first panic of a spawned task since the last `wait`, if any, or
    /// `Err(TaskError::WouldDeadlock)` at once when called from a task of
    /// this group (it would wait for itself).
    pub fn wait(&self) -> Result<(), TaskError> {
        self.inner().wait_result()
    }

    /// Waits at most `timeout` (`None`: forever); true if the group emptied.
    /// `None` from a task of this group returns false at once (see `wait`).
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
        self.inner().wait_for(timeout)
    }

    /// Would an untimed wait on this group, from the calling thread, wait
    /// for itself (`TaskError::WouldDeadlock`)?
    pub fn would_deadlock(&self) -> bool {
        self.inner().waited_by_member()
    }

    /// Waits at most `d`; true if the group emptied.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        self.wait_for(Some(d))
    }

    /// Tasks spawned and not yet finished.
    pub fn pending(&self) -> usize {
        self.inner().pending() as usize
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("pending", &self.pending()).finish()
    }
}
