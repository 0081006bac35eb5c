//! Groups whose state lives in memory their owner provides: the caller's
//! stack ([`LocalGroup`], through [`Pool::group_scope`]) or any memory the
//! caller keeps until it finalises the group ([`GroupPlace`], what the C
//! API's `wspool_group_init` uses). No allocation, and the state's count
//! reaching zero is what lets the owner go: every pending task, and the
//! last task's wake-up call, are finished before the memory can be reused.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;
use std::time::Duration;

use super::Group;
use super::state::{GroupInner, RegistryRef};
use crate::error::{SpawnError, TaskError};
use crate::pool::Pool;
use crate::task::TaskHandle;

/// A group whose state lives on the stack of [`Pool::group_scope`]. It
/// offers what [`Group`] offers except cloning and naming it in
/// [`crate::SpawnOptions`] (which takes a `Group`): tasks cannot refer to
/// it (they are `'static`), and the scope waits for all of them before it
/// returns.
pub struct LocalGroup<'pool> {
    inner: GroupInner,
    pool: PhantomData<&'pool Pool>,
}

impl LocalGroup<'_> {
    /// Spawns `f` into the group (local deque on a pool thread).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), SpawnError<F>> {
        self.inner.spawn(f, false)
    }

    /// Submits `f` into the group and returns its handle.
    pub fn submit<F, T>(&self, f: F) -> Result<TaskHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.inner.submit(f, false)
    }

    /// Waits until the group is empty, helping on a pool thread. Returns the
    /// first panic of a spawned task since the last `wait`, if any.
    pub fn wait(&self) -> Result<(), TaskError> {
        self.inner.wait_result()
    }

    /// Waits at most `timeout` (`None`: forever); true if the group emptied.
    pub fn wait_for(&self, timeout: Option<Duration>) -> bool {
        self.inner.wait_for(timeout)
    }

    /// Waits at most `d`; true if the group emptied.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        self.wait_for(Some(d))
    }

    /// Tasks spawned and not yet finished.
    pub fn pending(&self) -> usize {
        self.inner.pending() as usize
    }
}

impl std::fmt::Debug for LocalGroup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalGroup").field("pending", &self.pending()).finish()
    }
}

impl Pool {
    /// Runs `f` with a group whose state lives on this call's stack: a
    /// group per fork costs no allocation and no reference counting. When
    /// `f` returns (or panics) the call waits, helping on a pool thread,
    /// until every task spawned into the group has finished, then
    /// re-raises `f`'s panic, else the first task panic that no
    /// [`LocalGroup::wait`] reported.
    ///
    /// ```
    /// let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.group_scope(|g| {
    ///     for i in 0..4 {
    ///         let tx = tx.clone();
    ///         g.spawn(move || tx.send(i * i).unwrap()).unwrap();
    ///     }
    ///     g.wait().unwrap();
    /// });
    /// assert_eq!(rx.try_iter().sum::<i32>(), 14);
    /// ```
    pub fn group_scope<R>(&self, f: impl FnOnce(&LocalGroup<'_>) -> R) -> R {
        // SAFETY: `self` outlives this call, and the state does not.
        let registry = unsafe { RegistryRef::borrowed(self.registry()) };
        let group = LocalGroup { inner: GroupInner::new(registry), pool: PhantomData };
        let result = catch_unwind(AssertUnwindSafe(|| f(&group)));
        // SAFETY: the state's own handle count, given up once; the state
        // lives in this frame until `finish_placed` saw every count go.
        unsafe { group.inner.finish_placed() };
        let task_panic = group.inner.take_panic();
        match (result, task_panic) {
            (Err(p), _) | (Ok(_), Some(p)) => resume_unwind(p),
            (Ok(r), None) => r,
        }
    }
}

/// Group state in memory that the caller provides and keeps, unmoved,
/// until [`GroupPlace::fini`] returned: the C API's `wspool_group_init`
/// places it in a caller's (typically stack) buffer. [`GroupPlace::init`]
/// hands out a [`Group`] handle to it, usable like any group's.
pub struct GroupPlace {
    inner: GroupInner,
}

impl GroupPlace {
    /// Writes a fresh, empty group state for `pool` to `place` and returns
    /// a handle to it.
    ///
    /// # Safety
    /// `place` must be valid for writes and aligned; the memory must not
    /// be moved, reused or freed until `fini` (given this handle) returned;
    /// `fini` must be called exactly once per `init`. Handles cloned from
    /// the returned one must all be dropped for `fini` to return. Nothing
    /// else: called anywhere, on one of `pool`'s threads too, the state
    /// keeps what it needs of the pool alive until `fini`, so it may
    /// outlive the calling task and `pool` (spawns then fail with
    /// `Shutdown`). On a pool thread that costs no shared count: the state
    /// counts itself in the thread's lease (`lease.rs`).
    pub unsafe fn init(place: *mut GroupPlace, pool: &Pool) -> Group {
        let registry = pool.registry();
        let registry = match registry.current_worker() {
            Some(worker) => RegistryRef::leased(registry, worker),
            None => RegistryRef::counted(registry.clone()),
        };
        // SAFETY: per the contract.
        unsafe { place.write(GroupPlace { inner: GroupInner::new(registry) }) };
        // SAFETY: just written; `&raw` avoids a reference to a place the
        // caller may share.
        Group { inner: unsafe { NonNull::new_unchecked(&raw mut (*place).inner) } }
    }

    /// Drops `handle`, waits (helping on a pool thread) until every task of
    /// the group has finished and every other handle to it was dropped,
    /// then releases the state. Afterwards no task or thread touches
    /// `place`: its memory may be reused. A task panic not reported by a
    /// `wait` is dropped.
    ///
    /// # Safety
    /// `place` was initialised by `init`, which returned `handle`, and is
    /// finalised once.
    pub unsafe fn fini(place: *mut GroupPlace, handle: Group) {
        let handle = ManuallyDrop::new(handle);
        debug_assert!(std::ptr::eq(handle.inner.as_ptr(), unsafe { &raw mut (*place).inner }));
        // SAFETY: the handle's count, given up once (ManuallyDrop); the
        // state is live until every count went, and ours to drop then.
        unsafe {
            (*place).inner.finish_placed();
            std::ptr::drop_in_place(place);
        }
    }
}
