//! A real pool under Miri (`make test-miri` runs this file with several
//! seeds, each another schedule of the same threads): worker threads, the
//! sleep/wake protocol, the monitor, task cells, lanes, the priority
//! levels, deadlines, cancellation, completion queues, snapshots and a
//! draining shutdown, all through the public API, so every unsafe block
//! and atomic that a pool run reaches is checked, not only the queues'
//! unit tests. Counts are small so that one seed interprets in well under
//! a minute. Natively the file is an ordinary (fast) test.
//!
//! Held pools: a `Fixed(1)` pool whose one worker is kept inside a task
//! until the test opens a gate, so what the test queues meanwhile waits,
//! and the order it then runs in is the pool's to choose, never the
//! schedule's.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wspool::{
    CloseMode, CompletionQueue, CqEvent, CqOptions, CqStatus, Growth, Label, Pool, Priority, Shutdown, SpawnOptions,
    TaskError, TaskState,
};

/// A pool of one worker, held in a task until the returned sender is
/// dropped or sent to (the worker is inside the task when this returns).
fn held_pool() -> (Pool, mpsc::Sender<()>) {
    held_pool_labelled(None)
}

/// [`held_pool`] whose holding task carries `label`.
fn held_pool_labelled(label: Option<Label>) -> (Pool, mpsc::Sender<()>) {
    let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    pool.spawn_with(SpawnOptions { label, ..Default::default() }, move || {
        started_tx.send(()).unwrap();
        // A closed gate (the sender dropped) opens it too, so a failing
        // assertion does not leave the pool's drop waiting here.
        let _ = gate_rx.recv();
    })
    .unwrap();
    started_rx.recv().unwrap();
    (pool, gate_tx)
}

/// Records the order tasks ran in.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<&'static str>>>);

impl Log {
    fn push(&self, what: &'static str) {
        self.0.lock().unwrap().push(what);
    }
    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// High work queued behind normal and Low work runs first (a burst of two
/// is far below `HIGH_BURST`), and every task runs exactly once. The
/// orders between normal and Low tasks are the model tests' to check
/// (`core/tests/model_*.rs`); here they only have to run.
#[test]
fn priorities_on_a_held_worker() {
    let (pool, gate) = held_pool();
    let log = Log::default();
    let mut handles = Vec::new();
    for (name, priority) in [
        ("normal", Priority::Normal),
        ("low", Priority::Low),
        ("normal", Priority::Normal),
        ("high", Priority::High),
        ("low", Priority::Low),
        ("high", Priority::High),
    ] {
        let log = log.clone();
        let opts = SpawnOptions { priority, ..Default::default() };
        handles.push(pool.submit_with(opts, move || log.push(name)).unwrap());
    }
    gate.send(()).unwrap();
    for h in handles {
        h.wait().unwrap();
    }
    let order = log.take();
    assert_eq!(order.len(), 6, "{order:?}");
    assert_eq!(&order[..2], ["high", "high"], "{order:?}");
    assert_eq!(order.iter().filter(|&&n| n == "low").count(), 2, "{order:?}");
    pool.shutdown(Shutdown::Drain, None).unwrap();
}

/// A lane of width 2 runs at most two of its tasks at once, starts them
/// in submission order, and the lane's other work waits while both run.
#[test]
fn a_lane_keeps_its_width_and_order() {
    let pool = Pool::builder().min_threads(3).growth(Growth::Fixed).build().unwrap();
    let lane = pool.lane(2);
    let running = Arc::new(AtomicUsize::new(0));
    let widest = Arc::new(AtomicUsize::new(0));
    let started = Log::default();
    const NAMES: [&str; 5] = ["t0", "t1", "t2", "t3", "t4"];
    let handles: Vec<_> = NAMES
        .iter()
        .map(|&name| {
            let (running, widest, started) = (running.clone(), widest.clone(), started.clone());
            lane.submit(move || {
                started.push(name);
                let now = running.fetch_add(1, SeqCst) + 1;
                widest.fetch_max(now, SeqCst);
                std::thread::yield_now();
                running.fetch_sub(1, SeqCst);
            })
            .unwrap()
        })
        .collect();
    for h in handles {
        h.wait().unwrap();
    }
    assert!(widest.load(SeqCst) <= 2, "a lane of 2 ran {} at once", widest.load(SeqCst));
    assert_eq!(started.take(), NAMES, "a lane starts its tasks in FIFO order");
    assert_eq!(lane.pending(), 0);
    pool.shutdown(Shutdown::Drain, None).unwrap();
}

/// Counts the drops of what a task captured: a cancelled or expired
/// task's closure is dropped unrun, exactly once.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A deadline already past expires the task where it would start; one far
/// ahead lets it run; a pending task cancelled ends cancelled. Each
/// closure is dropped exactly once, and only the live one ran.
#[test]
fn deadlines_and_cancel_end_each_task_once() {
    let (pool, gate) = held_pool();
    let (drops, ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let task = |drops: &Arc<AtomicUsize>, ran: &Arc<AtomicUsize>| {
        let (guard, ran) = (DropCount(drops.clone()), ran.clone());
        move || {
            let _guard = guard;
            ran.fetch_add(1, SeqCst);
        }
    };
    let past = SpawnOptions { deadline: Some(Instant::now()), ..Default::default() };
    let far = SpawnOptions { deadline: Some(Instant::now() + Duration::from_secs(3600)), ..Default::default() };
    let expired = pool.submit_with(past, task(&drops, &ran)).unwrap();
    let live = pool.submit_with(far, task(&drops, &ran)).unwrap();
    let cancelled = pool.submit(task(&drops, &ran)).unwrap();
    assert!(cancelled.cancel(), "a pending task can be cancelled");
    assert!(!cancelled.cancel(), "only once");
    assert_eq!(cancelled.state(), TaskState::Cancelled);
    gate.send(()).unwrap();
    assert!(matches!(expired.wait(), Err(TaskError::Expired)));
    live.wait().unwrap();
    assert!(matches!(cancelled.wait(), Err(TaskError::Cancelled)));
    assert_eq!(ran.load(SeqCst), 1, "only the task within its deadline ran");
    assert_eq!(drops.load(SeqCst), 3, "every closure dropped once");
    let stats = pool.stats();
    assert_eq!((stats.expired, stats.cancelled), (1, 1));
    pool.shutdown(Shutdown::Drain, None).unwrap();
}

/// Completion-queue submissions with handles: one cancelled while queued
/// comes back `Cancelled` with its payload, the others `Ran`, each once.
#[test]
fn cancellable_completion_queue_submissions() {
    let (pool, gate) = held_pool();
    let cq = CompletionQueue::new(&pool, CqOptions { overload_target: None, ..Default::default() }).unwrap();
    let handles: Vec<_> =
        (0..3u32).map(|i| cq.submit_cancellable(SpawnOptions::default(), i, |n: &mut u32| *n += 10).unwrap()).collect();
    assert!(handles[1].cancel(), "a queued submission can be cancelled");
    gate.send(()).unwrap();
    let mut events = Vec::new();
    cq.close(CloseMode::Drain, None, |e| {
        if let CqEvent::Done(item, status) = e {
            events.push((item, status));
        }
    })
    .unwrap();
    events.sort_by_key(|&(item, _)| item % 10);
    assert_eq!(events, [(10, CqStatus::Ran), (1, CqStatus::Cancelled), (12, CqStatus::Ran)]);
    pool.shutdown(Shutdown::Drain, None).unwrap();
}

/// A snapshot of a held pool sees the holding task, its label and the
/// queued work (it reads every worker's counters and queues, and the label
/// table, while they run).
#[test]
fn dump_while_a_task_is_held() {
    let (pool, gate) = held_pool_labelled(Some(Label::new("held")));
    let handles: Vec<_> = (0..3).map(|i| pool.submit(move || i).unwrap()).collect();
    let dump = pool.dump();
    assert_eq!(dump.live_threads, 1);
    assert_eq!(dump.threads.len(), 1);
    assert_eq!(dump.threads[0].label, Some("held"), "{dump}");
    assert_eq!(dump.queued, 3, "{dump}");
    assert!(!dump.to_string().is_empty());
    gate.send(()).unwrap();
    let sum: i32 = handles.into_iter().map(|h| h.wait().unwrap()).sum();
    assert_eq!(sum, 3);
    pool.shutdown(Shutdown::Drain, None).unwrap();
    assert_eq!(pool.dump().live_threads, 0);
}

/// A draining shutdown runs everything accepted, including what tasks
/// spawn while it drains (local spawns onto the workers' deques, which
/// other workers steal), and leaves no thread behind.
#[test]
fn drain_shutdown_runs_what_tasks_spawn() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..4 {
        let (p, ran) = (pool.clone(), ran.clone());
        pool.spawn(move || {
            for _ in 0..3 {
                let ran = ran.clone();
                // Refused only once the pool has stopped, which a drain
                // does not do while this task runs.
                p.spawn(move || {
                    ran.fetch_add(1, SeqCst);
                })
                .unwrap();
            }
            ran.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    pool.shutdown(Shutdown::Drain, None).unwrap();
    assert_eq!(ran.load(SeqCst), 16);
    let stats = pool.stats();
    assert_eq!(stats.threads, 0);
    assert_eq!(stats.completed, 16);
}
