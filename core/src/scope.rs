//! Scoped tasks that may borrow from the caller's stack, like
//! `std::thread::scope`.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};

use crate::job::HeapJob;
use crate::latch::CountLatch;
use crate::registry::Registry;
use crate::sync::lock;
use crate::worker::wait_on;

/// A scope handed to [`crate::Pool::scope`]'s closure. Every task spawned
/// in it finishes before `scope` returns, so tasks may borrow anything that
/// outlives the scope.
pub struct Scope<'scope, 'env: 'scope> {
    data: Arc<ScopeData>,
    registry: Arc<Registry>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

struct ScopeData {
    latch: CountLatch,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<'scope> Scope<'scope, '_> {
    /// Spawns a task that may borrow from outside the scope. If the pool
    /// is shut down or its queue refuses the task, it runs right here, so
    /// a scope's work is never lost.
    pub fn spawn<F: FnOnce() + Send + 'scope>(&'scope self, f: F) {
        self.data.latch.increment();
        let member = ScopeMember(self.data.clone());
        let task = move || {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                let mut slot = lock(&member.0.panic);
                if slot.is_none() {
                    *slot = Some(payload);
                }
            }
        };
        // SAFETY: `run_scope` waits for the latch before returning, and the
        // latch counts this task until `member` is dropped (run or not), so
        // every borrow in `task` outlives the job.
        let job = unsafe { HeapJob::into_job_ref_unchecked(task) };
        if let Err(refused) = self.registry.submit_job(job, false, |job| job) {
            self.registry.run_on_caller(refused.into_task());
        }
    }
}

/// Counts one task of a scope until dropped.
struct ScopeMember(Arc<ScopeData>);

impl Drop for ScopeMember {
    fn drop(&mut self) {
        self.0.latch.decrement();
    }
}

/// Runs `f` with a scope; waits (helping) for every task spawned in it, then
/// re-raises the first panic (the closure's own first, then a task's).
pub(crate) fn run_scope<'env, F, R>(registry: &Arc<Registry>, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    let scope = Scope {
        data: Arc::new(ScopeData { latch: CountLatch::default(), panic: Mutex::new(None) }),
        registry: registry.clone(),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    wait_on(registry, &scope.data.latch, None);
    let task_panic = lock(&scope.data.panic).take();
    match (result, task_panic) {
        (Err(p), _) | (Ok(_), Some(p)) => resume_unwind(p),
        (Ok(r), None) => r,
    }
}
