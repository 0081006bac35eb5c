//! Groups: fire-and-forget tasks you can wait for together.
//!
//! A group's shared state counts, in one atomic word, both the handles
//! (`Group` clones) and the unfinished tasks, and is freed when both reach
//! zero. A task therefore costs one read-modify-write when spawned and one
//! when it finishes; the task that finishes last borrows a handle count for
//! the moment it takes to wake the waiters, so the state cannot be freed
//! under it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{SpawnError, TaskError};
use crate::job::HeapJob;
use crate::latch::{Awaitable, Signal};
use crate::registry::Registry;
use crate::sync::lock;
use crate::task::TaskHandle;
use crate::wait::wait_on;

/// One handle in `GroupInner::refs`; the low bits count pending tasks.
const HANDLE: u64 = 1 << 40;
const PENDING_MASK: u64 = HANDLE - 1;
/// Past this many handles (or pending tasks) the next one would carry into
/// the other field (or wrap the word) and free the state under live users:
/// abort instead, as `Arc` does on a reference-count overflow.
const MAX_HANDLES: u64 = (u64::MAX >> 40) - 1;
const MAX_PENDING: u64 = PENDING_MASK - 1;

#[cold]
#[inline(never)]
fn count_overflow(what: &str) -> ! {
    eprintln!("wspool: Group {what} count overflow (a leak of handles or tasks?); aborting");
    std::process::abort()
}

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

struct GroupInner {
    /// Handles × HANDLE + pending tasks. Freed when it reaches zero.
    refs: AtomicU64,
    registry: Arc<Registry>,
    signal: Signal,
    /// First panic since the last `wait`.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl GroupInner {
    fn pending(&self) -> u64 {
        self.refs.load(SeqCst) & PENDING_MASK
    }

    /// Drops `n` from `refs`; frees the state if nothing is left.
    ///
    /// # Safety
    /// `this` must hold `n` of the references counted in `refs`.
    unsafe fn release(this: NonNull<GroupInner>, n: u64) {
        // SAFETY: we hold n references, so the state is live.
        if unsafe { this.as_ref() }.refs.fetch_sub(n, Release) == n {
            std::sync::atomic::fence(Acquire);
            // SAFETY: no references are left; it came from Box::leak.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// A task finished (or was dropped unrun).
    ///
    /// # Safety
    /// `this` must hold one pending reference, which this consumes.
    unsafe fn finish_task(this: NonNull<GroupInner>) {
        // SAFETY: our pending reference keeps it live.
        let inner = unsafe { this.as_ref() };
        let mut refs = inner.refs.load(Relaxed);
        loop {
            // The last pending task turns its reference into a handle
            // reference, so it can wake waiters without racing a free.
            let next = if refs & PENDING_MASK == 1 { refs - 1 + HANDLE } else { refs - 1 };
            match inner.refs.compare_exchange_weak(refs, next, SeqCst, Relaxed) {
                Ok(_) => break,
                Err(actual) => refs = actual,
            }
        }
        if refs & PENDING_MASK == 1 {
            inner.signal.notify();
            // SAFETY: the borrowed handle reference from above.
            unsafe { Self::release(this, HANDLE) };
        }
    }
}

impl Awaitable for GroupInner {
    fn probe(&self) -> bool {
        self.pending() == 0
    }
    fn block_until(&self, deadline: Option<Instant>) -> bool {
        self.signal.wait_until(|| self.probe(), deadline)
    }
    fn register_sleeper(&self, registry: &Arc<Registry>, index: usize) {
        self.signal.register_sleeper(registry, index)
    }
    fn unregister_sleeper(&self, index: usize) {
        self.signal.unregister_sleeper(index)
    }
}

/// Counts one task of the group; its drop (run, panicked or cancelled)
/// uncounts it, so a cancelled task can never leave a waiter hanging.
pub(crate) struct Member(NonNull<GroupInner>);

// SAFETY: as for Group.
unsafe impl Send for Member {}

impl Member {
    fn record_panic(&self, payload: Box<dyn Any + Send>) {
        // SAFETY: the member's reference keeps the state live.
        let mut slot = lock(&unsafe { self.0.as_ref() }.panic);
        if slot.is_none() {
            *slot = Some(payload);
        }
    }
}

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
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(()) => drop(member),
            Err(payload) => {
                member.record_panic(payload);
                drop(member);
                // Let the pool (or the task handle) count the panic too.
                resume_unwind(Box::new("group task panicked"))
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // SAFETY: a member holds one pending reference.
        unsafe { GroupInner::finish_task(self.0) }
    }
}

impl Clone for Group {
    fn clone(&self) -> Group {
        let before = self.inner().refs.fetch_add(HANDLE, Relaxed);
        if before >> 40 >= MAX_HANDLES {
            count_overflow("handle");
        }
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
        let inner = Box::new(GroupInner {
            refs: AtomicU64::new(HANDLE),
            registry,
            signal: Signal::default(),
            panic: Mutex::new(None),
        });
        Group { inner: NonNull::from(Box::leak(inner)) }
    }

    fn inner(&self) -> &GroupInner {
        // SAFETY: our handle reference keeps it live.
        unsafe { self.inner.as_ref() }
    }

    pub(crate) fn member(&self) -> Member {
        let before = self.inner().refs.fetch_add(1, SeqCst);
        if before & PENDING_MASK >= MAX_PENDING {
            count_overflow("pending task");
        }
        Member(self.inner)
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner().registry
    }

    /// Binds `f` to the group: the returned closure counts as one pending
    /// task until it has run or been dropped unrun. Either way `f` and its
    /// captures are dropped *before* the count is released, so `wait`
    /// never returns while a task's destructors (a C task's `on_cancel`)
    /// still run.
    /// A panic is recorded for `wait` and re-raised for the pool to count.
    pub(crate) fn bind<F: FnOnce() + Send + 'static>(&self, f: F) -> impl FnOnce() + Send + 'static {
        let task = GroupTask { f, member: self.member() };
        move || task.call()
    }

    /// [`Group::bind`] for a task with a handle: the handle reports its
    /// panic, with the original payload.
    pub(crate) fn bind_handled<T, F: FnOnce() -> T + Send + 'static>(
        &self,
        f: F,
    ) -> impl FnOnce() -> T + Send + 'static {
        let task = GroupTask { f, member: self.member() };
        move || {
            let GroupTask { f, member } = task;
            let value = f();
            drop(member);
            value
        }
    }

    /// Spawns `f` into the group (local deque on a pool thread).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.spawn_inner(f, false)
    }

    pub(crate) fn spawn_inner<F: FnOnce() + Send + 'static>(&self, f: F, global: bool) -> Result<(), SpawnError<F>> {
        self.inner().registry.submit_job(f, global, |f| HeapJob::into_job_ref(self.bind(f)))
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
        let registry = &self.inner().registry;
        let mut handle = None;
        registry.submit_job(f, global, |f| {
            let (h, job) = TaskHandle::new(registry, self.bind_handled(f));
            handle = Some(h);
            job
        })?;
        Ok(handle.expect("submit_job builds the job when it accepts"))
    }

    /// Waits until the group is empty, helping on a pool thread. Returns the
    /// first panic of a spawned task since the last `wait`, if any.
    pub fn wait(&self) -> Result<(), TaskError> {
        self.wait_for(None);
        match lock(&self.inner().panic).take() {
            Some(p) => Err(TaskError::Panicked(p)),
            None => Ok(()),
        }
    }

    /// Waits at most `timeout` (`None`: forever); true if the group emptied.
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        wait_on(&self.inner().registry, self.inner(), deadline)
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
