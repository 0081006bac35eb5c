//! Batch submission: many tasks under one in-flight ticket, counted at once
//! and announced with one wake-up.
//!
//! A batch follows the single submission's rules task by task (open-check,
//! admission, the push of `submit.rs`), so shutdown and the reject policies
//! see nothing new: the ticket taken at the open-check is held until the
//! last task of the batch is pushed, which is what the closing protocol of
//! [`InFlight`](super::submit::InFlight) needs. What a batch saves is what a
//! single submission repeats per task: the open-check and its ticket, the
//! lookup of the calling thread, the counter update and, above all, the
//! wake-up. One `notify` per batch is enough: by the sleep protocol's rule 4
//! (`sleep/README.md`) the woken searcher wakes the next one when it finds
//! work and more is left, so a batch is picked up by as many workers as it
//! needs.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::{Admission, Registry};
use crate::error::BatchError;
use crate::job::{JobRef, Tag};
use crate::stats;
use crate::worker::WorkerThread;

impl Registry {
    /// Submits `tasks` in order, stopping at the first refusal: the tasks
    /// before it are accepted, it and the ones after it come back in the
    /// error. `into_job` builds a task's job, and what the caller gets back
    /// for it (a handle, or `()`), once it is admitted.
    pub(crate) fn submit_batch<F, H>(
        self: &Arc<Self>,
        tasks: Vec<F>,
        global: bool,
        mut into_job: impl FnMut(F) -> (JobRef, H),
    ) -> Result<Vec<H>, BatchError<F, H>> {
        let mut tasks = tasks.into_iter();
        // `Vec<()>` never allocates: `spawn_batch` pays nothing for this.
        let mut accepted = Vec::with_capacity(tasks.len());
        let mut build = |task: F, accepted: &mut Vec<H>| {
            let (job, handle) = into_job(task);
            accepted.push(handle);
            job
        };
        // One pass per open submission: a task the reject policy runs on the
        // caller is run with the submission closed (as in `submit_job`, the
        // ticket must not hold a closing pool up while it runs), and the
        // rest of the batch opens a new one.
        let here = crate::here::here();
        let worker = self.worker_at(here);
        let tick = here.take_sample_ticks(tasks.len());
        let mut pusher = Pusher { registry: self, worker, global, region: None, tick };
        while tasks.len() > 0 {
            let open = match self.open_submission_at(here, worker) {
                Ok(open) => open,
                Err(kind) => return Err(BatchError::new(kind, accepted, tasks.collect())),
            };
            if !self.tracks_queue {
                // Nothing to admit: every task is accepted. Counted before
                // the first push, like a single submission, so `completed`
                // never runs ahead of `submitted` in the stats.
                self.count_submitted_n(worker, tasks.len());
                pusher.push_all(&mut tasks, |task| build(task, &mut accepted));
                pusher.finish();
                drop(open);
                break;
            }
            let mut ran_on_caller = None;
            for task in tasks.by_ref() {
                match self.admit(worker) {
                    Err(kind) => {
                        pusher.finish();
                        drop(open);
                        let rest = std::iter::once(task).chain(tasks).collect();
                        return Err(BatchError::new(kind, accepted, rest));
                    }
                    Ok(Admission::RunOnCaller) => {
                        ran_on_caller = Some(task);
                        break;
                    }
                    Ok(Admission::Queue) => {
                        self.count_submitted(worker);
                        pusher.push(build(task, &mut accepted));
                    }
                }
            }
            pusher.finish();
            drop(open);
            if let Some(task) = ran_on_caller {
                self.count_submitted(worker);
                self.run_on_caller(build(task, &mut accepted));
            }
        }
        Ok(accepted)
    }

    /// `count_submitted` for `n` tasks at once.
    fn count_submitted_n(&self, worker: Option<&WorkerThread>, n: usize) {
        match worker {
            Some(worker) => {
                let c = &worker.counters().submitted;
                // Only the owning worker writes its counters (as `stats::bump`).
                c.store(c.load(Relaxed).wrapping_add(n as u64), Relaxed);
            }
            None => self.counters.submitted.add(n as u64),
        }
    }
}

/// Pushes the admitted jobs of one open submission, like `enqueue` minus
/// the wake-up, which `finish` (or a drop, should anything unwind) does
/// once for all of them.
struct Pusher<'a> {
    registry: &'a Arc<Registry>,
    worker: Option<&'a WorkerThread>,
    global: bool,
    /// Set once a job went to the injector: the region to notify for
    /// (`Some(None)`: a foreign submitter's, which wakes idle workers only).
    region: Option<Option<Tag>>,
    /// The delay-sampling tick, taken for the whole batch at once
    /// (`Here::take_sample_ticks`): one thread-local access per batch.
    tick: u32,
}

impl Pusher<'_> {
    fn push(&mut self, job: JobRef) {
        match self.worker {
            // The worker's own deque: `push_and_wake` wakes only when the
            // deque was empty, so a batch wakes at most once here too.
            Some(worker) if !self.global => {
                let job = self.sample(job);
                worker.push_and_wake(job);
            }
            _ => {
                let job = self.for_injector(job);
                self.registry.injector.push(job);
            }
        }
    }

    /// Pushes what `tasks` has left, in order: into the injector a run of
    /// slots per CAS (`Injector::push_run`), each job built in its slot.
    fn push_all<F>(&mut self, tasks: &mut impl ExactSizeIterator<Item = F>, mut build: impl FnMut(F) -> JobRef) {
        if self.worker.is_some() && !self.global {
            for task in tasks {
                self.push(build(task));
            }
            return;
        }
        let injector = &self.registry.injector;
        while tasks.len() > 0 {
            // `build` cannot unwind: it only wraps the task (see
            // `submit_batch`'s callers), as `push_run` requires.
            injector.push_run(tasks.len(), || {
                let task = tasks.next().expect("push_run asks for at most what is left");
                self.for_injector(build(task))
            });
        }
    }

    /// One submission in `DELAY_SAMPLE_EVERY` is wrapped to time its
    /// queue delay, as in `submit_job`.
    fn sample(&mut self, job: JobRef) -> JobRef {
        self.tick = self.tick.wrapping_add(1);
        if self.tick.is_multiple_of(stats::DELAY_SAMPLE_EVERY) { super::submit::sampled(job) } else { job }
    }

    /// A job bound for the injector: sampled, tagged as in `enqueue`, and
    /// noted for `finish`'s wake-up.
    fn for_injector(&mut self, job: JobRef) -> JobRef {
        let mut job = self.sample(job);
        match self.worker {
            Some(worker) => {
                job.tag_if_unset(|| worker.region.get());
                self.region = Some(Some(job.tag()));
            }
            // A foreign task stays untagged, as in `enqueue`: it gets a
            // region of its own when it runs, so tasks of one batch are as
            // unrelated as tasks submitted apart.
            None => self.region = Some(None),
        }
        job
    }

    /// Wakes for the injector's new jobs (their pushes' SeqCst CAS orders
    /// them before the notify's read, as in `enqueue`).
    fn finish(&mut self) {
        if let Some(region) = self.region.take() {
            self.registry.notify_new_work(region);
        }
    }
}

impl Drop for Pusher<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}
