//! Deadlines: a task not started by its deadline is never run; it ends as
//! *expired*.
//!
//! The deadline is checked where a task starts, never by a timer: an
//! expired task costs a worker the pop that finds it and one clock read,
//! nothing more, and a pool whose submissions carry no deadline pays
//! nothing at all (only submissions with a deadline take this path).
//!
//! Expiry reuses the "dropped unrun" path that cancellation takes (the
//! closure is dropped, which is what calls a C task's `on_cancel` and
//! completes a completion-queue submission), with a thread-local flag set
//! around the drop so that code can tell the two apart ([`expiring`]). It
//! is counted in `Stats::expired`, not in `cancelled`, and before the drop:
//! whoever the drop wakes (a group's waiter, a completion queue's loop)
//! reads stats that include it.
//!
//! A task with a handle keeps its deadline in its cell instead
//! (`task.rs`): its waiters can then expire it themselves once the
//! deadline passes, rather than wait for a worker to reach it.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use crate::job::{JobRef, JobVTable, Payload};
use crate::registry::{Registry, drop_payload};

thread_local! {
    static EXPIRING: Cell<bool> = const { Cell::new(false) };
}

/// True while the pool drops a task unrun *because its deadline passed*:
/// code that runs on that drop (a captured value's destructor, a C task's
/// `on_cancel`, a completion queue's bookkeeping) asks this to tell expiry
/// from cancellation. False everywhere else, on every thread.
pub fn expiring() -> bool {
    EXPIRING.with(Cell::get)
}

/// Runs `f` (the drop of an expired task) with [`expiring`] true, restored
/// afterwards even if `f` unwinds. Whatever that drop calls sees the flag
/// too (a destructor that cancels another C task would have that task's
/// `on_cancel` told "expired"): the flag describes the drop in progress on
/// this thread, which is documented.
pub(crate) fn expire_with<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            EXPIRING.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(EXPIRING.with(|e| e.replace(true)));
    f()
}

/// A job that is run only if it starts before `deadline`.
struct Expiring {
    job: JobRef,
    deadline: Instant,
    /// Counts the expiry; held by the job, like a task handle holds it.
    registry: Arc<Registry>,
}

impl Expiring {
    // The wrapper answers `evictable` like the job it wraps (user tasks
    // are; plumbing never gets a deadline).
    const EVICTABLE: JobVTable = JobVTable { run: Self::run, cancel: Self::cancel, evictable: true };
    const PINNED: JobVTable = JobVTable { run: Self::run, cancel: Self::cancel, evictable: false };

    unsafe fn run(payload: *mut Payload) -> bool {
        // SAFETY: a leaked Box<Expiring> built by `wrap`, consumed once.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<Expiring>().as_ptr()) };
        let Expiring { job, deadline, registry } = *this;
        if Instant::now() < deadline {
            return job.run();
        }
        // Counted before the drop: the drop is what releases a group's
        // waiter or hands a completion queue its status.
        registry.counters.expired.add(1);
        // Only a `HeapJob` is wrapped (see `wrap`): its cancel drops the
        // closure and answers true; a panic in that drop is contained here,
        // as `Registry::cancel_job` contains one on the cancel path.
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| expire_with(|| job.cancel()))) {
            drop_payload(p);
        }
        // Nothing ran: not a completion.
        false
    }

    unsafe fn cancel(payload: *mut Payload) -> bool {
        // SAFETY: as in run; a cancellation before the pop is a
        // cancellation whatever the deadline, and the inner job's answer
        // stands.
        let this = unsafe { Box::from_raw(JobRef::pointer(payload).cast::<Expiring>().as_ptr()) };
        this.job.cancel()
    }
}

/// `job` (a new `HeapJob`, whose cancel path counts nothing itself) made to
/// expire at `deadline`. One allocation, paid only by submissions that
/// carry a deadline.
pub(crate) fn wrap(job: JobRef, deadline: Instant, registry: &Arc<Registry>) -> JobRef {
    let vtable = if job.evictable() { &Expiring::EVICTABLE } else { &Expiring::PINNED };
    let boxed = Box::new(Expiring { job, deadline, registry: registry.clone() });
    let data = std::ptr::NonNull::from(Box::leak(boxed)).cast::<()>();
    // SAFETY: a leaked Box<Expiring> read back by its own vtable exactly
    // once; Expiring is Send (a JobRef and an Arc).
    unsafe { JobRef::from_pointer(data, vtable) }
}

/// The monotonic clock in ns: `CLOCK_MONOTONIC` on Linux, the clock
/// [`Instant`] reads there, so a deadline a C caller computed from its own
/// `clock_gettime` means the same instant (the C API's `wspool_now_ns`).
/// Elsewhere, ns since the first call (never 0).
#[doc(hidden)]
pub fn monotonic_now_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid out-pointer; CLOCK_MONOTONIC cannot fail on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    //! The wrapper's own lifetime rules, without pool threads (so Miri
    //! runs them: `make test-miri`): the leaked box is read back exactly
    //! once on each path, and the wrapped closure runs or is dropped once.
    use super::*;
    use crate::job::HeapJob;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::time::Duration;

    /// Counts its runs and its drops, and whether it was dropped expiring.
    struct Probe {
        ran: Arc<AtomicUsize>,
        dropped: Arc<AtomicUsize>,
        dropped_expiring: Arc<AtomicUsize>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Relaxed);
            if expiring() {
                self.dropped_expiring.fetch_add(1, Relaxed);
            }
        }
    }

    fn setup(deadline: Instant) -> (Arc<Registry>, JobRef, [Arc<AtomicUsize>; 3]) {
        let registry = Arc::new(Registry::new(crate::Pool::builder().min_threads(1)));
        let counts = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
        let probe = Probe { ran: counts[0].clone(), dropped: counts[1].clone(), dropped_expiring: counts[2].clone() };
        let job = HeapJob::into_job_ref(move || {
            probe.ran.fetch_add(1, Relaxed);
        });
        (registry.clone(), wrap(job, deadline, &registry), counts)
    }

    fn seen(counts: &[Arc<AtomicUsize>; 3]) -> [usize; 3] {
        counts.each_ref().map(|c| c.load(Relaxed))
    }

    #[test]
    fn a_job_started_before_its_deadline_runs_once() {
        let (registry, job, counts) = setup(Instant::now() + Duration::from_secs(3600));
        job.run();
        assert_eq!(seen(&counts), [1, 1, 0]);
        assert_eq!(registry.counters.expired.sum(), 0);
    }

    #[test]
    fn a_job_past_its_deadline_is_dropped_unrun_as_expiring_and_counted() {
        let (registry, job, counts) = setup(Instant::now());
        assert!(!job.run(), "an expired job is not a completion");
        assert_eq!(seen(&counts), [0, 1, 1]);
        assert_eq!(registry.counters.expired.sum(), 1);
        assert!(!expiring(), "the flag is set only while the job is dropped");
    }

    #[test]
    fn a_cancelled_job_is_dropped_once_and_not_counted_expired() {
        let (registry, job, counts) = setup(Instant::now());
        job.cancel();
        assert_eq!(seen(&counts), [0, 1, 0]);
        assert_eq!(registry.counters.expired.sum(), 0);
    }
}
