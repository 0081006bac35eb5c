//! `make demo`: the pool working, and what its stats say about it.
//!
//! Every claim printed is computed from the stats printed beside it, so the
//! text cannot drift from what the pool did on this run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use wspool::{Pool, Shutdown, Stats};

const MIN_THREADS: usize = 2;
const KEEP_ALIVE: Duration = Duration::from_millis(300);

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = wspool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// One row per step: the pool's state at the end of the step, and what its
/// counters did during it.
struct Table {
    last: Stats,
}

impl Table {
    fn new(pool: &Pool) -> Table {
        println!(
            "\n  {:<22} {:>7} {:>5} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>10}",
            "after step",
            "threads",
            "peak",
            "started",
            "injected",
            "tasks run",
            "own deque",
            "global q",
            "stolen",
            "spin hit/miss"
        );
        Table { last: pool.stats() }
    }

    /// Prints the row and returns the step's deltas, for the sentence under it.
    fn row(&mut self, step: &str, pool: &Pool) -> Stats {
        // A waiter can return a moment before the worker counts the task
        // as completed; let the counters catch up so the row adds up.
        let t = Instant::now();
        let mut s = pool.stats();
        while s.completed < s.submitted && t.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
            s = pool.stats();
        }
        let d = Stats {
            completed: s.completed - self.last.completed,
            local_pops: s.local_pops - self.last.local_pops,
            global_pops: s.global_pops - self.last.global_pops,
            steals: s.steals - self.last.steals,
            spin_hits: s.spin_hits - self.last.spin_hits,
            spin_misses: s.spin_misses - self.last.spin_misses,
            threads_started: s.threads_started - self.last.threads_started,
            threads_retired: s.threads_retired - self.last.threads_retired,
            starvation_injections: s.starvation_injections - self.last.starvation_injections,
            ..s.clone()
        };
        println!(
            "  {:<22} {:>7} {:>5} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>10}",
            step,
            s.threads,
            s.peak_threads,
            d.threads_started,
            d.starvation_injections,
            d.completed,
            d.local_pops,
            d.global_pops,
            d.steals,
            format!("{}/{}", d.spin_hits, d.spin_misses),
        );
        self.last = s;
        d
    }
}

/// A million-task flood, measured like the benchmark's W1: the closure
/// captures nothing (a static countdown), and the last task signals.
fn flood(pool: &Pool, n: u64) -> f64 {
    static LEFT: AtomicU64 = AtomicU64::new(0);
    static DONE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
    *DONE.0.lock().unwrap() = false;
    LEFT.store(n, Ordering::Relaxed);
    let t = Instant::now();
    for _ in 0..n {
        pool.spawn(|| {
            if LEFT.fetch_sub(1, Ordering::AcqRel) == 1 {
                *DONE.0.lock().unwrap() = true;
                DONE.1.notify_all();
            }
        })
        .expect("spawn");
    }
    let mut done = DONE.0.lock().unwrap();
    while !*done {
        done = DONE.1.wait(done).unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64() / 1e6
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Waits (at most 3 s) until the threads lent or injected by a step have
/// retired, so the next step starts from `min_threads` again.
fn settle(pool: &Pool) {
    let t = Instant::now();
    while pool.stats().threads as usize > MIN_THREADS && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let pool = Pool::builder().name("demo").min_threads(MIN_THREADS).keep_alive(KEEP_ALIVE).build().expect("pool");
    println!(
        "== Rust demo (core/examples/demo.rs): a pool of {} workers (grows up to {}; extra threads retire after {} ms idle)",
        pool.min_threads(),
        pool.max_threads(),
        KEEP_ALIVE.as_millis()
    );
    let mut table = Table::new(&pool);

    // 1. Flood: one foreign thread submits tiny tasks, three rounds.
    const N: u64 = 1_000_000;
    let rates: Vec<f64> = (0..3).map(|_| flood(&pool, N)).collect();
    let d = table.row("1. flood 3 x 1M tasks", &pool);
    let flood_text = format!(
        "  1. 1,000,000 tiny tasks from one outside thread, three rounds: {:.1} / {:.1} / {:.1} M tasks/s \
         ({} tasks run).\n     The first round starts cold (threads asleep, deques growing). docs/benchmarks.md's \
         22 M/s is the median of 9 rounds\n     after a warm-up on a quiet machine (`make bench`); a machine busy \
         compiling reads lower.",
        rates[0], rates[1], rates[2], d.completed
    );

    // 2. Fork-join: fib(25) with join at every level, no heap allocation.
    let t = Instant::now();
    let v = pool.submit(|| fib(25)).expect("submit").wait().expect("fib");
    let fib_ms = ms(t);
    let d = table.row("2. fork-join fib(25)", &pool);
    let fib_text = format!(
        "  2. fib(25) = {v} with `join` at every level in {fib_ms:.1} ms, {} steals: the second worker took \
         branches forked by the first; the rest ran where they were forked.",
        d.steals
    );

    // 3. Sync-over-async: tasks block on inner tasks. The waiter runs other
    //    work (here: usually the very task it waits for) instead of sleeping.
    let t = Instant::now();
    let handles: Vec<_> = (0..200u64)
        .map(|i| {
            let p = pool.clone();
            pool.submit(move || p.submit(move || i * 2).expect("inner").wait().expect("inner result")).expect("outer")
        })
        .collect();
    let sum: u64 = handles.into_iter().map(|h| h.wait().expect("outer result")).sum();
    let nested_ms = ms(t);
    let d = table.row("3. nested waits", &pool);
    let nested_text = format!(
        "  3. 200 tasks each waiting on an inner task, sum = {sum}, {nested_ms:.1} ms; {}",
        if d.threads_started == 0 {
            "no thread was added: each waiting task ran work itself (help-while-waiting).".to_string()
        } else {
            format!(
                "{} thread(s) were started meanwhile ({} by the starvation monitor).",
                d.threads_started, d.starvation_injections
            )
        }
    );

    // 4. Blocking work declared with `blocking`: the pool lends threads.
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(10)))).expect("spawn");
    }
    g.wait().expect("ok");
    let declared_ms = ms(t);
    let d = table.row("4. declared blocking", &pool);
    let declared_text = format!(
        "  4. 100 x 10 ms sleeps inside `wspool::blocking` in {declared_ms:.0} ms (2 fixed threads would need ~500 ms): \
         the pool lent {} thread(s), peak {}.",
        d.threads_started, d.peak_threads
    );

    // 5. Undeclared blocking: only the starvation monitor can help. Wait
    //    for step 4's threads to retire first, or they would take the work.
    settle(&pool);
    let retired_before = pool.stats().threads;
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| std::thread::sleep(Duration::from_millis(10))).expect("spawn");
    }
    g.wait().expect("ok");
    let undeclared_ms = ms(t);
    let d = table.row("5. undeclared blocking", &pool);
    let undeclared_text = format!(
        "  5. the same sleeps undeclared, starting from {retired_before} threads, in {undeclared_ms:.0} ms: {}",
        if d.starvation_injections > 0 {
            format!(
                "the starvation monitor saw blocked workers and a stuck queue and injected {} thread(s).",
                d.starvation_injections
            )
        } else {
            format!(
                "no injection this time ({} thread(s) were started otherwise); the 2 workers ran the sleeps in turn.",
                d.threads_started
            )
        }
    );

    // 6. Serial queue: one task at a time, in submission order.
    let q = pool.serial();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10 {
        let o = order.clone();
        q.spawn(move || o.lock().unwrap().push(i)).expect("serial");
    }
    q.submit(|| ()).expect("serial").wait().expect("ok");
    table.row("6. serial queue", &pool);
    let serial_text = format!("  6. 10 tasks on a serial queue ran in order: {:?}", order.lock().unwrap());

    // 7. Idle: extra threads retire after keep-alive; an idle pool parks.
    settle(&pool);
    let d = table.row("7. idle", &pool);
    let idle_text = format!(
        "  7. idle: {} thread(s) retired after {} ms without work; {} remain ({}), parked.",
        d.threads_retired,
        KEEP_ALIVE.as_millis(),
        d.threads,
        if d.threads as usize == MIN_THREADS { "min_threads" } else { "still retiring" }
    );

    println!();
    for line in [flood_text, fib_text, nested_text, declared_text, undeclared_text, serial_text, idle_text] {
        println!("{line}");
    }
    let s = pool.stats();
    println!(
        "     queue delay (sampled over the last 10 s, so the floods dominate it): p50 {} µs, p99 {} µs, max {} µs",
        s.queue_delay_p50_ns / 1000,
        s.queue_delay_p99_ns / 1000,
        s.queue_delay_max_ns / 1000
    );
    pool.shutdown(Shutdown::Drain, Some(Duration::from_secs(5))).expect("shutdown");
    println!(
        "  summary: {} tasks, {} panics, {} threads started over the run (peak {}), shut down cleanly.",
        s.completed, s.panicked, s.threads_started, s.peak_threads
    );
}
