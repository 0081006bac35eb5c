//! `make demo`: the pool working, each step beside a baseline measured in
//! the same run (a plain `Mutex` + `Condvar` pool of the same size, or one
//! thread), and at the end what the pool's stats say about each step.
//!
//! Every claim printed is computed from what this run measured, so the text
//! cannot drift from what the pool did.

use std::collections::VecDeque;
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

fn fib_seq(n: u64) -> u64 {
    if n < 2 { n } else { fib_seq(n - 1) + fib_seq(n - 2) }
}

type PlainJob = Box<dyn FnOnce() + Send>;

/// The baseline: the thread pool most programs write first, one queue
/// behind one lock, a fixed number of threads. Its threads are detached;
/// the process ends them.
#[derive(Clone)]
struct PlainPool {
    queue: Arc<(Mutex<VecDeque<PlainJob>>, Condvar)>,
}

impl PlainPool {
    fn new(threads: usize) -> PlainPool {
        let pool = PlainPool { queue: Arc::new((Mutex::new(VecDeque::new()), Condvar::new())) };
        for _ in 0..threads {
            let queue = pool.queue.clone();
            std::thread::spawn(move || {
                loop {
                    let job = {
                        let mut q = queue.0.lock().unwrap();
                        loop {
                            match q.pop_front() {
                                Some(job) => break job,
                                None => q = queue.1.wait(q).unwrap(),
                            }
                        }
                    };
                    job();
                }
            });
        }
        pool
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        self.queue.0.lock().unwrap().push_back(Box::new(f));
        self.queue.1.notify_one();
    }
}

/// One row per step: the pool's state at the end of the step, and what its
/// counters did during it.
struct Table {
    last: Stats,
}

impl Table {
    fn new(pool: &Pool) -> Table {
        Table { last: pool.stats() }
    }

    fn header(&self) {
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
    }

    /// The step's row: the pool now, and its counters' change since the last row.
    fn row_text(&mut self, step: &str, pool: &Pool) -> String {
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
        let row = format!(
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
        row
    }
}

/// A million-task flood, measured like the benchmark's W1: the closure
/// captures nothing (a static countdown), and the last task signals.
fn flood(spawn: impl Fn(fn()), n: u64) -> f64 {
    static LEFT: AtomicU64 = AtomicU64::new(0);
    static DONE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
    *DONE.0.lock().unwrap() = false;
    LEFT.store(n, Ordering::Relaxed);
    let t = Instant::now();
    for _ in 0..n {
        spawn(|| {
            if LEFT.fetch_sub(1, Ordering::AcqRel) == 1 {
                *DONE.0.lock().unwrap() = true;
                DONE.1.notify_all();
            }
        });
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

/// Runs `n` outer tasks on a plain pool of `MIN_THREADS`, each submitting
/// an inner task to the same pool and waiting for it. Returns the time, or
/// None if nothing finished within `patience` (the plain pool deadlocked:
/// every thread waits for a task queued behind it).
fn plain_nested_waits(n: u64, patience: Duration) -> Option<f64> {
    let plain = PlainPool::new(MIN_THREADS);
    let done = Arc::new((Mutex::new(0u64), Condvar::new()));
    let t = Instant::now();
    for i in 0..n {
        let (p, done) = (plain.clone(), done.clone());
        plain.spawn(move || {
            let inner = Arc::new((Mutex::new(None), Condvar::new()));
            let slot = inner.clone();
            p.spawn(move || {
                *slot.0.lock().unwrap() = Some(i * 2);
                slot.1.notify_all();
            });
            let mut v = inner.0.lock().unwrap();
            while v.is_none() {
                v = inner.1.wait(v).unwrap();
            }
            *done.0.lock().unwrap() += 1;
            done.1.notify_all();
        });
    }
    let mut finished = done.0.lock().unwrap();
    while *finished < n {
        let left = patience.checked_sub(t.elapsed())?;
        finished = done.1.wait_timeout(finished, left).unwrap().0;
    }
    Some(ms(t))
}

/// 100 sleeps of 10 ms on a plain pool of `MIN_THREADS`, in ms.
fn plain_sleeps() -> f64 {
    let plain = PlainPool::new(MIN_THREADS);
    let left = Arc::new((Mutex::new(100u32), Condvar::new()));
    let t = Instant::now();
    for _ in 0..100 {
        let left = left.clone();
        plain.spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            *left.0.lock().unwrap() -= 1;
            left.1.notify_all();
        });
    }
    let mut n = left.0.lock().unwrap();
    while *n > 0 {
        n = left.1.wait(n).unwrap();
    }
    ms(t)
}

/// CPU time this process used (all threads), in ms.
fn process_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // utime and stime are fields 14 and 15, counted after the command name's ')'.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks * 10.0 // USER_HZ is 100 on Linux
}

fn main() {
    let pool = Pool::builder().name("demo").min_threads(MIN_THREADS).keep_alive(KEEP_ALIVE).build().expect("pool");
    println!(
        "== Rust demo (core/examples/demo.rs): a wspool pool of {} workers that may grow to {} threads \
         (extras retire after {} ms idle),\n   beside a plain pool (one queue behind a Mutex + Condvar, {} threads) \
         measured in the same run.",
        pool.min_threads(),
        pool.max_threads(),
        KEEP_ALIVE.as_millis(),
        MIN_THREADS
    );
    if cfg!(debug_assertions) {
        println!(
            "   This is a DEBUG build: every figure is several times below a release build's \
             (`cargo run --release --example demo`, as `make demo` runs it)."
        );
    }
    let mut table = Table::new(&pool);
    let mut rows = Vec::new();
    let mut step = |title: &str, text: String, row: &str, table: &mut Table| {
        println!("\n{title}\n{text}");
        rows.push(table.row_text(row, &pool));
    };

    // 1. Flood: one foreign thread submits tiny tasks.
    const N: u64 = 1_000_000;
    let rates: Vec<f64> = (0..3).map(|_| flood(|f| pool.spawn(f).expect("spawn"), N)).collect();
    let plain = PlainPool::new(MIN_THREADS);
    let plain_rate = flood(|f| plain.spawn(f), N);
    let best = rates.iter().copied().fold(0.0, f64::max);
    step(
        "1. Many tiny tasks: 1,000,000 submitted from one outside thread (three rounds; the first starts cold).",
        format!(
            "   wspool {:.1} / {:.1} / {:.1} M tasks/s; the plain pool {plain_rate:.1} M tasks/s: {:.1}x.",
            rates[0],
            rates[1],
            rates[2],
            best / plain_rate
        ),
        "1. flood 3 x 1M tasks",
        &mut table,
    );

    // 2. Fork-join: fib(25) with join at every level, no heap allocation.
    let t = Instant::now();
    let v = pool.submit(|| fib(25)).expect("submit").wait().expect("fib");
    let fib_ms = ms(t);
    let t = Instant::now();
    let v_seq = std::hint::black_box(fib_seq(std::hint::black_box(25)));
    let seq_ms = ms(t);
    assert_eq!(v, v_seq);
    step(
        "2. Fork-join: fib(25) = 75025 with `join` at every level (121,392 forks, each a few nanoseconds of work).",
        format!(
            "   wspool {fib_ms:.1} ms on {MIN_THREADS} workers, plain recursion on one thread {seq_ms:.1} ms: a fork \
             costs about {:.0} ns of a worker's time,\n   more than the addition it splits off (rayon's `join` costs \
             as much: docs/benchmarks.md, W2). A plain pool cannot run this at all:\n   every fork would wait, \
             blocking a thread, for a task queued behind it (step 3).",
            fib_ms * 1e6 * MIN_THREADS as f64 / 121_392.0
        ),
        "2. fork-join fib(25)",
        &mut table,
    );

    // 3. Sync-over-async: tasks block on inner tasks. The waiter runs other
    //    work (here: usually the very task it waits for) instead of sleeping.
    let started_before = pool.stats().threads_started;
    let t = Instant::now();
    let handles: Vec<_> = (0..200u64)
        .map(|i| {
            let p = pool.clone();
            pool.submit(move || p.submit(move || i * 2).expect("inner").wait().expect("inner result")).expect("outer")
        })
        .collect();
    let sum: u64 = handles.into_iter().map(|h| h.wait().expect("outer result")).sum();
    let nested_ms = ms(t);
    let started = pool.stats().threads_started - started_before;
    let plain_nested = plain_nested_waits(200, Duration::from_secs(1));
    step(
        "3. Waits inside tasks: 200 tasks each submit an inner task to the same pool and wait for it.",
        format!(
            "   wspool {nested_ms:.1} ms (sum {sum}), {}; the plain pool: {}.",
            if started == 0 {
                "no thread added: each waiting task ran the work it waited for".to_string()
            } else {
                format!("{started} thread(s) started meanwhile")
            },
            match plain_nested {
                Some(t) => format!("{t:.1} ms"),
                None => "deadlocked (nothing finished in 1 s: both threads wait for tasks queued behind them), \
                         abandoned"
                    .to_string(),
            }
        ),
        "3. nested waits",
        &mut table,
    );

    // 4. Blocking work declared with `blocking`: the pool lends threads.
    let plain_sleep_ms = plain_sleeps();
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(10)))).expect("spawn");
    }
    g.wait().expect("ok");
    let declared_ms = ms(t);
    let s4 = pool.stats();
    step(
        "4. Blocking calls, declared: 100 sleeps of 10 ms, each inside `wspool::blocking`.",
        format!(
            "   wspool {declared_ms:.0} ms, lending threads for the blocked calls (peak {} threads); the plain pool \
             {plain_sleep_ms:.0} ms.",
            s4.peak_threads
        ),
        "4. declared blocking",
        &mut table,
    );

    // 5. Undeclared blocking: only the starvation monitor can help. Wait
    //    for step 4's threads to retire first, or they would take the work.
    settle(&pool);
    let threads_before = pool.stats().threads;
    let injected_before = pool.stats().starvation_injections;
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| std::thread::sleep(Duration::from_millis(10))).expect("spawn");
    }
    g.wait().expect("ok");
    let undeclared_ms = ms(t);
    let injected = pool.stats().starvation_injections - injected_before;
    step(
        "5. Blocking calls, undeclared: the same sleeps without `blocking`, starting from the minimum threads.",
        format!(
            "   wspool {undeclared_ms:.0} ms from {threads_before} threads: {}; the plain pool {plain_sleep_ms:.0} ms \
             (step 4).",
            if injected > 0 {
                format!("the starvation monitor saw the queue stop moving and added {injected} thread(s)")
            } else {
                "no thread was added this time".to_string()
            }
        ),
        "5. undeclared blocking",
        &mut table,
    );

    // 6. Serial queue: one task at a time, in submission order.
    let q = pool.serial();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10 {
        let o = order.clone();
        q.spawn(move || o.lock().unwrap().push(i)).expect("serial");
    }
    q.submit(|| ()).expect("serial").wait().expect("ok");
    step(
        "6. A serial queue: tasks of one queue run one at a time, in order, on any worker.",
        format!("   10 tasks ran as {:?}.", order.lock().unwrap()),
        "6. serial queue",
        &mut table,
    );

    // 7. Idle: extra threads retire after keep-alive; an idle pool parks.
    settle(&pool);
    let cpu0 = process_cpu_ms();
    std::thread::sleep(Duration::from_millis(500));
    let idle_cpu = process_cpu_ms() - cpu0;
    let s7 = pool.stats();
    step(
        "7. Idle: threads added in steps 4 and 5 retire after the keep-alive; the rest park.",
        format!(
            "   {} thread(s) now ({} started and {} retired over the run); the whole process used {idle_cpu:.0} ms \
             of CPU in 500 ms idle (the clock ticks in 10 ms).",
            s7.threads, s7.threads_started, s7.threads_retired
        ),
        "7. idle",
        &mut table,
    );

    println!(
        "\nWhat the pool's counters (`Pool::stats`) say about each step: threads at its end, the peak so far, threads \
         started and\nadded by the starvation monitor during it, tasks run and where workers found them (own deque, \
         global queue, stolen),\nand debounce spins that found work or not."
    );
    table.header();
    for row in rows {
        println!("{row}");
    }
    let s = pool.stats();
    pool.shutdown(Shutdown::Drain, Some(Duration::from_secs(5))).expect("shutdown");
    println!(
        "\n  {} tasks, {} panics, {} threads started over the run (peak {}); shut down cleanly.",
        s.completed, s.panicked, s.threads_started, s.peak_threads
    );
}
