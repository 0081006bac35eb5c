//! The bound on calls *executing* at once (`growth="compensate"`, the
//! default): `max_workers` permits per pool.
//!
//! A call on one of the pool's threads takes a permit before it runs Python
//! code and gives it back when it returns (a call that `reject="caller_runs"`
//! runs on a submitting thread outside the pool takes none). A call that waits on the pool (`Future.result()`,
//! `Group.wait()`, a `map` iterator, `concurrent.futures.wait` /
//! `as_completed`) or sits in `with wspool.blocking():` gives its permit
//! back for the wait (a *region*), while the core lends a thread
//! (`Growth::Compensate`) that can take it; at the end of the region it
//! takes a permit again before any of its Python code runs, ahead of calls
//! that have not started. So at most `max_workers` calls execute outside
//! such regions at any instant, however many threads were lent; a thread
//! lent for a wait that ended retires (core) once its call returns.
//!
//! Deadlock freedom: a permit is only ever held by a call that executes
//! Python code outside a region, so every held permit comes back when that
//! code returns or enters a region. Permits are only waited for with the
//! GIL released (a holder may need the GIL to get on).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};

use crate::lock;

#[derive(Default)]
struct State {
    free: usize,
    /// Calls back from a region, waiting for a permit: they go first.
    returning: usize,
    /// Threads waiting for a permit (of either kind).
    waiters: usize,
}

pub(crate) struct Permits {
    state: Mutex<State>,
    cv: Condvar,
}

/// The permit the calling thread holds, and how many regions deep it is.
struct Held {
    permits: Arc<Permits>,
    regions: u32,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

impl Permits {
    pub(crate) fn new(n: usize) -> Arc<Permits> {
        Arc::new(Permits { state: Mutex::new(State { free: n, returning: 0, waiters: 0 }), cv: Condvar::new() })
    }

    /// Blocks (the caller has released the GIL) until a permit is free.
    fn acquire(&self, returning: bool) {
        let mut st = lock(&self.state);
        if returning {
            st.returning += 1;
        }
        while st.free == 0 || (!returning && st.returning > 0) {
            st.waiters += 1;
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            st.waiters -= 1;
        }
        st.free -= 1;
        if returning {
            st.returning -= 1;
        }
    }

    fn release(&self) {
        let mut st = lock(&self.state);
        st.free += 1;
        // Both kinds of waiter share the condition variable: wake them all
        // and let the rule in `acquire` choose (few ever wait at once). The
        // count is read under the lock a waiter holds until it sleeps, so
        // none is missed; with none, no wake-up system call per call.
        if st.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Runs a call's `f` holding a permit (taken with the GIL released: the
    /// caller is not attached). A thread that already holds one (a call run
    /// inline by `reject="caller_runs"` inside another call) does not take
    /// a second: the two calls share one thread and one permit.
    pub(crate) fn run<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        if HELD.with(|h| h.borrow().is_some()) {
            return f();
        }
        self.acquire(false);
        HELD.with(|h| *h.borrow_mut() = Some(Held { permits: self.clone(), regions: 0 }));
        struct Give;
        impl Drop for Give {
            fn drop(&mut self) {
                // Also on unwinding: a permit is never lost.
                if let Some(held) = HELD.with(|h| h.borrow_mut().take())
                    && held.regions == 0
                {
                    held.permits.release();
                }
            }
        }
        let _give = Give;
        f()
    }
}

/// The calling thread enters a region: its call's permit (if it holds one,
/// at the outermost region) goes back to the pool. Never blocks.
pub(crate) fn region_enter() {
    HELD.with(|h| {
        if let Some(held) = h.borrow_mut().as_mut() {
            held.regions += 1;
            if held.regions == 1 {
                held.permits.release();
            }
        }
    });
}

/// The calling thread leaves a region: at the outermost one it takes a
/// permit again, first in line. Call it with the GIL released: it may wait.
pub(crate) fn region_leave() {
    let permits = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let held = h.as_mut()?;
        if held.regions == 0 {
            return None; // unbalanced: ignored, as blocking_end does
        }
        held.regions -= 1;
        (held.regions == 0).then(|| held.permits.clone())
    });
    if let Some(p) = permits {
        p.acquire(true);
    }
}

/// Permits in use: calls executing outside regions (a diagnostic).
pub(crate) fn in_use(p: &Permits, total: usize) -> usize {
    total - lock(&p.state).free
}
