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

use crate::sync::{AtomicU64, fence};

/// One thread inside a blocking region (low half of `Compensation::state`).
const BLOCKED: u64 = 1;
/// One thread parked in a wait with nothing it may run (high half).
const WAITING: u64 = 1 << 32;

/// Counts blocked and waiting pool threads and decides when to lend
/// replacements.
#[derive(Default)]
pub struct Compensation {
    /// Low 32 bits: pool threads inside a blocking region. High 32 bits:
    /// pool threads parked in a wait with nothing of their region to run.
    /// One word, so a submitter reads both with one load.
    state: AtomicU64,
}

impl Compensation {
    /// Threads blocked now.
    pub fn blocked(&self) -> usize {
        (self.state.load(SeqCst) & 0xFFFF_FFFF) as usize
    }

    /// Threads parked in a wait now.
    pub fn waiting(&self) -> usize {
        (self.state.load(SeqCst) >> 32) as usize
    }

    /// A pool thread starts blocking. `has_work` scans the queues, `wake`
    /// wakes an idle worker (false if there was none), `lend` starts
    /// threads.
    pub fn enter(&self, has_work: impl FnOnce() -> bool, wake: impl FnOnce() -> bool, lend: impl FnOnce()) {
        self.count_in(BLOCKED, has_work, wake, lend);
    }

    /// The handshake both kinds of entry share: count, fence, then look.
    fn count_in(&self, unit: u64, has_work: impl FnOnce() -> bool, wake: impl FnOnce() -> bool, lend: impl FnOnce()) {
        self.state.fetch_add(unit, SeqCst);
        fence(SeqCst);
        if has_work() && !wake() {
            lend();
        }
    }

    /// A pool thread stops blocking.
    pub fn leave(&self) {
        self.state.fetch_sub(BLOCKED, SeqCst);
    }

    /// A pool thread parks inside a wait with nothing it may run. The same
    /// handshake as [`Compensation::enter`]; `lend` decides how many
    /// threads the pool is short (a waiter is compensated only when no
    /// thread at all is left to run the queued work).
    pub fn enter_wait(&self, has_work: impl FnOnce() -> bool, wake: impl FnOnce() -> bool, lend: impl FnOnce()) {
        self.count_in(WAITING, has_work, wake, lend);
    }

    /// The waiter is awake again.
    pub fn leave_wait(&self) {
        self.state.fetch_sub(WAITING, SeqCst);
    }

    /// A submitter pushed work (and fenced, see `Sleep::notify_one`) and
    /// `woke` says whether it woke a worker.
    #[inline]
    pub fn after_submit(&self, woke: bool, lend: impl FnOnce()) {
        if !woke && self.state.load(SeqCst) != 0 {
            lend();
        }
    }
}
