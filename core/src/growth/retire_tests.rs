//! What a retiring thread leaves in its slot (issue 38.3): only the idle
//! rings, whatever way it left; and what a parked one keeps once a burst
//! is over. Measured as the slots its queues' buffers
//! hold (`Worker::kept_capacity`), not as resident memory, which the
//! allocator and the schedule blur.

use std::sync::mpsc;

use crate::config::Growth;
use crate::deque::Worker;
use crate::job::JobRef;
use crate::pool::Pool;
use crate::sync::lock;

/// More local spawns than `BURST_CAP` (16 Ki), so the deque grows past the
/// size a draining worker gives back at once.
const BURST: usize = 20_000;

/// A `Compensate` pool of one thread, A, blocks in a declared region, so
/// the pool lends a thread, B, for the next submission. On B a task
/// spawns a burst of local jobs; the last of them (spawned first, popped
/// last) lets A out of its region and waits until it is out, so B, now
/// surplus with nothing queued, retires as soon as that job returns,
/// without parking first. A stays inside a task until B has gone, so B is
/// the thread that retires. Before the fix B's slot kept the deque's
/// 32 Ki-slot ring and every ring it had outgrown (65,472 slots, 3 MiB).
#[test]
fn a_lent_thread_retiring_after_a_burst_leaves_only_idle_rings() {
    let pool = Pool::builder().min_threads(1).max_threads(2).growth(Growth::Compensate).build().unwrap();
    let (in_region_tx, in_region_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (out_tx, out_rx) = mpsc::channel();
    let (b_gone_tx, b_gone_rx) = mpsc::channel::<()>();
    pool.spawn(move || {
        crate::blocking(|| {
            in_region_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        out_tx.send(()).unwrap();
        // A dropped sender (a failed assertion) lets A go too.
        let _ = b_gone_rx.recv();
    })
    .unwrap();
    in_region_rx.recv().unwrap();

    let (b_index_tx, b_index_rx) = mpsc::channel();
    let p = pool.clone();
    // Submitted while A blocks and nobody is idle: this lends B.
    pool.spawn(move || {
        p.spawn(move || {
            release_tx.send(()).unwrap();
            out_rx.recv().unwrap();
            b_index_tx.send(crate::current_index().expect("on a pool thread")).unwrap();
        })
        .unwrap();
        for _ in 0..BURST {
            p.spawn(|| {}).unwrap();
        }
    })
    .unwrap();
    let b = b_index_rx.recv().unwrap();

    let registry = pool.registry().clone();
    // The handle was stored when the spawn above returned; B's thread ends
    // after it handed its queues back (`release_slot`).
    let handle = lock(&registry.slots[b].join).take().expect("B's join handle");
    handle.join().unwrap();
    let kept = {
        let queues = lock(&registry.slots[b].queues);
        let queues = queues.as_ref().expect("B's queues are back in its slot");
        (queues.deque.kept_capacity(), queues.inbox.kept_capacity())
    };
    drop(b_gone_tx);
    let idle = Worker::<JobRef>::new_lifo().kept_capacity();
    assert_eq!(kept, (idle, idle), "B's slot keeps (deque, inbox) slots; idle rings hold {idle} each");
    assert_eq!(pool.stats().threads_retired, 1, "B retired; A stayed");
}

/// A parked worker gives back the rings a burst grew once it has been idle
/// for the linger (`QUEUE_MEMORY_LINGER`), without a retirement or a new
/// task to prompt it: on a one-thread pool, a task spawns 5,000 local jobs
/// (the deque grows to 8 Ki slots, below the size given back at once), the
/// worker drains them and parks keeping the grown ring, and later, still
/// parked, keeps only the idle rings. No time bound is asserted: the test
/// waits for each state, with a two-minute watchdog.
#[test]
fn a_parked_worker_gives_a_bursts_rings_back_after_the_linger() {
    const JOBS: usize = 5_000;
    let pool = Pool::builder().min_threads(1).max_threads(1).growth(Growth::Fixed).build().unwrap();
    let registry = pool.registry().clone();
    let idle = 2 * Worker::<JobRef>::new_lifo().kept_capacity();
    let kept = || registry.slots[0].counters.kept_queue_slots.load(std::sync::atomic::Ordering::Relaxed);
    let (done_tx, done_rx) = mpsc::channel();
    let p = pool.clone();
    pool.spawn(move || {
        for _ in 0..JOBS {
            p.spawn(|| {}).unwrap();
        }
        done_tx.send(()).unwrap();
    })
    .unwrap();
    done_rx.recv().unwrap();
    let peak = || registry.slots[0].counters.kept_queue_slots_peak.load(std::sync::atomic::Ordering::Relaxed);
    // A watchdog, not a timing claim: the linger is 100 ms.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !(peak() >= JOBS && kept() == idle) {
        assert!(
            std::time::Instant::now() < give_up,
            "the parked worker still keeps {} slots (peak {}, idle rings {idle})",
            kept(),
            peak()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(peak() >= JOBS, "the burst grew the deque to hold its {JOBS} jobs");
    assert_eq!(kept(), idle, "after the linger the parked worker keeps only the idle rings");
}
