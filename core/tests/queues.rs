//! Regression tests for issue 10, queue part: reject policies on pool
//! threads, wake-ups during a slow start hook, serial-queue fairness,
//! what DiscardOldest may evict, and global-queue FIFO order. Each test
//! names the item it covers; anything that could hang runs under
//! `common::watchdog`.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Gate, OpenOnDrop, Outcomes, Tracked, eventually, held_single_worker, watchdog};
use wspool::{Growth, Pool, Reject, SubmitErrorKind, TaskError};

const HANG: Duration = Duration::from_secs(10);

// Issue 10.6, documented rule: a pool thread whose submission finds the
// queue full gets `Rejected` at once under Block and BlockFor (it must not
// wait for room that only its own progress would make). Block and an
// hour's BlockFor would wait past the watchdog: a `Rejected` within it was
// given at once.
#[test]
fn block_policies_reject_a_pool_thread_at_once() {
    for reject in [Reject::Block, Reject::BlockFor(Duration::from_secs(3600))] {
        let (kinds, took) = watchdog(HANG, "a pool thread submitting to its own full queue", move || {
            let pool =
                Pool::builder().min_threads(1).growth(Growth::Fixed).queue_capacity(1).reject(reject).build().unwrap();
            let p = pool.clone();
            pool.submit(move || {
                let start = Instant::now();
                let kinds: Vec<Option<SubmitErrorKind>> =
                    (0..2).map(|_| p.spawn(|| ()).err().map(|e| e.kind())).collect();
                (kinds, start.elapsed())
            })
            .unwrap()
            .wait()
            .unwrap()
        });
        assert_eq!(kinds, [None, Some(SubmitErrorKind::Rejected)], "{reject:?} (after {took:?})");
    }
}

// Issue 10.6, documented rule: DiscardOldest from a pool thread evicts the
// oldest user task of the global queue, like a foreign submitter would.
#[test]
fn discard_oldest_from_a_pool_thread_evicts_the_oldest_global_task() {
    watchdog(HANG, "DiscardOldest from a pool thread", || {
        let pool = Pool::builder()
            .min_threads(1)
            .growth(Growth::Fixed)
            .queue_capacity(1)
            .reject(Reject::DiscardOldest)
            .build()
            .unwrap();
        let go = Arc::new(Gate::default());
        let _open = OpenOnDrop(go.clone());
        let started = Arc::new(AtomicBool::new(false));
        let p = pool.clone();
        let a = {
            let (go, started) = (go.clone(), started.clone());
            pool.submit(move || {
                started.store(true, SeqCst);
                go.wait();
                p.submit(|| "mine").map_err(|e| e.kind())
            })
            .unwrap()
        };
        eventually(HANG, "A runs", || started.load(SeqCst));
        let oldest = pool.submit(|| "oldest").unwrap();
        go.open();
        let mine = a.wait().unwrap().expect("a pool thread's DiscardOldest submission is accepted");
        assert!(matches!(oldest.wait(), Err(TaskError::Cancelled)), "the oldest global task was not evicted");
        assert_eq!(mine.wait().unwrap(), "mine");
        assert_eq!(pool.stats().cancelled, 1);
    });
}

// Issue 10.8: new threads counted as searching before `on_thread_start`
// ran, so while a hook was slow every wake-up was suppressed (a trivial
// task took 1.8 s). Threads 1 and 2 of 3 stay in their hook until the
// trivial task is done: thread 0 must be woken for it, or the watchdog
// fails the test.
#[test]
fn a_slow_start_hook_does_not_suppress_wake_ups() {
    watchdog(HANG, "trivial task during slow start hooks", || {
        let hooks = Arc::new(Gate::default());
        let h = hooks.clone();
        let pool = Pool::builder()
            .min_threads(3)
            .growth(Growth::Fixed)
            .on_thread_start(move |i| {
                if i >= 1 {
                    h.wait();
                }
            })
            .build()
            .unwrap();
        // Dropped before the pool, whose drop waits for the hooked threads.
        let _open = OpenOnDrop(hooks);
        pool.submit(|| ()).unwrap().wait().unwrap();
    });
}

// Issue 10.10: a serial queue's next turn went on top of the running
// worker's LIFO deque, so one queue ran to exhaustion before the others
// started (A0..A5 B0..B5 C0..C5 on one thread). Turns of different queues
// interleave in FIFO order.
#[test]
fn serial_queues_interleave_fairly() {
    let order = watchdog(HANG, "three serial queues on one thread", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let queues = [("A", pool.serial()), ("B", pool.serial()), ("C", pool.serial())];
        let mut last = Vec::new();
        for (name, q) in &queues {
            for i in 0..6 {
                let order = order.clone();
                let tag = format!("{name}{i}");
                last.push(q.submit(move || order.lock().unwrap().push(tag)).unwrap());
            }
        }
        gate.open();
        for h in last {
            h.wait().unwrap();
        }
        order.lock().unwrap().clone()
    });
    let expected: Vec<String> = (0..6).flat_map(|i| ["A", "B", "C"].map(|q| format!("{q}{i}"))).collect();
    assert_eq!(order, expected, "serial queues did not take turns");
}

// Issue 10.11: DiscardOldest evicted a serial queue's turn, cancelling
// every task of the queue for one over-capacity submission. Only user
// tasks are evictable, and one eviction cancels exactly one task.
#[test]
fn discard_oldest_never_evicts_a_serial_turn() {
    watchdog(HANG, "DiscardOldest with a serial turn queued", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder().queue_capacity(2).reject(Reject::DiscardOldest));
        let serial = Arc::new(Outcomes::default());
        let users = Arc::new(Outcomes::default());
        let q = pool.serial();
        for _ in 0..5 {
            let t = Tracked::new(&serial);
            q.spawn(move || t.run()).unwrap();
        }
        let mut accepted = 0;
        for _ in 0..3 {
            let t = Tracked::new(&users);
            accepted += usize::from(pool.spawn(move || t.run()).is_ok());
        }
        gate.open();
        let done = q.submit(|| ()).unwrap();
        done.wait().unwrap();
        eventually(HANG, "every accepted user task settled", || {
            users.ran.load(SeqCst) + users.dropped_unrun.load(SeqCst) == 3
        });
        assert_eq!(serial.ran.load(SeqCst), 5, "serial tasks were cancelled by an eviction");
        assert_eq!(serial.dropped_unrun.load(SeqCst), 0);
        // Refused submissions come back and drop unrun too; what matters is
        // that the pool's cancellations are exactly the evicted user tasks.
        let evicted = accepted - users.ran.load(SeqCst);
        assert_eq!(pool.stats().cancelled as usize, evicted, "one eviction must cancel exactly one task");
    });
}

// Issue 10.11 (scope tasks): a queued scope task must never be evicted by
// DiscardOldest (it would be lost; see also lifecycle.rs for 9.2). The
// scope's task runs, and the pool cancels nothing it did not count.
#[test]
fn discard_oldest_never_evicts_a_scope_task() {
    watchdog(HANG, "DiscardOldest with a scope task queued", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder().queue_capacity(1).reject(Reject::DiscardOldest));
        let ran = AtomicBool::new(false);
        let users = Arc::new(Outcomes::default());
        let mut accepted = 0;
        pool.scope(|s| {
            s.spawn(|| ran.store(true, SeqCst));
            let t = Tracked::new(&users);
            accepted += usize::from(pool.spawn(move || t.run()).is_ok());
            gate.open();
        });
        assert!(ran.load(SeqCst), "the scope task was evicted and never ran");
        eventually(HANG, "accepted user tasks ran or were evicted", || {
            users.ran.load(SeqCst) + users.dropped_unrun.load(SeqCst) == 1
        });
        let evicted = accepted - users.ran.load(SeqCst);
        assert_eq!(pool.stats().cancelled as usize, evicted);
    });
}

// Issue 10.12: work taken from the global queue in a batch lands in the
// taker's deque; the fairness poll (every 61st task) then takes newer
// global work ahead of the older batch. On a 1-thread pool, 200 tasks
// submitted from outside start in submission order (crossing the poll).
#[test]
fn global_queue_work_keeps_fifo_order_on_one_thread() {
    let order = watchdog(HANG, "200 global tasks on one thread", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Arc<Mutex<Vec<usize>>> = Arc::default();
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let order = order.clone();
                pool.submit(move || order.lock().unwrap().push(i)).unwrap()
            })
            .collect();
        gate.open();
        handles.into_iter().for_each(|h| h.wait().unwrap());
        order.lock().unwrap().clone()
    });
    assert_eq!(order, (0..200).collect::<Vec<_>>(), "global-queue tasks ran out of submission order");
}

// Issue 10.12: a worker that took a batch of global work and then entered a
// blocking region kept the rest of the batch behind it. On a Fixed 2-thread
// pool where the first task blocks (declared) for 300 ms, the other worker
// runs all later tasks during that time, in submission order, but for one
// inversion: a batch the other worker took from the global queue before the
// blocking one was marked stalled starts ahead of the blocked worker's older
// batch (seen 1 in 20 runs of the debug suite; `docs/scheduling.md`).
#[test]
fn a_blocking_worker_hands_its_queued_work_on_in_order() {
    let (order, late) = watchdog(HANG, "global batch behind a blocking worker", || {
        let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
        let blocked_done = Arc::new(AtomicBool::new(false));
        let order: Arc<Mutex<Vec<usize>>> = Arc::default();
        let late = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        {
            let done = blocked_done.clone();
            handles.push(
                pool.submit(move || {
                    wspool::blocking(|| std::thread::sleep(Duration::from_millis(300)));
                    done.store(true, SeqCst);
                })
                .unwrap(),
            );
        }
        for i in 1..=30 {
            let (order, late, done) = (order.clone(), late.clone(), blocked_done.clone());
            handles.push(
                pool.submit(move || {
                    if done.load(SeqCst) {
                        late.lock().unwrap().push(i);
                    }
                    order.lock().unwrap().push(i);
                })
                .unwrap(),
            );
        }
        handles.into_iter().for_each(|h| h.wait().unwrap());
        let (order, late) = (order.lock().unwrap().clone(), late.lock().unwrap().clone());
        (order, late)
    });
    assert!(late.is_empty(), "tasks waited behind the blocking worker: {late:?}");
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=30).collect::<Vec<_>>(), "every task ran once");
    let inversions = order.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions <= 1, "global-queue tasks ran out of submission order: {order:?}");
}

/// A searcher takes a batch from a long deque (a flat fan-out of siblings:
/// more queued than a fork-join tree's depth) and one job from a short one.
/// A task forking 4,000 small siblings on a 2-thread pool: one steal per
/// stolen task would be about 2,000 steals; batches of up to 32 take the
/// same share in a few hundred at most.
#[test]
fn a_long_deque_is_stolen_from_in_batches() {
    let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
    let p = pool.clone();
    pool.submit(move || {
        p.scope(|s| {
            for _ in 0..4000 {
                s.spawn(|| {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                });
            }
        })
    })
    .unwrap()
    .wait()
    .unwrap();
    let s = pool.stats();
    println!("steals {} for 4000 siblings", s.steals);
    assert!(s.steals < 600, "{s:?}");
}
