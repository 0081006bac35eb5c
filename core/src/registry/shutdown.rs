//! Shutdown: closing the pool, cancelling what it must, and waiting for
//! its threads (see `InFlight` in `submit.rs` for why no accepted job can
//! be stranded).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use crate::deque::Steal;

use super::{CANCELLING, DRAINING, Registry, drop_payload};
use crate::job::JobRef;
use crate::sync::lock;

impl Registry {
    /// Moves to DRAINING or CANCELLING (never back), wakes everyone. A
    /// draining pool keeps every growth mechanism (blocking regions lend
    /// threads, the monitor watches) until its queues are empty; a
    /// cancelling one stops growing.
    pub(crate) fn begin_shutdown(self: &Arc<Self>, cancel: bool) {
        let target = if cancel { CANCELLING } else { DRAINING };
        self.state.fetch_max(target, SeqCst);
        if cancel {
            self.cancel_global_queue();
            self.monitor.stop();
        }
        self.sleep.notify_all();
        self.room.notify();
    }

    pub(crate) fn cancel_global_queue(&self) {
        loop {
            match self.injector.steal() {
                Steal::Success(job) => {
                    self.on_dequeue();
                    self.cancel_job(job);
                }
                Steal::Empty => break,
                Steal::Retry => continue,
            }
        }
    }

    /// Drops a job unrun (a panicking destructor is contained); counts it
    /// if it was a user task that does not count itself.
    pub(crate) fn cancel_job(&self, job: JobRef) {
        match catch_unwind(AssertUnwindSafe(move || job.cancel())) {
            Ok(true) => self.counters.cancelled.add(1),
            Ok(false) => {}
            Err(payload) => {
                self.counters.cancelled.add(1);
                drop_payload(payload);
            }
        }
    }

    /// Waits for every worker thread to exit, then joins them. On success
    /// the pool is closed for good: every accepted job ran (drain) or was
    /// cancelled (cancel).
    pub(crate) fn wait_for_exit(&self, deadline: Option<Instant>) -> bool {
        if !self.exited.wait_until(|| self.running_threads.load(SeqCst) == 0, deadline) {
            return false;
        }
        self.monitor.stop();
        for slot in self.slots.iter() {
            if let Some(handle) = lock(&slot.join).take() {
                let _ = handle.join();
            }
        }
        self.monitor.join();
        // Workers exit only once no admitted foreign submission is on its
        // way, so nothing normally remains. What does (a job pushed by a
        // pool thread of this pool after the last worker's final look; a
        // worker that retired with jobs) is handled here, as the mode says.
        while !self.inflight.is_empty() {
            std::thread::yield_now();
        }
        loop {
            match self.injector.steal() {
                Steal::Success(job) if self.state() == CANCELLING => {
                    self.on_dequeue();
                    self.cancel_job(job);
                }
                Steal::Success(job) => {
                    self.on_dequeue();
                    self.run_on_caller(job);
                }
                Steal::Empty => break,
                Steal::Retry => continue,
            }
        }
        true
    }
}
