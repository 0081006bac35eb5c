//! Awaiting task handles and groups from async code (issue 41): a
//! `TaskHandle` and a `Group` are `IntoFuture`, for any executor.
//!
//! No test depends on timing. That the runtime's thread is not blocked is
//! shown by another task's progress, which the awaited pool task itself
//! waits for; each wake-up is counted with a waker of the test's own;
//! every test runs under a watchdog, so a hang (a lost wake-up, a blocked
//! runtime) fails instead of stalling the suite.
#![cfg(not(loom))]

mod common;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Gate, OpenOnDrop, held_single_worker, watchdog};
use wspool::{Pool, Priority, Shutdown, SpawnOptions, TaskError, TaskFuture};

const LIMIT: Duration = Duration::from_secs(120);

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a current-thread runtime")
}

/// Wraps a future and reports, once, that a poll of it returned `Pending`
/// (its waker is then stored): what another thread waits for before it
/// ends the awaited task, so the end has to come through the waker.
struct FirstPending<F> {
    inner: F,
    tell: Option<mpsc::Sender<()>>,
}

fn first_pending<F: Future + Unpin>(inner: F) -> (FirstPending<F>, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    (FirstPending { inner, tell: Some(tx) }, rx)
}

impl<F: Future + Unpin> Future for FirstPending<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = Pin::new(&mut self.inner).poll(cx);
        if polled.is_pending()
            && let Some(tell) = self.tell.take()
        {
            let _ = tell.send(());
        }
        polled
    }
}

/// A waker that reports each wake on a channel.
struct ChannelWaker(std::sync::Mutex<mpsc::Sender<()>>);

impl Wake for ChannelWaker {
    fn wake(self: Arc<Self>) {
        let _ = self.0.lock().unwrap().send(());
    }
}

fn channel_waker() -> (Waker, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    (Waker::from(Arc::new(ChannelWaker(std::sync::Mutex::new(tx)))), rx)
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn a_current_thread_runtime_keeps_running_while_it_awaits_a_pool_task() {
    watchdog(LIMIT, "await on a current-thread runtime", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let rt = current_thread_runtime();
        rt.block_on(async {
            // Another task of the same (one-thread) runtime ticks.
            let ticks = Arc::new(AtomicU64::new(0));
            let (tick_tx, tick_rx) = mpsc::channel::<()>();
            let ticker = {
                let ticks = ticks.clone();
                tokio::spawn(async move {
                    loop {
                        ticks.fetch_add(1, SeqCst);
                        let _ = tick_tx.send(());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            };
            // The pool task ends only after 10 of those ticks, then works
            // 300 ms: had the await blocked the runtime's only thread, no
            // tick could come and the await would never end.
            let before = ticks.load(SeqCst);
            let handle = pool
                .submit(move || {
                    for _ in 0..10 {
                        tick_rx.recv().expect("the ticker ticks");
                    }
                    std::thread::sleep(Duration::from_millis(300));
                    "done"
                })
                .unwrap();
            assert_eq!(handle.await.unwrap(), "done");
            let during = ticks.load(SeqCst) - before;
            assert!(during >= 10, "the runtime ran its other task {during} times during the await");
            ticker.abort();
        });
    });
}

#[test]
fn ten_thousand_handles_awaited_with_join_all_give_every_result() {
    watchdog(LIMIT, "join_all of 10,000 handles", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let group = pool.group();
        let rt = current_thread_runtime();
        // Handles from every way to get one: submit, submit_with (a
        // priority, a deadline an hour away), submit_batch, a group's.
        let mut handles = Vec::with_capacity(10_000);
        for i in 0..4_000u64 {
            handles.push(pool.submit(move || i * i).unwrap());
        }
        let far = Some(Instant::now() + Duration::from_secs(3600));
        for i in 4_000..6_000u64 {
            let priority = [Priority::Low, Priority::Normal, Priority::High][i as usize % 3];
            let opts = SpawnOptions { priority, deadline: far, ..Default::default() };
            handles.push(pool.submit_with(opts, move || i * i).unwrap());
        }
        handles.extend(pool.submit_batch((6_000..9_000u64).map(|i| move || i * i)).map_err(|_| "refused").unwrap());
        for i in 9_000..10_000u64 {
            handles.push(group.submit(move || i * i).unwrap());
        }
        let results = rt.block_on(futures_util::future::join_all(handles.into_iter().map(IntoFuture::into_future)));
        assert_eq!(results.len(), 10_000);
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap(), (i * i) as u64, "handle {i}");
        }
        assert_eq!(group.pending(), 0);
    });
}

#[test]
fn a_panicking_task_ends_the_await_with_its_panic() {
    watchdog(LIMIT, "await a panic", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let g = gate.clone();
        let handle = pool
            .submit(move || -> u32 {
                g.wait();
                panic!("boom")
            })
            .unwrap();
        let (fut, polled) = first_pending(handle.into_future());
        let opener = std::thread::spawn(move || {
            polled.recv().unwrap();
            gate.open();
        });
        let result = current_thread_runtime().block_on(fut);
        opener.join().unwrap();
        match result {
            Err(e @ TaskError::Panicked(_)) => assert_eq!(e.panic_message(), Some("boom")),
            other => panic!("expected the task's panic, got {:?}", other.err()),
        }
    });
}

#[test]
fn a_cancelled_task_ends_the_await_with_cancelled() {
    watchdog(LIMIT, "await a cancelled task", || {
        // Cancelled through the future, before it was ever polled.
        let (pool, _gate, _open) = held_single_worker(Pool::builder());
        let fut = pool.submit(|| 1).unwrap().into_future();
        assert!(fut.cancel());
        assert!(matches!(current_thread_runtime().block_on(fut), Err(TaskError::Cancelled)));

        // Cancelled on another thread (a `Shutdown::Cancel` empties the
        // queue there) while the runtime awaits it.
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let handle = pool.submit(move || r.fetch_add(1, SeqCst)).unwrap();
        let (fut, polled) = first_pending(handle.into_future());
        let result = std::thread::scope(|s| {
            let pool = &pool;
            s.spawn(move || {
                polled.recv().unwrap();
                // The only worker is still held: the shutdown cannot end
                // within no time, but it cancelled the queue first.
                assert!(pool.shutdown(Shutdown::Cancel, Some(Duration::ZERO)).is_err());
            });
            current_thread_runtime().block_on(fut)
        });
        assert!(matches!(result, Err(TaskError::Cancelled)), "got {:?}", result.map_err(|e| format!("{e:?}")));
        assert_eq!(ran.load(SeqCst), 0, "a cancelled task never runs");
    });
}

#[test]
fn an_expired_task_ends_the_await_with_expired() {
    watchdog(LIMIT, "await an expired task", || {
        // The only worker is held until the deadline has passed; the pop
        // that then finds the task late expires it and wakes the await.
        // (Were the first poll itself late, it would expire the task: the
        // same error either way, so the test does not depend on timing.)
        let (pool, gate, _open) = held_single_worker(Pool::builder());
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let deadline = Instant::now() + Duration::from_millis(100);
        let opts = SpawnOptions { deadline: Some(deadline), ..Default::default() };
        let handle = pool.submit_with(opts, move || r.fetch_add(1, SeqCst)).unwrap();
        let (fut, polled) = first_pending(handle.into_future());
        let opener = std::thread::spawn(move || {
            // Never polled (the first poll was late): nothing to wait for.
            let _ = polled.recv();
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            gate.open();
        });
        let result = current_thread_runtime().block_on(fut);
        opener.join().unwrap();
        assert!(matches!(result, Err(TaskError::Expired)), "got {:?}", result.map_err(|e| format!("{e:?}")));
        assert_eq!(ran.load(SeqCst), 0, "an expired task never runs");
        assert_eq!(pool.stats().expired, 1);
    });
}

/// Each way a task ends (it returns or panics on the worker, is
/// cancelled while queued, or is expired by the worker's pop) wakes the
/// waker of a poll that returned `Pending` exactly once: one wake-up each, none more by
/// the time the pool has shut down (every task's end is behind it).
#[test]
fn every_ending_wakes_the_awaiting_future_exactly_once() {
    watchdog(LIMIT, "one wake-up per ending", || {
        let (pool, gate, open) = held_single_worker(Pool::builder());
        let deadline = Instant::now() + Duration::from_millis(100);
        let mut futures: Vec<(&str, TaskFuture<u32>)> = vec![
            ("returns", pool.submit(|| 7).unwrap().into_future()),
            ("panics", pool.submit(|| -> u32 { panic!("boom") }).unwrap().into_future()),
            ("cancelled", pool.submit(|| 8).unwrap().into_future()),
            (
                "expired",
                pool.submit_with(SpawnOptions { deadline: Some(deadline), ..Default::default() }, || 9)
                    .unwrap()
                    .into_future(),
            ),
        ];
        // Only the deadlined task could end at its first poll (a late poll
        // expires it, with no wake to count): then it is left out.
        if Instant::now() >= deadline {
            futures.pop();
        }
        let mut wakes = Vec::new();
        for (what, fut) in futures.iter_mut() {
            let (waker, woken) = channel_waker();
            match poll_once(fut, &waker) {
                Poll::Pending => {}
                Poll::Ready(r) => panic!("{what}: ready before the worker was freed: {:?}", r.err()),
            }
            // Polled again with the same waker: stored once, still pending.
            assert!(poll_once(fut, &waker).is_pending());
            wakes.push((waker, woken));
        }
        assert!(futures[2].1.cancel(), "cancelled while queued");
        let cancel_woke = wakes[2].1.recv_timeout(LIMIT).is_ok();
        assert!(cancel_woke, "the cancel woke its future");
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        gate.open();
        for ((what, fut), (waker, woken)) in futures.iter_mut().zip(&wakes) {
            if *what != "cancelled" {
                woken.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("{what}: never woken"));
            }
            let result = match poll_once(fut, waker) {
                Poll::Ready(r) => r,
                Poll::Pending => panic!("{what}: woken but pending"),
            };
            match (*what, result) {
                ("returns", Ok(7)) | ("panics", Err(TaskError::Panicked(_))) => {}
                ("cancelled", Err(TaskError::Cancelled)) | ("expired", Err(TaskError::Expired)) => {}
                (what, r) => panic!("{what}: wrong result {:?}", r.map_err(|e| format!("{e:?}"))),
            }
        }
        drop(open);
        pool.shutdown(Shutdown::Drain, Some(LIMIT)).unwrap();
        for ((what, _), (_, woken)) in futures.iter().zip(&wakes) {
            assert!(woken.try_recv().is_err(), "{what}: woken a second time");
        }
    });
}

#[test]
fn a_future_dropped_before_completion_leaves_its_task_running_to_completion() {
    watchdog(LIMIT, "dropped future", || {
        let (pool, gate, _open) = held_single_worker(Pool::builder());
        let (ran_tx, ran_rx) = mpsc::channel();
        let handle = pool.submit(move || ran_tx.send("ran").unwrap()).unwrap();
        let mut fut = handle.into_future();
        let (waker, woken) = channel_waker();
        assert!(poll_once(&mut fut, &waker).is_pending());
        drop(fut);
        gate.open();
        assert_eq!(ran_rx.recv_timeout(LIMIT), Ok("ran"), "the detached task ran");
        pool.shutdown(Shutdown::Drain, Some(LIMIT)).unwrap();
        assert_eq!(pool.stats().cancelled, 0, "dropping the future cancelled nothing");
        assert!(woken.try_recv().is_err(), "a dropped future's waker is not woken");

        // The same in a runtime: a timeout drops the future it polled
        // while the pool task is held; the task then runs.
        let (pool, gate, _open) = held_single_worker(Pool::builder());
        let (ran_tx, ran_rx) = mpsc::channel();
        let handle = pool.submit(move || ran_tx.send("ran").unwrap()).unwrap();
        let (fut, polled) = first_pending(handle.into_future());
        let timed_out =
            current_thread_runtime().block_on(async { tokio::time::timeout(Duration::from_millis(10), fut).await });
        assert!(timed_out.is_err(), "the held task cannot end before the gate opens");
        assert!(
            polled.try_recv().is_ok(),
            "the future was polled (and its waker stored) before the timeout dropped it"
        );
        gate.open();
        assert_eq!(ran_rx.recv_timeout(LIMIT), Ok("ran"), "the task whose await timed out ran");
    });
}

#[test]
fn awaiting_a_group() {
    watchdog(LIMIT, "await a group", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let group = pool.group();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..8 {
            let (gate, done) = (gate.clone(), done.clone());
            group
                .spawn(move || {
                    gate.wait();
                    done.fetch_add(1, SeqCst);
                })
                .unwrap();
        }
        let rt = current_thread_runtime();
        // By reference: the group stays usable after.
        let (fut, polled) = first_pending((&group).into_future());
        let opener = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                polled.recv().unwrap();
                gate.open();
            })
        };
        rt.block_on(fut).unwrap();
        opener.join().unwrap();
        assert_eq!(done.load(SeqCst), 8, "ready only once every task ended");

        // A panic reaches the await, as it reaches `wait`; then it is taken.
        group.spawn(|| panic!("group boom")).unwrap();
        match rt.block_on((&group).into_future()) {
            Err(e @ TaskError::Panicked(_)) => assert_eq!(e.panic_message(), Some("group boom")),
            other => panic!("expected the group's panic, got {:?}", other.err()),
        }
        assert!(rt.block_on(group.clone().into_future()).is_ok());

        // By value, and an empty group is ready at once.
        let empty = pool.group();
        assert!(rt.block_on(empty.into_future()).is_ok());
        assert!(rt.block_on(group.into_future()).is_ok());
    });
}
