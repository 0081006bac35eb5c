//! loom models of the sleep/wake, waiter and blocking-compensation protocols.
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p wspool --test loom`
//! (`make test-loom`). Without `--cfg loom` this file compiles to nothing.
//! The same build runs the mutants of the real code that the models must
//! catch: `WSPOOL_LOOM_MUTANT=wspool_mutant_...` takes the fence, check or
//! compare-exchange out (`sync::mutant!` in the crate; `make test-loom`
//! says which model must fail, and how).
//!
//! What is real and what is a model: every call into `Sleep` (park,
//! park_waiter, notify_one, notify_after_local_push, notify_for_push,
//! wake_worker, notify_all, the searching counters) and `Compensation` is
//! the production code, compiled against loom's primitives through the
//! `sync` shim, and so is the global queue (`injector.rs`, 3-slot blocks
//! under loom), which `global_queue_*` below check on their own (single
//! pushes across a block end and a reused block, and a batch's run pushes,
//! `Injector::push_run`, across a block end). In the
//! sleep models the deques are models (`Deque`, `Injector` below) with
//! the real deques' orderings on the words that matter: a local push publishes
//! with a Release fence and store and no SeqCst fence (the model keeps the
//! Release store: a Release fence orders nothing more for a protocol whose
//! thieves read that very store); `is_empty` loads behind a SeqCst fence.
//! The worker loops are the control flow of `WorkerThread::main_loop` and
//! `wait.rs` reduced to the protocol steps (searching, taking, parking).
//! The workers' deques (`deque/mod.rs`, 2-slot buffers under loom) are
//! checked on their own by `deque_*`: a LIFO owner's pops racing a thief
//! down to the last value, pushes publishing to a thief that reads `back`
//! from a pop, growth under a thief holding the old buffer, memory given
//! back under a thief (also by a retiring owner that waits until none is
//! kept), and a FIFO batch steal racing the owner's pops. loom cannot run OS timeouts (a timed park is
//! modelled as "may time out at once"); `core/tests/stress.rs` and the
//! race tests in `lifecycle.rs` cover the real deques under contention.
//! The waker hand-off of an awaited task (`waker_slot.rs`) is checked by
//! `waker_*`: a poll's registration, a re-registration with another waker
//! and a future's drop, each racing the task's completion.
#![cfg(loom)]
#![allow(missing_docs)]

use loom::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use loom::sync::atomic::{AtomicBool, AtomicUsize, fence};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use wspool::__loom::{Compensation, Injector as GlobalQueue, NO_REGION, Sleep, Steal, Wake, WakerSlot, Worker};

/// A worker's own deque as `deque/mod.rs` implements the words this protocol
/// reads: the owner's push publishes `back` with Release (no SeqCst fence);
/// a thief's `is_empty` is a SeqCst fence then Acquire loads.
#[derive(Default)]
struct Deque(AtomicUsize);

impl Deque {
    fn push(&self) {
        self.0.fetch_add(1, Release);
    }
    fn take(&self) -> bool {
        self.0.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok()
    }
    fn is_empty(&self) -> bool {
        fence(SeqCst);
        self.0.load(Acquire) == 0
    }
    /// The owner's look right after its push (`Worker::holds_at_most_one`:
    /// its own `back`, and `front` with SeqCst).
    fn holds_at_most_one(&self) -> bool {
        self.0.load(SeqCst) <= 1
    }
}

/// The global injector: its push reserves a slot with a SeqCst CAS, which
/// orders it like a fence on x86 and in the C++20 model; loom models SeqCst
/// accesses as acquire/release only, so the model adds the fence the CAS
/// provides.
#[derive(Default)]
struct Injector(AtomicUsize);

impl Injector {
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

/// "The job has run", which a pool thread blocks on (an undeclared wait):
/// blocking, not spinning, so a lost wake-up shows as a loom deadlock.
#[derive(Default)]
struct Done {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn set(&self) {
        *self.flag.lock().unwrap() = true;
        self.cv.notify_all();
    }
    fn wait(&self) {
        let mut done = self.flag.lock().unwrap();
        while !*done {
            done = self.cv.wait(done).unwrap();
        }
    }
}

/// An idle worker: take work, else (as the searcher it is born) park with a
/// re-scan; stop after taking `want` jobs. `retire` lets a timed-out park
/// retire the worker (keep-alive), as `main_loop` does above `min_threads`.
fn worker(sleep: &Sleep, take: &dyn Fn() -> bool, has_work: &dyn Fn() -> bool, index: usize, want: usize) {
    worker_from(sleep, take, has_work, index, want, true, false)
}

/// [`worker`], starting searching or not, and optionally with one debounce
/// spin first (`try_start_spinning`; the spin is one look at the queue).
fn worker_from(
    sleep: &Sleep,
    take: &dyn Fn() -> bool,
    has_work: &dyn Fn() -> bool,
    index: usize,
    want: usize,
    mut searching: bool,
    mut spin: bool,
) {
    let mut taken = 0;
    while taken < want {
        // As in `main_loop`: a spin that found nothing is followed by a park.
        let mut missed = false;
        if std::mem::take(&mut spin) && sleep.try_start_spinning(2) {
            let got = take();
            // The last spinner out hands on a global push's skipped wake-up.
            if sleep.stop_spinning() && got && has_work() {
                sleep.notify_global();
            }
            if got {
                taken += 1;
                continue;
            }
            missed = true;
        }
        if !missed && take() {
            taken += 1;
            if searching {
                searching = false;
                if sleep.stop_searching() && has_work() {
                    sleep.notify_one();
                }
            }
            continue;
        }
        let wake = sleep.park(index, searching, None, |scan| scan && has_work());
        assert!(matches!(wake, Wake::Notified { .. }));
        searching = true;
    }
    if searching && sleep.stop_searching() && has_work() {
        sleep.notify_one();
    }
}

/// Issue 10 item 7: a pool thread pushes onto its own deque while another
/// worker parks, then blocks until the job has run (an undeclared wait on
/// its result). Only the other worker can run it: if the push and the
/// parker's re-scan miss each other, that worker sleeps forever and loom
/// reports the deadlock. Remove the fence in
/// `Sleep::notify_after_local_push` and this model fails.
#[test]
fn local_push_races_park() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        sleep.add_searcher();
        let (s, d, f) = (sleep.clone(), deque.clone(), done.clone());
        let idle = thread::spawn(move || {
            worker(
                &s,
                &|| {
                    let took = d.take();
                    if took {
                        f.set();
                    }
                    took
                },
                &|| !d.is_empty(),
                1,
                1,
            )
        });
        // The owner (worker 0, busy in a task): push, offer, then block.
        deque.push();
        sleep.notify_after_local_push(7);
        done.wait();
        idle.join().unwrap();
    });
}

/// A foreign submission racing a worker that is about to park.
#[test]
fn global_push_races_park() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let queue = Arc::new(Injector::default());
        sleep.add_searcher();
        let (s, q) = (sleep.clone(), queue.clone());
        let w = thread::spawn(move || worker(&s, &|| q.take(), &|| q.has_work(), 0, 1));
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
        let queue = Arc::new(Injector::default());
        sleep.add_searcher();
        sleep.add_searcher();
        let workers: Vec<_> = (0..2)
            .map(|i| {
                let (s, q) = (sleep.clone(), queue.clone());
                thread::spawn(move || worker(&s, &|| q.take(), &|| q.has_work(), i, 1))
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

/// Keep-alive: worker 0 parks with a timeout (loom: it may time out at
/// once) and, timed out, retires; worker 1 parks for good. A job submitted
/// meanwhile is still taken: the retiring worker stops searching through
/// the last-searcher rule, which re-checks the queue and hands the wake-up
/// on.
#[test]
fn timed_park_and_retirement_lose_no_job() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let sleep = Arc::new(Sleep::new(2));
        let queue = Arc::new(Injector::default());
        let taken = Arc::new(AtomicUsize::new(0));
        sleep.add_searcher();
        sleep.add_searcher();
        let (s, q, t) = (sleep.clone(), queue.clone(), taken.clone());
        let retiring = thread::spawn(move || {
            if q.take() {
                t.fetch_add(1, SeqCst);
                if s.stop_searching() && q.has_work() {
                    s.notify_one();
                }
                return;
            }
            match s.park(0, true, Some(std::time::Duration::from_millis(1)), |scan| scan && q.has_work()) {
                Wake::Notified { .. } => {
                    if q.take() {
                        t.fetch_add(1, SeqCst);
                    }
                }
                Wake::TimedOut => {}
            }
            // Retire (or finish): leave the search the way main_loop does.
            if s.stop_searching() && q.has_work() {
                s.notify_one();
            }
        });
        let (s, q, t) = (sleep.clone(), queue.clone(), taken.clone());
        let staying = thread::spawn(move || {
            let mut searching = true;
            while t.load(SeqCst) == 0 {
                if q.take() {
                    t.fetch_add(1, SeqCst);
                    break;
                }
                s.park(1, searching, None, |scan| (scan && q.has_work()) || t.load(SeqCst) != 0);
                searching = true;
            }
            let _ = searching;
        });
        queue.push();
        sleep.notify_one();
        retiring.join().unwrap();
        // The staying worker may be parked after the job was taken by the
        // retiring one: wake it so the model can end.
        while taken.load(SeqCst) == 0 {
            thread::yield_now();
        }
        sleep.notify_all();
        staying.join().unwrap();
        assert_eq!(taken.load(SeqCst), 1);
    });
}

/// Shutdown racing a worker that is about to park: the worker's re-scan
/// sees the state change or `notify_all` finds it on the list.
#[test]
fn shutdown_races_park() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let closed = Arc::new(AtomicBool::new(false));
        sleep.add_searcher();
        let (s, c) = (sleep.clone(), closed.clone());
        let w = thread::spawn(move || {
            let mut searching = true;
            while !c.load(SeqCst) {
                s.park(0, searching, None, |_| c.load(SeqCst));
                searching = true;
            }
            if searching {
                s.stop_searching();
            }
        });
        closed.store(true, SeqCst);
        sleep.notify_all();
        w.join().unwrap();
    });
}

/// A waiter parked inside a wait (`park_waiter`, registered on its latch)
/// is woken by the latch's `wake_worker` however the set and the park
/// interleave, and is never counted as idle.
#[test]
fn latch_set_wakes_parked_waiter() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let latch = Arc::new(AtomicBool::new(false));
        let (s, l) = (sleep.clone(), latch.clone());
        let waiter = thread::spawn(move || {
            while !l.load(SeqCst) {
                s.park_waiter(0, NO_REGION, None, || l.load(SeqCst));
            }
        });
        latch.store(true, SeqCst);
        sleep.wake_worker(0);
        waiter.join().unwrap();
        assert_eq!(sleep.counts(), (0, 0));
    });
}

/// A waiter of region 7 with nothing to run parks; the worker running the
/// rest of region 7 pushes a job and offers it. No idle worker exists, so
/// the offer must reach the waiter, which runs the job (else the pusher,
/// blocked on it, and the waiter deadlock).
#[test]
fn region_push_wakes_its_waiter() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        let (s, d, f) = (sleep.clone(), deque.clone(), done.clone());
        let waiter = thread::spawn(move || {
            loop {
                if d.take() {
                    f.set();
                    return;
                }
                s.park_waiter(0, 7, None, || !d.is_empty());
            }
        });
        deque.push();
        sleep.notify_after_local_push(7);
        done.wait();
        waiter.join().unwrap();
    });
}

/// Issue 30.5, first half: the push wakes an idle worker, which (a model of
/// a woken worker that finds other work first) never takes this job; the
/// waiter of region 7 must be woken too. The old rule woke a waiter only
/// when no idle worker could be woken, and this model deadlocked.
#[test]
fn region_push_wakes_its_waiter_past_an_idle_worker() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, d, f) = (sleep.clone(), deque.clone(), done.clone());
        let waiter = thread::spawn(move || {
            loop {
                if d.take() {
                    f.set();
                    return;
                }
                s.park_waiter(0, 7, None, || !d.is_empty());
            }
        });
        let (s, st) = (sleep.clone(), stop.clone());
        let idle = thread::spawn(move || {
            s.park(1, false, None, |_| st.load(SeqCst));
        });
        deque.push();
        sleep.notify_after_local_push(7);
        done.wait();
        waiter.join().unwrap();
        stop.store(true, SeqCst);
        sleep.notify_all();
        idle.join().unwrap();
    });
}

/// Issue 30.5, second half: a push onto a deque that was not empty (no
/// fence, no idle wake-up: rayon's rule) offers the job to a waiter of its
/// region parked before the push (`notify_waiter_for_push`). The model
/// starts the push once the waiter is registered: a registration at the
/// very moment of the push may miss it, as `sleep/README.md` says.
#[test]
fn non_empty_region_push_wakes_its_parked_waiter() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        let (s, d, f) = (sleep.clone(), deque.clone(), done.clone());
        let waiter = thread::spawn(move || {
            loop {
                if d.take() {
                    f.set();
                    return;
                }
                s.park_waiter(0, 7, None, || !d.is_empty());
            }
        });
        while sleep.waiters() == 0 {
            thread::yield_now();
        }
        deque.push();
        sleep.notify_waiter_for_push(7);
        done.wait();
        waiter.join().unwrap();
    });
}

/// A lost wake-up a loaded CI run found (`helping.rs`,
/// `a_parked_waiter_is_woken_for_its_regions_second_job`): a pool thread
/// pushes J1 onto its empty deque (fenced: it wakes the idle worker and the
/// parked waiter of its region), then J2. Whoever takes J1 blocks in it
/// until J2 has run. The waiter may take J1 while the idle worker, woken as
/// a searcher, looks before J2 is pushed, finds nothing and parks again.
/// J2's push must then wake it: `push_and_wake` reads "was the deque empty"
/// after the push, so a J1 taken in between counts. With the read before
/// the push (J1 still there), as it was, the push takes the no-wake path
/// and loom reports "deadlock" on this model (checked when the model was
/// written; `should_panic` cannot catch loom's deadlock report, which
/// aborts while unwinding).
#[test]
fn second_push_after_a_thief_emptied_the_deque_wakes_the_idle_worker() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        let taken = Arc::new(AtomicUsize::new(0));
        // Runs a job just taken: the first one blocks until the second ran.
        let run = {
            let (taken, done) = (taken.clone(), done.clone());
            Arc::new(move || {
                if taken.fetch_add(1, SeqCst) == 0 {
                    done.wait();
                } else {
                    done.set();
                }
            })
        };
        let (s, d, r) = (sleep.clone(), deque.clone(), run.clone());
        let waiter = thread::spawn(move || {
            loop {
                if d.take() {
                    r();
                    return;
                }
                s.park_waiter(0, 7, None, || !d.is_empty());
            }
        });
        let (s, d, r) = (sleep.clone(), deque.clone(), run.clone());
        let idle = thread::spawn(move || {
            let take = || {
                let got = d.take();
                if got {
                    r();
                }
                got
            };
            worker_from(&s, &take, &|| !d.is_empty(), 1, 1, false, false);
        });
        while sleep.waiters() == 0 {
            thread::yield_now();
        }
        deque.push();
        sleep.notify_after_local_push(7);
        deque.push();
        if deque.holds_at_most_one() {
            sleep.notify_after_local_push(7);
        } else {
            sleep.notify_waiter_for_push(7);
        }
        done.wait();
        waiter.join().unwrap();
        idle.join().unwrap();
    });
}

/// Issue 30.6: a pool task pushes a job of region 7 onto the global queue
/// (its SeqCst CAS, with the fence the model adds) and notifies
/// (`notify_for_push`, as `Registry::enqueue` does); the only other worker
/// waits in region 7 and, having nobody free beside it, looks through the
/// global queue in its park's re-check (`wait.rs`, `look_in_global_queue`,
/// reduced to a take whose job is run once the park returns). However the
/// push and the registration interleave, the waiter runs the job.
#[test]
fn global_region_push_reaches_its_waiters_look() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let queue = Arc::new(Injector::default());
        let done = Arc::new(Done::default());
        let (s, q, f) = (sleep.clone(), queue.clone(), done.clone());
        let waiter = thread::spawn(move || {
            loop {
                let found = AtomicBool::new(false);
                s.park_waiter(0, 7, None, || q.take() && !found.swap(true, SeqCst));
                if found.load(SeqCst) {
                    f.set();
                    return;
                }
            }
        });
        queue.push();
        sleep.notify_for_push(7);
        done.wait();
        waiter.join().unwrap();
    });
}

/// How a pool thread enters the compensation count: `enter` (a blocking
/// region) or `enter_wait` (parked inside a wait). Arguments: has_work,
/// wake, lend.
type Entry = fn(&Compensation, &dyn Fn() -> bool, &dyn Fn() -> bool, &dyn Fn());

/// The only worker enters the count (`entry`) while a submitter pushes a
/// job; there is no sleeper to wake. Whatever the interleaving, the queued
/// job ends with somebody to run it: a lent thread. Returns the state
/// after both sides finished.
fn entry_races_submit(entry: Entry) -> Arc<Compensation> {
    let comp = Arc::new(Compensation::default());
    let queue = Arc::new(Injector::default());
    let lent = Arc::new(AtomicUsize::new(0));
    let (c, q, l) = (comp.clone(), queue.clone(), lent.clone());
    let worker = thread::spawn(move || {
        entry(&c, &|| q.has_work(), &|| false, &|| {
            l.fetch_add(1, SeqCst);
        });
    });
    queue.push();
    comp.after_submit(false, || {
        lent.fetch_add(1, SeqCst);
    });
    worker.join().unwrap();
    assert!(lent.load(SeqCst) >= 1, "queued work stranded behind a thread that stopped running it");
    comp
}

/// Blocking compensation: a pool thread entering a blocking region races a
/// submitter.
#[test]
fn blocking_entry_races_submit() {
    loom::model(|| {
        let comp = entry_races_submit(|c, has_work, wake, lend| c.enter(has_work, wake, lend));
        assert_eq!(comp.blocked(), 1);
    });
}

/// The same handshake for a thread parking inside a wait.
#[test]
fn waiter_entry_races_submit() {
    loom::model(|| {
        let comp = entry_races_submit(|c, has_work, wake, lend| c.enter_wait(has_work, wake, lend));
        assert_eq!((comp.blocked(), comp.waiting()), (0, 1));
    });
}

/// Leaving a region undoes entering it, from any thread order.
#[test]
fn blocking_enter_leave_balance() {
    loom::model(|| {
        let comp = Arc::new(Compensation::default());
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let c = comp.clone();
                thread::spawn(move || {
                    if i == 0 {
                        c.enter(|| false, || false, || {});
                        c.leave();
                    } else {
                        c.enter_wait(|| false, || false, || {});
                        c.leave_wait();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!((comp.blocked(), comp.waiting()), (0, 0));
    });
}

/// Issue 10 item 9: only the last searcher to park scans the queues. Worker
/// 1 searches; worker 2 was refused the search (the cap) and parks without
/// a scan while worker 1 still searches. The owner pushes onto its own
/// deque and blocks until the job has run: whichever way the push, the
/// offer and the two parks interleave, someone runs it (worker 1 scans when
/// it parks as the last searcher, or the offer wakes a sleeper).
#[test]
fn only_the_last_searcher_scans_before_parking() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let sleep = Arc::new(Sleep::new(3));
        let deque = Arc::new(Deque::default());
        let done = Arc::new(Done::default());
        let stop = Arc::new(AtomicBool::new(false));
        sleep.add_searcher();
        let idle: Vec<_> = [(1, true), (2, false)]
            .into_iter()
            .map(|(index, searching)| {
                let (s, d, f, st) = (sleep.clone(), deque.clone(), done.clone(), stop.clone());
                thread::spawn(move || idle_worker(&s, &d, &f, &st, index, searching))
            })
            .collect();
        deque.push();
        sleep.notify_after_local_push(7);
        done.wait();
        stop.store(true, SeqCst);
        sleep.notify_all();
        for w in idle {
            w.join().unwrap();
        }
        assert_eq!(sleep.counts(), (0, 0));
    });
}

/// An idle worker of the model above: takes the job if it is there, else
/// parks as `main_loop` does (a searcher or not); leaves on `stop`.
fn idle_worker(sleep: &Sleep, deque: &Deque, done: &Done, stop: &AtomicBool, index: usize, mut searching: bool) {
    loop {
        if deque.take() {
            done.set();
            if searching {
                searching = false;
                if sleep.stop_searching() && !deque.is_empty() {
                    sleep.notify_one();
                }
            }
        }
        if stop.load(SeqCst) {
            break;
        }
        sleep.park(index, searching, None, |scan| stop.load(SeqCst) || (scan && !deque.is_empty()));
        searching = true;
    }
    if searching {
        sleep.stop_searching();
    }
}

/// Rule 5: a global push wakes nobody while a worker spins. Worker 0 spins
/// (one look) and worker 1 parks without searching; two foreign jobs
/// arrive, each with `notify_global`. Both are taken however the spin,
/// the parks and the pushes interleave: the spinner takes one and hands
/// the wake-up on, or gives up and parks, and its park re-scans.
#[test]
fn global_push_skips_the_wake_up_while_a_worker_spins() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let sleep = Arc::new(Sleep::new(2));
        let queue = Arc::new(Injector::default());
        let workers: Vec<_> = [(0, true), (1, false)]
            .into_iter()
            .map(|(i, spin)| {
                let (s, q) = (sleep.clone(), queue.clone());
                thread::spawn(move || worker_from(&s, &|| q.take(), &|| q.has_work(), i, 1, false, spin))
            })
            .collect();
        for _ in 0..2 {
            queue.push();
            sleep.notify_global();
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(queue.0.load(SeqCst), 0);
        assert_eq!(sleep.counts(), (0, 0));
        assert_eq!(sleep.spinners(), 0);
    });
}

/// Takes one value from the real global queue, retrying a lost race.
fn take_one(q: &GlobalQueue<u32>) -> Option<u32> {
    loop {
        match q.steal() {
            Steal::Success(v) => return Some(v),
            Steal::Empty => return None,
            Steal::Retry => thread::yield_now(),
        }
    }
}

/// A thread that takes one batch of up to 2 values from the real global
/// queue, and returns them in the order taken.
fn spawn_batch_taker(q: &Arc<GlobalQueue<u32>>) -> thread::JoinHandle<Vec<u32>> {
    let q = q.clone();
    thread::spawn(move || {
        let dest = Worker::new_fifo();
        let mut got = Vec::new();
        if let Steal::Success(v) = q.steal_batch_with_limit_and_pop(&dest, 2) {
            got.push(v);
            while let Some(v) = dest.pop() {
                got.push(v);
            }
        }
        got
    })
}

/// After the producer and the batch taker joined: each taker got the
/// producer's values (those below 20) in their order, and with what is
/// left drained, every value came out exactly once.
fn assert_taken_once(q: &GlobalQueue<u32>, mut mine: Vec<u32>, theirs: Vec<u32>, expected: [u32; 4]) {
    for got in [&mine, &theirs] {
        let order: Vec<_> = got.iter().filter(|&&v| v < 20).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "producer's values out of order: {got:?}");
    }
    while let Some(v) = take_one(q) {
        mine.push(v);
    }
    let mut all: Vec<u32> = mine.iter().chain(&theirs).copied().collect();
    all.sort_unstable();
    assert_eq!(all, expected);
}

/// The real global queue (`injector.rs`): two blocks (3 slots each under
/// loom) are filled and emptied first, so the queue now works in a reused
/// block (its slot states reset by whoever retired it); then a
/// producer pushes three values while the main thread pushes a fourth (the
/// block-end winner installs the spare as the next block, and one push
/// lands behind it) and two takers,
/// one single and one batch, race them. Every value comes out exactly once,
/// the producer's in its order, and a later push and drain still work on
/// the reused block.
#[test]
fn global_queue_keeps_each_value_once_across_a_block_end_and_reuse() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let q = Arc::new(GlobalQueue::new());
        for round in 0..2 {
            for v in 0..3 {
                q.push(round * 3 + v);
            }
            for v in 0..3 {
                assert_eq!(take_one(&q), Some(round * 3 + v));
            }
        }
        let producer = {
            let q = q.clone();
            thread::spawn(move || {
                for v in 10..13 {
                    q.push(v);
                }
            })
        };
        let batch_taker = spawn_batch_taker(&q);
        q.push(20);
        let mine: Vec<u32> = take_one(&q).into_iter().collect();
        producer.join().unwrap();
        let theirs = batch_taker.join().unwrap();
        assert_taken_once(&q, mine, theirs, [10, 11, 12, 20]);
        q.push(30);
        assert_eq!(take_one(&q), Some(30));
        assert!(q.is_empty());
    });
}

/// The real global queue's run push (`Injector::push_run`, what a batch
/// submission uses): a producer pushes four values in runs while a batch
/// taker and the main thread take. Under loom a block has 3 slots, so the
/// producer's first run stops short of the block's last slot, that slot
/// is pushed alone (installing the next block) and the rest goes into the
/// next block. Every value comes out exactly once, in the producer's order.
#[test]
fn global_queue_runs_keep_each_value_once_across_a_block_end() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let q = Arc::new(GlobalQueue::new());
        let producer = {
            let q = q.clone();
            thread::spawn(move || {
                let mut next: u32 = 10;
                while next < 14 {
                    q.push_run(14 - next as usize, || {
                        next += 1;
                        next - 1
                    });
                }
            })
        };
        let batch_taker = spawn_batch_taker(&q);
        let mine: Vec<u32> = take_one(&q).into_iter().collect();
        producer.join().unwrap();
        let theirs = batch_taker.join().unwrap();
        assert_taken_once(&q, mine, theirs, [10, 11, 12, 13]);
        assert!(q.is_empty());
    });
}

/// Every value taken once, whoever took it.
fn assert_each_once(mut got: Vec<usize>, n: usize) {
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "values lost or taken twice");
}

fn steal_all(s: &wspool::__loom::Stealer<usize>) -> Vec<usize> {
    let mut got = Vec::new();
    loop {
        match s.steal() {
            Steal::Success(v) => got.push(v),
            Steal::Empty => return got,
            Steal::Retry => thread::yield_now(),
        }
    }
}

/// The owner pops while a thief steals, down to the last value: the SeqCst
/// fences in `pop` and `steal` keep the owner from taking, without an RMW,
/// a value the thief has claimed (remove `pop`'s fence and this fails), and
/// the CAS on `front` gives the last value to exactly one of them.
#[test]
fn deque_pop_races_steal() {
    loom::model(|| {
        let owner = Worker::new_lifo();
        owner.push(0);
        owner.push(1);
        let stealer = owner.stealer();
        let thief = thread::spawn(move || steal_all(&stealer));
        let mut got: Vec<usize> = std::iter::from_fn(|| owner.pop()).collect();
        got.extend(thief.join().unwrap());
        assert_each_once(got, 2);
    });
}

/// The owner grows its full buffer (2 slots under loom) while a thief may
/// hold the old one: the old buffer is retired, not freed, and every value
/// is still taken once, from either buffer.
#[test]
fn deque_growth_races_steal() {
    loom::model(|| {
        let owner = Worker::new_lifo();
        owner.push(0);
        owner.push(1);
        let stealer = owner.stealer();
        let thief = thread::spawn(move || match stealer.steal() {
            Steal::Success(v) => vec![v],
            _ => vec![],
        });
        owner.push(2);
        let mut got: Vec<usize> = std::iter::from_fn(|| owner.pop()).collect();
        got.extend(thief.join().unwrap());
        assert_each_once(got, 3);
    });
}

/// A thief moves a batch out of a FIFO inbox (one CAS for the run) while
/// its owner pops with `fetch_add`: no value is taken twice or lost.
#[test]
fn deque_fifo_batch_steal_races_pop() {
    loom::model(|| {
        let owner = Worker::new_fifo();
        for v in 0..3 {
            owner.push(v);
        }
        let stealer = owner.stealer();
        let thief = thread::spawn(move || {
            let own = Worker::new_fifo();
            let mut got = Vec::new();
            if let Steal::Success(v) = stealer.steal_batch_and_pop(&own) {
                got.push(v);
            }
            got.extend(std::iter::from_fn(|| own.pop()));
            got
        });
        let mut got: Vec<usize> = owner.pop().into_iter().collect();
        got.extend(thief.join().unwrap());
        got.extend(std::iter::from_fn(|| owner.pop()));
        assert_each_once(got, 3);
    });
}

/// Two pushes race a thief, and a pop stores `back` between them: a thief
/// that loads `back` from the pop's Relaxed store goes on to read the first
/// slot. The push's Release fence orders that slot's write before the read
/// (fence-to-acquire synchronisation through any later store of the owner);
/// a Release *store* would not, since the pop's store does not continue its
/// release sequence. `make test-loom` runs push with that store and no
/// fence (`WSPOOL_LOOM_MUTANT=wspool_mutant_push_release_store`) and requires this model
/// to report the race ("Causality violation"). Two values, 2-slot buffer:
/// no wrap-around, no growth.
#[test]
fn deque_push_pop_race_steal() {
    loom::model(|| {
        let owner = Worker::new_lifo();
        let stealer = owner.stealer();
        let thief = thread::spawn(move || match stealer.steal() {
            Steal::Success(v) => vec![v],
            _ => vec![],
        });
        owner.push(0);
        owner.push(1);
        let mut got: Vec<usize> = owner.pop().into_iter().collect();
        got.extend(thief.join().unwrap());
        got.extend(std::iter::from_fn(|| owner.pop()));
        assert_each_once(got, 2);
    });
}

/// The owner drains a grown deque while a thief steals, then gives its
/// memory back (`release_memory`): the buffers are freed only when no
/// thief can still read them (a "free" under loom is a write that every
/// slot read is checked against), and every value is taken once. Without
/// the check of the thieves' count (`WSPOOL_LOOM_MUTANT=wspool_mutant_no_stealing_check`)
/// `make test-loom` requires this model to report the use after free.
#[test]
fn deque_release_memory_races_steal() {
    loom::model(|| {
        let owner = Worker::new_lifo();
        for v in 0..3 {
            owner.push(v);
        }
        let stealer = owner.stealer();
        let thief = thread::spawn(move || match stealer.steal() {
            Steal::Success(v) => vec![v],
            _ => vec![],
        });
        let mut got: Vec<usize> = std::iter::from_fn(|| owner.pop()).collect();
        owner.release_memory();
        got.extend(thief.join().unwrap());
        owner.push(3);
        got.extend(std::iter::from_fn(|| owner.pop()));
        assert_each_once(got, 4);
    });
}

/// A retiring worker hands its queues to its slot with only the minimal
/// buffer (`Registry::release_slot`): `release_memory_waiting` returns
/// with nothing retired in every interleaving with a thief that may still
/// be reading the grown buffer, which the thief never reads once freed,
/// and every value is taken once.
#[test]
fn deque_release_memory_waiting_races_steal() {
    loom::model(|| {
        let owner = Worker::new_lifo();
        let idle = owner.kept_capacity();
        for v in 0..3 {
            owner.push(v);
        }
        let stealer = owner.stealer();
        let thief = thread::spawn(move || match stealer.steal() {
            Steal::Success(v) => vec![v],
            _ => vec![],
        });
        let mut got: Vec<usize> = std::iter::from_fn(|| owner.pop()).collect();
        owner.release_memory_waiting();
        assert_eq!(owner.kept_capacity(), idle, "a grown or retired buffer outlived the wait");
        got.extend(thief.join().unwrap());
        assert_each_once(got, 3);
    });
}

/// A waker for the `waker_*` models that counts its wakes, and the wakers
/// made, cloned and dropped (a leak or a double drop shows as an
/// imbalance). The counts are loom atomics read after the join.
#[derive(Default)]
struct WakerCounts {
    made: AtomicUsize,
    clones: AtomicUsize,
    drops: AtomicUsize,
    wakes: AtomicUsize,
}

static COUNTING_VTABLE: std::task::RawWakerVTable =
    std::task::RawWakerVTable::new(counting_clone, counting_wake, counting_wake_by_ref, counting_drop);

unsafe fn counting_clone(data: *const ()) -> std::task::RawWaker {
    // SAFETY: `data` is a `std::sync::Arc<WakerCounts>` reference owned by
    // the RawWaker being cloned (see `WakerCounts::waker`).
    unsafe {
        (*(data as *const WakerCounts)).clones.fetch_add(1, SeqCst);
        std::sync::Arc::increment_strong_count(data as *const WakerCounts);
    }
    std::task::RawWaker::new(data, &COUNTING_VTABLE)
}

unsafe fn counting_wake(data: *const ()) {
    // SAFETY: as in `counting_clone`; waking by value drops the waker.
    unsafe {
        counting_wake_by_ref(data);
        counting_drop(data);
    }
}

unsafe fn counting_wake_by_ref(data: *const ()) {
    // SAFETY: as in `counting_clone`.
    unsafe { (*(data as *const WakerCounts)).wakes.fetch_add(1, SeqCst) };
}

unsafe fn counting_drop(data: *const ()) {
    // SAFETY: as in `counting_clone`; this RawWaker's reference goes back.
    let counts = unsafe { std::sync::Arc::from_raw(data as *const WakerCounts) };
    counts.drops.fetch_add(1, SeqCst);
}

impl WakerCounts {
    fn waker(self: &std::sync::Arc<Self>) -> std::task::Waker {
        self.made.fetch_add(1, SeqCst);
        let data = std::sync::Arc::into_raw(self.clone()) as *const ();
        // SAFETY: the vtable's functions treat `data` as the Arc reference
        // handed over here.
        unsafe { std::task::Waker::from_raw(std::task::RawWaker::new(data, &COUNTING_VTABLE)) }
    }
    fn wakes(&self) -> usize {
        self.wakes.load(SeqCst)
    }
    fn assert_balanced(&self) {
        let (made, clones, drops) = (self.made.load(SeqCst), self.clones.load(SeqCst), self.drops.load(SeqCst));
        assert_eq!(
            made + clones,
            drops,
            "wakers leaked or dropped twice: {made} made, {clones} cloned, {drops} dropped"
        );
    }
}

/// The task's side: writes its result (a loom cell, so that a waiter's
/// read not ordered after the write is reported), then completes.
fn spawn_completer(slot: &Arc<WakerSlot>, result: &Arc<loom::cell::UnsafeCell<u32>>) -> thread::JoinHandle<()> {
    let (slot, result) = (slot.clone(), result.clone());
    thread::spawn(move || {
        // SAFETY: the task's one write, before `complete`.
        result.with_mut(|r| unsafe { *r = 42 });
        slot.complete();
    })
}

/// A waiter that sees the task complete reads its result.
fn read_result(result: &loom::cell::UnsafeCell<u32>) -> u32 {
    // SAFETY: read only after the slot said complete (loom checks that
    // this read is ordered after the write).
    result.with(|r| unsafe { *r })
}

/// A poll's registration races the task's completion. Either the poll
/// returns Ready (it saw the completion, and reads the result) and nobody
/// is woken, or it returns Pending and the completion wakes its waker
/// exactly once. `make test-loom` runs the slot with its closing
/// compare-exchange turned into a plain store
/// (`WSPOOL_LOOM_MUTANT=wspool_mutant_waker_store_close`) and requires this model to
/// report the lost wake-up.
#[test]
fn waker_register_races_complete() {
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let result = Arc::new(loom::cell::UnsafeCell::new(0u32));
        let counts = std::sync::Arc::new(WakerCounts::default());
        let completer = spawn_completer(&slot, &result);
        let waker = counts.waker();
        let ready = slot.register(&waker);
        if ready {
            assert_eq!(read_result(&result), 42);
        }
        completer.join().unwrap();
        if ready {
            assert_eq!(counts.wakes(), 0, "a poll that returned Ready was also woken");
        } else {
            assert_eq!(counts.wakes(), 1, "lost wake-up: the poll returned Pending and the completion did not wake it");
            assert!(slot.register(&waker), "woken: the next poll is ready");
            assert_eq!(read_result(&result), 42);
        }
        drop((waker, slot));
        counts.assert_balanced();
    });
}

/// A first poll stored one waker; a second poll, with a waker of another
/// task, races the completion. Only the waker stored last may be woken:
/// a pending second poll is woken exactly once through the new waker and
/// never through the replaced one; a ready second poll was woken at most
/// once, through the first waker, by a completion that came before it.
#[test]
fn waker_reregister_races_complete() {
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let result = Arc::new(loom::cell::UnsafeCell::new(0u32));
        let (first, second) =
            (std::sync::Arc::new(WakerCounts::default()), std::sync::Arc::new(WakerCounts::default()));
        let w1 = first.waker();
        assert!(!slot.register(&w1));
        let completer = spawn_completer(&slot, &result);
        let w2 = second.waker();
        let ready = slot.register(&w2);
        if ready {
            assert_eq!(read_result(&result), 42);
        }
        completer.join().unwrap();
        if ready {
            assert_eq!(second.wakes(), 0, "a poll that returned Ready was also woken");
            assert!(first.wakes() <= 1, "the first waker was woken twice");
        } else {
            assert_eq!(first.wakes(), 0, "the replaced waker was woken");
            assert_eq!(second.wakes(), 1, "lost wake-up: the second poll returned Pending and was not woken");
        }
        drop((w1, w2, slot));
        first.assert_balanced();
        second.assert_balanced();
    });
}

/// The future is dropped (its waker taken back) while the task completes:
/// the cell is never touched by both (loom reports concurrent access),
/// the waker is woken at most once, and every clone is dropped once.
#[test]
fn waker_drop_races_complete() {
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let result = Arc::new(loom::cell::UnsafeCell::new(0u32));
        let counts = std::sync::Arc::new(WakerCounts::default());
        let waker = counts.waker();
        assert!(!slot.register(&waker));
        drop(waker);
        let completer = spawn_completer(&slot, &result);
        slot.unregister();
        completer.join().unwrap();
        assert!(counts.wakes() <= 1, "woken twice");
        assert!(slot.is_complete());
        drop(slot);
        counts.assert_balanced();
    });
}
