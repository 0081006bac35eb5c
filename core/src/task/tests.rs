//! The task cell's hand-overs, under Miri in `make test-miri` (the racing
//! ones, whose names say `race`, with several seeds): the closure owned by
//! whoever wins the CAS out of PENDING, the result written by that winner
//! and read by a waiter on another thread after the latch, and the cell
//! freed by whichever of the job and the handle lets go last. The job is
//! run or cancelled by hand, off any pool thread, so each test is one
//! small, fixed set of threads; the pool only lends its registry.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::*;
use crate::config::Growth;
use crate::pool::Pool;

/// A pool whose one worker never sees these jobs: they are run by hand.
fn pool() -> Pool {
    Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap()
}

/// Counts its drops: a closure must be dropped exactly once, run or not.
struct Drops(Arc<AtomicUsize>);

impl Drop for Drops {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A result that owns heap memory, so a racy read of the result cell or a
/// double drop is a use after free Miri reports.
fn payload(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

#[test]
fn the_result_races_to_the_waiter_through_the_latch() {
    let pool = pool();
    let (handle, job) = TaskHandle::new(pool.registry(), || payload(3));
    let runner = std::thread::spawn(move || job.run());
    assert_eq!(handle.wait().unwrap(), payload(3));
    assert!(runner.join().unwrap(), "the job ran the task");
}

/// A run and a cancel race for a pending task: exactly one wins, the
/// closure is dropped once either way, and the waiter sees the winner's
/// outcome.
#[test]
fn run_and_cancel_race_one_wins() {
    let pool = pool();
    for _ in 0..if cfg!(miri) { 2 } else { 200 } {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = Drops(drops.clone());
        let (handle, job) = TaskHandle::new(pool.registry(), move || {
            let _guard = guard;
            payload(2)
        });
        let runner = std::thread::spawn(move || job.run());
        let cancelled = handle.cancel();
        let ran = runner.join().unwrap();
        assert!(ran != cancelled, "exactly one of run ({ran}) and cancel ({cancelled}) wins");
        assert_eq!(drops.load(SeqCst), 1, "the closure is dropped once");
        match handle.wait() {
            Ok(v) => assert!(ran && v == payload(2)),
            Err(TaskError::Cancelled) => assert!(cancelled),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// A waiter off the pool that expires a task at its deadline races the
/// worker that would start it: one of them wins, and the waiter's result
/// is the winner's.
#[test]
fn expiry_at_the_deadline_races_the_start() {
    let pool = pool();
    let deadline = Instant::now() + Duration::from_millis(1);
    let (handle, job) = TaskHandle::labelled(pool.registry(), || payload(1), true, Some(deadline), None);
    let runner = std::thread::spawn(move || job.run());
    let result = handle.wait();
    let ran = runner.join().unwrap();
    match result {
        Ok(v) => assert!(ran && v == payload(1)),
        Err(TaskError::Expired) => assert!(!ran),
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// A task past its deadline is expired where it would start: its closure
/// is dropped unrun, once, and `expiring` is true during that drop.
#[test]
fn a_late_task_expires_where_it_would_start() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let guard = Drops(drops.clone());
    let (handle, job) = TaskHandle::labelled(pool.registry(), move || drop(guard), true, Some(Instant::now()), None);
    assert!(!job.run(), "an expired task is not counted as run");
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(handle.state(), TaskState::Expired);
    assert!(matches!(handle.wait(), Err(TaskError::Expired)));
    assert_eq!(pool.stats().expired, 1);
}

/// A panic is caught in the cell and its payload handed to the waiter.
#[test]
fn a_panic_reaches_the_waiter() {
    let pool = pool();
    let (handle, job) = TaskHandle::new(pool.registry(), || -> u32 { std::panic::panic_any(payload(2)) });
    let runner = std::thread::spawn(move || job.run());
    match handle.wait() {
        Err(TaskError::Panicked(p)) => assert_eq!(*p.downcast::<Vec<String>>().unwrap(), payload(2)),
        other => panic!("expected the panic, got {other:?}"),
    }
    assert!(runner.join().unwrap());
    assert_eq!(pool.stats().panicked, 1);
}

/// The handle dropped first (a detached task) and the job last, or the
/// job cancelled through the pool's path while the handle is gone: the
/// cell is freed exactly once (Miri reports a leak or a double free).
#[test]
fn the_cell_outlives_whichever_side_lets_go_first() {
    let pool = pool();
    let (handle, job) = TaskHandle::new(pool.registry(), || payload(2));
    drop(handle);
    assert!(std::thread::spawn(move || job.run()).join().unwrap());

    let drops = Arc::new(AtomicUsize::new(0));
    let guard = Drops(drops.clone());
    let (handle, job) = TaskHandle::new(pool.registry(), move || drop(guard));
    drop(handle);
    pool.registry().cancel_job(job);
    assert_eq!(drops.load(SeqCst), 1);
    assert_eq!(pool.stats().cancelled, 1);
}

/// Two threads cancel one pending task: one gets true, after the closure
/// was dropped; the other false.
#[test]
fn two_cancels_race_one_wins() {
    let pool = pool();
    let drops = Arc::new(AtomicUsize::new(0));
    let guard = Drops(drops.clone());
    let (handle, job) = TaskHandle::new(pool.registry(), move || drop(guard));
    let handle = Arc::new(handle);
    let other = {
        let (handle, drops) = (handle.clone(), drops.clone());
        std::thread::spawn(move || {
            let won = handle.cancel();
            // A winner returns only after the drop.
            assert!(!won || drops.load(SeqCst) == 1);
            won
        })
    };
    let mine = handle.cancel();
    assert!(!mine || drops.load(SeqCst) == 1);
    let theirs = other.join().unwrap();
    assert!(mine != theirs, "exactly one cancel wins");
    assert!(!job.run(), "a cancelled task's job is a tombstone");
    assert_eq!(drops.load(SeqCst), 1);
}
