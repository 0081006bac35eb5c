//! Waits the pool cannot see, made visible: a binding that waits on its own
//! latch (a Python future, a `map` chunk) for work of the pool marks the
//! wait, so the pool counts the thread as parked in a wait, as it counts its
//! own untimed waits (`wait.rs`): a thread is lent only when every thread
//! of the pool is blocked or waiting while work is queued, never one per
//! waiter. (A `blocking` region, by contrast, is lent a thread at once.)

use std::cell::RefCell;

use crate::growth::WaitingGuard;
use crate::worker::WorkerThread;

thread_local! {
    static WAITING: RefCell<Vec<WaitingGuard<'static>>> = const { RefCell::new(Vec::new()) };
}

/// The calling pool thread starts waiting for work of its pool that some
/// other thread must run (elsewhere this does nothing). While it waits, the
/// pool lends a thread only if every thread is blocked or waiting and work
/// is queued. Nests; each call needs one [`waiting_end`].
pub fn waiting_begin() {
    let Some(worker) = WorkerThread::current() else {
        return;
    };
    let guard = worker.registry.enter_waiting();
    WAITING.with(|w| w.borrow_mut().push(guard));
}

/// Ends the innermost [`waiting_begin`]. An unbalanced call is ignored.
pub fn waiting_end() {
    // Popped first, dropped after the borrow ends: the guard's drop touches
    // only the registry.
    let guard = WAITING.with(|w| w.borrow_mut().pop());
    drop(guard);
}

/// On a pool thread: whether its pool runs `max_threads` threads now, so a
/// wait can be lent no thread. False off the pool.
pub fn at_thread_cap() -> bool {
    WorkerThread::current()
        .is_some_and(|w| w.registry.threads.load(std::sync::atomic::Ordering::SeqCst) >= w.registry.config.max_threads)
}
