//! Priorities: `High` work goes before queued work with a bounded bypass,
//! a `Low` task starts after the normal work queued before it and ages by
//! a bound no stream of work can reset, lanes carry a priority, and
//! prioritized tasks end exactly once under both shutdown modes, with the
//! queue's count kept exact (it counts tasks, never bookkeeping).
//!
//! Orders are checked on a single worker held by a gate while the work is
//! queued: the order a lone worker takes queued work in is deterministic,
//! so no check depends on timing. A reference model of the documented
//! rules (`model_order`) is compared with the pool on random mixes.

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

// ------------------------------------------------- the reference model ----
//
// What the docs promise, as an executable model of one worker that takes
// work queued before it started (docs/scheduling.md, "Priorities"):
// high work before ordinary work, but ordinary work after every HIGH_BURST
// high tasks in a row; a Low task's place in the global queue is reached
// when the worker next looks at ordinary work after every normal task
// queued before it started, and it then starts once LOW_MAX_OVERTAKES
// other tasks started since it became the oldest Low task waiting, or when
// nothing else is queued. A cancelled or expired task keeps its place and
// is taken like any task, but never runs.

#[derive(Clone, Copy, Debug)]
enum Ending {
    Runs,
    CancelledBeforeStart,
    Expired,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    priority: Priority,
    ending: Ending,
}

/// The order (submission indices) in which the model's worker starts the
/// tasks that run.
fn model_order(ops: &[Op]) -> Vec<usize> {
    use std::collections::VecDeque;
    let burst = HIGH_BURST as usize;
    let max_overtakes = wspool::LOW_MAX_OVERTAKES as usize;
    let mut high: VecDeque<usize> = VecDeque::new();
    let mut ordinary: VecDeque<usize> = VecDeque::new();
    for (i, op) in ops.iter().enumerate() {
        match op.priority {
            Priority::High => high.push_back(i),
            _ => ordinary.push_back(i),
        }
    }
    let mut ready_low: VecDeque<usize> = VecDeque::new();
    let (mut overtakes, mut high_in_a_row) = (0, 0);
    let mut taken = Vec::new();
    loop {
        let next = if !ready_low.is_empty() && overtakes >= max_overtakes {
            high_in_a_row = 0;
            overtakes = 0;
            ready_low.pop_front()
        } else if !high.is_empty() && high_in_a_row < burst {
            high_in_a_row += 1;
            overtakes += usize::from(!ready_low.is_empty());
            high.pop_front()
        } else {
            while ordinary.front().is_some_and(|&i| ops[i].priority == Priority::Low) {
                if ready_low.is_empty() {
                    overtakes = 0;
                }
                ready_low.extend(ordinary.pop_front());
            }
            if let Some(i) = ordinary.pop_front() {
                high_in_a_row = 0;
                overtakes += usize::from(!ready_low.is_empty());
                Some(i)
            } else if let Some(i) = high.pop_front() {
                high_in_a_row += 1;
                overtakes += usize::from(!ready_low.is_empty());
                Some(i)
            } else {
                high_in_a_row = 0;
                overtakes = 0;
                ready_low.pop_front()
            }
        };
        match next {
            Some(i) => taken.push(i),
            None => break,
        }
    }
    taken.into_iter().filter(|&i| matches!(ops[i].ending, Ending::Runs)).collect()
}

/// Queues `ops` from outside the pool on a single worker held at a gate,
/// opens the gate, and returns the order the tasks ran in, checking that
/// every task ended exactly once as its op says.
fn pool_order(ops: &[Op]) -> Vec<usize> {
    let ops = ops.to_vec();
    watchdog(LIMIT, "the priority model's run", move || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Arc<Mutex<Vec<usize>>> = Arc::default();
        let outcomes = Arc::new(Outcomes::default());
        let g = pool.group();
        let mut handles = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let (order, t) = (order.clone(), Tracked::new(&outcomes));
            let task = move || {
                order.lock().unwrap().push(i);
                t.run();
            };
            let deadline = matches!(op.ending, Ending::Expired).then(Instant::now);
            let opts = SpawnOptions { group: Some(&g), priority: op.priority, deadline, ..Default::default() };
            match op.ending {
                Ending::CancelledBeforeStart => handles.push(pool.submit_with(opts, task).unwrap()),
                _ => pool.spawn_with(opts, task).unwrap(),
            }
        }
        for h in &handles {
            assert!(h.cancel(), "a queued task is cancelled");
        }
        gate.open();
        g.wait().unwrap();
        let runs = ops.iter().filter(|op| matches!(op.ending, Ending::Runs)).count();
        assert_eq!(outcomes.ran.load(SeqCst), runs);
        assert_eq!(outcomes.dropped_unrun.load(SeqCst), ops.len() - runs);
        let stats = pool.stats();
        assert_eq!(stats.expired as usize, ops.iter().filter(|op| matches!(op.ending, Ending::Expired)).count());
        common::eventually(LIMIT, "the queue's count back to 0", || pool.stats().queued == 0);
        order.lock().unwrap().clone()
    })
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let priority = prop_oneof![Just(Priority::Low), Just(Priority::Normal), Just(Priority::High)];
    let ending =
        prop_oneof![8 => Just(Ending::Runs), 1 => Just(Ending::CancelledBeforeStart), 1 => Just(Ending::Expired)];
    (priority, ending).prop_map(|(priority, ending)| Op { priority, ending })
}

/// Random cases per run: 64 by default (about 2 s in release), more with
/// WSPOOL_PROPTEST_CASES.
fn cases() -> u32 {
    std::env::var("WSPOOL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: cases(), failure_persistence: None, ..Default::default()
    })]

    /// The pool's order is the model's, for random mixes of priorities,
    /// cancellations and expiries queued on one held worker.
    #[test]
    fn one_worker_runs_prioritized_work_in_the_models_order(ops in proptest::collection::vec(op(), 0..160)) {
        proptest::prop_assert_eq!(pool_order(&ops), model_order(&ops));
    }
}

#[test]
fn low_tasks_queued_first_run_after_the_normal_tasks_queued_after_them() {
    // The report: 3 Low then 5 normal ran as L0 N0 N1 N2 N3 N4 L1 L2.
    let low = Op { priority: Priority::Low, ending: Ending::Runs };
    let normal = Op { priority: Priority::Normal, ending: Ending::Runs };
    let ops = [low, low, low, normal, normal, normal, normal, normal];
    assert_eq!(pool_order(&ops), [3, 4, 5, 6, 7, 0, 1, 2]);
}

#[test]
fn a_low_task_runs_within_its_bound_under_a_self_renewing_high_lane() {
    // One Low task, 20 normal ones, and a high lane whose every turn queues
    // the next: the Low task must not wait for the stream to end.
    watchdog(LIMIT, "low under a high stream", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Order = Arc::default();
        pool.spawn_with(at(Priority::Low), push(&order, "L".into())).unwrap();
        for i in 0..20 {
            pool.spawn(push(&order, format!("N{i}"))).unwrap();
        }
        let lane = Arc::new(pool.lane_with_priority(1, Priority::High));
        let high_ran = Arc::new(AtomicUsize::new(0));
        fn renew(pool: Pool, lane: Arc<wspool::SerialQueue>, order: Order, high_ran: Arc<AtomicUsize>) {
            let n = high_ran.fetch_add(1, SeqCst);
            if n >= 20_000 || order.lock().unwrap().iter().filter(|t| !t.starts_with('H')).count() == 21 {
                return;
            }
            order.lock().unwrap().push(format!("H{n}"));
            let (p, l, o, h) = (pool.clone(), lane.clone(), order.clone(), high_ran.clone());
            lane.spawn(move || renew(p, l, o, h)).unwrap();
        }
        for _ in 0..8 {
            let (p, l, o, h) = (pool.clone(), lane.clone(), order.clone(), high_ran.clone());
            lane.spawn(move || renew(p, l, o, h)).unwrap();
        }
        gate.open();
        common::eventually(LIMIT, "the low task ran", || order.lock().unwrap().iter().any(|t| t == "L"));
        let order = order.lock().unwrap().clone();
        let low_at = order.iter().position(|t| t == "L").unwrap();
        // Its place is reached after at most one high burst, then at most
        // LOW_MAX_OVERTAKES tasks start before it.
        let bound = (HIGH_BURST + wspool::LOW_MAX_OVERTAKES) as usize;
        assert!(low_at <= bound, "the low task started after {low_at} others (bound {bound}): {order:?}");
        pool.shutdown(Shutdown::Drain, None).unwrap();
    });
}

#[test]
fn a_steady_high_stream_leaves_nothing_queued_but_tasks() {
    // A foreign thread keeps 8 high tasks queued: `queued` counts exactly
    // the tasks waiting, and a normal task submitted into the stream starts
    // within one burst per worker.
    watchdog(LIMIT, "queued under a high stream", || {
        let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).queue_capacity(1_000).build().unwrap();
        let (ran, normal_ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let mut high_after_normal = None;
        for i in 0..20_000usize {
            while i - ran.load(SeqCst) >= 8 {
                std::thread::yield_now();
            }
            let r = ran.clone();
            pool.spawn_with(at(Priority::High), move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
            assert!(pool.stats().queued <= 10, "queued {} with at most 10 tasks waiting", pool.stats().queued);
            if i == 10_000 {
                let n = normal_ran.clone();
                let r = ran.clone();
                pool.spawn(move || {
                    n.store(true, SeqCst);
                    r.fetch_add(0, SeqCst);
                })
                .unwrap();
                high_after_normal = Some(ran.load(SeqCst));
            }
            if let Some(start) = high_after_normal
                && normal_ran.load(SeqCst)
            {
                let overtook = ran.load(SeqCst) - start;
                assert!(overtook <= 2 * HIGH_BURST as usize, "{overtook} high tasks ran before a queued normal one");
                high_after_normal = None;
            }
        }
        common::eventually(LIMIT, "the normal task ran", || normal_ran.load(SeqCst));
        pool.shutdown(Shutdown::Drain, None).unwrap();
        assert_eq!(pool.stats().queued, 0);
    });
}
