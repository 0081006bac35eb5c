//! `Pool::spawn_batch` (issue 15): every task of a batch runs, or is
//! cancelled like any accepted task, or comes back to the caller, exactly
//! once, whatever races it; refusals stop a batch at a defined point.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::{Outcomes, Tracked, eventually, held_single_worker, watchdog};
use wspool::{Growth, Pool, Reject, Shutdown, SpawnOptions, SubmitErrorKind};

const HANG: Duration = Duration::from_secs(20);

fn fixed(threads: usize) -> Pool {
    Pool::builder().min_threads(threads).growth(Growth::Fixed).build().unwrap()
}

#[test]
fn a_batch_from_a_foreign_thread_runs_every_task_once() {
    watchdog(HANG, "foreign batch", || {
        let pool = fixed(2);
        let hits: Arc<Vec<AtomicU8>> = Arc::new((0..10_000).map(|_| AtomicU8::new(0)).collect());
        let before = pool.stats().submitted;
        pool.spawn_batch((0..10_000).map(|i| {
            let hits = hits.clone();
            move || {
                hits[i].fetch_add(1, SeqCst);
            }
        }))
        .unwrap();
        eventually(HANG, "every task ran", || hits.iter().all(|h| h.load(SeqCst) > 0));
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "a task ran twice");
        assert_eq!(pool.stats().submitted - before, 10_000);
    });
}

#[test]
fn a_batch_from_a_pool_thread_runs_every_task_once() {
    watchdog(HANG, "batch from a task", || {
        let pool = fixed(2);
        let count = Arc::new(AtomicUsize::new(0));
        let group = pool.group();
        let (p, c) = (pool.clone(), count.clone());
        group
            .spawn(move || {
                let tasks: Vec<_> = (0..1000)
                    .map(|_| {
                        let c = c.clone();
                        move || {
                            c.fetch_add(1, SeqCst);
                        }
                    })
                    .collect();
                p.spawn_batch(tasks).unwrap();
                // Through the global queue too.
                let c = c.clone();
                p.spawn_batch_with(
                    SpawnOptions { global: true, ..Default::default() },
                    (0..1000).map(move |_| {
                        let c = c.clone();
                        move || {
                            c.fetch_add(1, SeqCst);
                        }
                    }),
                )
                .unwrap();
            })
            .unwrap();
        group.wait().unwrap();
        eventually(HANG, "2000 tasks ran", || count.load(SeqCst) == 2000);
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert_eq!(count.load(SeqCst), 2000);
    });
}

#[test]
fn an_empty_batch_is_accepted() {
    let pool = fixed(1);
    let none: Vec<fn()> = Vec::new();
    pool.spawn_batch(none).unwrap();
    pool.shutdown(Shutdown::Drain, None).unwrap();
    assert_eq!(pool.stats().submitted, 0);
}

#[test]
fn a_batch_after_shutdown_comes_back_whole_and_in_order() {
    let pool = fixed(1);
    pool.shutdown(Shutdown::Drain, None).unwrap();
    let outcomes = Arc::new(Outcomes::default());
    let order = Arc::new(Mutex::new(Vec::new()));
    let err = pool
        .spawn_batch((0..5).map(|i| {
            let t = Tracked::new(&outcomes);
            let order = order.clone();
            move || {
                t.run();
                order.lock().unwrap().push(i);
            }
        }))
        .unwrap_err();
    assert_eq!(err.kind(), SubmitErrorKind::Shutdown);
    assert_eq!(err.accepted(), 0);
    let rest = err.into_rest();
    assert_eq!(outcomes.dropped_unrun.load(SeqCst), 0, "the pool dropped a task it refused");
    // The caller gets its tasks back, in order, and may still run them.
    rest.into_iter().for_each(|f| f());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(outcomes.ran.load(SeqCst), 5);
}

#[test]
fn a_full_queue_stops_the_batch_at_the_first_rejected_task() {
    watchdog(HANG, "bounded batch", || {
        let builder = Pool::builder().queue_capacity(3).reject(Reject::Abort);
        let (pool, gate, _guard) = held_single_worker(builder);
        let outcomes = Arc::new(Outcomes::default());
        let err = pool
            .spawn_batch((0..10).map(|_| {
                let t = Tracked::new(&outcomes);
                move || t.run()
            }))
            .unwrap_err();
        assert_eq!(err.kind(), SubmitErrorKind::Rejected);
        assert_eq!(err.accepted(), 3, "a capacity of 3 with the only worker held");
        assert_eq!(err.into_rest().len(), 7);
        // The 7 refused tasks came back and were dropped here, unrun.
        assert_eq!(outcomes.dropped_unrun.load(SeqCst), 7);
        gate.open();
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert_eq!(outcomes.ran.load(SeqCst), 3);
        assert_eq!(pool.stats().rejected, 1);
    });
}

#[test]
fn caller_runs_tasks_of_a_batch_run_on_the_caller_and_the_rest_is_queued() {
    watchdog(HANG, "caller-runs batch", || {
        let builder = Pool::builder().queue_capacity(2).reject(Reject::CallerRuns);
        let (pool, gate, _guard) = held_single_worker(builder);
        let me = std::thread::current().id();
        let on_caller = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        pool.spawn_batch((0..6).map(|_| {
            let (on_caller, ran) = (on_caller.clone(), ran.clone());
            move || {
                if std::thread::current().id() == me {
                    on_caller.fetch_add(1, SeqCst);
                }
                ran.fetch_add(1, SeqCst);
            }
        }))
        .unwrap();
        // Two fit the queue; the other four ran on the caller during the call.
        assert_eq!(on_caller.load(SeqCst), 4);
        gate.open();
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert_eq!(ran.load(SeqCst), 6);
        assert_eq!(pool.stats().submitted, 1 + 6, "the gate task and the batch");
    });
}

#[test]
fn a_batch_on_a_group_counts_toward_it_and_another_pools_group_is_refused() {
    watchdog(HANG, "group batch", || {
        let pool = fixed(2);
        let other = fixed(1);
        let count = Arc::new(AtomicUsize::new(0));
        let group = pool.group();
        let mk = |n: usize| {
            let count = count.clone();
            (0..n).map(move |_| {
                let count = count.clone();
                move || {
                    count.fetch_add(1, SeqCst);
                }
            })
        };
        pool.spawn_batch_with(SpawnOptions { group: Some(&group), ..Default::default() }, mk(100)).unwrap();
        group.wait().unwrap();
        assert_eq!(count.load(SeqCst), 100, "the group's wait covered the batch");
        let foreign = other.group();
        let err =
            pool.spawn_batch_with(SpawnOptions { group: Some(&foreign), ..Default::default() }, mk(3)).unwrap_err();
        assert_eq!((err.kind(), err.accepted(), err.into_rest().len()), (SubmitErrorKind::WrongPool, 0, 3));
    });
}

/// Batches race a shutdown in both modes: every task is run, cancelled by
/// the pool, or handed back in the error, exactly once, and what the
/// errors say was accepted is exactly what ran or was cancelled.
#[test]
fn batches_racing_shutdown_account_for_every_task_exactly_once() {
    for mode in [Shutdown::Drain, Shutdown::Cancel] {
        for round in 0..20 {
            watchdog(HANG, "batches racing shutdown", move || {
                const SUBMITTERS: usize = 3;
                const BATCHES: usize = 40;
                const PER_BATCH: usize = 64;
                let total = SUBMITTERS * BATCHES * PER_BATCH;
                let pool = fixed(2);
                // 0 = untouched, 1 = ran, 2 = dropped unrun (by the pool or by us).
                let fate: Arc<Vec<AtomicU8>> = Arc::new((0..total).map(|_| AtomicU8::new(0)).collect());
                let accepted = Arc::new(AtomicUsize::new(0));
                let returned = Arc::new(AtomicUsize::new(0));
                let start = Arc::new(Barrier::new(SUBMITTERS + 1));
                let mut threads = Vec::new();
                for s in 0..SUBMITTERS {
                    let (pool, fate, accepted, returned, start) =
                        (pool.clone(), fate.clone(), accepted.clone(), returned.clone(), start.clone());
                    threads.push(std::thread::spawn(move || {
                        start.wait();
                        for b in 0..BATCHES {
                            let base = (s * BATCHES + b) * PER_BATCH;
                            let batch: Vec<_> = (base..base + PER_BATCH).map(|i| Fated::new(&fate, i)).collect();
                            match pool.spawn_batch(batch.into_iter().map(|t| move || t.run())) {
                                Ok(()) => {
                                    accepted.fetch_add(PER_BATCH, SeqCst);
                                }
                                Err(e) => {
                                    // No reject policy in play: only a shutdown
                                    // refuses, and it refuses a batch whole.
                                    assert_eq!((e.kind(), e.accepted()), (SubmitErrorKind::Shutdown, 0));
                                    let rest = e.into_rest();
                                    assert_eq!(rest.len(), PER_BATCH);
                                    returned.fetch_add(rest.len(), SeqCst);
                                }
                            }
                        }
                    }));
                }
                start.wait();
                std::thread::sleep(Duration::from_micros(200 * (round as u64 % 5)));
                pool.shutdown(mode, None).unwrap();
                for t in threads {
                    t.join().unwrap();
                }
                let ran = fate.iter().filter(|f| f.load(SeqCst) == 1).count();
                let dropped = fate.iter().filter(|f| f.load(SeqCst) == 2).count();
                assert!(fate.iter().all(|f| f.load(SeqCst) != 0), "a task was lost: neither run nor dropped");
                let returned = returned.load(SeqCst);
                assert_eq!(ran + dropped, total);
                // What was accepted ran or was cancelled; what came back was dropped here.
                assert_eq!(ran + (dropped - returned), accepted.load(SeqCst), "accepted != ran + cancelled");
                if mode == Shutdown::Drain {
                    assert_eq!(dropped, returned, "a drain cancelled an accepted task");
                }
            });
        }
    }
}

/// A task's fate in a shared table: set to 1 when run, 2 when dropped
/// unrun; a second fate panics (it would mean a task ended twice).
struct Fated {
    fate: Arc<Vec<AtomicU8>>,
    i: usize,
    done: bool,
}

impl Fated {
    fn new(fate: &Arc<Vec<AtomicU8>>, i: usize) -> Fated {
        Fated { fate: fate.clone(), i, done: false }
    }
    fn run(mut self) {
        self.done = true;
        assert_eq!(self.fate[self.i].swap(1, SeqCst), 0, "task {} ended twice", self.i);
    }
}

impl Drop for Fated {
    fn drop(&mut self) {
        if !self.done {
            let prev = self.fate[self.i].swap(2, SeqCst);
            assert_eq!(prev, 0, "task {} ended twice", self.i);
        }
    }
}

/// Any `IntoIterator` will do, even one that calls the pool while it is
/// iterated.
#[test]
fn batches_take_any_iterator() {
    watchdog(HANG, "iterator kinds", || {
        let pool = fixed(1);
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        // An iterator that itself uses the pool: it is collected before the
        // pool's submission opens, so this cannot deadlock.
        let p = pool.clone();
        let tasks = (0..3).map(move |i| {
            let _ = p.stats();
            let l = l.clone();
            move || l.lock().unwrap().push(i)
        });
        pool.spawn_batch(tasks).unwrap();
        pool.shutdown(Shutdown::Drain, None).unwrap();
        let mut got = log.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, vec![0, 1, 2]);
    });
}

#[test]
fn submit_batch_hands_back_one_handle_per_task_in_order() {
    watchdog(HANG, "submit_batch", || {
        let pool = fixed(2);
        let handles = pool.submit_batch((0..100u64).map(|i| move || i * i)).unwrap();
        let values: Vec<u64> = handles.into_iter().map(|h| h.wait().unwrap()).collect();
        assert_eq!(values, (0..100u64).map(|i| i * i).collect::<Vec<_>>());
    });
}

#[test]
fn a_refused_submit_batch_returns_the_accepted_handles_and_the_rest() {
    watchdog(HANG, "submit_batch refused", || {
        let builder = Pool::builder().queue_capacity(2).reject(Reject::Abort);
        let (pool, gate, _guard) = held_single_worker(builder);
        let err = pool.submit_batch((0..5).map(|i| move || i)).unwrap_err();
        assert_eq!((err.kind(), err.accepted()), (SubmitErrorKind::Rejected, 2));
        let (handles, rest) = err.into_parts();
        assert_eq!(rest.into_iter().map(|f| f()).collect::<Vec<_>>(), vec![2, 3, 4]);
        gate.open();
        assert_eq!(handles.into_iter().map(|h| h.wait().unwrap()).collect::<Vec<_>>(), vec![0, 1]);
        pool.shutdown(Shutdown::Drain, None).unwrap();
    });
}

#[test]
fn batch_tasks_are_sampled_for_queue_delay_like_single_ones() {
    watchdog(HANG, "delay sampling", || {
        let pool = fixed(1);
        // 640 tasks: 10 of them carry a timestamp (one in 64 per thread).
        pool.spawn_batch((0..640).map(|_| || {})).unwrap();
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert!(pool.stats().queue_delay_max_ns > 0, "no task of the batch was sampled");
    });
}

/// One wake-up per batch still brings in every worker the batch needs (the
/// woken searcher wakes the next, `sleep/README.md` rule 4): two tasks that
/// can only finish together run at once on an idle 2-worker pool.
#[test]
fn one_batch_wakes_as_many_workers_as_it_needs() {
    watchdog(HANG, "batch wake-ups", || {
        let pool = fixed(2);
        eventually(HANG, "both workers idle", || pool.stats().idle_threads == 2);
        for _round in 0..20 {
            let arrived = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(AtomicUsize::new(0));
            pool.spawn_batch((0..2).map(|_| {
                let (arrived, done) = (arrived.clone(), done.clone());
                move || {
                    arrived.fetch_add(1, SeqCst);
                    // Both tasks must be running at once to get past this.
                    while arrived.load(SeqCst) < 2 {
                        std::thread::yield_now();
                    }
                    done.fetch_add(1, SeqCst);
                }
            }))
            .unwrap();
            eventually(HANG, "both tasks ran together", || done.load(SeqCst) == 2);
            eventually(HANG, "both workers idle again", || pool.stats().idle_threads == 2);
        }
    });
}
