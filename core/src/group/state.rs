//! A group's shared state: the count of handles and pending tasks in one
//! word, the first panic, and how waiters wait on it.
//!
//! The state lives on the heap behind [`super::Group`] handles, or in memory
//! its owner provides ([`super::GroupPlace`], [`super::LocalGroup`]) and
//! keeps until the count reaches zero. Either way a task costs one
//! read-modify-write of the count when spawned and one when it finishes.
//!
//! Waking: a waiter about to sleep sets `SLEEPER` in the count word (after
//! registering with the signal, before its last look at the count); the
//! task that empties the group clears it in the same compare-exchange and,
//! only if it was set, borrows a handle count for the moment it takes to
//! wake the waiters, so the state cannot be freed (or its memory reused)
//! under it. With nobody asleep, finishing the last task is one
//! read-modify-write, as finishing any other is. Either the waiter's
//! read-modify-write comes first (the finisher sees the bit, and then the
//! waiter's registration) or the finisher's does (the waiter then sees the
//! group empty); a waiter that finds the bit already set relies on the same
//! order, since its look at the count precedes the emptying.
//!
//! Freeing: whoever takes the count of a heap state to zero frees it: the
//! last handle dropped after its tasks finished (`release`), or the last
//! task finished after every handle was dropped (`finish_task`, seeing
//! zero in the result of its own exchange: no extra read-modify-write).
//! Either order of destroy and completion frees the state exactly once.

use std::any::Any;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicPtr, AtomicU64};
use std::task::Waker;
use std::time::Instant;

use super::lease::Lease;
use crate::latch::{Awaitable, Signal};
use crate::registry::Registry;
use crate::wait::wait_on;
use crate::worker::WorkerThread;

/// One handle in `GroupInner::refs`; the low 39 bits count pending tasks.
pub(super) const HANDLE: u64 = 1 << 40;
/// Some waiter may be asleep: whoever empties the group must wake it.
const SLEEPER: u64 = 1 << 39;
const PENDING_MASK: u64 = SLEEPER - 1;
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

type Payload = Box<dyn Any + Send>;

/// The group's pool. Counted (an `Arc` the state owns) unless something
/// else guarantees that the registry outlives the state: a
/// [`super::LocalGroup`] borrows its `Pool`, and a state placed on one of
/// the pool's threads borrows that thread's count, counting itself in the
/// thread's [`Lease`], which hands over a count of its own if the thread
/// exits first. Not counting it spares a group two read-modify-writes of a
/// count every worker shares.
pub(super) struct RegistryRef {
    arc: ManuallyDrop<Arc<Registry>>,
    kind: RefKind,
}

enum RefKind {
    Counted,
    Borrowed,
    Leased(NonNull<Lease>),
}

impl RegistryRef {
    pub(super) fn counted(registry: Arc<Registry>) -> RegistryRef {
        RegistryRef { arc: ManuallyDrop::new(registry), kind: RefKind::Counted }
    }

    /// # Safety
    /// `registry` must outlive the returned value.
    pub(super) unsafe fn borrowed(registry: &Arc<Registry>) -> RegistryRef {
        RegistryRef { arc: ManuallyDrop::new(Self::alias(registry)), kind: RefKind::Borrowed }
    }

    /// For a state placed on `worker`, one of `registry`'s threads (the
    /// caller checked): kept alive through the thread's lease.
    pub(super) fn leased(registry: &Arc<Registry>, worker: &WorkerThread) -> RegistryRef {
        debug_assert!(Arc::ptr_eq(registry, &worker.registry));
        RegistryRef { arc: ManuallyDrop::new(Self::alias(registry)), kind: RefKind::Leased(worker.lease.place()) }
    }

    /// An `Arc` that is never dropped (see Drop) standing for a count held
    /// elsewhere; clones taken from it count normally.
    fn alias(registry: &Arc<Registry>) -> Arc<Registry> {
        // SAFETY: a pointer from a live `Arc`; the result is never dropped,
        // so the count it stands for is never given back twice.
        unsafe { Arc::from_raw(Arc::as_ptr(registry)) }
    }
}

// SAFETY: the registry is Send + Sync; a lease is released once, by the
// drop, and `Lease::release` works from any thread (it checks whether it
// runs on the lease's own).
unsafe impl Send for RegistryRef {}
unsafe impl Sync for RegistryRef {}

impl std::ops::Deref for RegistryRef {
    type Target = Arc<Registry>;
    fn deref(&self) -> &Arc<Registry> {
        &self.arc
    }
}

impl Drop for RegistryRef {
    fn drop(&mut self) {
        match self.kind {
            // SAFETY: dropped once, here; the others are never dropped.
            RefKind::Counted => unsafe { ManuallyDrop::drop(&mut self.arc) },
            RefKind::Borrowed => {}
            // SAFETY: the state is being dropped: its last use of the
            // registry is behind it, and its lease is released once.
            RefKind::Leased(lease) => unsafe { Lease::release(lease) },
        }
    }
}

pub(crate) struct GroupInner {
    /// Handles × HANDLE + SLEEPER + pending tasks. At zero a heap state is freed and
    /// a placed one may be released by its owner.
    refs: AtomicU64,
    pub(super) registry: RegistryRef,
    signal: Signal,
    /// First panic since the last `wait`: null, or a leaked `Box<Payload>`.
    /// A pointer rather than a mutex: a group that never panics never
    /// touches it, and setting it is one compare-exchange.
    panic: AtomicPtr<Payload>,
    /// A state allocated by [`GroupInner::boxed`], freed when `refs`
    /// reaches zero, through this pointer (None: the memory belongs to
    /// whoever placed the state). The pointer `Box::into_raw` returned,
    /// kept because it may free: those in handles may too, but members
    /// and waiters derive theirs from a shared reference (`&self`), which
    /// may only read.
    heap: Option<HeapPtr>,
}

#[derive(Clone, Copy)]
struct HeapPtr(NonNull<GroupInner>);

// SAFETY: only used to free the state, once, by whoever drops its last
// count; the state itself is Send + Sync.
unsafe impl Send for HeapPtr {}
unsafe impl Sync for HeapPtr {}

impl GroupInner {
    /// A state with one handle and no tasks, for memory its owner keeps.
    pub(super) fn new(registry: RegistryRef) -> GroupInner {
        GroupInner {
            refs: AtomicU64::new(HANDLE),
            registry,
            signal: Signal::default(),
            panic: AtomicPtr::new(std::ptr::null_mut()),
            heap: None,
        }
    }

    /// A state with one handle and no tasks on the heap, freed by whoever
    /// drops its last count.
    pub(super) fn boxed(registry: RegistryRef) -> NonNull<GroupInner> {
        let raw = Box::into_raw(Box::new(GroupInner::new(registry)));
        // SAFETY: from Box::into_raw, so non-null, and not shared yet.
        unsafe {
            (*raw).heap = Some(HeapPtr(NonNull::new_unchecked(raw)));
            NonNull::new_unchecked(raw)
        }
    }

    /// Frees a heap state. Out of line: inlined, it made every task's
    /// finish longer (callgrind, `bench/c/groups_callgrind.sh`: W4 313
    /// instructions per task against 296).
    ///
    /// # Safety
    /// `heap` is the state's own pointer and no count of it is left.
    #[cold]
    #[inline(never)]
    unsafe fn free(heap: HeapPtr) {
        // SAFETY: per the contract; it came from Box::into_raw.
        drop(unsafe { Box::from_raw(heap.0.as_ptr()) });
    }

    pub(super) fn pending(&self) -> u64 {
        self.refs.load(SeqCst) & PENDING_MASK
    }

    /// Sets `SLEEPER` unless the group is empty or the bit is set; then
    /// probes. See the module comment for why this cannot miss a wake-up.
    fn mark_sleeper_and_probe(&self) -> bool {
        let refs = self.refs.load(SeqCst);
        if refs & PENDING_MASK == 0 {
            return true;
        }
        if refs & SLEEPER == 0 {
            self.refs.fetch_or(SLEEPER, SeqCst);
        }
        self.probe()
    }

    /// An awaiting future's look (`super::GroupFuture`): true if the group
    /// is empty (the future's waker then taken back, if `registered`);
    /// else `waker` is stored under `key` for the task that empties the
    /// group, `registered` set, and false. Stored before the look that
    /// marks `SLEEPER`, as a sleeping waiter registers before its own
    /// (module comment): the finisher that empties the group then sees the
    /// bit and wakes the stored wakers.
    pub(super) fn poll_empty(&self, key: u64, registered: &mut bool, waker: &Waker) -> bool {
        if !self.probe() {
            self.signal.register_waker(key, waker);
            *registered = true;
            if !self.mark_sleeper_and_probe() {
                return false;
            }
        }
        if std::mem::take(registered) {
            self.signal.unregister_waker(key);
        }
        true
    }

    /// Takes back the waker a dropped future stored under `key`.
    pub(super) fn forget_waker(&self, key: u64) {
        self.signal.unregister_waker(key);
    }

    /// The caller holds the only count (its handle): no task, no other
    /// handle, no waker in flight, and none can appear.
    pub(super) fn sole_handle(&self) -> bool {
        self.refs.load(Acquire) & !SLEEPER == HANDLE
    }

    /// Nothing counted at all: no handle, no task, no waker in flight.
    /// Acquire: whatever the last releaser wrote is visible.
    pub(super) fn released(&self) -> bool {
        self.refs.load(Acquire) & !SLEEPER == 0
    }

    pub(super) fn add_handle(&self) {
        let before = self.refs.fetch_add(HANDLE, Relaxed);
        if before >> 40 >= MAX_HANDLES {
            count_overflow("handle");
        }
    }

    /// Drops `n` from `refs`; frees a heap state if nothing is left.
    ///
    /// # Safety
    /// `this` must hold `n` of the references counted in `refs`; after the
    /// call it may be freed.
    pub(super) unsafe fn release(this: NonNull<GroupInner>, n: u64) {
        // SAFETY: we hold n references, so the state is live.
        let inner = unsafe { this.as_ref() };
        let heap = inner.heap;
        // A SLEEPER bit left behind by a waiter that went away is no count.
        if (inner.refs.fetch_sub(n, Release) - n) & !SLEEPER == 0
            && let Some(heap) = heap
        {
            std::sync::atomic::fence(Acquire);
            // SAFETY: no references are left.
            unsafe { Self::free(heap) };
        }
    }

    /// Counts one more pending task.
    #[inline]
    pub(super) fn member(&self) -> Member {
        let before = self.refs.fetch_add(1, SeqCst);
        if before & PENDING_MASK >= MAX_PENDING {
            count_overflow("pending task");
        }
        Member(NonNull::from(self))
    }

    /// A task finished (or was dropped unrun).
    ///
    /// # Safety
    /// `this` must hold one pending reference, which this consumes.
    unsafe fn finish_task(this: NonNull<GroupInner>) {
        // SAFETY: our pending reference keeps it live.
        let inner = unsafe { this.as_ref() };
        // Read while our count holds the state: once it is given up, a
        // placed state's owner may reuse the memory at once.
        let heap = inner.heap;
        let mut refs = inner.refs.load(Relaxed);
        let (wake, next) = loop {
            // The last pending task, if a waiter may sleep, turns its
            // reference into a handle reference, so it can wake waiters
            // without racing a free.
            let wake = refs & PENDING_MASK == 1 && refs & SLEEPER != 0;
            let next = if wake { (refs - 1 + HANDLE) & !SLEEPER } else { refs - 1 };
            // SeqCst on success: the waiters' protocol (module comment),
            // and for the free below both halves of AcqRel. Release
            // publishes this task's writes to whoever drops the last count;
            // Acquire, if this is the last, makes every earlier release of
            // a count (handles' `fetch_sub(Release)`, other tasks' exchanges:
            // one release sequence, since every change of `refs` is a
            // read-modify-write) happen before the free.
            match inner.refs.compare_exchange_weak(refs, next, SeqCst, Relaxed) {
                Ok(_) => break (wake, next),
                Err(actual) => refs = actual,
            }
        };
        if wake {
            inner.signal.notify();
            // SAFETY: the borrowed handle reference from above.
            unsafe { Self::release(this, HANDLE) };
        } else if next == 0
            && let Some(heap) = heap
        {
            // The last reference was this task's: every handle was dropped
            // while it was pending (a `Group` dropped, `wspool_group_destroy`
            // with tasks pending), so nobody else will free the state. No
            // SLEEPER bit can be set here (`wake` was false with no task
            // left), and no count can come back: a new handle or task needs
            // a live handle. A placed state at zero is its owner's to reuse
            // (`released`), and untouched here.
            // SAFETY: no reference is left.
            unsafe { Self::free(heap) };
        }
    }

    fn record_panic(&self, payload: Payload) {
        if !self.panic.load(Relaxed).is_null() {
            return;
        }
        let boxed = Box::into_raw(Box::new(payload));
        if self.panic.compare_exchange(std::ptr::null_mut(), boxed, AcqRel, Relaxed).is_err() {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(boxed) });
        }
    }

    /// Takes the first panic recorded since the last call.
    pub(super) fn take_panic(&self) -> Option<Payload> {
        if self.panic.load(Relaxed).is_null() {
            return None;
        }
        let p = self.panic.swap(std::ptr::null_mut(), Acquire);
        // SAFETY: a non-null pointer is a leaked Box<Payload> that the swap
        // took out of the slot, so only we own it.
        (!p.is_null()).then(|| *unsafe { Box::from_raw(p) })
    }

    /// Waits until no task is pending or `deadline` passes; true if empty.
    ///
    /// An untimed wait on a pool thread first runs the jobs on top of its
    /// own deque (the tasks it just spawned, typically this group's): no
    /// clock read, no scan of other workers, often no wait at all. Then it
    /// waits as every waiter does (`wait.rs`): helping with its isolation
    /// region's work, parked when there is none.
    pub(super) fn wait(&self, deadline: Option<Instant>) -> bool {
        if self.probe() {
            return true;
        }
        if deadline.is_none()
            && let Some(worker) = self.registry.current_worker()
        {
            return self.run_own_jobs(worker) || worker.wait_until(self, None);
        }
        wait_on(&self.registry, self, deadline)
    }

    /// Runs jobs popped from `worker`'s own deque while the group has
    /// pending tasks, under the same conditions as any helping wait (not in
    /// a blocking region, enough stack left, only jobs of the waiter's
    /// region: others are handed over). True once the group is empty.
    fn run_own_jobs(&self, worker: &WorkerThread) -> bool {
        if worker.deque.is_empty() || !worker.may_run_nested() {
            return false;
        }
        let depth = worker.help_depth.get();
        worker.help_depth.set(depth + 1);
        let _restore = RestoreDepth(worker, depth);
        while let Some(job) = worker.deque.pop() {
            worker.count_local_pop();
            worker.run_or_hand_over(job);
            if self.probe() {
                return true;
            }
            if worker.deque.is_empty() {
                break;
            }
        }
        false
    }

    /// For the owner of a placed state: gives up its handle, then waits
    /// until every count is gone (no other handle, no pending task, no
    /// waker in flight), helping meanwhile. Then nothing touches the state
    /// again, and its memory may be reused.
    ///
    /// # Safety
    /// The caller holds the state's owning handle count, which this consumes.
    pub(super) unsafe fn finish_placed(&self) {
        // Usually every task has finished and nobody else holds a handle:
        // then nobody can touch the state any more, and the handle need
        // not even be given back.
        if self.sole_handle() {
            return;
        }
        // SAFETY: the caller's count; a placed state is not freed at zero.
        unsafe { Self::release(NonNull::from(self), HANDLE) };
        self.wait_released();
    }

    fn wait_released(&self) {
        while !self.released() {
            self.wait(None);
            // Only the last task's wake-up call is left: a few instructions.
            let mut spins = 0u32;
            while !self.released() && self.pending() == 0 {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

struct RestoreDepth<'a>(&'a WorkerThread, u32);

impl Drop for RestoreDepth<'_> {
    fn drop(&mut self) {
        self.0.help_depth.set(self.1);
    }
}

impl Drop for GroupInner {
    fn drop(&mut self) {
        drop(self.take_panic());
    }
}

impl Awaitable for GroupInner {
    fn probe(&self) -> bool {
        self.pending() == 0
    }
    fn block_until(&self, deadline: Option<Instant>) -> bool {
        // The signal counts this waiter before each look that may precede
        // a sleep; the look marks the group (module comment).
        self.signal.wait_until(|| self.probe() || self.mark_sleeper_and_probe(), deadline)
    }
    fn register_sleeper(&self, registry: &Arc<Registry>, index: usize) {
        self.signal.register_sleeper(registry, index);
        // The caller probes again before it parks.
        self.mark_sleeper_and_probe();
    }
    fn unregister_sleeper(&self, index: usize) {
        self.signal.unregister_sleeper(index)
    }
    fn wait_note(&self) -> (u64, usize) {
        (crate::dump::WAIT_GROUP, self as *const Self as usize)
    }
}

/// Counts one task of the group; its drop (run, panicked or cancelled)
/// uncounts it, so a cancelled task can never leave a waiter hanging.
pub(crate) struct Member(NonNull<GroupInner>);

impl Member {
    /// The group's identity, for `Here::group`.
    #[inline(always)]
    pub(crate) fn group_ptr(&self) -> *const () {
        self.0.as_ptr() as *const ()
    }
}

// SAFETY: GroupInner is Sync, and the member's count keeps it live.
unsafe impl Send for Member {}

impl Member {
    pub(super) fn record_panic(&self, payload: Payload) {
        // SAFETY: the member's reference keeps the state live.
        unsafe { self.0.as_ref() }.record_panic(payload)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // SAFETY: a member holds one pending reference.
        unsafe { GroupInner::finish_task(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Weak};

    use super::super::Group;
    use crate::registry::Registry;

    /// A registry with no thread: a group's state on it is driven by hand,
    /// so these tests run under Miri. The returned `Weak` sees the registry
    /// freed, which happens only when every group state on it was.
    fn threadless() -> (Arc<Registry>, Weak<Registry>) {
        let config = crate::Pool::builder().min_threads(1).growth(crate::Growth::Fixed).validate().unwrap();
        let registry = Arc::new(Registry::new(config));
        let weak = Arc::downgrade(&registry);
        (registry, weak)
    }

    #[test]
    fn a_group_dropped_with_a_task_pending_is_freed_by_that_task() {
        // Issue 30, item 4: destroy while pending, then the task finishes.
        for run in [true, false] {
            let (registry, weak) = threadless();
            let g = Group::new(registry);
            let task = g.bind(|| ());
            drop(g);
            assert!(weak.upgrade().is_some(), "the pending task still holds the state");
            if run {
                task();
            } else {
                drop(task); // dropped unrun (a cancelled task)
            }
            assert!(weak.upgrade().is_none(), "the last task freed the state (ran: {run})");
        }
    }

    #[test]
    fn a_group_is_freed_once_whatever_order_its_last_task_and_handles_go() {
        // The last task and the last handle race on two threads; Miri with
        // several seeds tries the interleavings (and sees a double free or
        // a leak), a native run tries a few hundred.
        let rounds = if cfg!(miri) { 4 } else { 300 };
        for _ in 0..rounds {
            let (registry, weak) = threadless();
            let g = Group::new(registry);
            let g2 = g.clone();
            let tasks: Vec<_> = (0..2).map(|_| g.bind(|| ())).collect();
            let [a, b]: [_; 2] = tasks.try_into().unwrap_or_else(|_| unreachable!());
            let t = std::thread::spawn(move || {
                a();
                drop(g2);
            });
            drop(g);
            b();
            t.join().unwrap();
            assert!(weak.upgrade().is_none(), "every count went, and the state with them");
        }
    }

    #[test]
    fn a_waited_group_is_still_freed_by_its_last_handle() {
        // The sleeper path: the last task borrows a handle count to wake,
        // and the handle dropped after it frees the state.
        let (registry, weak) = threadless();
        let g = Group::new(registry);
        let task = g.bind(|| ());
        let t = std::thread::spawn(task);
        assert!(g.wait_for(None));
        t.join().unwrap();
        drop(g);
        assert!(weak.upgrade().is_none());
    }
}
