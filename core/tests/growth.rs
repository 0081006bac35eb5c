//! Growth, blocking compensation, rejection and starvation immunity
#![allow(missing_docs)]
//! (the seeds' failure modes). These tests share the CPU-time signal of the
//! whole process, so they run one at a time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{Gate, Outcomes, Tracked, eventually};
use wspool::{Growth, Pool, Reject, SubmitErrorKind};

const LONG: Duration = Duration::from_secs(30);

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Seed 000: a foreign producer feeds the global queue 200 tasks/s for 3 s,
/// each blocking 20 ms without saying so, on a 2-thread pool. .NET's pool
/// never recovers from this; wspool's monitor must act. How fast it absorbs
/// the backlog, and its peak, depend on the machine's load: they are
/// checked on a simulated pool (`growth::sim::tests::seed_000_*`) and
/// printed here for the record.
#[test]
fn seed_000_steady_stream_of_undeclared_blocking_recovers() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    for i in 0..600u32 {
        // 200 per second, on schedule even if a sleep overshoots.
        let due = start + Duration::from_millis(5) * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let d = done.clone();
        pool.spawn_global(move || {
            std::thread::sleep(Duration::from_millis(20));
            d.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    let producer_end = Instant::now();
    eventually(LONG, "all 600 tasks done", || done.load(SeqCst) == 600);
    let tail = producer_end.elapsed();
    let s = pool.stats();
    println!("seed 000 stream: all done {tail:?} after the producer; peak {} threads; {s:?}", s.peak_threads);
    // Two threads alone would need 6 s: the queue grows while every worker
    // sleeps, which the hint reads as blocked whatever the machine's load.
    assert!(s.starvation_injections > 0, "the monitor had to act: {s:?}");
}

/// Seed 000's exact shape: each task submits an inner 50 ms blocking task
/// and waits on its handle (sync over async), 40 per second for 2 s.
#[test]
fn seed_000_sync_over_async_completes() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    for i in 0..80u32 {
        let due = start + Duration::from_millis(25) * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (p, d) = (pool.clone(), done.clone());
        pool.spawn_global(move || {
            let inner = p.submit(|| std::thread::sleep(Duration::from_millis(50))).unwrap();
            inner.wait().unwrap();
            d.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    eventually(LONG, "all 80 outer tasks done", || done.load(SeqCst) == 80);
    println!("seed 000 sync-over-async: {:?}", pool.stats());
}

/// Seed 003, scale-first: min 20, max 100, queue 50, tasks blocked on a gate.
#[test]
fn seed_003_scale_first_grows_to_max_then_queues_then_rejects() {
    let _serial = serial();
    let pool =
        Pool::builder().min_threads(20).max_threads(100).queue_capacity(50).growth(Growth::ScaleFirst).build().unwrap();
    let gate = Arc::new(Gate::default());
    let _open = common::OpenOnDrop(gate.clone());
    for _ in 0..150 {
        let g = gate.clone();
        pool.spawn(move || g.wait()).unwrap();
    }
    eventually(LONG, "100 threads with 50 queued", || {
        let s = pool.stats();
        s.threads == 100 && s.queued == 50
    });
    let g = gate.clone();
    let err = pool.spawn(move || g.wait()).unwrap_err();
    assert_eq!(err.kind(), SubmitErrorKind::Rejected);
    assert_eq!(pool.stats().rejected, 1);
    assert_eq!(pool.stats().starvation_injections, 0, "scale-first growth is not starvation");
    gate.open();
}

/// Seed 003, Java's queue-first: grow only when the queue is full.
#[test]
fn seed_003_queue_first_queues_then_grows() {
    let _serial = serial();
    let pool =
        Pool::builder().min_threads(20).max_threads(100).queue_capacity(50).growth(Growth::QueueFirst).build().unwrap();
    let gate = Arc::new(Gate::default());
    let _open = common::OpenOnDrop(gate.clone());
    let running = Arc::new(AtomicUsize::new(0));
    let submit = |n: usize| {
        for _ in 0..n {
            let (g, r) = (gate.clone(), running.clone());
            pool.spawn(move || {
                r.fetch_add(1, SeqCst);
                g.wait()
            })
            .unwrap();
        }
    };
    submit(20);
    eventually(LONG, "20 running", || running.load(SeqCst) == 20);
    submit(50);
    let s = pool.stats();
    assert_eq!((s.threads, s.queued), (20, 50));
    submit(1);
    eventually(LONG, "the 71st grows the pool", || pool.stats().threads == 21);
    eventually(LONG, "the new thread takes a task", || running.load(SeqCst) == 21);
    gate.open();
}

/// Declared blocking lends threads at once; afterwards the extras retire
/// (after keep-alive: the time it took is printed, and measured by `make
/// bench`'s monitor bench, not asserted).
#[test]
fn blocking_regions_lend_threads_which_retire_after_keep_alive() {
    let _serial = serial();
    let keep_alive = Duration::from_millis(200);
    let interval = Duration::from_millis(10);
    let pool = Pool::builder().min_threads(2).keep_alive(keep_alive).monitor_interval(interval).build().unwrap();
    let g = pool.group();
    for _ in 0..200 {
        g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(10)))).unwrap();
    }
    g.wait().unwrap();
    let burst_end = Instant::now();
    let s = pool.stats();
    assert!(s.peak_threads > 2, "blocking lent threads: {s:?}");
    assert_eq!(s.blocked_threads, 0);
    eventually(LONG, "back to min_threads", || pool.stats().threads == 2);
    let back = burst_end.elapsed();
    println!("200 x 10 ms blocking: peak {} threads, back to 2 threads {back:?} after the burst", s.peak_threads);
    // `threads` drops when a lent thread decides to retire; `threads_retired`
    // counts it once it has left its slot, later (on a loaded machine, much
    // later): wait for that too.
    eventually(LONG, "every extra thread counted retired", || {
        pool.stats().threads_retired >= u64::from(s.peak_threads) - 2
    });
}

/// Blocking off the pool is a no-op, and unbalanced ends are ignored.
#[test]
fn blocking_off_pool_and_unbalanced_end() {
    assert_eq!(wspool::blocking(|| 7), 7);
    wspool::blocking_end();
    let pool = Pool::builder().min_threads(2).build().unwrap();
    pool.submit(|| {
        wspool::blocking_end();
        wspool::blocking_begin();
        wspool::blocking_begin();
        wspool::blocking_end();
        wspool::blocking_end();
    })
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(pool.stats().blocked_threads, 0);
}

/// Fixed pools never grow, whatever blocks.
#[test]
fn fixed_never_grows() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
    let g = pool.group();
    for _ in 0..20 {
        g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(5)))).unwrap();
    }
    g.wait().unwrap();
    assert_eq!(pool.stats().peak_threads, 2);
}

/// `Compensate` lends a thread to a declared blocking region, and the lent
/// thread retires as soon as the region ended and it is between tasks, not
/// after `keep_alive` (an hour here): the watchdog fails the test if it stays.
#[test]
fn compensate_lends_for_a_region_and_the_lent_thread_retires_when_it_ends() {
    let _serial = serial();
    common::watchdog(LONG, "compensate lend and retire", || {
        let pool = Pool::builder()
            .min_threads(1)
            .growth(Growth::Compensate)
            .keep_alive(Duration::from_secs(3600))
            .build()
            .unwrap();
        let gate = Arc::new(Gate::default());
        let _open = common::OpenOnDrop(gate.clone());
        let g = gate.clone();
        let blocked = pool.submit(move || wspool::blocking(|| g.wait())).unwrap();
        // Runs only on a lent thread: the pool's one thread is in the region.
        let other = pool.submit(|| 7).unwrap();
        assert_eq!(other.wait().unwrap(), 7);
        assert!(pool.stats().peak_threads >= 2, "a thread was lent: {:?}", pool.stats());
        gate.open();
        blocked.wait().unwrap();
        // `threads` drops when the lent thread decides to retire;
        // `threads_retired` counts it once it has left its slot, a moment
        // later: wait for both.
        let mut last = pool.stats();
        while last.threads != 1 || last.threads_retired == 0 {
            std::thread::sleep(Duration::from_millis(1));
            last = pool.stats();
        }
        assert_eq!(last.starvation_injections, 0, "{last:?}");
    });
}

/// `Compensate` never adds threads for throughput: tasks that block without
/// declaring it keep the pool at `min_threads` (no starvation monitor).
#[test]
fn compensate_never_grows_for_undeclared_blocking() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).growth(Growth::Compensate).build().unwrap();
    let g = pool.group();
    for _ in 0..40 {
        g.spawn(|| std::thread::sleep(Duration::from_millis(5))).unwrap();
    }
    g.wait().unwrap();
    let s = pool.stats();
    assert_eq!((s.peak_threads, s.starvation_injections), (2, 0), "{s:?}");
}

fn gated_pool(reject: Reject) -> (Pool, common::OpenOnDrop) {
    let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).queue_capacity(4).reject(reject).build().unwrap();
    let gate = Arc::new(Gate::default());
    let running = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (g, r) = (gate.clone(), running.clone());
        pool.spawn(move || {
            r.fetch_add(1, SeqCst);
            g.wait()
        })
        .unwrap();
    }
    eventually(LONG, "workers busy", || running.load(SeqCst) == 2);
    (pool, common::OpenOnDrop(gate))
}

#[test]
fn reject_abort_hands_the_task_back() {
    let (pool, gate) = gated_pool(Reject::Abort);
    let outcomes = Arc::new(Outcomes::default());
    for _ in 0..4 {
        let t = Tracked::new(&outcomes);
        pool.spawn(move || t.run()).unwrap();
    }
    let t = Tracked::new(&outcomes);
    let err = pool.spawn(move || t.run()).unwrap_err();
    assert_eq!(err.kind(), SubmitErrorKind::Rejected);
    (err.into_task())();
    assert_eq!(outcomes.ran.load(SeqCst), 1, "the caller ran its own task");
    gate.0.open();
    eventually(LONG, "queued tasks ran", || outcomes.ran.load(SeqCst) == 5);
    assert_eq!(outcomes.dropped_unrun.load(SeqCst), 0);
    assert_eq!(pool.stats().rejected, 1);
}

#[test]
fn reject_caller_runs_runs_on_the_submitter() {
    let (pool, gate) = gated_pool(Reject::CallerRuns);
    for _ in 0..4 {
        pool.spawn(|| ()).unwrap();
    }
    let me = std::thread::current().id();
    let h = pool.submit(move || std::thread::current().id() == me).unwrap();
    assert!(h.is_finished(), "ran synchronously");
    assert!(h.wait().unwrap());
    gate.0.open();
}

#[test]
fn reject_block_waits_for_room_and_block_for_times_out() {
    let (pool, gate) = gated_pool(Reject::Block);
    for _ in 0..4 {
        pool.spawn(|| ()).unwrap();
    }
    let g2 = gate.0.clone();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        g2.open();
    });
    pool.submit(|| 1).unwrap().wait().unwrap();
    opener.join().unwrap();

    let (pool, gate) = gated_pool(Reject::BlockFor(Duration::from_millis(20)));
    for _ in 0..4 {
        pool.spawn(|| ()).unwrap();
    }
    assert_eq!(pool.spawn(|| ()).unwrap_err().kind(), SubmitErrorKind::Rejected);
    gate.0.open();
}

#[test]
fn reject_discard_oldest_cancels_the_evicted_task() {
    let (pool, gate) = gated_pool(Reject::DiscardOldest);
    let outcomes = Arc::new(Outcomes::default());
    for _ in 0..6 {
        let t = Tracked::new(&outcomes);
        pool.spawn(move || t.run()).unwrap();
    }
    assert_eq!(outcomes.dropped_unrun.load(SeqCst), 2, "two oldest evicted");
    gate.0.open();
    eventually(LONG, "the rest ran", || outcomes.ran.load(SeqCst) == 4);
    assert_eq!(pool.stats().cancelled, 2);
}

/// Queue delay is measured (sampled) and reported.
#[test]
fn queue_delay_is_reported() {
    let pool2 = Pool::builder().min_threads(2).build().unwrap();
    let g = pool2.group();
    for _ in 0..10_000 {
        g.spawn(|| ()).unwrap();
    }
    g.wait().unwrap();
    let s = pool2.stats();
    assert!(s.queue_delay_max_ns > 0, "{s:?}");
    assert!(s.queue_delay_p50_ns <= s.queue_delay_p99_ns);
}
