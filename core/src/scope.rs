//! Scoped tasks that may borrow from the caller's stack, like
//! `std::thread::scope`.
//!
//! The scope's bookkeeping lives on the caller's stack: `pending` counts
//! the scope body itself plus every unfinished task, so it reaches zero
//! exactly once, and whoever brings it there sets the owner's latch (which
//! copies what it needs before its final swap). A task therefore costs one
//! increment and one decrement of a shared counter, no reference counting.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use crate::job::HeapJob;
use crate::latch::OwnerLatch;
use crate::registry::Registry;
use crate::sync::lock;
use crate::wait::wait_on;

/// A scope handed to [`crate::Pool::scope`]'s closure. Every task spawned
/// in it finishes before `scope` returns, so tasks may borrow anything that
/// outlives the scope.
pub struct Scope<'scope, 'env: 'scope> {
    data: ScopeData,
    registry: Arc<Registry>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

struct ScopeData {
    /// 1 for the scope body + 1 per unfinished task.
    pending: AtomicUsize,
    /// Set when `pending` reaches zero.
    done: OwnerLatch,
    /// The first panic of a task.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl ScopeData {
    /// Drops one count; the last one out sets the latch.
    ///
    /// # Safety
    /// `this` must be live; after this call it may be freed.
    unsafe fn release(this: *const ScopeData) {
        // SAFETY: live until the count reaches zero and the latch is set.
        unsafe {
            if (*this).pending.fetch_sub(1, SeqCst) == 1 {
                OwnerLatch::set(&(*this).done);
            }
        }
    }
}

/// Counts one task of a scope until dropped (run, panicked or cancelled).
struct ScopeMember(*const ScopeData);

// SAFETY: ScopeData is Sync, and the scope outlives every member.
unsafe impl Send for ScopeMember {}

impl Drop for ScopeMember {
    fn drop(&mut self) {
        // SAFETY: the scope waits for this release before freeing the data.
        unsafe { ScopeData::release(self.0) }
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Spawns a task that may borrow from outside the scope. A scope's
    /// work is never lost: if the pool is shut down or its queue refuses
    /// the task, it runs right here; a queued scope task is run, never
    /// cancelled, by `Shutdown::Cancel` and is never evicted by
    /// `Reject::DiscardOldest`. Its captures are dropped before `scope`
    /// can return (the task's count is released last).
    pub fn spawn<F: FnOnce() + Send + 'scope>(&'scope self, f: F) {
        self.data.pending.fetch_add(1, SeqCst);
        let member = ScopeMember(&self.data);
        let task = move || {
            let member = member;
            if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                // SAFETY: the member keeps the data alive until it drops.
                let mut slot = lock(unsafe { &(*member.0).panic });
                if slot.is_none() {
                    *slot = Some(payload);
                }
            }
            // Counted before the member's release can end the scope.
            crate::stats::count_completion_now();
        };
        // SAFETY: `run_scope` waits until every member is released, so the
        // borrows in `task` outlive the job. The job is never dropped unrun
        // (cancelling it runs it), and running it consumes `f`, dropping
        // its captures, before `member` releases the count.
        let job = unsafe { HeapJob::into_must_run_job_ref(task) };
        if let Err(refused) = self.registry.submit_job(job, false, |job| job) {
            self.registry.run_on_caller(refused.into_task());
        }
    }
}

/// Runs `f` with a scope; waits (helping) for every task spawned in it, then
/// re-raises the first panic (the closure's own first, then a task's).
pub(crate) fn run_scope<'env, F, R>(registry: &Arc<Registry>, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    let scope = Scope {
        data: ScopeData {
            pending: AtomicUsize::new(1),
            done: OwnerLatch::for_current(registry),
            panic: Mutex::new(None),
        },
        registry: registry.clone(),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // SAFETY: `scope` lives until the latch is set (waited for below).
    unsafe { ScopeData::release(&scope.data) };
    wait_on(registry, &scope.data.done, None);
    let task_panic = lock(&scope.data.panic).take();
    match (result, task_panic) {
        (Err(p), _) | (Ok(_), Some(p)) => resume_unwind(p),
        (Ok(r), None) => r,
    }
}
