//! What the hot paths need to know about the calling thread, in one
//! thread-local: which pool worker it is, its counter stripe, and its
//! queue-delay sampling tick. In a shared library (`libwspool.so`) every
//! thread-local access is a call to `__tls_get_addr`, and a foreign
//! submission used to make three; it now makes one and passes the result on.

use std::cell::Cell;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use crate::stats::{Completion, DELAY_SAMPLE_EVERY, STRIPES};
use crate::worker::WorkerThread;

/// The calling thread's state (see the module comment).
pub(crate) struct Here {
    /// The worker running on this thread, of any pool (null elsewhere).
    worker: Cell<*const WorkerThread>,
    /// This thread's stripe of striped counters; `usize::MAX` until first use.
    stripe: Cell<usize>,
    /// Submissions made by this thread (every `DELAY_SAMPLE_EVERY`th is timed).
    sample_tick: Cell<u32>,
    /// Where the job running on this thread counts its completion, until
    /// it has (`stats::count_completion_now`).
    pub(crate) completion: Cell<Completion>,
    /// The group whose member task runs on this thread now (innermost), so
    /// that its untimed wait on that group fails instead of hanging.
    pub(crate) group: Cell<*const ()>,
    /// The serial queue (a lane of 1) whose task runs on this thread now
    /// (innermost; 0: none), for the same check on a task queued behind it.
    pub(crate) lane: Cell<usize>,
}

thread_local! {
    static HERE: Here = const {
        Here {
            worker: Cell::new(std::ptr::null()),
            stripe: Cell::new(usize::MAX),
            sample_tick: Cell::new(0),
            completion: Cell::new(Completion::NOWHERE),
            group: Cell::new(std::ptr::null()),
            lane: Cell::new(0),
        }
    };
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's state.
#[inline]
pub(crate) fn here() -> &'static Here {
    // SAFETY: `Here` needs no destructor, so its storage stays valid for the
    // whole life of the thread; it is not `Sync` (its cells), so the
    // reference can never reach another thread.
    HERE.with(|h| unsafe { &*(h as *const Here) })
}

impl Here {
    /// The worker running on this thread, of any pool.
    #[inline]
    pub(crate) fn worker(&self) -> Option<&'static WorkerThread> {
        // SAFETY: set only for the lifetime of `WorkerThread::run` on this
        // thread, which outlives every use (all of them are on this thread,
        // inside tasks).
        unsafe { self.worker.get().as_ref() }
    }

    pub(crate) fn set_worker(&self, worker: *const WorkerThread) {
        self.worker.set(worker);
    }

    /// This thread's stripe of striped counters (assigned round-robin on
    /// first use, so concurrent threads rarely share one).
    #[inline]
    pub(crate) fn stripe(&self) -> usize {
        match self.stripe.get() {
            usize::MAX => self.assign_stripe(),
            stripe => stripe,
        }
    }

    #[cold]
    fn assign_stripe(&self) -> usize {
        let stripe = NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES;
        self.stripe.set(stripe);
        stripe
    }

    /// True for one submission in `DELAY_SAMPLE_EVERY` on this thread.
    #[inline]
    pub(crate) fn should_sample_delay(&self) -> bool {
        let tick = self.sample_tick.get().wrapping_add(1);
        self.sample_tick.set(tick);
        tick.is_multiple_of(DELAY_SAMPLE_EVERY)
    }

    /// Takes `n` sampling ticks at once (a batch) and returns the tick
    /// before them: task `i` (from 0) of the batch is sampled when
    /// `tick + i + 1` is a multiple of `DELAY_SAMPLE_EVERY`, as if each had
    /// asked.
    #[inline]
    pub(crate) fn take_sample_ticks(&self, n: usize) -> u32 {
        let tick = self.sample_tick.get();
        self.sample_tick.set(tick.wrapping_add(n as u32));
        tick
    }
}
