//! loom models of the sleep/wake and blocking-compensation protocols.
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p wspool --test loom`
//! (`make test-loom`). Without `--cfg loom` this file compiles to nothing.
#![cfg(loom)]
#![allow(missing_docs)]

use loom::sync::Arc;
use loom::sync::atomic::Ordering::SeqCst;
use loom::sync::atomic::{AtomicUsize, fence};
use loom::thread;

use wspool::__loom::{Compensation, Sleep, Wake};

/// A stand-in for the queues: a count of jobs. A push is followed by a
/// SeqCst fence, which is what production gets from the injector's SeqCst
/// CAS or the explicit fence in `Registry::wake_for_new_work` (loom models
/// SeqCst fences exactly but treats SeqCst accesses as acquire/release).
#[derive(Default)]
struct Queue(AtomicUsize);

impl Queue {
    fn push(&self) {
        self.0.fetch_add(1, SeqCst);
        fence(SeqCst);
    }
    fn take(&self) -> bool {
        self.0.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok()
    }
    fn has_work(&self) -> bool {
        self.0.load(SeqCst) > 0
    }
}

/// One worker loop iteration set: search, then park; returns after it has
/// taken `want` jobs. Mirrors `WorkerThread::main_loop` (minus spinning).
fn worker(sleep: &Sleep, queue: &Queue, index: usize, mut searching: bool, want: usize) {
    let mut taken = 0;
    while taken < want {
        if queue.take() {
            taken += 1;
            if searching {
                searching = false;
                if sleep.stop_searching() && queue.has_work() {
                    sleep.notify_one();
                }
            }
            continue;
        }
        let wake = sleep.park(index, searching, None, || queue.has_work());
        assert_eq!(wake, Wake::Notified);
        searching = true;
    }
    if searching && sleep.stop_searching() && queue.has_work() {
        sleep.notify_one();
    }
}

/// No lost wake-up: a submitter racing a worker that is about to park.
/// If the job could be stranded with the worker asleep, loom reports a
/// deadlock (every thread blocked).
#[test]
fn submit_races_park() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let queue = Arc::new(Queue::default());
        sleep.add_searcher();
        let (s, q) = (sleep.clone(), queue.clone());
        let w = thread::spawn(move || worker(&s, &q, 0, true, 1));
        queue.push();
        sleep.notify_one();
        w.join().unwrap();
        assert_eq!(sleep.counts(), (0, 0));
    });
}

/// Two workers, two jobs from one submitter: both jobs are taken, nobody
/// sleeps through work, and the counters return to zero searchers.
#[test]
fn two_workers_two_jobs() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let sleep = Arc::new(Sleep::new(2));
        let queue = Arc::new(Queue::default());
        sleep.add_searcher();
        sleep.add_searcher();
        let workers: Vec<_> = (0..2)
            .map(|i| {
                let (s, q) = (sleep.clone(), queue.clone());
                thread::spawn(move || worker(&s, &q, i, true, 1))
            })
            .collect();
        for _ in 0..2 {
            queue.push();
            sleep.notify_one();
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(queue.0.load(SeqCst), 0);
        assert_eq!(sleep.counts().0, 0);
    });
}

/// A waiter registered on a latch and parked in the pool's sleep system is
/// woken by `wake_worker` however the set and the park interleave.
#[test]
fn latch_set_wakes_parked_waiter() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let latch = Arc::new(AtomicUsize::new(0));
        let (s, l) = (sleep.clone(), latch.clone());
        let waiter = thread::spawn(move || {
            while l.load(SeqCst) == 0 {
                s.park(0, false, None, || l.load(SeqCst) != 0);
                // Woken (as a searcher): leave the search again.
                s.stop_searching();
            }
        });
        latch.store(1, SeqCst);
        sleep.wake_worker(0);
        waiter.join().unwrap();
        assert_eq!(sleep.counts(), (0, 0));
    });
}

/// Blocking compensation: a pool thread entering a blocking region races a
/// submitter. Whatever the interleaving, the queued job ends with somebody
/// to run it: a woken worker or a lent thread.
#[test]
fn blocking_entry_races_submit() {
    loom::model(|| {
        let comp = Arc::new(Compensation::default());
        let queue = Arc::new(Queue::default());
        let lent = Arc::new(AtomicUsize::new(0));
        let (c, q, l) = (comp.clone(), queue.clone(), lent.clone());
        // The only worker blocks; there is no sleeper to wake.
        let blocker = thread::spawn(move || {
            c.enter(
                || q.has_work(),
                || false,
                || {
                    l.fetch_add(1, SeqCst);
                },
            );
        });
        queue.push();
        comp.after_submit(false, || {
            lent.fetch_add(1, SeqCst);
        });
        blocker.join().unwrap();
        assert!(lent.load(SeqCst) >= 1, "queued work stranded behind a blocked thread");
        assert_eq!(comp.blocked(), 1);
    });
}

/// Leaving a region undoes entering it, from any thread order.
#[test]
fn blocking_enter_leave_balance() {
    loom::model(|| {
        let comp = Arc::new(Compensation::default());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let c = comp.clone();
                thread::spawn(move || {
                    c.enter(|| false, || false, || {});
                    c.leave();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(comp.blocked(), 0);
    });
}
