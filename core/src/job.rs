//! Type-erased units of work that travel through the deques.
//!
//! A [`JobRef`] is two words (data pointer + static vtable), like rayon-core's,
//! so a `join` can push a job that lives on the caller's stack without a heap
//! allocation, while `spawn` pushes a boxed closure. Every `JobRef` is consumed
//! exactly once: by [`JobRef::run`], or by being dropped, which cancels it (the
//! job's own "dropped unrun" path: a boxed closure is dropped, which is how a C
//! task's `on_cancel` gets called).

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// What to do with a job's data pointer.
pub(crate) struct JobVTable {
    /// Runs the job and releases its data (even when the job unwinds).
    /// Returns false when the job turned out to be a tombstone (a task
    /// handle already cancelled or claimed by a waiter): nothing ran.
    pub(crate) run: unsafe fn(NonNull<()>) -> bool,
    /// Releases the data without running the user's code (cancellation).
    pub(crate) cancel: unsafe fn(NonNull<()>),
}

/// An owned, type-erased job.
pub(crate) struct JobRef {
    data: NonNull<()>,
    vtable: &'static JobVTable,
}

// SAFETY: every constructor requires the underlying job to be `Send`.
unsafe impl Send for JobRef {}

impl JobRef {
    /// # Safety
    /// `data` must stay valid until the job is run or cancelled, `vtable`'s
    /// functions must accept it exactly once, and the job must be `Send`.
    pub(crate) unsafe fn new(data: NonNull<()>, vtable: &'static JobVTable) -> JobRef {
        JobRef { data, vtable }
    }

    /// The identity of the job (used by `join` to recognise its own job).
    pub(crate) fn id(&self) -> *const () {
        self.data.as_ptr()
    }

    /// Runs the job. It may unwind if the user's code panics: the worker
    /// catches that around this call (one `catch_unwind` per task).
    pub(crate) fn run(self) -> bool {
        let this = ManuallyDrop::new(self);
        // SAFETY: consumed once; `this` is never dropped.
        unsafe { (this.vtable.run)(this.data) }
    }
}

impl Drop for JobRef {
    fn drop(&mut self) {
        // SAFETY: a dropped JobRef was never run; cancel consumes it once.
        unsafe { (self.vtable.cancel)(self.data) }
    }
}

/// A boxed `FnOnce` job: the representation of `spawn`.
pub(crate) struct HeapJob<F> {
    func: F,
}

impl<F: FnOnce() + Send> HeapJob<F> {
    const VTABLE: JobVTable = JobVTable { run: Self::run, cancel: Self::cancel };

    /// Boxes `func` into a job.
    pub(crate) fn into_job_ref(func: F) -> JobRef
    where
        F: 'static,
    {
        // SAFETY: the 'static bound makes the job valid until it is consumed.
        unsafe { Self::into_job_ref_unchecked(func) }
    }

    /// # Safety
    /// Whatever `func` borrows must outlive the job (scopes guarantee this by
    /// waiting for every job they spawned).
    pub(crate) unsafe fn into_job_ref_unchecked(func: F) -> JobRef {
        let boxed = Box::new(HeapJob { func });
        let data = NonNull::from(Box::leak(boxed)).cast::<()>();
        let vtable: &'static JobVTable = &Self::VTABLE;
        // SAFETY: data came from Box::leak of a HeapJob<F>, matching the vtable.
        unsafe { JobRef::new(data, vtable) }
    }

    unsafe fn run(data: NonNull<()>) -> bool {
        // SAFETY: data is a leaked Box<HeapJob<F>>, consumed once.
        let job = unsafe { Box::from_raw(data.cast::<HeapJob<F>>().as_ptr()) };
        (job.func)();
        true
    }

    unsafe fn cancel(data: NonNull<()>) {
        // SAFETY: as in `run`; dropping the closure is the cancellation.
        drop(unsafe { Box::from_raw(data.cast::<HeapJob<F>>().as_ptr()) });
    }
}
