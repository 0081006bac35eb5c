//! `group.await`: a [`Group`] as a future, for any executor.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Group;
use crate::error::TaskError;
use crate::latch::new_waker_key;

/// The future of a [`Group`] (`group.await`, or `(&group).await`, through
/// [`IntoFuture`]): ready once the group has no pending task, with what
/// [`Group::wait`] returns, the first panic of a task since the last wait
/// or await (`Err(TaskError::Panicked)`), else `Ok(())`. It never blocks
/// the thread that polls it: a poll stores the executor's waker (replaced
/// only when it would wake another task) and the task that empties the
/// group wakes it. As with `wait`, tasks spawned before it is ready count
/// too, and awaited from one of the group's own tasks it ends at once with
/// `Err(TaskError::WouldDeadlock)`. Dropping it leaves the group and its
/// tasks untouched.
///
/// ```
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
/// let group = pool.group();
/// let sum = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
/// for i in 1..=10 {
///     let sum = sum.clone();
///     group.spawn(move || { sum.fetch_add(i, std::sync::atomic::Ordering::Relaxed); }).unwrap();
/// }
/// (&group).await.unwrap();
/// assert_eq!(sum.load(std::sync::atomic::Ordering::Relaxed), 55);
/// # });
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct GroupFuture {
    group: Group,
    /// Its waker's key in the group's signal.
    key: u64,
    /// A waker of ours may be stored: the drop takes it back.
    registered: bool,
}

impl IntoFuture for Group {
    type Output = Result<(), TaskError>;
    type IntoFuture = GroupFuture;

    /// The group as a future ([`GroupFuture`]), holding this handle.
    fn into_future(self) -> GroupFuture {
        GroupFuture { group: self, key: new_waker_key(), registered: false }
    }
}

impl IntoFuture for &Group {
    type Output = Result<(), TaskError>;
    type IntoFuture = GroupFuture;

    /// The group as a future ([`GroupFuture`]), holding a clone of the
    /// handle (so the future is `'static`).
    fn into_future(self) -> GroupFuture {
        self.clone().into_future()
    }
}

impl Future for GroupFuture {
    type Output = Result<(), TaskError>;

    /// Ready once the group is empty; else `Pending`, with `cx`'s waker
    /// stored for the task that empties it.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let inner = this.group.inner();
        if inner.waited_by_member() {
            return Poll::Ready(Err(TaskError::WouldDeadlock));
        }
        if !inner.poll_empty(this.key, &mut this.registered, cx.waker()) {
            return Poll::Pending;
        }
        Poll::Ready(match inner.take_panic() {
            Some(p) => Err(TaskError::Panicked(p)),
            None => Ok(()),
        })
    }
}

impl Drop for GroupFuture {
    /// Takes its waker back; the group's tasks are untouched.
    fn drop(&mut self) {
        if self.registered {
            self.group.inner().forget_waker(self.key);
        }
    }
}

impl std::fmt::Debug for GroupFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupFuture").field("group", &self.group).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! On a registry with no thread (tasks bound and run by hand), so
    //! these run under Miri too (`make test-miri`, `group::`).

    use std::future::IntoFuture;
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::{Poll, Waker};

    use super::super::Group;
    use crate::TaskError;
    use crate::test_support::{CountingWaker, poll, threadless};

    #[test]
    fn the_last_task_wakes_the_group_future_once() {
        let g = Group::new(threadless());
        let a = g.bind(|| ());
        let b = g.bind(|| panic!("second"));
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        let mut fut = (&g).into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        assert!(poll(&mut fut, &waker).is_pending(), "polled again: the same waker stays stored");
        a();
        assert_eq!(counter.0.load(SeqCst), 0, "one task still pending");
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(b)).is_err());
        assert_eq!(counter.0.load(SeqCst), 1, "the last task woke it");
        match poll(&mut fut, &waker) {
            Poll::Ready(Err(TaskError::Panicked(_))) => {}
            other => panic!(
                "expected the recorded panic, got {}",
                if other.is_pending() { "Pending" } else { "another result" }
            ),
        }
        assert!(matches!(poll(&mut fut, &waker), Poll::Ready(Ok(()))), "the panic was taken");
        drop(fut);
        assert_eq!(Arc::strong_count(&counter), 2, "the group keeps no waker");
    }

    #[test]
    fn a_dropped_group_future_is_not_woken() {
        let g = Group::new(threadless());
        let task = g.bind(|| ());
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        let mut fut = g.clone().into_future();
        assert!(poll(&mut fut, &waker).is_pending());
        drop(fut);
        assert_eq!(Arc::strong_count(&counter), 2, "the drop took the waker back");
        task();
        assert_eq!(counter.0.load(SeqCst), 0);
        assert!(g.wait().is_ok());
    }

    /// The last task ends on another thread while the future registers.
    #[test]
    fn a_group_poll_races_the_last_task() {
        let rounds = if cfg!(miri) { 4 } else { 200 };
        for _ in 0..rounds {
            let g = Group::new(threadless());
            let task = g.bind(|| ());
            let counter = Arc::new(CountingWaker::default());
            let waker = Waker::from(counter.clone());
            let mut fut = g.clone().into_future();
            let t = std::thread::spawn(task);
            let first = poll(&mut fut, &waker);
            t.join().unwrap();
            if first.is_pending() {
                assert_eq!(counter.0.load(SeqCst), 1, "pending, then woken by the last task");
                assert!(matches!(poll(&mut fut, &waker), Poll::Ready(Ok(()))));
            }
        }
    }
}
