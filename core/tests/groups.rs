//! Groups whose state lives in their owner's memory (`Pool::group_scope`,
//! `GroupPlace`), and the wake-up protocol every group shares: adversarial
//! cases for waits, shutdown, cancellation, panics and memory reuse.

mod common;

use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::{Outcomes, Tracked, eventually, held_single_worker, watchdog};
use wspool::{Group, GroupPlace, Growth, Pool, Shutdown, SpawnOptions, SubmitErrorKind};

const HANG: Duration = Duration::from_secs(60);

fn pool(threads: usize) -> Pool {
    Pool::builder().min_threads(threads).growth(Growth::Fixed).build().unwrap()
}

/// Counts its drop, slowly: a group's wait must not return while a task's
/// captures are still being dropped.
struct SlowDrop(Arc<AtomicUsize>);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_micros(300));
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn group_scope_returns_after_every_task_and_its_captures() {
    watchdog(HANG, "group_scope with slow tasks", || {
        let pool = pool(2);
        for round in 0..20 {
            let dropped = Arc::new(AtomicUsize::new(0));
            pool.group_scope(|g| {
                for i in 0..8 {
                    let guard = SlowDrop(dropped.clone());
                    g.spawn(move || {
                        let _guard = guard;
                        std::thread::sleep(Duration::from_micros(((round + i) % 5) as u64 * 100));
                    })
                    .unwrap();
                }
                // No wait: leaving the scope is the wait.
            });
            assert_eq!(dropped.load(SeqCst), 8, "round {round}: group_scope returned before every capture dropped");
        }
    });
}

#[test]
fn group_scope_reraises_a_task_panic_that_no_wait_reported() {
    watchdog(HANG, "group_scope panics", || {
        let pool = pool(2);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.group_scope(|g| {
                g.spawn(|| panic!("unwaited boom")).unwrap();
            })
        }));
        let payload = caught.expect_err("the task's panic comes out of group_scope");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"unwaited boom"));

        // Reported by a wait: then not again.
        let reported = pool.group_scope(|g| {
            g.spawn(|| panic!("waited boom")).unwrap();
            let e = g.wait().expect_err("wait reports the panic");
            assert_eq!(e.panic_message(), Some("waited boom"));
            g.wait().is_ok()
        });
        assert!(reported, "a panic is reported once");
    });
}

#[test]
fn group_scope_body_panic_still_waits_for_the_tasks() {
    watchdog(HANG, "group_scope body panic", || {
        let pool = pool(2);
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = dropped.clone();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.group_scope(|g| {
                for _ in 0..4 {
                    let guard = SlowDrop(d.clone());
                    g.spawn(move || {
                        std::thread::sleep(Duration::from_millis(2));
                        drop(guard);
                    })
                    .unwrap();
                }
                panic!("body boom");
            })
        }));
        assert_eq!(caught.unwrap_err().downcast_ref::<&str>(), Some(&"body boom"));
        assert_eq!(dropped.load(SeqCst), 4, "the scope waited for its tasks before re-raising");
    });
}

fn fib_groups(pool: &Pool, n: u64, out: &Arc<AtomicUsize>) {
    if n < 2 {
        out.fetch_add(n as usize, SeqCst);
        return;
    }
    pool.group_scope(|g| {
        let (p, o) = (pool.clone(), out.clone());
        g.spawn(move || fib_groups(&p, n - 2, &o)).unwrap();
        fib_groups(pool, n - 1, out);
        g.wait().unwrap();
    });
}

#[test]
fn nested_group_scopes_on_pool_threads_compute_fib() {
    watchdog(HANG, "nested group scopes", || {
        let pool = pool(2);
        let out = Arc::new(AtomicUsize::new(0));
        let (p, o) = (pool.clone(), out.clone());
        pool.submit(move || fib_groups(&p, 18, &o)).unwrap().wait().unwrap();
        assert_eq!(out.load(SeqCst), 2584);
        // And from a foreign thread.
        let out = Arc::new(AtomicUsize::new(0));
        fib_groups(&pool, 15, &out);
        assert_eq!(out.load(SeqCst), 610);
    });
}

#[test]
fn cancelling_shutdown_drops_a_local_groups_queued_tasks_before_the_scope_returns() {
    watchdog(HANG, "group_scope across Shutdown::Cancel", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let queued = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            let scope = s.spawn(|| {
                pool.group_scope(|g| {
                    for _ in 0..10 {
                        let t = Tracked::new(&outcomes);
                        g.spawn(move || t.run()).unwrap();
                    }
                    queued.store(true, SeqCst);
                })
            });
            eventually(HANG, "the tasks are queued", || queued.load(SeqCst));
            // The only worker is held: Cancel drops the queued tasks; it
            // times out waiting for the held one, which is fine.
            let _ = pool.shutdown(Shutdown::Cancel, Some(Duration::from_millis(50)));
            scope.join().unwrap();
            assert_eq!(outcomes.dropped_unrun.load(SeqCst) + outcomes.ran.load(SeqCst), 10);
            assert_eq!(outcomes.dropped_unrun.load(SeqCst), 10, "queued behind a held worker, all cancelled");
            gate.open();
        });
        // After shutdown a local group refuses work.
        pool.group_scope(|g| {
            let e = g.spawn(|| ()).unwrap_err();
            assert_eq!(e.kind(), SubmitErrorKind::Shutdown);
        });
    });
}

/// Places a group in a heap buffer, runs `tasks` tiny tasks in it and
/// finalises it without waiting first; then poisons and frees the buffer.
/// A task or waker touching the state after `fini` would read the poison
/// (and trip the sanitizers / allocator in the C suite's twin).
fn place_run_fini(pool: &Pool, tasks: usize, done: &Arc<AtomicUsize>) {
    let mut buf: Box<MaybeUninit<GroupPlace>> = Box::new(MaybeUninit::uninit());
    // SAFETY: the buffer stays put until fini returned; fini is called once.
    let group = unsafe { GroupPlace::init(buf.as_mut_ptr(), pool) };
    for _ in 0..tasks {
        let d = done.clone();
        group
            .spawn(move || {
                d.fetch_add(1, SeqCst);
            })
            .unwrap();
    }
    // SAFETY: as above.
    unsafe { GroupPlace::fini(buf.as_mut_ptr(), group) };
    // SAFETY: plain bytes written over memory nothing refers to any more.
    unsafe { std::ptr::write_bytes(buf.as_mut_ptr().cast::<u8>(), 0xA5, size_of::<GroupPlace>()) };
    drop(buf);
}

#[test]
fn placed_group_fini_races_finishing_tasks_and_leaves_the_memory_free() {
    watchdog(HANG, "placed group fini vs finishing tasks", || {
        let pool = pool(2);
        let done = Arc::new(AtomicUsize::new(0));
        // From a foreign thread: the state counts its pool.
        for round in 0..500 {
            let before = done.load(SeqCst);
            place_run_fini(&pool, 1 + round % 4, &done);
            assert_eq!(done.load(SeqCst), before + 1 + round % 4, "fini returned before its tasks ran");
        }
        // From pool threads: the state borrows the pool, the task finalises it.
        let group = pool.group();
        for round in 0..200 {
            let (p, d) = (pool.clone(), done.clone());
            group.spawn(move || place_run_fini(&p, 1 + round % 3, &d)).unwrap();
        }
        group.wait().unwrap();
    });
}

#[test]
fn placed_group_made_off_the_pool_outlives_it() {
    watchdog(HANG, "placed group after its pool", || {
        let pool = pool(1);
        let mut buf: Box<MaybeUninit<GroupPlace>> = Box::new(MaybeUninit::uninit());
        // SAFETY: the buffer stays put until fini; fini once.
        let group = unsafe { GroupPlace::init(buf.as_mut_ptr(), &pool) };
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        group
            .spawn(move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        drop(pool); // drains
        assert_eq!(ran.load(SeqCst), 1);
        assert_eq!(group.spawn(|| ()).unwrap_err().kind(), SubmitErrorKind::Shutdown);
        assert!(group.wait().is_ok());
        // SAFETY: as above.
        unsafe { GroupPlace::fini(buf.as_mut_ptr(), group) };
    });
}

#[test]
fn foreign_waiters_asleep_are_woken_when_the_group_empties() {
    // Each round the task outlasts the waiters' spin phase, so they sleep
    // (the SLEEPER path) and only the emptying wakes them.
    watchdog(HANG, "foreign waiters on a group", || {
        let pool = pool(2);
        for round in 0..200 {
            let g = pool.group();
            g.spawn(move || std::thread::sleep(Duration::from_micros(50 + (round % 7) * 40))).unwrap();
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| g.wait().unwrap());
                }
            });
            assert_eq!(g.pending(), 0);
        }
    });
}

#[test]
fn a_pool_thread_parked_on_a_group_is_woken_by_another_worker() {
    // The waiter's task is on the global queue, where a waiting worker
    // never looks: it parks registered with the group, and the worker that
    // runs the task must wake it.
    watchdog(HANG, "parked pool-thread waiter", || {
        let pool = pool(2);
        let outer = pool.group();
        for round in 0..200u64 {
            let p = pool.clone();
            outer
                .spawn(move || {
                    let g: Group = p.group();
                    let opts = SpawnOptions { global: true, group: Some(&g), ..SpawnOptions::default() };
                    p.spawn_with(opts, move || std::thread::sleep(Duration::from_micros(30 + (round % 5) * 50)))
                        .unwrap();
                    g.wait().unwrap();
                    assert_eq!(g.pending(), 0);
                })
                .unwrap();
            outer.wait().unwrap();
        }
    });
}

#[test]
fn groups_refilled_while_waiters_sleep_still_wake_them() {
    // The emptying clears the sleeper mark; a task spawned right after
    // must not leave a waiter that slept through the emptying unwoken.
    watchdog(HANG, "refilled group", || {
        let pool = pool(2);
        let g = pool.group();
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..2000u64 {
                    g.spawn(move || {
                        if i % 16 == 0 {
                            std::thread::sleep(Duration::from_micros(40));
                        }
                    })
                    .unwrap();
                    if i % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                stop.store(true, SeqCst);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(SeqCst) {
                        g.wait_for(None);
                    }
                });
            }
        });
        g.wait().unwrap();
    });
}

/// A pool whose internals are watched: its builder's hook holds the
/// returned marker's only other clone, so the marker's count falls back to
/// one exactly when the pool's internals are freed.
fn watched_pool(threads: usize) -> (Pool, Arc<()>) {
    let marker = Arc::new(());
    let m = marker.clone();
    let pool = Pool::builder()
        .min_threads(threads)
        .growth(Growth::Fixed)
        .on_thread_start(move |_| assert!(Arc::strong_count(&m) > 0))
        .build()
        .unwrap();
    (pool, marker)
}

#[test]
fn a_group_dropped_with_tasks_pending_lets_its_pool_be_freed() {
    // Issue 30, item 4: the group's last task, finishing after the group's
    // last handle went, must free the group's state, and with it the
    // state's count of the pool's internals.
    watchdog(HANG, "a group dropped with tasks pending", || {
        for global in [false, true] {
            let (pool, marker) = watched_pool(1);
            let gate = Arc::new(common::Gate::default());
            let g = pool.group();
            let (gt, opts) = (gate.clone(), SpawnOptions { global, group: Some(&g), ..Default::default() });
            pool.spawn_with(opts, move || gt.wait()).unwrap();
            g.spawn(|| ()).unwrap();
            drop(g); // destroyed with its tasks pending
            gate.open();
            drop(pool); // drains, then joins every thread
            assert_eq!(Arc::strong_count(&marker), 1, "the pool's internals were not freed (global: {global})");
        }
    });
}

/// Places a group in `buf` from a task on `pool` and spawns `tasks` tasks
/// into it; the task returns without finalising it.
fn place_on_a_pool_thread(
    pool: &Pool,
    buf: &mut MaybeUninit<GroupPlace>,
    tasks: usize,
    ran: &Arc<AtomicUsize>,
) -> Group {
    let place = buf.as_mut_ptr() as usize;
    let (p, r) = (pool.clone(), ran.clone());
    let h = pool
        .submit(move || {
            // SAFETY: the caller keeps the buffer, unmoved, until its fini.
            let g = unsafe { GroupPlace::init(place as *mut GroupPlace, &p) };
            for _ in 0..tasks {
                let r = r.clone();
                g.spawn(move || {
                    r.fetch_add(1, SeqCst);
                })
                .unwrap();
            }
            g
        })
        .unwrap();
    h.wait().unwrap()
}

#[test]
fn a_group_placed_on_a_pool_thread_outlives_its_task_and_its_pool() {
    // Issue 30, item 7: placed by a task that returned without finalising
    // it, the group must keep the pool's internals alive past the pool.
    watchdog(HANG, "placed on a pool thread, used after its pool", || {
        let (pool, marker) = watched_pool(2);
        let ran = Arc::new(AtomicUsize::new(0));
        let mut buf: Box<MaybeUninit<GroupPlace>> = Box::new(MaybeUninit::uninit());
        let group = place_on_a_pool_thread(&pool, &mut buf, 3, &ran);
        drop(pool); // drains, joins every thread
        assert_eq!(ran.load(SeqCst), 3);
        assert_eq!(Arc::strong_count(&marker), 2, "the placed group keeps the pool's internals");
        assert_eq!(group.spawn(|| ()).unwrap_err().kind(), SubmitErrorKind::Shutdown);
        assert!(group.wait().is_ok());
        // SAFETY: placed in `buf` by `init`, finalised once.
        unsafe { GroupPlace::fini(buf.as_mut_ptr(), group) };
        assert_eq!(Arc::strong_count(&marker), 1, "the last placed group freed the pool's internals");
    });
}

#[test]
fn groups_placed_on_pool_threads_and_finalised_anywhere_let_the_pool_go() {
    // The lease's three ways out: finalised on the placing thread (a
    // stack group per fork), on a foreign thread while the pool lives, and
    // on a foreign thread after the placing thread exited.
    watchdog(HANG, "placed groups finalised anywhere", || {
        let (pool, marker) = watched_pool(2);
        let done = Arc::new(AtomicUsize::new(0));
        let (p, d) = (pool.clone(), done.clone());
        pool.submit(move || place_run_fini(&p, 2, &d)).unwrap().wait().unwrap();
        assert_eq!(done.load(SeqCst), 2);
        let ran = Arc::new(AtomicUsize::new(0));
        let mut early: Box<MaybeUninit<GroupPlace>> = Box::new(MaybeUninit::uninit());
        let mut late: Box<MaybeUninit<GroupPlace>> = Box::new(MaybeUninit::uninit());
        let g_early = place_on_a_pool_thread(&pool, &mut early, 2, &ran);
        let g_late = place_on_a_pool_thread(&pool, &mut late, 2, &ran);
        // SAFETY: placed in `early` by `init`, finalised once.
        unsafe { GroupPlace::fini(early.as_mut_ptr(), g_early) };
        drop(pool);
        assert_eq!(Arc::strong_count(&marker), 2, "`late` still holds the pool's internals");
        // SAFETY: placed in `late` by `init`, finalised once.
        unsafe { GroupPlace::fini(late.as_mut_ptr(), g_late) };
        assert_eq!(ran.load(SeqCst), 4);
        assert_eq!(Arc::strong_count(&marker), 1);
    });
}
