//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Counts how a task ended: run, or dropped unrun (the cancel path).
#[derive(Default)]
pub struct Outcomes {
    pub ran: AtomicUsize,
    pub dropped_unrun: AtomicUsize,
}

/// Captured by a task closure: `run()` marks it run; dropping it without
/// `run()` counts as a cancellation. Exactly one of the two happens.
pub struct Tracked {
    outcomes: Arc<Outcomes>,
    ran: bool,
}

impl Tracked {
    pub fn new(outcomes: &Arc<Outcomes>) -> Tracked {
        Tracked { outcomes: outcomes.clone(), ran: false }
    }
    pub fn run(mut self) {
        self.ran = true;
        self.outcomes.ran.fetch_add(1, SeqCst);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.ran {
            self.outcomes.dropped_unrun.fetch_add(1, SeqCst);
        }
    }
}

/// Polls `cond` until it holds; panics with `what` after `limit` (a hang
/// guard, not a performance assertion).
pub fn eventually(limit: Duration, what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A gate tasks block on until opened.
#[derive(Default)]
pub struct Gate {
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    pub fn wait(&self) {
        let mut g = self.open.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
    }
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// Opens the gate when dropped, so a failing assertion cannot leave pool
/// threads blocked forever (the pool's drop would wait for them).
pub struct OpenOnDrop(pub std::sync::Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}
