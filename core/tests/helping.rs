//! Regression tests for issue 10, helping part: help-while-waiting must
//! not add deadlocks of its own, nor hand a waiter unrelated long work, nor
//! break a timed wait. Each test names the item it covers; every wait that
//! could deadlock runs under `common::watchdog`. Wall-clock bounds here are
//! generous hang/behaviour guards (the bad behaviour costs 500 ms or
//! forever), never performance assertions. Queue-order items (10.6, 10.10
//! to 10.12) are in `queues.rs`; 10.8 too. The `wspool::isolate` API is
//! tested in `isolate.rs`.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Gate, OpenOnDrop, eventually, pool_with_one_free_worker, ran_inside_the_wait, watchdog};
use wspool::{Growth, Pool};

const HANG: Duration = Duration::from_secs(10);

fn fixed(n: usize) -> Pool {
    Pool::builder().min_threads(n).growth(Growth::Fixed).build().unwrap()
}

/// Submits a task from outside that sets `started`, then sleeps `d` on its
/// worker (so it is certainly running elsewhere when others wait on it).
fn running_elsewhere(pool: &Pool, d: Duration) -> wspool::TaskHandle<()> {
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let h = pool
        .submit(move || {
            s.store(true, SeqCst);
            std::thread::sleep(d);
        })
        .unwrap();
    eventually(HANG, "the task started on a worker", || started.load(SeqCst));
    h
}

// Issue 10.1: S1 (serial queue Q) waits for X running elsewhere; its worker
// helps and picks up R from the global queue; R waits for S2, the next task
// of Q. S2 cannot start before S1 returns, S1 cannot return before R does:
// helping made a deadlock out of tasks with no cycle among them (without
// helping all finishes in about 300 ms).
#[test]
fn serial_queue_and_helping_do_not_deadlock() {
    watchdog(HANG, "S1 waits X, R waits S2 (same serial queue)", || {
        let pool = fixed(2);
        let q = pool.serial();
        let x = running_elsewhere(&pool, Duration::from_millis(300));
        let s1_waiting = Arc::new(AtomicBool::new(false));
        let s1 = {
            let flag = s1_waiting.clone();
            q.submit(move || {
                flag.store(true, SeqCst);
                x.wait().unwrap();
            })
            .unwrap()
        };
        let s2 = q.submit(|| 2).unwrap();
        eventually(HANG, "S1 is waiting", || s1_waiting.load(SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        let r = pool.submit(move || s2.wait().unwrap()).unwrap();
        assert_eq!(r.wait().unwrap(), 2);
        s1.wait().unwrap();
    });
}

// Issue 10.2 (the rayon#592 class): a task holding a std Mutex waits on a
// group whose task runs elsewhere; its worker helped and ran another queued
// task that locks the same mutex: self-deadlock. A wait must not run
// unrelated work.
#[test]
fn mutex_held_across_a_group_wait_does_not_self_deadlock() {
    watchdog(HANG, "a task holding a mutex waits on a group; another task locks it", || {
        // Y holds one of the two workers for 200 ms.
        let (pool, group) = pool_with_one_free_worker();
        let m = Arc::new(Mutex::new(0u32));
        let holding = Arc::new(AtomicBool::new(false));
        let t1 = {
            let (m, group, holding) = (m.clone(), group.clone(), holding.clone());
            pool.submit(move || {
                let mut g = m.lock().unwrap();
                holding.store(true, SeqCst);
                group.wait().unwrap();
                *g += 1;
            })
            .unwrap()
        };
        eventually(HANG, "T1 holds the mutex and waits", || holding.load(SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        let t2 = {
            let m = m.clone();
            pool.submit(move || *m.lock().unwrap() += 10).unwrap()
        };
        t1.wait().unwrap();
        t2.wait().unwrap();
        assert_eq!(*m.lock().unwrap(), 11);
    });
}

// Issue 10.2: the README's escape hatch, waiting inside `wspool::blocking`,
// did nothing (waits never looked at blocking regions). A wait inside a
// blocking region must never run other tasks on this thread.
#[test]
fn a_wait_inside_a_blocking_region_runs_no_other_task() {
    // Y holds one of the two workers for 200 ms; T1 waits inside blocking().
    let ran = ran_inside_the_wait("wait inside blocking()", |g| wspool::blocking(|| g.wait()));
    assert!(!ran, "a wait inside wspool::blocking ran another task on its thread");
}

// Issue 10.3: a worker parked inside a wait was the first one woken for new
// work (LIFO sleepers), so a 50 ms wait lasted 500 ms: the waiter ran a new
// 500 ms task while a third worker stayed idle. Idle workers are woken
// before parked waiters: the long task runs on another thread, not inside
// the wait. (The wait's length is printed, not asserted: a loaded machine
// stretches it without breaking the rule.)
#[test]
fn a_waiter_is_not_handed_long_work_while_a_worker_idles() {
    let (wait_took, ran_inside_the_wait) = watchdog(HANG, "waiter vs idle worker", || {
        let pool = fixed(3);
        let w = running_elsewhere(&pool, Duration::from_millis(50));
        // The waiter's thread while it is inside its wait.
        let waiter = Arc::new(Mutex::new(None));
        let waiting = Arc::new(AtomicBool::new(false));
        let a = {
            let (waiter, waiting) = (waiter.clone(), waiting.clone());
            pool.submit(move || {
                let start = Instant::now();
                *waiter.lock().unwrap() = Some(std::thread::current().id());
                waiting.store(true, SeqCst);
                w.wait().unwrap();
                *waiter.lock().unwrap() = None;
                start.elapsed()
            })
            .unwrap()
        };
        eventually(HANG, "A waits", || waiting.load(SeqCst));
        std::thread::sleep(Duration::from_millis(5));
        let long = pool
            .submit(move || {
                let inside = *waiter.lock().unwrap() == Some(std::thread::current().id());
                std::thread::sleep(Duration::from_millis(500));
                inside
            })
            .unwrap();
        let took = a.wait().unwrap();
        (took, long.wait().unwrap())
    });
    println!("a 50 ms wait took {wait_took:?}");
    assert!(!ran_inside_the_wait, "the waiter ran the new 500 ms task inside its wait while a worker was idle");
}

// Issue 10.4: a waiter took global-queue work before in-flight work stolen
// from other workers; the README promises own deque, then other workers'
// in-flight work, then the global queue (rayon's order). Here A waits on a
// group; its own child J1 runs first; while J1 runs, G (global queue) and
// then C (another worker's deque) arrive, both members of the group. If A's
// thread runs G during its wait, it must have run C before it. (If the
// waiter is isolated from both, it runs neither and the order is moot.)
#[test]
fn a_waiter_steals_in_flight_work_before_taking_global_work() {
    let order = watchdog(HANG, "help order", || {
        let pool = fixed(2);
        let group = pool.group();
        let order: Arc<Mutex<Vec<(&'static str, std::thread::ThreadId)>>> = Arc::default();
        let record = |name: &'static str| {
            let order = order.clone();
            move || order.lock().unwrap().push((name, std::thread::current().id()))
        };
        let go_b = Arc::new(Gate::default());
        let go_j1 = Arc::new(Gate::default());
        let (_ob, _oj) = (OpenOnDrop(go_b.clone()), OpenOnDrop(go_j1.clone()));
        let b_started = Arc::new(AtomicBool::new(false));
        let c_pushed = Arc::new(AtomicBool::new(false));
        // B: on one worker, later pushes C onto its own deque, then stays busy.
        {
            let (go_b, b_started, c_pushed, group, c) =
                (go_b.clone(), b_started.clone(), c_pushed.clone(), group.clone(), record("C"));
            pool.spawn(move || {
                b_started.store(true, SeqCst);
                go_b.wait();
                group.spawn(c).unwrap();
                c_pushed.store(true, SeqCst);
                std::thread::sleep(Duration::from_millis(500));
            })
            .unwrap();
        }
        eventually(HANG, "B runs", || b_started.load(SeqCst));
        // A: on the other worker, spawns J1 locally and waits on the group.
        let j1_started = Arc::new(AtomicBool::new(false));
        let a_thread = {
            let (group, go_j1, j1_started, j1) = (group.clone(), go_j1.clone(), j1_started.clone(), record("J1"));
            pool.submit(move || {
                group
                    .spawn(move || {
                        j1_started.store(true, SeqCst);
                        go_j1.wait();
                        j1();
                    })
                    .unwrap();
                group.wait().unwrap();
                std::thread::current().id()
            })
            .unwrap()
        };
        eventually(HANG, "J1 runs inside A's wait", || j1_started.load(SeqCst));
        group.spawn(record("G")).unwrap();
        go_b.open();
        eventually(HANG, "C is on B's deque", || c_pushed.load(SeqCst));
        go_j1.open();
        let a_thread = a_thread.wait().unwrap();
        group.wait().unwrap();
        let order = order.lock().unwrap().clone();
        order.into_iter().filter(|(_, t)| *t == a_thread).map(|(n, _)| n).collect::<Vec<_>>()
    });
    if let Some(g) = order.iter().position(|n| *n == "G") {
        let c = order.iter().position(|n| *n == "C");
        assert!(
            c.is_some_and(|c| c < g),
            "the waiter took global work before in-flight work of another worker: {order:?}"
        );
    }
}

// Issue 10.5: `wait_timeout` on a pool thread ran the awaited (500 ms) task
// inline and returned after 500 ms. A timed wait must not start work it
// cannot bound: it returns false while the task is still pending. The tasks
// wait on a gate opened after both waits: a wait that ran one inline is
// seen by the task itself (it then returns at once instead of hanging).
#[test]
fn wait_timeout_on_a_pool_thread_does_not_run_the_task_inline() {
    let (handle_result, group_result, inline) = watchdog(HANG, "timed waits", || {
        let pool = fixed(2);
        let p = pool.clone();
        pool.submit(move || {
            let gate = Arc::new(Gate::default());
            let _open = OpenOnDrop(gate.clone());
            let inline = Arc::new(AtomicBool::new(false));
            // The waiter's thread while it is inside a timed wait.
            let waiter = Arc::new(Mutex::new(None));
            let task = || {
                let (gate, inline, waiter) = (gate.clone(), inline.clone(), waiter.clone());
                move || {
                    if *waiter.lock().unwrap() == Some(std::thread::current().id()) {
                        inline.store(true, SeqCst);
                        return;
                    }
                    gate.wait();
                }
            };
            let timed = |wait: &dyn Fn() -> bool| {
                *waiter.lock().unwrap() = Some(std::thread::current().id());
                let r = wait();
                *waiter.lock().unwrap() = None;
                r
            };
            let h = p.submit(task()).unwrap();
            let hr = timed(&|| h.wait_timeout(Duration::from_millis(10)));
            let g = p.group();
            g.spawn(task()).unwrap();
            let gr = timed(&|| g.wait_timeout(Duration::from_millis(10)));
            gate.open();
            h.wait().unwrap();
            g.wait().unwrap();
            (hr, gr, inline.load(SeqCst))
        })
        .unwrap()
        .wait()
        .unwrap()
    });
    assert!(!inline, "a timed wait ran the awaited task inline");
    assert!(!handle_result, "TaskHandle::wait_timeout(10 ms) returned true for a task still waiting on its gate");
    assert!(!group_result, "Group::wait_timeout(10 ms) returned true for a task still waiting on its gate");
}

// Issue 30.5: only a push onto an *empty* deque offered work to a parked
// waiter, and only when no idle worker existed. Here T waits (parked) on a
// group whose task P runs on another worker; P pushes J1 and J2 (T's
// region) and then stays busy. J1's push wakes the idle worker, which takes
// J1 and stays in it; J2's push found the deque non-empty and woke nobody,
// so J2 sat behind P while T, allowed to run it, slept until the test let
// everything go. Now a push of a region's work wakes a parked waiter of
// that region: J2 must run while J1 and P are still held. (No timing is
// asserted; the watchdog only turns the old hang into a failure.)
#[test]
fn a_parked_waiter_is_woken_for_its_regions_second_job() {
    let pool = fixed(3);
    let (hold_j1, hold_p) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    let (_o1, _o2) = (OpenOnDrop(hold_j1.clone()), OpenOnDrop(hold_p.clone()));
    let (j2_ran, j2_seen) = std::sync::mpsc::channel::<std::thread::ThreadId>();
    let waiter = {
        let (p, hold_j1, hold_p) = (pool.clone(), hold_j1.clone(), hold_p.clone());
        pool.submit(move || {
            let group = p.group();
            let p_started = Arc::new(AtomicBool::new(false));
            {
                let (p2, p_started) = (p.clone(), p_started.clone());
                group
                    .spawn(move || {
                        p_started.store(true, SeqCst);
                        // Push only once T is parked in its wait.
                        while p2.stats().blocked_threads == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        p2.spawn(move || hold_j1.wait()).unwrap();
                        p2.spawn(move || j2_ran.send(std::thread::current().id()).unwrap()).unwrap();
                        hold_p.wait();
                    })
                    .unwrap();
            }
            // P must run on another worker: do not wait (and help) before.
            while !p_started.load(SeqCst) {
                std::thread::yield_now();
            }
            group.wait().unwrap();
        })
        .unwrap()
    };
    let ran_on = j2_seen.recv_timeout(Duration::from_secs(30));
    // Who held what when J2 was missed: each thread's state, each queue.
    let snapshot = ran_on.is_err().then(|| pool.dump().to_string());
    hold_j1.open();
    hold_p.open();
    watchdog(HANG, "T's wait ends once P is released", move || waiter.wait().unwrap());
    assert!(
        ran_on.is_ok(),
        "J2 did not run while J1 and P were held: its region's waiter was not woken\n{}",
        snapshot.unwrap_or_default()
    );
}

/// Two tasks on a 2-thread `Fixed` pool, each spawning `n` jobs with
/// `SpawnOptions::global` into a group and waiting on it; `before` runs
/// once both tasks hold their worker and before either spawns. Returns how
/// many of the 2 × n jobs ran.
fn global_region_jobs_on_a_fixed_pool(n: usize, before: fn(&Pool)) -> usize {
    watchdog(HANG, "waiters of global region jobs", move || {
        let pool = fixed(2);
        let both = Arc::new(std::sync::Barrier::new(3));
        let go = Arc::new(Gate::default());
        let _open = OpenOnDrop(go.clone());
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (p, both, go) = (pool.clone(), both.clone(), go.clone());
                pool.submit(move || {
                    both.wait();
                    go.wait();
                    let group = p.group();
                    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    for _ in 0..n {
                        let ran = ran.clone();
                        let opts = wspool::SpawnOptions { global: true, group: Some(&group), ..Default::default() };
                        p.spawn_with(opts, move || {
                            ran.fetch_add(1, SeqCst);
                        })
                        .unwrap();
                    }
                    group.wait().unwrap();
                    ran.load(SeqCst)
                })
                .unwrap()
            })
            .collect();
        both.wait();
        before(&pool);
        go.open();
        tasks.into_iter().map(|t| t.wait().unwrap()).sum()
    })
}

// Issue 30.6: a job a pool task spawns with `SpawnOptions::global` keeps the
// task's region, but a helping waiter never looked at the global queue: on
// a `Fixed` pool whose two workers both wait on such jobs, every job the
// pool needed was queued, of a waiter's own region, and nothing ran it
// (deadlock). A waiter now takes its own region's jobs from the global
// queue when no other thread is free to.
#[test]
fn fixed_pool_waiters_run_their_own_global_region_jobs() {
    assert_eq!(global_region_jobs_on_a_fixed_pool(4, |_| {}), 8);
}

// The same with 100 foreign jobs queued ahead of the region jobs, deeper
// than one look of a waiter while the other worker still runs: the looks
// of both waiters go on through the queue (and wake each other for the
// jobs they pass over) until each finds its own. The foreign jobs run
// afterwards.
#[test]
fn fixed_pool_waiters_find_global_region_jobs_behind_foreign_work() {
    static FOREIGN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let ran = global_region_jobs_on_a_fixed_pool(4, |pool| {
        for _ in 0..100 {
            pool.spawn(|| {
                FOREIGN.fetch_add(1, SeqCst);
            })
            .unwrap();
        }
    });
    assert_eq!(ran, 8);
    eventually(HANG, "the foreign jobs ran", || FOREIGN.load(SeqCst) == 100);
}

// The region jobs behind 100 foreign ones again, but the pool's other
// worker waits inside a blocking region (a wait that runs nothing): T1
// parks after a look that did not reach its jobs, and T2, the last thread
// to get stuck, must look through the queue for T1 (and wake it), though
// it may take nothing from it. Without that, both slept for good.
#[test]
fn a_waiter_that_runs_nothing_still_wakes_the_waiter_whose_global_jobs_it_passes() {
    static FOREIGN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let ran = watchdog(HANG, "a region waiter behind foreign work, the other worker blocked", || {
        let pool = fixed(2);
        let group = pool.group();
        let both = Arc::new(std::sync::Barrier::new(3));
        let go = Arc::new(Gate::default());
        let _open = OpenOnDrop(go.clone());
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t1 = {
            let (p, both, go, group, ran) = (pool.clone(), both.clone(), go.clone(), group.clone(), ran.clone());
            pool.submit(move || {
                both.wait();
                go.wait();
                for _ in 0..4 {
                    let ran = ran.clone();
                    let opts = wspool::SpawnOptions { global: true, group: Some(&group), ..Default::default() };
                    p.spawn_with(opts, move || {
                        ran.fetch_add(1, SeqCst);
                    })
                    .unwrap();
                }
                group.wait().unwrap();
            })
            .unwrap()
        };
        let t2 = {
            let (p, both, go, group) = (pool.clone(), both.clone(), go.clone(), group.clone());
            pool.submit(move || {
                both.wait();
                go.wait();
                // Wait only once T1 parked in its wait.
                while p.stats().blocked_threads == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(20));
                wspool::blocking(|| group.wait()).unwrap();
            })
            .unwrap()
        };
        both.wait();
        for _ in 0..100 {
            pool.spawn(|| {
                FOREIGN.fetch_add(1, SeqCst);
            })
            .unwrap();
        }
        go.open();
        t1.wait().unwrap();
        t2.wait().unwrap();
        ran.load(SeqCst)
    });
    assert_eq!(ran, 4);
    eventually(HANG, "the foreign jobs ran", || FOREIGN.load(SeqCst) == 100);
}
