//! Type-erased units of work that travel through the deques.
//!
//! A [`JobRef`] is a small inline payload plus a static vtable (rayon-core's
//! idea, widened): a closure of up to four words (a C task's `fn`, `arg`
//! and `on_cancel` plus the group it counts toward; an `Arc` and an index;
//! a scope pointer and a borrow) travels *inside* the deque slot with no heap allocation at all; a larger
//! one is boxed; a `join`'s second half, which lives on the joiner's stack,
//! travels as a pointer. Allocation is what a flood of tiny tasks pays for
//! most (a producer's allocations are freed by other threads, which keeps
//! the allocator on its slow path), so the common case avoids it.
//!
//! Every `JobRef` is consumed exactly once: by [`JobRef::run`], or by being
//! dropped, which cancels it (the job's own "dropped unrun" path: the
//! closure is dropped, which is how a C task's `on_cancel` gets called).

use std::mem::{ManuallyDrop, MaybeUninit, align_of, size_of};
use std::ptr::NonNull;

/// Inline storage: four machine words.
pub(crate) type Payload = [MaybeUninit<usize>; 4];

/// What to do with a job's payload.
pub(crate) struct JobVTable {
    /// Runs the job and releases its data (even when the job unwinds).
    /// Returns false when the job turned out to be a tombstone (a task
    /// handle already cancelled or claimed by a waiter): nothing ran.
    pub(crate) run: unsafe fn(*mut Payload) -> bool,
    /// Releases the data without running the user's code (cancellation).
    /// Returns true when that dropped a user task the caller should count as
    /// cancelled (false for plumbing, for tombstones, and for jobs that count
    /// their own cancellations). Jobs that must never be lost (a scope's
    /// tasks, a join's second half) run here instead.
    pub(crate) cancel: unsafe fn(*mut Payload) -> bool,
    /// A user task that `Reject::DiscardOldest` may evict. Plumbing (serial
    /// turns, join halves) and scope tasks are never evicted.
    pub(crate) evictable: bool,
}

/// The isolation region a job belongs to (see `worker::Region`): a waiting
/// thread runs only jobs of its own region. 0: not yet assigned (the queue
/// it enters assigns it).
pub(crate) type Tag = u64;
/// No region: never run by a helping waiter (a serial queue's turn, whose
/// task must not run nested inside an unrelated wait).
pub(crate) const TAG_NEVER_HELP: Tag = u64::MAX;

/// An owned, type-erased job.
pub(crate) struct JobRef {
    payload: Payload,
    vtable: &'static JobVTable,
    tag: Tag,
}

// SAFETY: every constructor requires the underlying job to be `Send`.
unsafe impl Send for JobRef {}

impl JobRef {
    /// A job whose payload is one pointer.
    ///
    /// # Safety
    /// `data` must stay valid until the job is run or cancelled, `vtable`'s
    /// functions must read it with [`JobRef::pointer`], exactly once, and
    /// the job must be `Send`.
    pub(crate) unsafe fn from_pointer(data: NonNull<()>, vtable: &'static JobVTable) -> JobRef {
        let mut payload = [MaybeUninit::new(0); 4];
        // The pointer itself goes in word 0, not its address as an integer: a
        // pointer read back from an integer has lost its provenance (Miri's
        // -Zmiri-strict-provenance checks this). A pointer is the size and
        // alignment of a usize word.
        // SAFETY: word 0 is in bounds and suitably aligned for a `*mut ()`.
        unsafe { payload.as_mut_ptr().cast::<*mut ()>().write(data.as_ptr()) };

        JobRef { payload, vtable, tag: 0 }
    }

    /// The job's isolation region (0 until a queue assigned one).
    #[inline]
    pub(crate) fn tag(&self) -> Tag {
        self.tag
    }

    /// Assigns the region, unless the job already has one (a job moved
    /// between queues keeps its region).
    #[inline]
    pub(crate) fn tag_if_unset(&mut self, tag: impl FnOnce() -> Tag) {
        if self.tag == 0 {
            self.tag = tag();
        }
    }

    /// A new job (tag 0) assigned to `region`.
    #[inline(always)]
    pub(crate) fn tagged(mut self, region: Tag) -> JobRef {
        debug_assert_eq!(self.tag, 0, "a job keeps the region it was given first");
        self.tag = region;
        self
    }

    /// Marks the job as one a helping waiter must never run.
    pub(crate) fn never_help(mut self) -> JobRef {
        self.tag = TAG_NEVER_HELP;
        self
    }

    /// Was the job built with `vtable` (a static: only a static has one
    /// address)?
    #[inline]
    pub(crate) fn has_vtable(&self, vtable: &'static JobVTable) -> bool {
        std::ptr::eq(self.vtable, vtable)
    }

    /// May `Reject::DiscardOldest` evict it?
    pub(crate) fn evictable(&self) -> bool {
        self.vtable.evictable
    }

    /// The pointer stored by [`JobRef::from_pointer`].
    ///
    /// # Safety
    /// `payload` must come from `from_pointer`.
    pub(crate) unsafe fn pointer(payload: *mut Payload) -> NonNull<()> {
        // SAFETY: from_pointer wrote a `*mut ()` in word 0.
        let pointer = unsafe { payload.cast::<*mut ()>().read() };
        // SAFETY: it was a NonNull.
        unsafe { NonNull::new_unchecked(pointer) }
    }

    /// The identity of a job built by `from_pointer`, to recognise it later
    /// with [`JobRef::is`] (`join` looks for its own second half).
    ///
    /// # Safety
    /// `self` must come from `from_pointer`.
    pub(crate) unsafe fn pointer_id(&self) -> (usize, *const JobVTable) {
        // SAFETY: word 0 was written by from_pointer.
        (unsafe { self.payload[0].assume_init() }, self.vtable)
    }

    /// Is this the job with that `pointer_id`?
    pub(crate) fn is(&self, id: (usize, *const JobVTable)) -> bool {
        // The vtable is compared first: only a pointer job with the same
        // vtable has an initialised word 0.
        // SAFETY: see above.
        std::ptr::eq(self.vtable, id.1) && unsafe { self.payload[0].assume_init() } == id.0
    }

    /// Runs the job. It may unwind if the user's code panics: the worker
    /// catches that around this call (one `catch_unwind` per task).
    pub(crate) fn run(self) -> bool {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: consumed once; `this` is never dropped.
        unsafe { (this.vtable.run)(&mut this.payload) }
    }
}

impl JobRef {
    /// Runs the job where it lies: [`JobRef::run`] without moving the job
    /// first. A worker pops a job as six words; moving it copies 16 bytes
    /// at a time, reloads that cannot be forwarded from those stores
    /// (`docs/benchmarks.md`, "Copies of a job, and store forwarding"),
    /// while the job's own run function reads its payload a word at a time.
    ///
    /// # Safety
    /// Consumes the job: the caller must forget it afterwards, whether this
    /// returns or unwinds, and never use or drop it.
    #[inline(always)]
    pub(crate) unsafe fn run_in_place(this: &mut JobRef) -> bool {
        // SAFETY: the caller gives the job up; run consumes its payload once.
        unsafe { (this.vtable.run)(&mut this.payload) }
    }

    /// Cancels the job; true if a user task was dropped unrun (see
    /// `JobVTable::cancel`).
    pub(crate) fn cancel(self) -> bool {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: consumed once; `this` is never dropped.
        unsafe { (this.vtable.cancel)(&mut this.payload) }
    }
}

impl Drop for JobRef {
    fn drop(&mut self) {
        // SAFETY: a dropped JobRef was never run; cancel consumes it once.
        unsafe { (self.vtable.cancel)(&mut self.payload) };
    }
}

/// An `FnOnce` job: the representation of `spawn`. Stored inline when it
/// fits in the payload, boxed otherwise.
pub(crate) struct HeapJob<F>(std::marker::PhantomData<F>);

impl<F: FnOnce() + Send> HeapJob<F> {
    const FITS_INLINE: bool = size_of::<F>() <= size_of::<Payload>() && align_of::<F>() <= align_of::<Payload>();
    const INLINE: JobVTable = JobVTable { run: Self::run_inline, cancel: Self::cancel_inline, evictable: true };
    const BOXED: JobVTable = JobVTable { run: Self::run_boxed, cancel: Self::cancel_boxed, evictable: true };
    // A job that must never be lost: "cancelling" it runs it (returning
    // false: nothing was dropped unrun).
    const INLINE_MUST_RUN: JobVTable =
        JobVTable { run: Self::run_inline, cancel: Self::run_inline_uncounted, evictable: false };
    const BOXED_MUST_RUN: JobVTable =
        JobVTable { run: Self::run_boxed, cancel: Self::run_boxed_uncounted, evictable: false };

    /// Wraps `func` into a job.
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
        // SAFETY: forwarded.
        unsafe { Self::build(func, &Self::INLINE, &Self::BOXED) }
    }

    /// A job that runs even when cancelled (shutdown, eviction, a dropped
    /// queue): a scope's task, whose scope is waiting for it and whose
    /// borrows must not be released by anything but the task itself.
    ///
    /// # Safety
    /// As for [`HeapJob::into_job_ref_unchecked`].
    pub(crate) unsafe fn into_must_run_job_ref(func: F) -> JobRef {
        // SAFETY: forwarded.
        unsafe { Self::build(func, &Self::INLINE_MUST_RUN, &Self::BOXED_MUST_RUN) }
    }

    unsafe fn build(func: F, inline: &'static JobVTable, boxed: &'static JobVTable) -> JobRef {
        if Self::FITS_INLINE {
            let mut payload: Payload = [MaybeUninit::uninit(); 4];
            // SAFETY: F fits the payload's size and alignment.
            unsafe { std::ptr::write(payload.as_mut_ptr() as *mut F, func) };
            JobRef { payload, vtable: inline, tag: 0 }
        } else {
            let data = NonNull::from(Box::leak(Box::new(func))).cast::<()>();
            // SAFETY: data is a leaked Box<F>, matching the boxed vtable.
            unsafe { JobRef::from_pointer(data, boxed) }
        }
    }

    // A job run by its cancel path is no counted task: it must not take the
    // completion of a task around it (`stats::Completion`).
    unsafe fn run_inline_uncounted(payload: *mut Payload) -> bool {
        // SAFETY: forwarded.
        crate::stats::uncounted(|| unsafe { Self::run_inline(payload) });
        false
    }

    unsafe fn run_boxed_uncounted(payload: *mut Payload) -> bool {
        // SAFETY: forwarded.
        crate::stats::uncounted(|| unsafe { Self::run_boxed(payload) });
        false
    }

    unsafe fn run_inline(payload: *mut Payload) -> bool {
        // SAFETY: written by into_job_ref_unchecked, consumed once.
        let func = unsafe { std::ptr::read(payload as *const F) };
        func();
        true
    }

    unsafe fn cancel_inline(payload: *mut Payload) -> bool {
        // SAFETY: as in run_inline; dropping the closure is the cancellation.
        drop(unsafe { std::ptr::read(payload as *const F) });
        true
    }

    unsafe fn run_boxed(payload: *mut Payload) -> bool {
        // SAFETY: a leaked Box<F>, consumed once.
        let func = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<F>().as_ptr()) };
        func();
        true
    }

    unsafe fn cancel_boxed(payload: *mut Payload) -> bool {
        // SAFETY: as in run_boxed.
        drop(unsafe { Box::from_raw(JobRef::pointer(payload).cast::<F>().as_ptr()) });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    struct CountDrop(Arc<AtomicUsize>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn small_closures_run_inline_and_large_ones_boxed() {
        const { assert!(HeapJob::<fn()>::FITS_INLINE) };
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        assert!(
            HeapJob::into_job_ref(move || {
                r.fetch_add(1, SeqCst);
            })
            .run()
        );
        let big = [7u64; 8];
        let r = ran.clone();
        let job = HeapJob::into_job_ref(move || {
            r.fetch_add(big[3] as usize, SeqCst);
        });
        assert!(job.run());
        assert_eq!(ran.load(SeqCst), 8);
    }

    #[test]
    fn dropping_a_job_drops_its_closure_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrop(drops.clone());
        drop(HeapJob::into_job_ref(move || drop(guard)));
        let guard = CountDrop(drops.clone());
        let big = [0u64; 8];
        drop(HeapJob::into_job_ref(move || {
            let _ = big;
            drop(guard)
        }));
        assert_eq!(drops.load(SeqCst), 2);
    }
}
