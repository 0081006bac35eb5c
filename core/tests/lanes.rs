//! Lanes (issue 29): a serial queue generalised to a concurrency limit n.
//! Its tasks start in submission order, at most n run at once (also while
//! they block, declared or not), queued ones occupy no worker, lanes take
//! turns through the global queue, and lanes work with groups, handles,
//! completion queues, deadlines and both shutdown modes.
//!
//! The concurrency bound is an invariant, checked as a maximum (never a
//! time); the "n run at once" side waits for the n tasks to arrive under a
//! hang guard.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Gate, OpenOnDrop, Outcomes, Tracked, eventually, held_single_worker, watchdog};
use wspool::{CompletionQueue, CqEvent, CqOptions, CqStatus, Growth, Pool, Shutdown, SpawnOptions};

const LIMIT: Duration = Duration::from_secs(60);

/// Tasks inside now, and the most ever inside at once.
#[derive(Default)]
struct Occupancy {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Occupancy {
    fn enter(&self) {
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.max.fetch_max(now, SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, SeqCst);
    }
}

#[test]
fn a_lane_runs_at_most_its_limit_and_queued_tasks_occupy_no_worker() {
    watchdog(LIMIT, "lane of 2 on 4 threads", || {
        let pool = Pool::builder().min_threads(4).growth(Growth::Fixed).build().unwrap();
        let lane = pool.lane(2);
        assert_eq!(lane.limit(), 2);
        assert_eq!(pool.serial().limit(), 1);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let occ = Arc::new(Occupancy::default());
        let g = pool.group();
        for _ in 0..20 {
            let (gate, occ) = (gate.clone(), occ.clone());
            pool.spawn_with(SpawnOptions { serial: Some(&lane), group: Some(&g), ..Default::default() }, move || {
                occ.enter();
                gate.wait();
                occ.leave();
            })
            .unwrap();
        }
        eventually(LIMIT, "two lane tasks inside", || occ.now.load(SeqCst) == 2);
        assert_eq!(lane.pending(), 18, "the rest wait in the lane");
        // Two threads are free: plain work runs beside the full lane.
        let free = Arc::new(AtomicUsize::new(0));
        let h: Vec<_> = (0..8)
            .map(|_| {
                let free = free.clone();
                pool.submit(move || free.fetch_add(1, SeqCst)).unwrap()
            })
            .collect();
        for h in h {
            h.wait().unwrap();
        }
        assert_eq!(free.load(SeqCst), 8);
        assert_eq!(occ.now.load(SeqCst), 2);
        gate.open();
        g.wait().unwrap();
        assert_eq!(occ.max.load(SeqCst), 2, "a lane of 2 never runs more than 2");
    });
}

#[test]
fn blocking_inside_a_lane_counts_against_the_lane() {
    watchdog(LIMIT, "blocking lane tasks on a growing pool", || {
        // The pool lends a thread for each declared blocking region; the
        // lane still runs no more than 2 of its tasks.
        let pool = Pool::builder().min_threads(2).max_threads(32).build().unwrap();
        let lane = pool.lane(2);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let occ = Arc::new(Occupancy::default());
        let g = pool.group();
        for _ in 0..12 {
            let (gate, occ) = (gate.clone(), occ.clone());
            pool.spawn_with(SpawnOptions { serial: Some(&lane), group: Some(&g), ..Default::default() }, move || {
                occ.enter();
                wspool::blocking(|| gate.wait());
                occ.leave();
            })
            .unwrap();
        }
        eventually(LIMIT, "two lane tasks blocked", || occ.now.load(SeqCst) == 2);
        // Work outside the lane still runs (the pool lent threads for the
        // blocked ones).
        let h = pool.submit(|| 5).unwrap();
        assert_eq!(h.wait().unwrap(), 5);
        assert_eq!(lane.pending(), 10);
        gate.open();
        g.wait().unwrap();
        assert_eq!(occ.max.load(SeqCst), 2);
    });
}

#[test]
fn a_lane_starts_its_tasks_in_submission_order() {
    let order = watchdog(LIMIT, "lane FIFO", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let lane = pool.lane(3);
        let order: Arc<Mutex<Vec<usize>>> = Arc::default();
        let g = pool.group();
        for i in 0..30 {
            let order = order.clone();
            pool.spawn_with(SpawnOptions { serial: Some(&lane), group: Some(&g), ..Default::default() }, move || {
                order.lock().unwrap().push(i)
            })
            .unwrap();
        }
        gate.open();
        g.wait().unwrap();
        order.lock().unwrap().clone()
    });
    assert_eq!(order, (0..30).collect::<Vec<_>>());
}

#[test]
fn lanes_take_turns_their_limit_at_a_time() {
    let order = watchdog(LIMIT, "three lanes of 2 on one thread", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let lanes = [("A", pool.lane(2)), ("B", pool.lane(2)), ("C", pool.lane(2))];
        let mut last = Vec::new();
        for (name, lane) in &lanes {
            for i in 0..6 {
                let order = order.clone();
                let tag = format!("{name}{i}");
                last.push(lane.submit(move || order.lock().unwrap().push(tag)).unwrap());
            }
        }
        gate.open();
        for h in last {
            h.wait().unwrap();
        }
        order.lock().unwrap().clone()
    });
    // Each lane's two turns sit together in the global queue: a lane runs
    // its share (2) in a row, never more.
    let expected: Vec<String> = (0..3)
        .flat_map(|r| ["A", "B", "C"].into_iter().flat_map(move |q| [2 * r, 2 * r + 1].map(|i| format!("{q}{i}"))))
        .collect();
    assert_eq!(order, expected, "lanes did not take turns");
}

#[test]
fn a_lane_feeds_a_completion_queue_and_expires_late_tasks() {
    watchdog(LIMIT, "lane + cq + deadline", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let lane = pool.lane(2);
        let cq = CompletionQueue::<usize>::new(&pool, CqOptions::default()).unwrap();
        for i in 0..6 {
            let deadline = (i == 3).then(std::time::Instant::now);
            cq.submit_with(SpawnOptions { serial: Some(&lane), deadline, ..Default::default() }, i, |_| {}).unwrap();
        }
        gate.open();
        let mut got = Vec::new();
        while got.len() < 6 {
            cq.drain(usize::MAX, |e| {
                if let CqEvent::Done(i, s) = e {
                    got.push((i, s));
                }
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        got.sort_by_key(|(i, _)| *i);
        for (i, s) in got {
            assert_eq!(s, if i == 3 { CqStatus::Expired } else { CqStatus::Ran }, "item {i}");
        }
    });
}

#[test]
fn cancel_shutdown_cancels_every_queued_lane_task_once() {
    watchdog(LIMIT, "lane tasks under Shutdown::Cancel", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let lanes = [pool.lane(2), pool.lane(3)];
        for lane in &lanes {
            for _ in 0..10 {
                let t = Tracked::new(&outcomes);
                lane.spawn(move || t.run()).unwrap();
            }
        }
        let closer = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.shutdown(Shutdown::Cancel, None).unwrap())
        };
        eventually(LIMIT, "the shutdown began", || pool.is_shutdown());
        gate.open();
        closer.join().unwrap();
        assert_eq!(outcomes.ran.load(SeqCst) + outcomes.dropped_unrun.load(SeqCst), 20);
        assert_eq!(pool.stats().cancelled as usize, outcomes.dropped_unrun.load(SeqCst));
    });
}
