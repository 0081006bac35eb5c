//! Stress: every task counted, nothing lost, nothing run twice.
#![allow(missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::time::Duration;

use common::{Outcomes, Tracked};
use wspool::{Pool, Shutdown};

const PRODUCERS: usize = 4;
const PER_PRODUCER: usize = 1_000_000;
/// Every 8th task spawns a child from inside the pool.
const CHILD_EVERY: usize = 8;

#[test]
fn four_producers_a_million_tasks_each_with_nested_spawns() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let parents = PRODUCERS * PER_PRODUCER;
    let children = parents / CHILD_EVERY;
    // One flag per task id: 1 = ran once; anything else is a bug.
    let seen: Arc<Vec<AtomicU8>> = Arc::new((0..parents + children).map(|_| AtomicU8::new(0)).collect());
    let next_child = Arc::new(AtomicUsize::new(parents));
    let group = pool.group();
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (seen, next_child, group) = (seen.clone(), next_child.clone(), group.clone());
            s.spawn(move || {
                for i in 0..PER_PRODUCER {
                    let id = p * PER_PRODUCER + i;
                    let (seen, next_child, g2) = (seen.clone(), next_child.clone(), group.clone());
                    group
                        .spawn(move || {
                            seen[id].fetch_add(1, Relaxed);
                            if id.is_multiple_of(CHILD_EVERY) {
                                let child = next_child.fetch_add(1, Relaxed);
                                let seen = seen.clone();
                                g2.spawn(move || {
                                    seen[child].fetch_add(1, Relaxed);
                                })
                                .unwrap();
                            }
                        })
                        .unwrap();
                }
            });
        }
    });
    group.wait().unwrap();
    assert_eq!(next_child.load(SeqCst), parents + children);
    let bad: Vec<_> = seen
        .iter()
        .enumerate()
        .filter(|(_, f)| f.load(SeqCst) != 1)
        .take(5)
        .map(|(i, f)| (i, f.load(SeqCst)))
        .collect();
    assert!(bad.is_empty(), "tasks not run exactly once (id, count): {bad:?}");
    // The group empties as each task's closure finishes, a moment before the
    // worker counts it: let the counters settle.
    common::eventually(Duration::from_secs(20), "completed settles", || {
        pool.stats().completed as usize == parents + children
    });
    let stats = pool.stats();
    assert_eq!(stats.submitted as usize, parents + children);
    assert_eq!(stats.panicked, 0);
}

#[test]
fn submit_races_shutdown_and_every_accepted_task_runs_or_is_cancelled_once() {
    for round in 0..20 {
        let outcomes = Arc::new(Outcomes::default());
        let accepted = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder().min_threads(2).build().unwrap();
        std::thread::scope(|s| {
            for _ in 0..2 {
                let (pool, outcomes, accepted, refused) =
                    (pool.clone(), outcomes.clone(), accepted.clone(), refused.clone());
                s.spawn(move || {
                    for _ in 0..20_000 {
                        let t = Tracked::new(&outcomes);
                        match pool.spawn(move || t.run()) {
                            Ok(()) => accepted.fetch_add(1, SeqCst),
                            Err(e) => {
                                // The refused task comes back unrun: the caller owns it.
                                std::mem::forget(e.into_task());
                                refused.fetch_add(1, SeqCst)
                            }
                        };
                    }
                });
            }
            let pool = pool.clone();
            s.spawn(move || {
                std::thread::sleep(Duration::from_micros(200 * (round % 5)));
                let mode = if round % 2 == 0 { Shutdown::Drain } else { Shutdown::Cancel };
                pool.shutdown(mode, None).unwrap();
            });
        });
        drop(pool);
        let (ran, dropped) = (outcomes.ran.load(SeqCst), outcomes.dropped_unrun.load(SeqCst));
        assert_eq!(accepted.load(SeqCst) + refused.load(SeqCst), 40_000);
        assert_eq!(ran + dropped, accepted.load(SeqCst), "round {round}: ran {ran} + cancelled {dropped} != accepted");
    }
}

#[test]
fn fork_join_tree_counts_every_leaf() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    fn tree(depth: u32, leaves: &AtomicUsize) {
        if depth == 0 {
            leaves.fetch_add(1, Relaxed);
            return;
        }
        wspool::join(|| tree(depth - 1, leaves), || tree(depth - 1, leaves));
    }
    let leaves = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let l = leaves.clone();
        pool.submit(move || tree(18, &l)).unwrap().wait().unwrap();
    }
    assert_eq!(leaves.load(SeqCst), 5 << 18);
}

/// Captured by a task of the mixed stress: ran, or dropped unrun, and then
/// whether the drop was an expiry (`wspool::expiring()` during it).
struct Ending {
    ran: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
    expired: Arc<AtomicUsize>,
    done: bool,
}

impl Ending {
    fn run(mut self) {
        self.done = true;
        self.ran.fetch_add(1, SeqCst);
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if !self.done {
            if wspool::expiring() { &self.expired } else { &self.cancelled }.fetch_add(1, SeqCst);
        }
    }
}

// Issue 29: with priorities, deadlines (past and far), lanes, serial
// queues, groups and task handles mixed, submissions racing both shutdown
// modes still end exactly once each: ran, cancelled, or expired.
#[test]
fn mixed_submissions_race_shutdown_and_every_accepted_task_ends_once() {
    use std::time::Instant;
    use wspool::{Priority, SpawnOptions};
    for round in 0..20 {
        let (ran, cancelled, expired) = (Arc::default(), Arc::default(), Arc::default());
        let accepted = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let lanes = [pool.lane(2), pool.serial(), pool.lane_with_priority(3, Priority::High)];
        let group = pool.group();
        std::thread::scope(|s| {
            for producer in 0..3 {
                let (pool, lanes, group) = (&pool, &lanes, &group);
                let (ran, cancelled, expired, accepted): (&Arc<AtomicUsize>, &Arc<AtomicUsize>, &Arc<AtomicUsize>, _) =
                    (&ran, &cancelled, &expired, &accepted);
                s.spawn(move || {
                    let mut handles = Vec::new();
                    for i in 0..6_000usize {
                        let t = Ending {
                            ran: ran.clone(),
                            cancelled: cancelled.clone(),
                            expired: expired.clone(),
                            done: false,
                        };
                        let k = i + producer;
                        let opts = SpawnOptions {
                            priority: [Priority::Normal, Priority::High, Priority::Low][k % 3],
                            deadline: match k % 4 {
                                0 => Some(Instant::now()),
                                1 => Some(Instant::now() + Duration::from_secs(3600)),
                                _ => None,
                            },
                            serial: (k % 5 == 0).then(|| &lanes[k % 3]),
                            group: (k % 7 == 0).then_some(group),
                            global: k % 2 == 0,
                            // Labelled tasks take the wrapped path: still ended exactly once.
                            label: (k % 3 == 1).then(|| wspool::Label::new("stress")),
                        };
                        let ok = if k % 11 == 0 {
                            match pool.submit_with(opts, move || t.run()) {
                                Ok(h) => {
                                    handles.push(h);
                                    true
                                }
                                Err(e) => {
                                    std::mem::forget(e.into_task());
                                    false
                                }
                            }
                        } else {
                            match pool.spawn_with(opts, move || t.run()) {
                                Ok(()) => true,
                                Err(e) => {
                                    std::mem::forget(e.into_task());
                                    false
                                }
                            }
                        };
                        if ok {
                            accepted.fetch_add(1, SeqCst);
                        }
                        if k % 97 == 0
                            && let Some(h) = handles.pop()
                        {
                            // Cancel races the pool's own ending of the task.
                            h.cancel();
                        }
                    }
                });
            }
            let pool = pool.clone();
            s.spawn(move || {
                std::thread::sleep(Duration::from_micros(300 * (round % 5)));
                let mode = if round % 2 == 0 { Shutdown::Drain } else { Shutdown::Cancel };
                pool.shutdown(mode, None).unwrap();
            });
        });
        let stats = pool.stats();
        drop(lanes);
        drop(group);
        drop(pool);
        let (r, c, e) = (ran.load(SeqCst), cancelled.load(SeqCst), expired.load(SeqCst));
        let a = accepted.load(SeqCst);
        assert_eq!(r + c + e, a, "round {round}: ran {r} + cancelled {c} + expired {e} != accepted {a}");
        assert_eq!(stats.expired as usize, e, "round {round}: every expiry counted once");
        assert_eq!(stats.cancelled as usize, c, "round {round}: every cancellation counted once");
    }
}
