//! Latches: "has X happened yet", with a cheap probe for helpers and a
//! blocking wait for everyone else.
//!
//! Waking protocol (Dekker style, all SeqCst): a waiter bumps `waiters`, then
//! checks the condition under `mutex` and sleeps on `cv`; a setter changes the
//! condition, then reads `waiters` and, if non-zero, takes `mutex` and
//! notifies. Either the waiter sees the new condition or the setter sees the
//! waiter, and because the waiter checks under the mutex that the setter
//! takes before notifying, the notification cannot fall between the check
//! and the sleep. Setters pay one atomic load when nobody waits.

use std::time::Instant;

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Condvar, Mutex};
use std::sync::atomic::Ordering::SeqCst;

/// Waiters' side of a latch: a condvar that only gets touched when somebody
/// actually sleeps.
#[derive(Default)]
pub(crate) struct Signal {
    waiters: AtomicUsize,
    mutex: Mutex<()>,
    cv: Condvar,
}

impl Signal {
    /// Call after changing the condition.
    pub(crate) fn notify(&self) {
        if self.waiters.load(SeqCst) != 0 {
            let _g = lock(&self.mutex);
            self.cv.notify_all();
        }
    }

    /// Sleeps until `done()` holds or `deadline` passes; returns `done()`.
    pub(crate) fn wait_until(&self, done: impl Fn() -> bool, deadline: Option<Instant>) -> bool {
        if done() {
            return true;
        }
        self.waiters.fetch_add(1, SeqCst);
        let mut guard = lock(&self.mutex);
        let result = loop {
            if done() {
                break true;
            }
            match deadline {
                None => {
                    guard = match self.cv.wait(guard) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    }
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break false;
                    }
                    guard = match self.cv.wait_timeout(guard, deadline - now) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    }
                }
            }
        };
        drop(guard);
        self.waiters.fetch_sub(1, SeqCst);
        result
    }
}

/// Set once, never reset.
#[derive(Default)]
pub(crate) struct OnceLatch {
    set: AtomicBool,
    signal: Signal,
}

impl OnceLatch {
    pub(crate) fn probe(&self) -> bool {
        self.set.load(SeqCst)
    }

    pub(crate) fn set(&self) {
        self.set.store(true, SeqCst);
        self.signal.notify();
    }

    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> bool {
        self.signal.wait_until(|| self.probe(), deadline)
    }
}

/// Counts outstanding work; "set" whenever the count is zero. Reusable: a
/// group can wait, get more tasks, and wait again.
#[derive(Default)]
pub(crate) struct CountLatch {
    count: AtomicUsize,
    signal: Signal,
}

impl CountLatch {
    pub(crate) fn increment(&self) {
        self.count.fetch_add(1, SeqCst);
    }

    pub(crate) fn decrement(&self) {
        if self.count.fetch_sub(1, SeqCst) == 1 {
            self.signal.notify();
        }
    }

    pub(crate) fn probe(&self) -> bool {
        self.count.load(SeqCst) == 0
    }

    pub(crate) fn pending(&self) -> usize {
        self.count.load(SeqCst)
    }

    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> bool {
        self.signal.wait_until(|| self.probe(), deadline)
    }
}
