//! Priorities (issue 29): `High` work goes before queued work with a
//! bounded bypass, `Low` work steps back behind normal work a bounded
//! number of times (aging), lanes carry a priority, and prioritized tasks
//! end exactly once under both shutdown modes, with the queue's count kept
//! exact.
//!
//! Orders are checked on a single worker held by a gate while the work is
//! queued: the order a lone worker takes queued work in is deterministic,
//! so no check depends on timing.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Outcomes, Tracked, held_single_worker, watchdog};
use wspool::{Growth, HIGH_BURST, Pool, Priority, Shutdown, SpawnOptions};

const LIMIT: Duration = Duration::from_secs(60);

fn at(priority: Priority) -> SpawnOptions<'static> {
    SpawnOptions { priority, ..Default::default() }
}

type Order = Arc<Mutex<Vec<String>>>;

fn push(order: &Order, tag: String) -> impl FnOnce() + Send + 'static {
    let order = order.clone();
    move || order.lock().unwrap().push(tag)
}

#[test]
fn high_work_goes_before_queued_work_with_a_bounded_bypass() {
    let order = watchdog(LIMIT, "high before normal", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Order = Arc::default();
        let g = pool.group();
        for i in 0..5 {
            pool.spawn_with(SpawnOptions { group: Some(&g), ..Default::default() }, push(&order, format!("N{i}")))
                .unwrap();
        }
        for i in 0..40 {
            let opts = SpawnOptions { group: Some(&g), priority: Priority::High, ..Default::default() };
            pool.spawn_with(opts, push(&order, format!("H{i}"))).unwrap();
        }
        gate.open();
        g.wait().unwrap();
        order.lock().unwrap().clone()
    });
    let burst = HIGH_BURST as usize;
    let mut expected: Vec<String> = (0..burst).map(|i| format!("H{i}")).collect();
    expected.push("N0".into());
    expected.extend((burst..2 * burst).map(|i| format!("H{i}")));
    expected.push("N1".into());
    expected.extend((2 * burst..40).map(|i| format!("H{i}")));
    expected.extend((2..5).map(|i| format!("N{i}")));
    assert_eq!(order, expected);
}

#[test]
fn low_work_steps_back_but_is_never_starved() {
    watchdog(LIMIT, "low under an endless normal stream", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let low_ran = Arc::new(AtomicBool::new(false));
        let normals = Arc::new(AtomicUsize::new(0));
        let l = low_ran.clone();
        pool.spawn_with(at(Priority::Low), move || l.store(true, SeqCst)).unwrap();
        // Normal work that renews itself until the low task has run: without
        // aging the low task would wait behind it forever.
        fn renew(pool: Pool, low_ran: Arc<AtomicBool>, normals: Arc<AtomicUsize>) {
            if low_ran.load(SeqCst) || normals.fetch_add(1, SeqCst) > 100_000 {
                return;
            }
            let p = pool.clone();
            pool.spawn_global(move || renew(p, low_ran, normals)).unwrap();
        }
        for _ in 0..4 {
            let (p, l, n) = (pool.clone(), low_ran.clone(), normals.clone());
            pool.spawn(move || renew(p, l, n)).unwrap();
        }
        gate.open();
        common::eventually(LIMIT, "the low task ran", || low_ran.load(SeqCst));
        let n = normals.load(SeqCst);
        assert!(n > 4, "the low task stepped back behind normal work at least once ({n} normal tasks ran)");
        assert!(n < 1_000, "the low task waited for {n} normal tasks: aging is bounded");
        pool.shutdown(Shutdown::Drain, None).unwrap();
    });
}

#[test]
fn a_high_lane_runs_before_queued_normal_work() {
    let order = watchdog(LIMIT, "high lane", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Order = Arc::default();
        let lane = pool.lane_with_priority(1, Priority::High);
        let g = pool.group();
        for i in 0..3 {
            pool.spawn_with(SpawnOptions { group: Some(&g), ..Default::default() }, push(&order, format!("N{i}")))
                .unwrap();
        }
        for i in 0..3 {
            let opts = SpawnOptions { group: Some(&g), serial: Some(&lane), ..Default::default() };
            pool.spawn_with(opts, push(&order, format!("L{i}"))).unwrap();
        }
        gate.open();
        g.wait().unwrap();
        order.lock().unwrap().clone()
    });
    // The lane's turn bypasses the queue; each next turn, queued again at
    // high priority from the pool thread, does too.
    assert_eq!(order, ["L0", "L1", "L2", "N0", "N1", "N2"]);
}

#[test]
fn prioritized_handles_cqs_and_deadlines_compose() {
    watchdog(LIMIT, "priority with handles, cq, deadline", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let far = Some(Instant::now() + Duration::from_secs(3600));
        let h = pool.submit_with(SpawnOptions { priority: Priority::High, deadline: far, ..Default::default() }, || 3);
        let late = pool.submit_with(
            SpawnOptions { priority: Priority::Low, deadline: Some(Instant::now()), ..Default::default() },
            || 4,
        );
        let cq = wspool::CompletionQueue::<u8>::new(&pool, wspool::CqOptions::default()).unwrap();
        cq.submit_with(at(Priority::High), 1, |x| *x += 1).unwrap();
        gate.open();
        assert_eq!(h.unwrap().wait().unwrap(), 3);
        assert!(matches!(late.unwrap().wait(), Err(wspool::TaskError::Expired)));
        let mut got = None;
        while got.is_none() {
            cq.drain(8, |e| {
                if let wspool::CqEvent::Done(x, s) = e {
                    got = Some((x, s));
                }
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, Some((2, wspool::CqStatus::Ran)));
    });
}

#[test]
fn a_pool_threads_prioritized_work_stays_where_its_waiter_finds_it() {
    // One worker, waiting on a group of high-priority tasks it spawned: the
    // tasks must stay in its deque, where the wait runs them.
    watchdog(LIMIT, "nested prioritized spawns on a 1-thread Fixed pool", || {
        let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
        let p = pool.clone();
        let n = pool
            .submit(move || {
                let g = p.group();
                let ran = Arc::new(AtomicUsize::new(0));
                for prio in [Priority::High, Priority::Low, Priority::High] {
                    let ran = ran.clone();
                    let opts = SpawnOptions { group: Some(&g), priority: prio, ..Default::default() };
                    p.spawn_with(opts, move || {
                        ran.fetch_add(1, SeqCst);
                    })
                    .unwrap();
                }
                g.wait().unwrap();
                ran.load(SeqCst)
            })
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(n, 3);
    });
}

#[test]
fn prioritized_tasks_end_exactly_once_under_both_shutdown_modes() {
    for mode in [Shutdown::Drain, Shutdown::Cancel] {
        watchdog(LIMIT, "prioritized tasks at shutdown", move || {
            let (pool, gate, _guard) = held_single_worker(Pool::builder().queue_capacity(1_000));
            let outcomes = Arc::new(Outcomes::default());
            for i in 0..60 {
                let t = Tracked::new(&outcomes);
                let priority = [Priority::High, Priority::Normal, Priority::Low][i % 3];
                pool.spawn_with(at(priority), move || t.run()).unwrap();
            }
            assert_eq!(pool.stats().queued, 60, "a prioritized task counts once in the queue");
            let closer = {
                let pool = pool.clone();
                std::thread::spawn(move || pool.shutdown(mode, None).unwrap())
            };
            common::eventually(LIMIT, "the shutdown began", || pool.is_shutdown());
            gate.open();
            closer.join().unwrap();
            let (ran, dropped) = (outcomes.ran.load(SeqCst), outcomes.dropped_unrun.load(SeqCst));
            assert_eq!(ran + dropped, 60, "{mode:?}");
            if mode == Shutdown::Drain {
                assert_eq!(ran, 60);
            }
            let s = pool.stats();
            assert_eq!(s.cancelled as usize, dropped, "{mode:?}");
            assert_eq!(s.queued, 0, "{mode:?}: the queue's count went back to 0");
        });
    }
}

#[test]
fn the_queue_count_stays_exact_when_high_work_is_bypassed() {
    watchdog(LIMIT, "queued count with bypasses", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder().queue_capacity(10_000));
        let g = pool.group();
        for i in 0..300 {
            let priority = [Priority::High, Priority::Normal, Priority::Low][i % 3];
            pool.spawn_with(SpawnOptions { group: Some(&g), priority, ..Default::default() }, || {}).unwrap();
        }
        gate.open();
        g.wait().unwrap();
        // Tokens left behind by bypassed high tasks run after the group
        // emptied: wait for the queue to drain under the hang guard.
        common::eventually(LIMIT, "the queue's count back to 0", || pool.stats().queued == 0);
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert_eq!(pool.stats().queued, 0);
    });
}
