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
        while let Some(job) = self.take_shared() {
            self.on_dequeue();
            self.cancel_job(job);
        }
    }

    /// A job of the shared queues (the global queue, then the priority
    /// levels), for shutdown. A Low job's marker taken here moves the job
    /// to its level, where a later call finds it.
    fn take_shared(&self) -> Option<JobRef> {
        loop {
            match self.injector.steal() {
                Steal::Success(job) => return Some(job),
                Steal::Empty => return self.prio.take_any(),
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

    /// Waits for every worker thread to exit, then joins them, then for
    /// every foreign submission in flight to push its job. On success the
    /// pool is closed for good: every accepted job ran (drain) or was
    /// cancelled (cancel). Returns false once `deadline` passed, at any of
    /// these steps; calling it again (without a deadline: the pool's drop)
    /// finishes the work.
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
        // A draining pool's workers exit only once no admitted foreign
        // submission is on its way; a cancelling pool's do not wait, so a
        // foreign submitter may still hold its ticket here (between the
        // open-check and its push). Its push must be seen below, so wait for
        // it, but only until the deadline: the caller's timeout is a bound.
        // Returning early is safe: whatever it pushes later is handled by the
        // next call (a retried shutdown, or the pool's drop, which waits
        // without a deadline), and until then nothing else takes from the
        // injector of a pool whose threads are gone.
        while !self.inflight.is_empty() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::yield_now();
        }
        // What remains (a job pushed by a pool thread of this pool after the
        // last worker's final look; a worker that retired with jobs; what an
        // in-flight submitter pushed) is handled here, as the mode says.
        while let Some(job) = self.take_shared() {
            self.on_dequeue();
            if self.state() == CANCELLING {
                self.cancel_job(job);
            } else {
                self.run_on_caller(job);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::{Arc, Barrier, mpsc};
    use std::time::Duration;

    use crate::job::HeapJob;
    use crate::{Pool, Shutdown};

    /// Counts how a job ended: run, or dropped unrun.
    struct Outcome {
        ran: Arc<AtomicUsize>,
        dropped: Arc<AtomicUsize>,
        done: bool,
    }

    impl Drop for Outcome {
        fn drop(&mut self) {
            if !self.done {
                self.dropped.fetch_add(1, SeqCst);
            }
        }
    }

    /// Issue 30.9: a cancelling shutdown's last step waited for every
    /// foreign submission in flight with no regard for its timeout, so
    /// `shutdown(Cancel, 50 ms)` lasted as long as a submitter stayed
    /// between its open-check and its push. Here one is held there (the
    /// ticket taken, the push not done) until the test lets it go: the
    /// shutdown must come back timed out, and a later shutdown must still
    /// account for what the submitter pushed (cancelled exactly once).
    #[test]
    fn a_cancelling_shutdown_times_out_while_a_foreign_submitter_is_in_flight() {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let registry = pool.registry().clone();
        let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let holding = Arc::new(Barrier::new(2));
        let (release, released) = mpsc::channel::<()>();
        let submitter = {
            let (registry, holding) = (registry.clone(), holding.clone());
            let outcome = Outcome { ran: ran.clone(), dropped: dropped.clone(), done: false };
            std::thread::spawn(move || {
                let open = registry.open_submission(None).expect("the pool is open");
                holding.wait();
                let _ = released.recv();
                let job = HeapJob::into_job_ref(move || {
                    let mut outcome = outcome;
                    outcome.done = true;
                    outcome.ran.fetch_add(1, SeqCst);
                });
                registry.push_internal(job);
                drop(open);
            })
        };
        holding.wait();
        let (tx, rx) = mpsc::channel();
        let shutter = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let _ = tx.send(pool.shutdown(Shutdown::Cancel, Some(Duration::from_millis(50))));
            })
        };
        // A watchdog, not a timing: the bug kept the shutdown waiting for
        // the held submitter, which is released only after this.
        let first = rx.recv_timeout(Duration::from_secs(30)).ok();
        let _ = release.send(());
        submitter.join().unwrap();
        shutter.join().unwrap();
        match first {
            Some(Err(crate::ShutdownError::TimedOut)) => {}
            Some(Ok(())) => panic!("shutdown(Cancel, 50 ms) returned Ok with a submission in flight"),
            Some(Err(e)) => panic!("shutdown(Cancel, 50 ms) from outside the pool: {e}"),
            None => {
                panic!("watchdog: shutdown(Cancel, 50 ms) had not returned after 30 s (it waited for the submitter)")
            }
        }
        assert_eq!(pool.shutdown(Shutdown::Cancel, None), Ok(()));
        assert_eq!((ran.load(SeqCst), dropped.load(SeqCst)), (0, 1), "(ran, dropped unrun)");
    }
}
