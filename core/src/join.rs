//! `join(a, b)`: fork-join without heap allocation on pool threads.
//!
//! On a worker, `b` is pushed onto the worker's own deque as a job that
//! lives on this stack frame, `a` runs here, then the worker pops `b` back
//! and runs it (the common, uncontended case) or, if a thief took it, helps
//! until the thief is done. The frame cannot return before `b` finished:
//! every path waits on `b`'s latch, panics included.
//!
//! On a foreign thread, `b` is a small shared job in the global queue that
//! whoever claims it first runs, the caller included, so a join from
//! outside the pool never waits for a busy pool to get round to `b`.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::thread::Result as ThreadResult;

use crate::job::{JobRef, JobVTable, Payload};
use crate::latch::{Awaitable, OnceLatch, OwnerLatch};
use crate::registry::Registry;
use crate::worker::{AbortOnUnwind, WorkerThread};

fn count_panic() {
    if let Some(worker) = WorkerThread::current() {
        worker.registry.counters.panicked.add(1);
    }
}

fn combine<RA, RB>(ra: ThreadResult<RA>, rb: ThreadResult<RB>) -> (RA, RB) {
    match (ra, rb) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), _) | (_, Err(p)) => resume_unwind(p),
    }
}

/// The second half of a join, on the joiner's stack.
struct StackJob<F, R> {
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<ThreadResult<R>>>,
    latch: OwnerLatch,
}

impl<F: FnOnce() -> R + Send, R: Send> StackJob<F, R> {
    // A join's half must run even when "cancelled" (shutdown): the joiner
    // is waiting for it. So both entries run it.
    const VTABLE: JobVTable = JobVTable { run: Self::run_job, cancel: Self::cancel_job, evictable: false };

    /// # Safety
    /// The job must not be moved or freed until its latch is set.
    unsafe fn job_ref(&self) -> JobRef {
        // SAFETY: the caller keeps `self` alive until the latch is set, and
        // the job is `Send` because F and R are.
        unsafe { JobRef::from_pointer(NonNull::from(self).cast(), &Self::VTABLE) }
    }

    unsafe fn run_job(payload: *mut Payload) -> bool {
        // The joiner's frame stays alive only until the latch is set: if
        // anything here unwound past the set, the joiner would wait forever
        // or, worse, return early. Nothing can (the user's code is
        // contained), and the guard makes sure of it.
        let guard = AbortOnUnwind("a join's second half");
        // SAFETY: built by `job_ref`.
        let this = unsafe { JobRef::pointer(payload) }.cast::<Self>().as_ptr() as *const Self;
        // SAFETY: live until the latch is set below; only one runner.
        unsafe {
            let func = (*(*this).func.get()).take().expect("join half runs once");
            let result = catch_unwind(AssertUnwindSafe(func));
            if result.is_err() {
                count_panic();
            }
            *(*this).result.get() = Some(result);
            OwnerLatch::set(&(*this).latch);
        }
        std::mem::forget(guard);
        // Half of a join is not a submitted task: not counted as completed.
        false
    }

    unsafe fn cancel_job(payload: *mut Payload) -> bool {
        // SAFETY: as for run_job.
        unsafe { Self::run_job(payload) }
    }

    fn into_result(self) -> ThreadResult<R> {
        self.result.into_inner().expect("join half finished")
    }
}

pub(crate) fn join_on_worker<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = StackJob {
        func: UnsafeCell::new(Some(b)),
        result: UnsafeCell::new(None),
        latch: OwnerLatch::for_worker(&worker.registry, worker.index),
    };
    // The job is built in its deque slot: built here and moved there, its
    // words were reloaded 16 bytes at a time from two 8-byte stores, a
    // store-forwarding stall that `perf annotate` put at a fifth of a
    // one-thread `join`'s cycles.
    let mut b_id = (0, std::ptr::null());
    worker.registry.push_local(worker, || {
        // SAFETY: `job_b` stays on this frame until its latch is set
        // (every path below waits for it).
        let job = unsafe { job_b.job_ref() };
        // SAFETY: a pointer job.
        b_id = unsafe { job.pointer_id() };
        job
    });
    let ra = catch_unwind(AssertUnwindSafe(a));
    while !job_b.latch.probe() {
        match worker.deque.pop() {
            Some(job) if job.is(b_id) => {
                // Nobody took `b`: run it right here, with no latch to set.
                std::mem::forget(job);
                worker.registry.on_dequeue();
                let func = job_b.func.into_inner().expect("join half runs once");
                let rb = catch_unwind(AssertUnwindSafe(func));
                if rb.is_err() {
                    count_panic();
                }
                return combine(ra, rb);
            }
            // Work `a` spawned and left behind: run it (if it is of this
            // task's region), then look again.
            Some(job) => worker.run_or_hand_over(job),
            None => {
                worker.wait_until(&job_b.latch, None);
            }
        }
    }
    combine(ra, job_b.into_result())
}

/// The second half of a join started off the pool.
struct SharedJob<F, R> {
    claimed: AtomicBool,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<ThreadResult<R>>>,
    latch: OnceLatch,
}

// SAFETY: func/result are touched only by the claimer, then read by the
// joiner after the latch.
unsafe impl<F: Send, R: Send> Sync for SharedJob<F, R> {}

impl<F: FnOnce() -> R + Send, R: Send> SharedJob<F, R> {
    const VTABLE: JobVTable = JobVTable { run: Self::run_job, cancel: Self::cancel_job, evictable: false };

    fn run_if_unclaimed(&self) -> bool {
        if self.claimed.swap(true, SeqCst) {
            return false;
        }
        // SAFETY: the claimer owns func and result until the latch.
        unsafe {
            let func = (*self.func.get()).take().expect("claimed once");
            let result = catch_unwind(AssertUnwindSafe(func));
            if result.is_err() {
                count_panic();
            }
            *self.result.get() = Some(result);
        }
        self.latch.set();
        true
    }

    unsafe fn run_job(payload: *mut Payload) -> bool {
        // SAFETY: created from Arc::into_raw in `join_foreign`.
        let this = unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Self) };
        this.run_if_unclaimed();
        // Half of a join is not a submitted task: not counted as completed.
        false
    }

    unsafe fn cancel_job(payload: *mut Payload) -> bool {
        // The joiner claims and runs it itself.
        // SAFETY: as for run_job.
        drop(unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Self) });
        false
    }
}

pub(crate) fn join_foreign<A, B, RA, RB>(registry: &Arc<Registry>, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = Arc::new(SharedJob {
        claimed: AtomicBool::new(false),
        func: UnsafeCell::new(Some(b)),
        result: UnsafeCell::new(None),
        latch: OnceLatch::default(),
    });
    let raw = NonNull::new(Arc::into_raw(job_b.clone()) as *mut ()).expect("non-null");
    // SAFETY: an Arc reference is handed to the job; `func` borrows only
    // data that outlives this call, because the call does not return before
    // `func` was taken (run here or by a worker, latch set) and the queued
    // job then holds nothing but empty slots.
    let job = unsafe { JobRef::from_pointer(raw, &SharedJob::<B, RB>::VTABLE) };
    // Once the pool is closing, `b` is not queued: the caller runs it below.
    match registry.open_submission(None) {
        Ok(_open) => registry.push_internal(job),
        Err(_) => drop(job),
    }
    let ra = catch_unwind(AssertUnwindSafe(a));
    if !job_b.run_if_unclaimed() {
        job_b.latch.block_until(None);
    }
    // SAFETY: the latch is set; the claimer is done with `result`.
    let rb = unsafe { (*job_b.result.get()).take() }.expect("join half finished");
    combine(ra, rb)
}

/// Runs `a` and `b`, potentially in parallel, and returns both results.
/// On a pool thread it forks onto that pool; elsewhere it runs `a` then `b`
/// on the caller (use [`crate::Pool::join`] to fork from outside a pool).
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    match WorkerThread::current() {
        Some(worker) => join_on_worker(worker, a, b),
        None => (a(), b()),
    }
}
