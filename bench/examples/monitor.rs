//! `make bench-monitor`: the starvation monitor on real threads, beside a
//! `Fixed` pool of `min_threads` threads: wall times, peak threads, threads
//! the monitor injected and retired, and the monitor thread's own cost.
//! These are the figures the real-thread tests of `core/tests/monitor.rs`
//! and `growth.rs` used to assert (and retry); they depend on the machine
//! and its load, so they are printed here, never asserted. What the monitor
//! decides is tested deterministically by `growth::sim` (`make test`).
//!
//! One run of each scenario, in order; `MONITOR_BENCH_ONLY=name,...` picks
//! scenarios by the first word of their name.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wspool::{Growth, Pool, Stats};

const LONG: Duration = Duration::from_secs(120);

fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Runs `n` tasks from a foreign thread and waits for all of them.
fn run_all(pool: &Pool, n: usize, task: impl Fn() + Send + Sync + Clone + 'static) -> Duration {
    let t0 = Instant::now();
    let g = pool.group();
    for _ in 0..n {
        g.spawn(task.clone()).unwrap();
    }
    assert!(g.wait_timeout(LONG), "{n} tasks did not finish in {LONG:?}");
    t0.elapsed()
}

fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LONG, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn row(scenario: &str, pool: &str, time: Duration, s: &Stats, note: &str) {
    println!(
        "| {scenario} | {pool} | {:.0} ms | {} | {} | {} | {note} |",
        time.as_secs_f64() * 1e3,
        s.peak_threads,
        s.starvation_injections,
        s.threads_retired
    );
}

type Make = fn() -> wspool::Builder;

const FIXED: (&str, Make) = ("Fixed", || Pool::builder().growth(Growth::Fixed));
const HINT: (&str, Make) = ("adaptive", Pool::builder);
const PORTABLE: (&str, Make) = ("adaptive, portable rule", || Pool::builder().monitor_kernel_hint(false));
const ONE_CORE: (&str, Make) = ("adaptive, cpu_parallelism(1)", || Pool::builder().cpu_parallelism(1));

fn each(scenario: &str, builders: &[(&str, Make)], work: impl Fn(&Pool) -> Duration) {
    for (name, make) in builders {
        let pool = make().min_threads(2).build().unwrap();
        // Let the pool's threads start before the clock does.
        std::thread::sleep(Duration::from_millis(20));
        let time = work(&pool);
        row(scenario, name, time, &pool.stats(), "");
    }
}

fn convoy() {
    each("convoy: 400 x 2 ms CPU under one Mutex", &[FIXED, HINT, PORTABLE, ONE_CORE], |pool| {
        let lock = Arc::new(Mutex::new(0u64));
        run_all(pool, 400, move || {
            let mut guard = lock.lock().unwrap();
            spin_for(Duration::from_millis(2));
            *guard += 1;
        })
    });
}

fn flood() {
    each("flood: 2000 x 1 ms CPU", &[FIXED, HINT, PORTABLE], |pool| {
        run_all(pool, 2000, || spin_for(Duration::from_millis(1)))
    });
    each("long: 16 x 15 ms CPU", &[FIXED, HINT], |pool| run_all(pool, 16, || spin_for(Duration::from_millis(15))));
}

fn declared() {
    each("declared: 2 x 300 ms blocking() + 300 x 1 ms CPU", &[FIXED, HINT], |pool| {
        let t0 = Instant::now();
        let g = pool.group();
        for _ in 0..2 {
            g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(300)))).unwrap();
        }
        for _ in 0..300 {
            g.spawn(|| spin_for(Duration::from_millis(1))).unwrap();
        }
        assert!(g.wait_timeout(LONG));
        t0.elapsed()
    });
}

fn undeclared() {
    each("undeclared: 200 x 10 ms sleeps", &[FIXED, HINT, PORTABLE], |pool| {
        run_all(pool, 200, || std::thread::sleep(Duration::from_millis(10)))
    });
}

fn shrink() {
    let pool = Pool::builder().min_threads(2).keep_alive(Duration::from_millis(200)).build().unwrap();
    let grow = run_all(&pool, 100, || wspool::blocking(|| std::thread::sleep(Duration::from_millis(10))));
    let grown = pool.stats();
    let t0 = Instant::now();
    eventually("the lent threads retire", || pool.stats().threads == 2);
    let back = t0.elapsed();
    row(
        "shrink: 100 x 10 ms in blocking(), keep_alive 200 ms",
        "adaptive",
        grow,
        &grown,
        &format!("back to 2 threads {:.0} ms after the burst", back.as_secs_f64() * 1e3),
    );
    let before = pool.stats().starvation_injections;
    let time = run_all(&pool, 100, || std::thread::sleep(Duration::from_millis(10)));
    let s = pool.stats();
    row(
        "...then 100 x 10 ms undeclared sleeps",
        "adaptive",
        time,
        &s,
        &format!("{} injections after the shrink (stats are the pool's totals)", s.starvation_injections - before),
    );
}

fn neighbour() {
    let sleepers = |pool: &Pool| run_all(pool, 60, || std::thread::sleep(Duration::from_millis(100)));
    let alone = Pool::builder().name("starved").min_threads(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let time = sleepers(&alone);
    row("neighbour: 60 x 100 ms sleeps", "adaptive, alone", time, &alone.stats(), "");
    let spinner = Pool::builder().name("spinner").min_threads(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (stop, spinning) = (stop.clone(), spinning.clone());
        spinner
            .spawn(move || {
                spinning.fetch_add(1, SeqCst);
                while !stop.load(SeqCst) {
                    spin_for(Duration::from_millis(1));
                }
            })
            .unwrap();
    }
    eventually("both spinners running", || spinning.load(SeqCst) == 2);
    let beside = Pool::builder().name("starved").min_threads(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let time_beside = sleepers(&beside);
    stop.store(true, SeqCst);
    row(
        "neighbour: 60 x 100 ms sleeps",
        "adaptive, beside a pool spinning on 2 threads",
        time_beside,
        &beside.stats(),
        &format!("{:.2}x alone; the spinners got {} injections", time_beside.as_secs_f64() / time.as_secs_f64(), {
            spinner.stats().starvation_injections
        }),
    );
}

fn seed_000() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    for i in 0..600u32 {
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
    eventually("all 600 tasks done", || done.load(SeqCst) == 600);
    let tail = producer_end.elapsed();
    row(
        "seed 000: 200/s x 3 s of 20 ms sleeps, global queue",
        "adaptive",
        start.elapsed(),
        &pool.stats(),
        &format!("done {:.0} ms after the producer (2 threads alone: 3 s)", tail.as_secs_f64() * 1e3),
    );
}

/// A file of the `/proc/self/task` entry of pool `pool_name`'s monitor thread.
fn monitor_proc_file(pool_name: &str, file: &str) -> Option<String> {
    let want = format!("{pool_name}-monitor");
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == want {
            return std::fs::read_to_string(entry.path().join(file)).ok();
        }
    }
    None
}

fn monitor_cpu(pool_name: &str) -> Option<Duration> {
    let stat = monitor_proc_file(pool_name, "schedstat")?;
    Some(Duration::from_nanos(stat.split_whitespace().next()?.parse().ok()?))
}

fn monitor_wakeups(pool_name: &str) -> Option<u64> {
    let status = monitor_proc_file(pool_name, "status")?;
    let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn cost() {
    if std::fs::read_dir("/proc/self/task").is_err() {
        println!("| cost | (no /proc here) | | | | | |");
        return;
    }
    let window = Duration::from_secs(1);
    let measure = |name: &str| {
        let before = monitor_cpu(name).unwrap_or_default();
        std::thread::sleep(window);
        let after = monitor_cpu(name).unwrap_or_default();
        format!("monitor thread: {:.3} % of a core", (after - before).as_secs_f64() / window.as_secs_f64() * 100.0)
    };

    let pool = Pool::builder().name("mc-max").min_threads(2).max_threads(256).build().unwrap();
    let open = Arc::new(AtomicBool::new(false));
    for _ in 0..300 {
        let open = open.clone();
        pool.spawn(move || {
            while !open.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .unwrap();
    }
    let t0 = Instant::now();
    eventually("256 threads", || pool.stats().threads == 256);
    let grow = t0.elapsed();
    let at_max = measure("mc-max");
    open.store(true, SeqCst);
    row("cost: 300 sleepers, max_threads 256, 1 s at max", "adaptive", grow, &pool.stats(), &at_max);
    drop(pool);

    let pool = Pool::builder().name("mc-cpu").min_threads(256).max_threads(512).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let feeder = std::thread::spawn(move || {
        let g = pool.group();
        while !st.load(SeqCst) {
            while pool.stats().queued < 64 {
                g.spawn(|| spin_for(Duration::from_millis(2))).unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(g.wait_timeout(LONG));
        pool.stats()
    });
    std::thread::sleep(Duration::from_millis(300));
    let computing = measure("mc-cpu");
    stop.store(true, SeqCst);
    let s = feeder.join().unwrap();
    row("cost: 256 computing below max_threads (512), backlog of 64", "adaptive", window, &s, &computing);

    let pool = Pool::builder().name("mc-idle").min_threads(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let idle = measure("mc-idle");
    row("cost: 2 idle workers", "adaptive", window, &pool.stats(), &idle);
    drop(pool);

    let interval = Duration::from_millis(5);
    let pool = Pool::builder().name("mcb").min_threads(2).monitor_interval(interval).build().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let before = monitor_wakeups("mcb").unwrap_or_default();
    let t0 = Instant::now();
    let mut tasks = 0u64;
    while t0.elapsed() < Duration::from_millis(500) {
        pool.submit(|| ()).unwrap().wait().unwrap();
        tasks += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = t0.elapsed();
    let wakeups = monitor_wakeups("mcb").unwrap_or_default() - before;
    row(
        "cost: one task every ~200 us, pool idle between",
        "adaptive, 5 ms interval",
        elapsed,
        &pool.stats(),
        &format!(
            "{tasks} tasks, the monitor slept {wakeups} times ({} intervals; waking per task: ~{tasks})",
            elapsed.as_micros() / interval.as_micros()
        ),
    );
}

fn main() {
    let only = std::env::var("MONITOR_BENCH_ONLY").ok();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("## Starvation monitor on real threads ({cores} CPUs; min_threads 2; one run each)\n");
    println!("| scenario | pool | time | peak threads | injected | retired | note |");
    println!("|---|---|---|---|---|---|---|");
    let scenarios: [(&str, fn()); 9] = [
        ("convoy", convoy),
        ("flood", flood),
        ("declared", declared),
        ("undeclared", undeclared),
        ("shrink", shrink),
        ("neighbour", neighbour),
        ("seed", seed_000),
        ("blocking", blocking_regions),
        ("cost", cost),
    ];
    for (name, run) in scenarios {
        if only.as_deref().is_none_or(|o| o.split(',').any(|w| w == name)) {
            run();
        }
    }
}

fn blocking_regions() {
    let keep_alive = Duration::from_millis(200);
    let pool = Pool::builder()
        .min_threads(2)
        .keep_alive(keep_alive)
        .monitor_interval(Duration::from_millis(10))
        .build()
        .unwrap();
    let time = run_all(&pool, 200, || wspool::blocking(|| std::thread::sleep(Duration::from_millis(10))));
    let burst_end = Instant::now();
    eventually("back to min_threads", || pool.stats().threads == 2);
    let back = burst_end.elapsed();
    row(
        "blocking: 200 x 10 ms in blocking(), keep_alive 200 ms",
        "adaptive, 10 ms interval",
        time,
        &pool.stats(),
        &format!(
            "back to 2 threads {:.0} ms after the burst (keep_alive + interval: 210 ms)",
            back.as_secs_f64() * 1e3
        ),
    );
}
