//! `handle.await`: a [`TaskHandle`] as a future, for any executor.
//!
//! The future never blocks and never runs the task: a poll stores the
//! executor's waker in the task's cell (`waker_slot.rs`) and returns
//! `Pending`; whoever ends the task (the worker that ran it, the thread
//! that cancelled it, the pop or waiter that expired it) wakes it once.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::TaskHandle;
use crate::error::TaskError;

/// The future of a [`TaskHandle`]: `handle.await` (through
/// [`IntoFuture`]) gives what [`TaskHandle::wait`] gives, the value or
/// `Err(TaskError::Panicked | Cancelled | Expired)`, without blocking the
/// thread that polls it, on any executor.
///
/// - A poll stores the executor's waker once and replaces it only when
///   the task is polled with a waker that would wake another task
///   ([`std::task::Waker::will_wake`]): polling again allocates nothing.
/// - The end of the task (returned, panicked, cancelled or expired) wakes
///   it exactly once.
/// - Dropping the future detaches the task, as dropping the handle does:
///   it still runs to completion. Cancelling is explicit
///   ([`TaskFuture::cancel`], or [`TaskHandle::cancel`] before awaiting),
///   as with tokio's `JoinHandle`.
/// - A task with a deadline ([`crate::SpawnOptions::deadline`]) that has
///   not started by then ends the await with `Err(TaskError::Expired)` at
///   the latest when a worker reaches it in its queue (the pop that finds
///   it late expires it and wakes the future), or sooner if the future is
///   polled after the deadline (that poll expires it, as a blocking
///   waiter does at the deadline). No timer is armed per await: when the
///   pool's workers are all busy, an expired task's await ends when one
///   of them gets to it.
/// - Awaited from inside the task itself (an executor blocking on the
///   future within the task), it ends at once with
///   `Err(TaskError::WouldDeadlock)`, as [`TaskHandle::wait`] does.
///
/// ```
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
/// let handle = pool.submit(|| (1..=100u64).sum::<u64>()).unwrap();
/// assert_eq!(handle.await.unwrap(), 5050);
/// # });
/// ```
#[must_use = "a future does nothing unless awaited; dropping it detaches the task"]
pub struct TaskFuture<T> {
    /// None once it returned `Ready`.
    handle: Option<TaskHandle<T>>,
    /// A waker of ours may be stored in the cell: the drop takes it out.
    registered: bool,
}

impl<T: Send + 'static> IntoFuture for TaskHandle<T> {
    type Output = Result<T, TaskError>;
    type IntoFuture = TaskFuture<T>;

    /// The handle as a future ([`TaskFuture`]): `handle.await`.
    fn into_future(self) -> TaskFuture<T> {
        TaskFuture { handle: Some(self), registered: false }
    }
}

impl<T: Send + 'static> TaskFuture<T> {
    /// Cancels the task if it has not started, as [`TaskHandle::cancel`]:
    /// the await then ends with `Err(TaskError::Cancelled)`. False if it
    /// already started or ended (or the future already returned `Ready`).
    pub fn cancel(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| h.cancel())
    }

    /// True once the task is done, cancelled or expired (the next poll
    /// returns `Ready`), or once the future returned `Ready`.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }
}

impl<T: Send + 'static> Future for TaskFuture<T> {
    type Output = Result<T, TaskError>;

    /// Polls the task: `Ready` with its result once it ended, else
    /// `Pending` with `cx`'s waker stored for its end.
    ///
    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let handle = this.handle.as_ref().expect("TaskFuture polled after it returned Ready");
        let cell = &handle.cell;
        let slot = cell.waker();
        if !slot.is_complete() {
            if handle.would_deadlock() {
                this.finish();
                return Poll::Ready(Err(TaskError::WouldDeadlock));
            }
            // Late and not started: expire it here, as a blocking waiter
            // does at the deadline (one clock read, for tasks with a
            // deadline only). If it expires, the stored waker of an
            // earlier poll is woken once: a spare poll, never a lost one.
            if let Some(deadline) = cell.deadline()
                && Instant::now() >= deadline
            {
                cell.expire();
            }
        }
        if !slot.register(cx.waker()) {
            this.registered = true;
            return Poll::Pending;
        }
        // Complete: the slot's Acquire made the result, published before
        // `complete`, visible, and the latch was set before that.
        this.registered = false;
        let handle = this.handle.take().expect("checked above");
        Poll::Ready(handle.cell.take_result().unwrap_or(Err(TaskError::Cancelled)))
    }
}

impl<T> TaskFuture<T> {
    /// Ends the future early: takes its waker back and drops the handle.
    fn finish(&mut self) {
        if let Some(handle) = self.handle.take()
            && std::mem::take(&mut self.registered)
        {
            handle.cell.waker().unregister();
        }
    }
}

impl<T> Drop for TaskFuture<T> {
    /// Detaches the task (it still runs), taking the future's waker back
    /// so the task's end wakes nobody.
    fn drop(&mut self) {
        self.finish();
    }
}

impl<T> std::fmt::Debug for TaskFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskFuture").field("handle", &self.handle).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The future on a registry with no thread: tasks are run, cancelled
    //! or expired by hand (on another thread where they race the poll),
    //! so these run under Miri (`make test-miri`) as well.

    use std::future::{Future, IntoFuture};
    use std::pin::pin;
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use crate::TaskError;
    use crate::task::TaskHandle;

    use crate::test_support::{CountingWaker, poll, threadless};

    #[test]
    fn a_task_run_after_the_first_poll_wakes_it_once_with_its_value() {
        let registry = threadless();
        let (handle, job) = TaskHandle::new(&registry, || 6 * 7);
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        let mut fut = handle.into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        assert!(poll(&mut fut, &waker).is_pending());
        assert!(job.run());
        assert_eq!(counter.0.load(SeqCst), 1);
        assert!(matches!(poll(&mut fut, &waker), Poll::Ready(Ok(42))));
        assert_eq!(counter.0.load(SeqCst), 1, "woken exactly once");
        assert_eq!(Arc::strong_count(&counter), 2, "the cell kept no waker");
    }

    #[test]
    fn cancel_and_expiry_end_the_await_with_their_errors() {
        let registry = threadless();
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());

        let (handle, job) = TaskHandle::new(&registry, || 1);
        let mut fut = handle.into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        assert!(fut.cancel());
        assert_eq!(counter.0.load(SeqCst), 1, "the cancel woke it");
        assert!(matches!(poll(&mut fut, &waker), Poll::Ready(Err(TaskError::Cancelled))));
        assert!(!job.run(), "a cancelled task does not run");

        // The worker's pop finds it late: `run` expires it and wakes the
        // waker a poll stored before the deadline. (Stored through the
        // slot itself: a poll now, after the deadline, would expire the
        // task itself, as the next case shows.)
        let (handle, job) = TaskHandle::labelled(&registry, || 2, true, Some(Instant::now()), None);
        assert!(!handle.cell.waker().register(&waker));
        let mut fut = handle.into_future();
        fut.registered = true;
        assert!(!job.run(), "late: expired, not run");
        assert_eq!(counter.0.load(SeqCst), 2, "the expiry woke it");
        assert!(matches!(poll(&mut fut, &waker), Poll::Ready(Err(TaskError::Expired))));

        // Polled late and not started: the poll expires it.
        let (late, late_job) = TaskHandle::labelled(&registry, || 3, true, Some(Instant::now()), None);
        let mut late = late.into_future();
        assert!(matches!(poll(&mut late, &waker), Poll::Ready(Err(TaskError::Expired))));
        assert!(!late_job.run());

        // A dropped future detaches its task: it still runs, and wakes
        // nobody.
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (handle, job) = TaskHandle::labelled(&registry, || 4, true, Some(deadline), None);
        let mut fut = handle.into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        drop(fut);
        assert!(job.run(), "the detached task runs");
        assert_eq!(counter.0.load(SeqCst), 2, "one wake per ended await, none for the detached one");
        assert_eq!(Arc::strong_count(&counter), 2, "no cell keeps a waker");
    }

    #[test]
    fn a_panic_ends_the_await_with_its_payload() {
        let registry = threadless();
        let (handle, job) = TaskHandle::new(&registry, || -> u32 { std::panic::panic_any("boom") });
        let waker = Waker::from(Arc::new(CountingWaker::default()));
        let mut fut = handle.into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        job.run();
        match poll(&mut fut, &waker) {
            Poll::Ready(Err(e)) => assert_eq!(e.panic_message(), Some("boom")),
            other => panic!("expected the panic, got {:?}", other.map(|r| r.map_err(|e| format!("{e:?}")))),
        }
    }

    /// The future's poll racing the task's run on another thread: the
    /// result is read only after the completion published it (Miri
    /// reports a data race otherwise), and a pending poll is woken.
    #[test]
    fn a_poll_races_the_run() {
        let rounds = if cfg!(miri) { 4 } else { 200 };
        for _ in 0..rounds {
            let registry = threadless();
            let (handle, job) = TaskHandle::new(&registry, || String::from("done"));
            let counter = Arc::new(CountingWaker::default());
            let waker = Waker::from(counter.clone());
            let runner = std::thread::spawn(move || job.run());
            let mut fut = pin!(handle.into_future());
            let first = fut.as_mut().poll(&mut Context::from_waker(&waker));
            assert!(runner.join().unwrap());
            let value = match first {
                Poll::Ready(v) => v,
                Poll::Pending => {
                    assert_eq!(counter.0.load(SeqCst), 1, "pending, then woken by the run");
                    match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                        Poll::Ready(v) => v,
                        Poll::Pending => panic!("woken but not ready"),
                    }
                }
            };
            assert_eq!(value.unwrap(), "done");
        }
    }
}
