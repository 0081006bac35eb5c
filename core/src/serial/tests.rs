//! A serial queue's bookkeeping (turns queued and running, under its lock)
//! and the raw `Arc` each turn job carries, under Miri in `make
//! test-miri` (the racing test, `concurrent…`, with several seeds): each
//! turn's pointer read back once, every task run or cancelled once, the
//! queue freed after its last turn.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Growth;
use crate::error::TaskError;
use crate::pool::{Pool, Shutdown};

/// A `Fixed(1)` pool whose worker is held in a task until the sender is
/// used or dropped, so what is queued meanwhile waits.
fn held_pool() -> (Pool, mpsc::Sender<()>) {
    let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    pool.spawn(move || {
        started_tx.send(()).unwrap();
        let _ = gate_rx.recv();
    })
    .unwrap();
    started_rx.recv().unwrap();
    (pool, gate_tx)
}

struct Drops(Arc<AtomicUsize>);

impl Drop for Drops {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Two threads submit to one serial queue of a 2-worker pool at once:
/// each one's tasks start in its order, never two at a time, all once.
#[test]
fn concurrent_submitters_keep_their_order_one_at_a_time() {
    let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
    let queue = pool.serial();
    let log = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicUsize::new(0));
    let per = if cfg!(miri) { 3 } else { 100 };
    let submitters: Vec<_> = (0..2)
        .map(|who| {
            let (queue, log, running) = (queue.clone(), log.clone(), running.clone());
            std::thread::spawn(move || {
                (0..per)
                    .map(|i| {
                        let (log, running) = (log.clone(), running.clone());
                        queue
                            .submit(move || {
                                assert_eq!(running.fetch_add(1, SeqCst), 0, "two tasks of a serial queue at once");
                                log.lock().unwrap().push((who, i));
                                running.fetch_sub(1, SeqCst);
                            })
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for s in submitters {
        for h in s.join().unwrap() {
            h.wait().unwrap();
        }
    }
    let log = log.lock().unwrap();
    for who in 0..2 {
        let mine: Vec<_> = log.iter().filter(|(w, _)| *w == who).map(|&(_, i)| i).collect();
        assert_eq!(mine, (0..per).collect::<Vec<_>>(), "submitter {who}'s tasks in its order");
    }
    drop(log);
    assert_eq!(queue.pending(), 0);
}

/// A cancelling shutdown drops the queue's turn unrun, and the turn takes
/// every queued task with it: each closure dropped once, each handle
/// cancelled, each counted once.
#[test]
fn a_cancelled_turn_cancels_every_queued_task_once() {
    let (pool, gate) = held_pool();
    let queue = pool.serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let guard = Drops(drops.clone());
            queue.submit(move || drop(guard)).unwrap()
        })
        .collect();
    // Cancels what is queued at once; the held task is still running, so
    // the wait for the threads times out.
    assert!(pool.shutdown(Shutdown::Cancel, Some(Duration::ZERO)).is_err());
    assert_eq!(drops.load(SeqCst), 3);
    for h in handles {
        assert!(matches!(h.wait(), Err(TaskError::Cancelled)));
    }
    assert_eq!(pool.stats().cancelled, 3);
    gate.send(()).unwrap();
    pool.shutdown(Shutdown::Cancel, None).unwrap();
    assert_eq!(queue.pending(), 0);
}

/// A panicking task ends its turn like any other: the next task runs.
#[test]
fn a_panic_does_not_stop_the_queue() {
    let pool = Pool::builder().min_threads(1).growth(Growth::Fixed).build().unwrap();
    let queue = pool.serial();
    let first = queue.submit(|| -> u32 { panic!("contained") }).unwrap();
    let second = queue.submit(|| 7).unwrap();
    assert!(matches!(first.wait(), Err(TaskError::Panicked(_))));
    assert_eq!(second.wait().unwrap(), 7);
    assert_eq!(pool.stats().panicked, 1);
}

/// The queue's handle dropped with tasks pending: the turns keep the queue
/// alive, its tasks still run in order, and it is freed after the last.
#[test]
fn a_dropped_queue_still_runs_its_tasks() {
    let (pool, gate) = held_pool();
    let queue = pool.lane(2);
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..4 {
        let log = log.clone();
        queue.spawn(move || log.lock().unwrap().push(i)).unwrap();
    }
    drop(queue);
    gate.send(()).unwrap();
    pool.shutdown(Shutdown::Drain, None).unwrap();
    assert_eq!(*log.lock().unwrap(), [0, 1, 2, 3], "one worker: a lane's tasks in FIFO order");
}
