//! Issue 26: `Pool::dump` (each thread state and queue statistic, set up
//! with gates, never with sleeps that must be long enough), waits that
//! cannot succeed (`TaskError::WouldDeadlock`), the stall report.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use common::{Gate, OpenOnDrop, eventually, watchdog};
use wspool::{Growth, Pool, PoolDump, TaskError, ThreadState, WaitTarget};

const LIMIT: Duration = Duration::from_secs(60);

fn state_of(dump: &PoolDump, index: usize) -> Option<ThreadState> {
    dump.threads.iter().find(|t| t.index == index).map(|t| t.state)
}

/// Records the worker index a task runs on.
fn record(slot: &Arc<AtomicUsize>) {
    slot.store(wspool::current_index().expect("a pool thread") + 1, SeqCst);
}

fn recorded(slot: &Arc<AtomicUsize>) -> usize {
    eventually(LIMIT, "the task started", || slot.load(SeqCst) != 0);
    slot.load(SeqCst) - 1
}

/// Five threads of a `Fixed` pool: one runs a task (a group's, with a
/// handle), one is in a declared blocking region, one waits on that task's
/// handle, one on its group, one is idle. Each shows as such, with the
/// task's runner named as the holder, and a second snapshot says how long
/// each has been so (the same task sequence: nothing moved).
#[test]
fn a_snapshot_shows_each_thread_state() {
    watchdog(LIMIT, "snapshot of every state", || {
        let pool = Pool::builder().min_threads(5).max_threads(5).growth(Growth::Fixed).build().unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let group = pool.group();
        let (run, blk, wtask, wgroup) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (g, r) = (gate.clone(), run.clone());
        let held = group
            .submit(move || {
                record(&r);
                g.wait();
            })
            .unwrap();
        let running = recorded(&run);
        let (g, b) = (gate.clone(), blk.clone());
        pool.spawn(move || {
            record(&b);
            wspool::blocking(|| g.wait());
        })
        .unwrap();
        let blocking = recorded(&blk);
        let w = wtask.clone();
        pool.spawn(move || {
            record(&w);
            held.wait().unwrap();
        })
        .unwrap();
        let task_waiter = recorded(&wtask);
        let (w, grp) = (wgroup.clone(), group.clone());
        pool.spawn(move || {
            record(&w);
            grp.wait().unwrap();
        })
        .unwrap();
        let group_waiter = recorded(&wgroup);
        let busy = [running, blocking, task_waiter, group_waiter];
        let idle = (0..5).find(|i| !busy.contains(i)).unwrap();
        eventually(LIMIT, "every thread in its state", || {
            let d = pool.dump();
            state_of(&d, running) == Some(ThreadState::Running)
                && state_of(&d, blocking) == Some(ThreadState::Blocking)
                && matches!(
                    state_of(&d, task_waiter),
                    Some(ThreadState::Waiting { on: WaitTarget::Task, holder: Some(h), .. }) if h == running
                )
                && matches!(state_of(&d, group_waiter), Some(ThreadState::Waiting { on: WaitTarget::Group, .. }))
                && state_of(&d, idle) == Some(ThreadState::Parked)
                && d.threads.iter().any(|t| t.index == task_waiter && t.parked_in_wait)
        });
        let first = pool.dump();
        std::thread::sleep(Duration::from_millis(5));
        let second = pool.dump();
        for i in busy {
            let (a, b) = (
                first.threads.iter().find(|t| t.index == i).unwrap(),
                second.threads.iter().find(|t| t.index == i).unwrap(),
            );
            assert_eq!(a.tasks_taken, b.tasks_taken, "#{i} moved:\n{first}\n{second}");
            assert!(b.for_at_least.is_some_and(|d| d > Duration::ZERO), "#{i}:\n{second}");
        }
        let text = second.to_string();
        assert!(text.contains("running a task for >="), "{text}");
        assert!(text.contains("in a declared blocking region"), "{text}");
        assert!(text.contains(&format!("(run by #{running})")), "{text}");
        assert!(text.contains("idle, parked"), "{text}");
        assert!(text.contains("parked: counted for lending"), "{text}");
        gate.open();
        group.wait().unwrap();
    });
}

/// The global queue's length and the age of its oldest task: a lower bound
/// that grows while its head does not move, and is gone once it drained.
#[test]
fn a_snapshot_shows_the_global_queue_and_its_oldest_task() {
    watchdog(LIMIT, "global queue in a snapshot", || {
        let (pool, gate, _open) = common::held_single_worker(Pool::builder().growth(Growth::Fixed));
        for _ in 0..3 {
            pool.spawn(|| {}).unwrap();
        }
        let first = pool.dump();
        let global = |d: &PoolDump| d.queues.iter().find(|q| q.name == "global").cloned().unwrap();
        assert_eq!(global(&first).len, 3, "{first}");
        assert_eq!(first.queued, 3, "{first}");
        std::thread::sleep(Duration::from_millis(5));
        let second = pool.dump();
        let q = global(&second);
        assert!(q.oldest_at_least.is_some_and(|d| d > Duration::ZERO), "{second}");
        assert!(second.to_string().contains("global: 3 queued, oldest waiting >="), "{second}");
        gate.open();
        eventually(LIMIT, "the queue drained", || pool.stats().completed == 4);
        let q = global(&pool.dump());
        assert_eq!((q.len, q.oldest_at_least), (0, None));
    });
}

/// A group's task waiting on its own group gets `WouldDeadlock` at once
/// instead of hanging; a task of another group waits as usual.
#[test]
fn a_group_task_waiting_on_its_own_group_gets_the_error() {
    watchdog(LIMIT, "self-waits", || {
        let pool = Pool::builder().min_threads(2).max_threads(2).growth(Growth::Fixed).build().unwrap();
        // A group's task waiting on its own group.
        let group = pool.group();
        let g = group.clone();
        let member = group
            .submit(move || {
                assert!(g.would_deadlock());
                assert!(!g.wait_for(None));
                g.wait()
            })
            .unwrap();
        assert!(matches!(member.wait().unwrap(), Err(TaskError::WouldDeadlock)));
        group.wait().unwrap();
        // Not a member: waits as usual (a timed wait is never refused).
        let other = pool.group();
        let o = other.clone();
        let gate = Arc::new(Gate::default());
        let gg = gate.clone();
        other.spawn(move || gg.wait()).unwrap();
        let waiter = pool.submit(move || (o.would_deadlock(), o.wait())).unwrap();
        gate.open();
        let (refused, waited) = waiter.wait().unwrap();
        assert!(!refused);
        waited.unwrap();
    });
}

/// The task that waits on its own handle sees the error; checked through
/// a channel, since the handle it consumed was the only one.
#[test]
fn a_task_waiting_on_its_own_handle_gets_the_error() {
    watchdog(LIMIT, "a task waits on itself", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let (give, take) = mpsc::channel::<wspool::TaskHandle<()>>();
        let (report, seen) = mpsc::channel();
        let h = pool
            .submit(move || {
                let own = take.recv().unwrap();
                report.send(own.wait().err().map(|e| e.to_string())).unwrap();
            })
            .unwrap();
        give.send(h).unwrap();
        let err = seen.recv().unwrap();
        assert_eq!(err.as_deref(), Some("wait would deadlock: the waiting task itself holds what it waits for"));
    });
}

/// A serial queue's task (or a lane of 1's) that waits on a task queued
/// behind it on the same queue gets `WouldDeadlock`: the queue starts that
/// task only after the waiting one returned. On a lane of 2 the same wait
/// is fine: the second place runs it.
#[test]
fn a_serial_task_waiting_on_a_task_behind_it_gets_the_error() {
    watchdog(LIMIT, "serial self-waits", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        for (queue, refused) in [(pool.serial(), true), (pool.lane(1), true), (pool.lane(2), false)] {
            let (give, take) = mpsc::channel::<wspool::TaskHandle<u32>>();
            let first = queue
                .submit(move || {
                    let behind = take.recv().unwrap();
                    let would = behind.would_deadlock();
                    (would, behind.wait().map_err(|e| e.to_string()))
                })
                .unwrap();
            give.send(queue.submit(|| 7).unwrap()).unwrap();
            let (would, waited) = first.wait().unwrap();
            assert_eq!(would, refused, "limit {}", queue.limit());
            if refused {
                assert!(waited.unwrap_err().contains("would deadlock"));
            } else {
                assert_eq!(waited, Ok(7));
            }
        }
    });
}

/// Lanes and serial queues appear in a snapshot with their queued and
/// running tasks, and a dropped, drained one disappears.
#[test]
fn a_snapshot_lists_lanes() {
    watchdog(LIMIT, "lanes in a snapshot", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let lane = pool.lane(1);
        let started = Arc::new(AtomicUsize::new(0));
        let (g, s) = (gate.clone(), started.clone());
        lane.spawn(move || {
            s.store(1, SeqCst);
            g.wait();
        })
        .unwrap();
        lane.spawn(|| {}).unwrap();
        lane.spawn(|| {}).unwrap();
        eventually(LIMIT, "the lane's first task started", || started.load(SeqCst) == 1);
        let d = pool.dump();
        let q = d.queues.iter().find(|q| q.name.starts_with("lane ") && q.name.ends_with("/1")).expect("the lane");
        assert_eq!((q.len, q.running), (2, 1), "{d}");
        assert!(d.to_string().contains("2 queued, 1 running"), "{d}");
        gate.open();
        drop(lane);
        eventually(LIMIT, "the lane drained", || pool.stats().completed == 3);
        assert!(pool.dump().queues.iter().all(|q| !q.name.starts_with("lane ")));
    });
}

/// A thread the compensation started to run work queued behind a task
/// blocked in a declared region is marked lent; the pool's first thread is
/// not.
#[test]
fn a_thread_lent_for_a_blocking_region_is_marked_lent() {
    watchdog(LIMIT, "lent thread in a snapshot", || {
        let pool = Pool::builder().min_threads(1).max_threads(4).growth(Growth::Compensate).build().unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let (g, b) = (gate.clone(), Arc::new(AtomicUsize::new(0)));
        let blk = b.clone();
        pool.spawn(move || {
            record(&b);
            wspool::blocking(|| g.wait());
        })
        .unwrap();
        let blocking = recorded(&blk);
        // Work queued behind the blocked thread: the pool lends one for it.
        pool.spawn(|| {}).unwrap();
        eventually(LIMIT, "a thread lent", || pool.dump().threads.iter().any(|t| t.lent));
        let d = pool.dump();
        let first = d.threads.iter().find(|t| t.index == blocking).unwrap();
        assert!(!first.lent && first.state == ThreadState::Blocking, "{d}");
        assert!(d.to_string().contains("lent for a blocked or waiting thread"), "{d}");
        gate.open();
    });
}

/// The priority levels appear once priorities were used, with their
/// lengths and the age of their oldest task; a pool that never used them
/// lists no such queue.
#[test]
fn a_snapshot_lists_the_priority_levels_once_used() {
    watchdog(LIMIT, "priority levels in a snapshot", || {
        let (pool, gate, _open) = common::held_single_worker(Pool::builder().growth(Growth::Fixed));
        pool.spawn(|| {}).unwrap();
        let d = pool.dump();
        assert!(d.queues.iter().all(|q| !q.name.starts_with("priority")), "{d}");
        let at = |priority| wspool::SpawnOptions { priority, ..Default::default() };
        for _ in 0..2 {
            pool.spawn_with(at(wspool::Priority::High), || {}).unwrap();
        }
        pool.spawn_with(at(wspool::Priority::Low), || {}).unwrap();
        let first = pool.dump();
        let level = |d: &PoolDump, name: &str| d.queues.iter().find(|q| q.name == name).cloned().unwrap();
        assert_eq!((level(&first, "priority high").len, level(&first, "priority low").len), (2, 1), "{first}");
        std::thread::sleep(Duration::from_millis(5));
        let second = pool.dump();
        assert!(level(&second, "priority high").oldest_at_least.is_some_and(|d| d > Duration::ZERO), "{second}");
        assert!(second.to_string().contains("priority high: 2 queued, oldest waiting >="), "{second}");
        gate.open();
        eventually(LIMIT, "every task ran", || pool.stats().completed == 5);
        let d = pool.dump();
        assert_eq!((level(&d, "priority high").len, level(&d, "priority low").len), (0, 0), "{d}");
    });
}

/// A pool that does not grow (here `Fixed`, with no stall handler set)
/// still watches: a stall episode is counted in its stats.
#[test]
fn a_pool_that_does_not_grow_counts_its_stall_episodes() {
    watchdog(LIMIT, "stall counted on a Fixed pool", || {
        let (pool, gate, _open) = common::held_single_worker(Pool::builder().growth(Growth::Fixed));
        pool.set_stall_handler(Duration::from_millis(20), None);
        pool.spawn(|| {}).unwrap();
        eventually(LIMIT, "a stall episode counted", || pool.stats().stalls >= 1);
        gate.open();
    });
}
