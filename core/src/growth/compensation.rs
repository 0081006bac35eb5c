//! The blocking-compensation handshake, kept apart from thread creation so
//! `loom` can check it (`core/tests/loom.rs`).
//!
//! Two sides race: a pool thread entering a blocking region, and a
//! submitter publishing work. The rule: entering a region increments
//! `blocked` (SeqCst) and then looks for visible work; a submitter pushes
//! its job and then, if it could not wake a sleeper, reads `blocked`
//! (after the SeqCst fence in `Sleep::notify_one`). Whichever comes second
//! sees the other, so queued work can never be left with every thread
//! blocked and nobody lending a replacement.

use std::sync::atomic::Ordering::SeqCst;

use crate::sync::{AtomicUsize, fence};

/// Counts blocked pool threads and decides when to lend replacements.
#[derive(Default)]
pub struct Compensation {
    /// Pool threads inside a blocking region (or a wait past the help cap).
    blocked: AtomicUsize,
}

impl Compensation {
    /// Threads blocked now.
    pub fn blocked(&self) -> usize {
        self.blocked.load(SeqCst)
    }

    /// A pool thread starts blocking. `has_work` scans the queues, `wake`
    /// wakes an idle worker (false if there was none), `lend` starts
    /// threads.
    pub fn enter(&self, has_work: impl FnOnce() -> bool, wake: impl FnOnce() -> bool, lend: impl FnOnce()) {
        self.blocked.fetch_add(1, SeqCst);
        fence(SeqCst);
        if has_work() && !wake() {
            lend();
        }
    }

    /// A pool thread stops blocking.
    pub fn leave(&self) {
        self.blocked.fetch_sub(1, SeqCst);
    }

    /// A submitter pushed work (and fenced, see `Sleep::notify_one`) and
    /// `woke` says whether it woke a worker.
    #[inline]
    pub fn after_submit(&self, woke: bool, lend: impl FnOnce()) {
        if !woke && self.blocked.load(SeqCst) > 0 {
            lend();
        }
    }
}
