//! Helpers shared by the unit tests of the future types: a registry with
//! no thread (tasks are run, cancelled or expired by hand, so the tests run
//! under Miri too), a waker that counts its wakes, and one poll.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Wake, Waker};

use crate::registry::Registry;

pub(crate) fn threadless() -> Arc<Registry> {
    let config = crate::Pool::builder().min_threads(1).growth(crate::Growth::Fixed).validate().unwrap();
    Arc::new(Registry::new(config))
}

#[derive(Default)]
pub(crate) struct CountingWaker(pub(crate) AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

pub(crate) fn poll<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(waker))
}
