//! Stats read after a wait returned include the work that wait waited for
//! (DESIGN.md): a task's completion is counted before the signal that
//! releases its waiters, for every kind of job a waiter can wait on. Each
//! test repeats a small round many times and checks the exact count after
//! every round: the property holds on every round, so no timing is assumed.
//! Before the fix the count was bumped after the job returned, that is after
//! the signal, and a reader saw one task short in about 1 round in 6.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::watchdog;
use wspool::{CompletionQueue, CqEvent, CqOptions, CqStatus, Growth, Pool};

const HANG: Duration = Duration::from_secs(120);
const ROUNDS: usize = 300;
const TASKS: usize = 64;

fn pool() -> Pool {
    Pool::builder().min_threads(2).max_threads(2).growth(Growth::Fixed).build().unwrap()
}

fn completed(pool: &Pool) -> u64 {
    pool.stats().completed
}

#[test]
fn a_group_wait_sees_every_task_counted() {
    watchdog(HANG, "group rounds", || {
        let pool = pool();
        for round in 0..ROUNDS {
            let before = completed(&pool);
            let g = pool.group();
            for _ in 0..TASKS {
                g.spawn(|| std::hint::black_box(())).unwrap();
            }
            g.wait().unwrap();
            assert_eq!(completed(&pool) - before, TASKS as u64, "round {round}: completed after group wait");
        }
    })
}

#[test]
fn a_group_scope_wait_sees_every_task_counted() {
    watchdog(HANG, "group_scope rounds", || {
        let pool = pool();
        for round in 0..ROUNDS {
            let before = completed(&pool);
            pool.group_scope(|g| {
                for _ in 0..TASKS {
                    g.spawn(|| std::hint::black_box(())).unwrap();
                }
                g.wait().unwrap();
            });
            assert_eq!(completed(&pool) - before, TASKS as u64, "round {round}: completed after group_scope wait");
        }
    })
}

#[test]
fn a_panicking_group_task_is_counted_before_the_wait_returns() {
    watchdog(HANG, "panicking group rounds", || {
        let pool = pool();
        for round in 0..ROUNDS / 3 {
            let before = completed(&pool);
            let g = pool.group();
            g.spawn(|| panic!("expected by the test")).unwrap();
            assert!(g.wait().is_err());
            assert_eq!(completed(&pool) - before, 1, "round {round}: completed after a panicking group task");
        }
    })
}

#[test]
fn a_task_handle_wait_sees_its_task_counted() {
    watchdog(HANG, "handle rounds", || {
        let pool = pool();
        for round in 0..ROUNDS * 4 {
            let before = completed(&pool);
            let h = pool.submit(|| 7).unwrap();
            assert_eq!(h.wait().unwrap(), 7);
            assert_eq!(completed(&pool) - before, 1, "round {round}: completed after a handle wait");
        }
    })
}

#[test]
fn a_group_task_with_a_handle_is_counted_before_either_wait_returns() {
    watchdog(HANG, "group handle rounds", || {
        let pool = pool();
        for round in 0..ROUNDS * 2 {
            let before = completed(&pool);
            let g = pool.group();
            let h = g.submit(|| 7).unwrap();
            g.wait().unwrap();
            assert_eq!(completed(&pool) - before, 1, "round {round}: completed after the group wait");
            assert_eq!(h.wait().unwrap(), 7);
        }
    })
}

#[test]
fn a_scope_sees_every_task_counted() {
    watchdog(HANG, "scope rounds", || {
        let pool = pool();
        for round in 0..ROUNDS {
            let before = completed(&pool);
            pool.scope(|s| {
                for _ in 0..TASKS {
                    s.spawn(|| std::hint::black_box(()));
                }
            });
            assert_eq!(completed(&pool) - before, TASKS as u64, "round {round}: completed after scope");
        }
    })
}

#[test]
fn a_serial_handle_wait_sees_every_earlier_task_counted() {
    watchdog(HANG, "serial rounds", || {
        let pool = pool();
        let q = pool.serial();
        for round in 0..ROUNDS {
            let before = completed(&pool);
            for _ in 0..TASKS - 1 {
                q.spawn(|| std::hint::black_box(())).unwrap();
            }
            q.submit(|| ()).unwrap().wait().unwrap();
            assert_eq!(completed(&pool) - before, TASKS as u64, "round {round}: completed after the last serial task");
        }
    })
}

#[test]
fn a_completion_queue_event_comes_after_its_count() {
    watchdog(HANG, "cq rounds", || {
        let pool = pool();
        let cq = CompletionQueue::new(&pool, CqOptions::default()).unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        for round in 0..ROUNDS {
            let before = completed(&pool);
            for i in 0..TASKS {
                cq.submit(i, |_| std::hint::black_box(())).unwrap();
            }
            let mut done = 0;
            while done < TASKS {
                cq.drain(usize::MAX, |e| {
                    if let CqEvent::Done(_, status) = e {
                        assert_eq!(status, CqStatus::Ran);
                        done += 1;
                        // Every event handed to the loop is already counted.
                        let counted = completed(&pool) - before;
                        assert!(counted >= done as u64, "round {round}: {done} events drained, {counted} counted");
                    }
                });
                if done < TASKS {
                    std::thread::yield_now();
                }
            }
            seen.fetch_add(done, SeqCst);
        }
        assert_eq!(seen.load(SeqCst), ROUNDS * TASKS);
        drop(cq);
    })
}

#[test]
fn a_wait_on_a_pool_thread_sees_what_it_waited_for_counted() {
    // The waiter is itself a pool task: the tasks it waits for run on the
    // other worker or nested inside its wait.
    watchdog(HANG, "nested rounds", || {
        let pool = Arc::new(pool());
        let p = Arc::clone(&pool);
        let failures = pool
            .submit(move || {
                let mut failures = Vec::new();
                for round in 0..ROUNDS {
                    let before = completed(&p);
                    let g = p.group();
                    for _ in 0..TASKS {
                        g.spawn(|| std::hint::black_box(())).unwrap();
                    }
                    g.wait().unwrap();
                    let h = p.submit(|| ()).unwrap();
                    h.wait().unwrap();
                    let counted = completed(&p) - before;
                    if counted != TASKS as u64 + 1 {
                        failures.push((round, counted));
                    }
                }
                failures
            })
            .unwrap()
            .wait()
            .unwrap();
        assert!(failures.is_empty(), "rounds with a short count (round, counted): {failures:?}");
    })
}

#[test]
fn a_panic_inside_a_handle_task_is_still_counted_once() {
    watchdog(HANG, "panicking handle rounds", || {
        let pool = pool();
        for round in 0..ROUNDS {
            let before = completed(&pool);
            let h = pool.submit(|| -> u32 { panic!("expected by the test") }).unwrap();
            assert!(catch_unwind(AssertUnwindSafe(|| h.wait())).map(|r| r.is_err()).unwrap_or(true));
            assert_eq!(completed(&pool) - before, 1, "round {round}: completed after a panicking handle task");
        }
    })
}
