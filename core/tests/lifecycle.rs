//! Regression tests for issue 9 (lifecycle and soundness): no task lost,
//! no hang at shutdown, nothing unsound from safe code. Each test names the
//! item it covers. Deadlocks are caught by `common::watchdog`, crashes by
//! running the crash-prone part in a child process (`common::run_child`).
#![allow(missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::{Gate, OpenOnDrop, Outcomes, Tracked, eventually, held_single_worker, in_child, run_child, watchdog};
use wspool::{Growth, Pool, Reject, Shutdown, SpawnOptions, SubmitErrorKind, TaskState};

const HANG: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------ 9.1

// Issue 9.1: in a debug build (overflow checks on) every worker but index 0
// died at start-up and `wait` never returned. Four tasks that can only
// finish together (a barrier of 4) must each run on a different worker of a
// 4-thread pool, and every index must be a live worker.
#[test]
fn every_worker_runs_tasks_in_this_build() {
    let indices = watchdog(HANG, "4 tasks meeting at a barrier on a 4-thread pool", || {
        let pool = Pool::builder().min_threads(4).growth(Growth::Fixed).build().unwrap();
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                pool.submit(move || {
                    let index = wspool::current_index();
                    barrier.wait();
                    index
                })
                .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.wait().unwrap()).collect::<Vec<_>>()
    });
    let set: BTreeSet<usize> = indices.iter().map(|i| i.expect("a task runs on a pool worker")).collect();
    assert_eq!(set, (0..4).collect(), "each worker ran one task: {indices:?}");
}

// ------------------------------------------------------------------ 9.2

/// Captured by a scope task: its drop takes 50 ms, then writes a flag in
/// the scope caller's stack frame. If `scope` returned before this drop
/// finished, the write would land in freed stack memory.
struct SlowDrop<'a> {
    dropped: &'a Mutex<bool>,
}

impl Drop for SlowDrop<'_> {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(50));
        *self.dropped.lock().unwrap() = true;
    }
}

/// Waits until the drop flag and the run flag are settled enough to assert
/// on without leaving a late destructor writing into this frame: the frame
/// that owns `dropped` must outlive any (buggy) late drop.
fn settle_then_check(dropped_at_return: bool, ran: &AtomicBool, dropped: &Mutex<bool>) {
    std::thread::sleep(Duration::from_millis(200));
    let _ = dropped.lock().map(|g| *g);
    assert!(ran.load(SeqCst), "a scope task dropped unrun: scope work must never be lost");
    assert!(dropped_at_return, "scope returned before its task's captures were dropped");
}

// Issue 9.2 (DiscardOldest): a queued scope task evicted by a full
// DiscardOldest queue was cancelled, and its count released before its
// captures dropped. It must run, and its captures must be dropped before
// `scope` returns.
#[test]
fn scope_task_survives_discard_oldest_and_drops_captures_before_scope_returns() {
    watchdog(HANG, "scope with a task evicted by DiscardOldest", || {
        let (pool, gate, _open) = held_single_worker(Pool::builder().queue_capacity(1).reject(Reject::DiscardOldest));
        let dropped = Mutex::new(false);
        let ran = AtomicBool::new(false);
        pool.scope(|s| {
            let capture = SlowDrop { dropped: &dropped };
            let ran = &ran;
            s.spawn(move || {
                let _keep = &capture;
                ran.store(true, SeqCst);
            });
            // The queue holds the scope task: this submission is over
            // capacity and evicts the oldest queued task (not the scope's).
            let _ = pool.spawn(|| {});
            gate.open();
        });
        let dropped_at_return = *dropped.lock().unwrap();
        settle_then_check(dropped_at_return, &ran, &dropped);
    });
}

// Issue 9.2 (Shutdown::Cancel): a `Shutdown::Cancel` from another thread
// while a scope's task is queued must not cancel the scope task: it runs,
// and its captures are dropped before `scope` returns.
#[test]
fn scope_task_survives_a_racing_cancel_shutdown() {
    watchdog(HANG, "scope racing Shutdown::Cancel", || {
        let (pool, gate, _open) = held_single_worker(Pool::builder());
        let dropped = Mutex::new(false);
        let ran = AtomicBool::new(false);
        let mut stopper = None;
        pool.scope(|s| {
            let capture = SlowDrop { dropped: &dropped };
            let ran = &ran;
            s.spawn(move || {
                let _keep = &capture;
                ran.store(true, SeqCst);
            });
            // The scope task is queued behind the busy worker: now cancel.
            let p = pool.clone();
            stopper = Some(std::thread::spawn(move || p.shutdown(Shutdown::Cancel, None)));
            eventually(HANG, "shutdown began", || pool.is_shutdown());
            // Give the canceller time to sweep the queue, then let the
            // worker go.
            std::thread::sleep(Duration::from_millis(20));
            gate.open();
        });
        let dropped_at_return = *dropped.lock().unwrap();
        assert!(stopper.expect("started").join().unwrap().is_ok());
        settle_then_check(dropped_at_return, &ran, &dropped);
    });
}

/// A `'static` capture whose drop takes 50 ms, then sets a flag.
struct SlowDropFlag(Arc<AtomicBool>);

impl Drop for SlowDropFlag {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(50));
        self.0.store(true, SeqCst);
    }
}

// Issue 9.2, the same capture-order pattern in groups: a group task dropped
// unrun (evicted here) must drop its captures before the group counts it
// finished, so a waiter on another thread never returns while the task's
// destructor (a C task's `on_cancel`) still runs.
#[test]
fn evicted_group_task_drops_its_captures_before_wait_returns() {
    watchdog(HANG, "group wait across an eviction", || {
        let (pool, gate, _open) = held_single_worker(Pool::builder().queue_capacity(1).reject(Reject::DiscardOldest));
        let dropped = Arc::new(AtomicBool::new(false));
        let group = pool.group();
        let capture = SlowDropFlag(dropped.clone());
        group.spawn(move || drop(capture)).unwrap();
        let waiter = {
            let (group, dropped) = (group.clone(), dropped.clone());
            std::thread::spawn(move || {
                group.wait_for(None);
                dropped.load(SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        // Over capacity: evicts the group task (the oldest user task).
        pool.spawn(|| ()).unwrap();
        assert!(waiter.join().unwrap(), "the group's wait returned while the task's captures were being dropped");
        gate.open();
    });
}

// ------------------------------------------------------------------ 9.3

const OVERFLOW_CHILD: &str = "WSPOOL_TEST_GROUP_OVERFLOW_CHILD";

// Issue 9.3: a Group's handle count could wrap after 2^24 leaked clones and
// free the group under a live handle. It must abort, as `Arc` does. The
// leaking runs in a child process (this same test, re-run with an env var).
#[test]
fn group_handle_count_overflow_aborts() {
    if in_child(OVERFLOW_CHILD) {
        let pool = Pool::builder().min_threads(1).build().unwrap();
        let group = pool.group();
        for _ in 0..(1u64 << 24) {
            std::mem::forget(group.clone());
        }
        // Still alive: the count wrapped or saturated silently.
        println!("child: 2^24 clones leaked without an abort");
        return;
    }
    let run = run_child("group_handle_count_overflow_aborts", OVERFLOW_CHILD, Duration::from_secs(120));
    assert!(!run.status.success(), "leaking 2^24 group handles must abort; the child exited normally: {}", run.stdout);
    #[cfg(unix)]
    assert_eq!(run.signal(), Some(libc_sigabrt()), "expected an abort (SIGABRT), got {:?}", run.status);
    assert!(run.stderr.contains("count overflow"), "abort message missing; stderr: {}", run.stderr);
}

#[cfg(unix)]
fn libc_sigabrt() -> i32 {
    6
}

// ------------------------------------------------------------------ 9.5

// Issue 9.5: once a Drain began, blocking regions stopped lending threads,
// so three declared-blocking tasks that must meet (a barrier of 3) on a
// min-2 Adaptive pool hung `shutdown(Drain)` forever. A draining pool keeps
// every growth mechanism. The tasks sleep briefly first so the shutdown
// certainly begins before they enter their blocking regions.
#[test]
fn drain_keeps_lending_threads_to_blocking_regions() {
    watchdog(HANG, "shutdown(Drain) of 3 blocking tasks meeting at a barrier on a min-2 pool", || {
        let pool = Pool::builder().min_threads(2).max_threads(8).growth(Growth::Adaptive).build().unwrap();
        let barrier = Arc::new(Barrier::new(3));
        let met = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let (barrier, met) = (barrier.clone(), met.clone());
            pool.spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                wspool::blocking(|| barrier.wait());
                met.fetch_add(1, SeqCst);
            })
            .unwrap();
        }
        assert!(pool.shutdown(Shutdown::Drain, None).is_ok());
        assert_eq!(met.load(SeqCst), 3, "every task ran before Drain returned");
    });
}

// ------------------------------------------------------------------ 9.4

/// One submitter's share of a round: how many tasks the pool accepted, and
/// the handles to wait for.
struct Accepted {
    count: usize,
    /// Refused tasks come back and are dropped unrun by the submitter.
    refused: usize,
    handles: Vec<wspool::TaskHandle<()>>,
}

/// Submits a mix of task kinds until the pool refuses one (it is shutting
/// down) or `most` were accepted, so every round races the shutdown.
fn submit_mix(
    pool: &Pool,
    group: &wspool::Group,
    queue: &wspool::SerialQueue,
    outcomes: &Arc<Outcomes>,
    most: usize,
) -> Accepted {
    let mut acc = Accepted { count: 0, refused: 0, handles: Vec::new() };
    for i in 0..most {
        let t = Tracked::new(outcomes);
        let ok = match i % 5 {
            0 => pool.spawn(move || t.run()).is_ok(),
            1 => match pool.submit(move || t.run()) {
                Ok(h) => {
                    acc.handles.push(h);
                    true
                }
                Err(_) => false,
            },
            2 => group.spawn(move || t.run()).is_ok(),
            3 => queue.spawn(move || t.run()).is_ok(),
            _ => match pool.submit_with(
                SpawnOptions { serial: Some(queue), group: Some(group), ..Default::default() },
                move || t.run(),
            ) {
                Ok(h) => {
                    acc.handles.push(h);
                    true
                }
                Err(_) => false,
            },
        };
        acc.count += usize::from(ok);
        acc.refused += usize::from(!ok);
        if !ok {
            break;
        }
    }
    acc
}

// Issue 9.4 (Rust side): a submission racing shutdown could be accepted and
// then stranded (never run, never cancelled, its handle Pending forever).
// 8 threads submit every kind of task while another shuts down, Drain and
// Cancel alternating: once `shutdown` returned Ok, every accepted task ran
// or was dropped unrun exactly once, no handle is Pending, every wait
// returns.
#[test]
fn submissions_racing_shutdown_are_run_or_cancelled_exactly_once() {
    let rounds = if cfg!(debug_assertions) { 300 } else { 3000 };
    watchdog(Duration::from_secs(300), "submit/shutdown race rounds", move || {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..rounds {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let delay_spins = (rng % 5_000) as usize;
            let mode = if round % 2 == 0 { Shutdown::Drain } else { Shutdown::Cancel };
            let pool = Pool::builder().min_threads(2).build().unwrap();
            let group = pool.group();
            let queue = pool.serial();
            let outcomes = Arc::new(Outcomes::default());
            let start = Barrier::new(9);
            let (accepted, shut) = std::thread::scope(|s| {
                let submitters: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            submit_mix(&pool, &group, &queue, &outcomes, 1_000)
                        })
                    })
                    .collect();
                let stopper = s.spawn(|| {
                    start.wait();
                    for _ in 0..delay_spins {
                        std::hint::spin_loop();
                    }
                    pool.shutdown(mode, None)
                });
                let accepted: Vec<Accepted> = submitters.into_iter().map(|t| t.join().unwrap()).collect();
                (accepted, stopper.join().unwrap())
            });
            assert!(shut.is_ok(), "round {round}: shutdown without a timeout returns Ok");
            let total: usize = accepted.iter().map(|a| a.count).sum();
            let refused: usize = accepted.iter().map(|a| a.refused).sum();
            let ran = outcomes.ran.load(SeqCst);
            let dropped = outcomes.dropped_unrun.load(SeqCst) - refused;
            assert_eq!(
                ran + dropped,
                total,
                "round {round} ({mode:?}): {total} accepted, {ran} ran, {dropped} dropped unrun: tasks stranded"
            );
            if mode == Shutdown::Drain {
                assert_eq!(dropped, 0, "round {round}: Drain dropped accepted tasks");
            }
            for h in accepted.iter().flat_map(|a| a.handles.iter()) {
                let state = h.state();
                assert!(
                    matches!(state, TaskState::Done | TaskState::Cancelled),
                    "round {round} ({mode:?}): a handle is {state:?} after shutdown returned"
                );
                assert!(h.wait_timeout(Duration::from_secs(5)), "round {round}: a handle's wait did not return");
            }
            assert!(group.wait_for(Some(Duration::from_secs(5))), "round {round}: the group's wait did not return");
        }
    });
}

// ------------------------------------------------------------------ 9.9

const STACK_CHILD: &str = "WSPOOL_TEST_STACK_CHILD";

/// A task with 16 KiB of locals that submits the next one and waits on its
/// handle (a wait on a pool thread runs or helps: nesting on this stack).
fn nest_by_handle(pool: &Pool, depth: usize) -> usize {
    let mut locals = [0u8; 16 * 1024];
    std::hint::black_box(&mut locals);
    if depth == 0 {
        return 1 + usize::from(locals[7]);
    }
    let next = pool.clone();
    let below = pool.submit(move || nest_by_handle(&next, depth - 1)).unwrap().wait().unwrap();
    std::hint::black_box(&mut locals);
    below + 1 + usize::from(locals[3])
}

/// The same through a group wait (help-while-waiting from the own deque).
fn nest_by_group(pool: &Pool, depth: usize, reached: &Arc<AtomicUsize>) {
    let mut locals = [0u8; 16 * 1024];
    std::hint::black_box(&mut locals);
    reached.fetch_add(1, SeqCst);
    if depth == 0 {
        return;
    }
    let group = pool.group();
    let (next, reached2) = (pool.clone(), reached.clone());
    group.spawn(move || nest_by_group(&next, depth - 1, &reached2)).unwrap();
    group.wait().unwrap();
    std::hint::black_box(&mut locals);
}

/// Runs `body` in a child process (this same test, re-run with an env var)
/// and asserts it exited cleanly: a stack overflow kills only the child.
fn in_child_process(test: &str, body: impl FnOnce()) {
    if in_child(STACK_CHILD) {
        body();
        println!("child: done");
        return;
    }
    let run = run_child(test, STACK_CHILD, Duration::from_secs(120));
    assert!(
        run.status.success() && run.stdout.contains("child: done"),
        "deep helping crashed or failed ({:?}, signal {:?}).\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.signal(),
        run.stdout,
        run.stderr
    );
}

// Issue 9.9: the help-depth cap counted frames, not bytes, and a wait that
// runs its task inline counted nothing: 16 KiB-per-frame tasks nested 300
// deep by waiting overflowed the default 2 MiB worker stack (SIGSEGV /
// abort). Helping must be bounded by the stack actually left. This one
// nests through task handles (a wait may run the awaited task inline).
#[test]
fn deep_handle_waits_with_16k_frames_do_not_overflow_the_stack() {
    in_child_process("deep_handle_waits_with_16k_frames_do_not_overflow_the_stack", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let p = pool.clone();
        let n = pool.submit(move || nest_by_handle(&p, 300)).unwrap().wait().unwrap();
        assert_eq!(n, 301);
    });
}

// Issue 9.9, nesting through group waits (help-while-waiting from the own
// deque, the path the old frame cap covered).
#[test]
fn deep_group_waits_with_16k_frames_do_not_overflow_the_stack() {
    in_child_process("deep_group_waits_with_16k_frames_do_not_overflow_the_stack", || {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let reached = Arc::new(AtomicUsize::new(0));
        let (p, r) = (pool.clone(), reached.clone());
        pool.submit(move || nest_by_group(&p, 300, &r)).unwrap().wait().unwrap();
        assert_eq!(reached.load(SeqCst), 301);
    });
}

// Issue 9.9, on a small configured stack: `Builder::stack_size(256 KiB)`
// must work with the same tasks (helping stops early; the pool still
// finishes the chain).
#[test]
fn deep_waits_on_a_256k_stack_do_not_overflow() {
    in_child_process("deep_waits_on_a_256k_stack_do_not_overflow", || {
        let pool = Pool::builder().min_threads(2).stack_size(256 * 1024).build().unwrap();
        let p = pool.clone();
        let n = pool.submit(move || nest_by_handle(&p, 100)).unwrap().wait().unwrap();
        assert_eq!(n, 101);
        let reached = Arc::new(AtomicUsize::new(0));
        let (p, r) = (pool.clone(), reached.clone());
        pool.submit(move || nest_by_group(&p, 100, &r)).unwrap().wait().unwrap();
        assert_eq!(reached.load(SeqCst), 101);
    });
}

// ----------------------------------------------------------------- 9.10

// Issue 9.10: an unbalanced `blocking_begin()` left its worker counted as
// blocked forever. The count must be reset when the task ends.
#[test]
fn unbalanced_blocking_begin_is_reset_at_task_end() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    pool.submit(wspool::blocking_begin).unwrap().wait().unwrap();
    eventually(Duration::from_secs(5), "blocked_threads back to 0 after the task ended", || {
        pool.stats().blocked_threads == 0
    });
    // The worker is usable and not counted blocked by a later region either.
    pool.submit(|| wspool::blocking(|| ())).unwrap().wait().unwrap();
    eventually(Duration::from_secs(5), "blocked_threads still 0", || pool.stats().blocked_threads == 0);
}

// Issue 9.10: a group or serial queue of another pool in SpawnOptions ran
// the task on that other pool. It must be refused with WrongPool, the task
// handed back unrun.
#[test]
fn spawn_options_of_another_pool_are_refused() {
    let a = Pool::builder().min_threads(1).build().unwrap();
    let b = Pool::builder().min_threads(1).build().unwrap();
    let bg = b.group();
    let bq = b.serial();
    let outcomes = Arc::new(Outcomes::default());

    let t = Tracked::new(&outcomes);
    let e = a.spawn_with(SpawnOptions { group: Some(&bg), ..Default::default() }, move || t.run()).unwrap_err();
    assert_eq!(e.kind(), SubmitErrorKind::WrongPool);
    drop(e.into_task());

    let t = Tracked::new(&outcomes);
    let e = a.submit_with(SpawnOptions { group: Some(&bg), ..Default::default() }, move || t.run()).unwrap_err();
    assert_eq!(e.kind(), SubmitErrorKind::WrongPool);
    drop(e);

    let t = Tracked::new(&outcomes);
    let e = a.spawn_with(SpawnOptions { serial: Some(&bq), ..Default::default() }, move || t.run()).unwrap_err();
    assert_eq!(e.kind(), SubmitErrorKind::WrongPool);
    drop(e);

    assert_eq!(outcomes.ran.load(SeqCst), 0, "a refused task ran");
    assert_eq!(outcomes.dropped_unrun.load(SeqCst), 3);
    assert_eq!(bg.pending(), 0);
    assert_eq!(b.stats().submitted, 0, "the other pool counted a refused task");
    assert_eq!(a.stats().submitted, 0);
}

// Issue 9.10: a cancelled serial task was counted both as completed and
// as cancelled. It counts once, as cancelled.
#[test]
fn cancelled_serial_task_counts_once_as_cancelled() {
    let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
    let queue = pool.serial();
    let gate = Arc::new(Gate::default());
    let _open = OpenOnDrop(gate.clone());
    let first = {
        let gate = gate.clone();
        queue.submit(move || gate.wait()).unwrap()
    };
    let victim = queue.submit(|| ()).unwrap();
    assert!(victim.cancel(), "a queued serial task can be cancelled");
    gate.open();
    let last = queue.submit(|| ()).unwrap();
    first.wait().unwrap();
    last.wait().unwrap();
    assert!(victim.wait().is_err());
    eventually(Duration::from_secs(5), "both run tasks counted", || pool.stats().completed >= 2);
    std::thread::sleep(Duration::from_millis(50));
    let s = pool.stats();
    assert_eq!(s.cancelled, 1, "{s:?}");
    assert_eq!(s.completed, 2, "the cancelled serial task was counted as completed too: {s:?}");
    assert_eq!(s.submitted, 3, "{s:?}");
}

// Issue 9.10: stats of a job run by another pool's worker (CallerRuns from
// a task of pool B onto a full pool A) landed in the wrong pool. They land
// in the pool the task was submitted to.
#[test]
fn caller_runs_stats_land_in_the_submitting_pool() {
    watchdog(HANG, "CallerRuns from another pool's worker", || {
        let a = Pool::builder()
            .min_threads(1)
            .growth(Growth::Fixed)
            .queue_capacity(1)
            .reject(Reject::CallerRuns)
            .build()
            .unwrap();
        let b = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let started = Arc::new(AtomicBool::new(false));
        {
            let (gate, started) = (gate.clone(), started.clone());
            a.spawn(move || {
                started.store(true, SeqCst);
                gate.wait();
            })
            .unwrap();
        }
        eventually(HANG, "A's worker is busy", || started.load(SeqCst));
        let a2 = a.clone();
        let on_b = b
            .submit(move || {
                // One fits in A's queue; the next four run right here, on B's worker.
                (0..5).filter(|_| a2.spawn(|| ()).is_ok()).count()
            })
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(on_b, 5);
        gate.open();
        eventually(HANG, "A counted its six tasks", || a.stats().completed == 6);
        std::thread::sleep(Duration::from_millis(50));
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.submitted, 6, "A: {sa:?}");
        assert_eq!(sa.completed, 6, "A: {sa:?}");
        assert_eq!(sb.submitted, 1, "B counted A's tasks: {sb:?}");
        assert_eq!(sb.completed, 1, "B counted A's tasks: {sb:?}");
    });
}

// The C API holds a pool handle for each call that publishes tasks
// (`Pool::call_handle`). On one of the pool's own threads that handle is the
// thread's own, not one of the pool's owners: dropping the last owner from
// a task still shuts the pool down while the call's handle is alive, the
// handle then sees the shutdown (a task it submits from there is drained
// like any child of a running task), and dropping it neither joins nor
// shuts anything down. Anywhere else it is an
// ordinary clone, which keeps the pool running.
#[test]
fn a_pool_threads_call_handle_is_not_an_owner() {
    watchdog(HANG, "call handles", || {
        let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
        let last_owner = Arc::new(Mutex::new(Some(pool.clone())));
        drop(pool);
        let (tx, rx) = std::sync::mpsc::channel();
        let in_task = last_owner.clone();
        last_owner
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .spawn(move || {
                let owner = in_task.lock().unwrap().take().unwrap();
                let handle = owner.call_handle();
                let running_before = !handle.is_shutdown();
                let other = handle.clone();
                other.drop_without_join();
                let running_after_handle_drop = !handle.is_shutdown();
                drop(owner); // the last owner: the pool shuts down, this thread exits on its own
                let shut = handle.is_shutdown();
                let child = tx.clone();
                let drained = handle.spawn(move || child.send(None).unwrap()).is_ok();
                handle.drop_without_join();
                tx.send(Some((running_before, running_after_handle_drop, shut, drained))).unwrap();
            })
            .unwrap();
        let mut got: Vec<_> = (0..2).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, [None, Some((true, true, true, true))]);

        // From a thread that is not the pool's: a clone, an owner.
        let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
        let handle = pool.call_handle();
        drop(pool);
        assert!(!handle.is_shutdown(), "a foreign thread's call handle keeps the pool running");
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        handle.submit(move || r.store(true, SeqCst)).unwrap().wait().unwrap();
        assert!(ran.load(SeqCst));
        drop(handle);
    });
}
