//! Issue 10.2: `wspool::isolate(|| ...)` runs a closure in a fresh
//! isolation region (oneTBB's `this_task_arena::isolate`): a wait inside it
//! helps only with work spawned inside the region, never with outside work
//! queued meanwhile. (Kept apart from `helping.rs` because the API is new:
//! this file does not build before it exists.)
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, pool_with_one_free_worker, ran_inside_the_wait, watchdog};

const HANG: Duration = Duration::from_secs(10);

// Issue 10.2: a wait inside `isolate` never runs a task from outside the
// region, even when that task is queued while the waiter has nothing else
// to do.
#[test]
fn an_isolated_wait_runs_no_outside_task() {
    let ran = ran_inside_the_wait("isolated wait with outside work queued", |g| wspool::isolate(|| g.wait()));
    assert!(!ran, "an isolated wait ran a task from outside its region");
}

// Issue 10.2: isolation keeps helping with the region's own work: a child
// spawned inside the region is run by the waiting thread itself (the only
// other worker is busy for 200 ms), and `isolate` returns the closure's
// value.
#[test]
fn an_isolated_wait_still_helps_with_its_own_work() {
    let (waiter, child) = watchdog(HANG, "isolated wait on its own child", || {
        let (pool, _busy) = pool_with_one_free_worker();
        let p = pool.clone();
        pool.submit(move || {
            wspool::isolate(|| {
                let inner = p.group();
                let child = Arc::new(Mutex::new(None));
                let c = child.clone();
                inner.spawn(move || *c.lock().unwrap() = Some(std::thread::current().id())).unwrap();
                inner.wait().unwrap();
                let child = child.lock().unwrap().take();
                (std::thread::current().id(), child)
            })
        })
        .unwrap()
        .wait()
        .unwrap()
    });
    assert_eq!(Some(waiter), child, "the isolated waiter did not run its own region's child");
}

// Issue 10.2, the safe choice made easy: holding a mutex across a wait
// inside `isolate` cannot self-deadlock on an outside task that takes the
// same mutex.
#[test]
fn a_mutex_held_across_an_isolated_wait_does_not_self_deadlock() {
    watchdog(HANG, "mutex held across an isolated wait", || {
        let (pool, group) = pool_with_one_free_worker();
        let m = Arc::new(Mutex::new(0u32));
        let holding = Arc::new(AtomicBool::new(false));
        let t1 = {
            let (m, group, holding) = (m.clone(), group.clone(), holding.clone());
            pool.submit(move || {
                wspool::isolate(|| {
                    let mut g = m.lock().unwrap();
                    holding.store(true, SeqCst);
                    group.wait().unwrap();
                    *g += 1;
                })
            })
            .unwrap()
        };
        eventually(HANG, "T1 holds the mutex and waits", || holding.load(SeqCst));
        let t2 = {
            let m = m.clone();
            pool.submit(move || *m.lock().unwrap() += 10).unwrap()
        };
        t1.wait().unwrap();
        t2.wait().unwrap();
        assert_eq!(*m.lock().unwrap(), 11);
    });
}
