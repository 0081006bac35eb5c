//! The starvation monitor's controller, adversarially (issue 11): threads it
//! adds must pay for themselves, its signals are the pool's own, and its
//! cost does not grow with the pool. Bounds asserted are behavioural (peak
//! threads, injections, CPU time of the monitor thread); times are printed
//! for the record (`-- --nocapture`), never asserted. The tests share the
//! machine's two cores, so they run one at a time.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::eventually;
use wspool::{Growth, Pool, Stats};

const LONG: Duration = Duration::from_secs(30);

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Runs `n` tasks on `pool` from a foreign thread and waits for all of them.
/// Runs `run` until one run's stats pass `ok`, three runs at most; says
/// whether one did, with every run's stats. For figures that the shared
/// 2-core VM's timing can push past a bound in one run: a pool that
/// breaks the rule fails all three.
fn up_to_three_runs(mut run: impl FnMut() -> Stats, ok: impl Fn(&Stats) -> bool) -> (bool, Vec<Stats>) {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let s = run();
        let passed = ok(&s);
        runs.push(s);
        if passed {
            return (true, runs);
        }
    }
    (false, runs)
}

fn run_all(pool: &Pool, n: usize, task: impl Fn() + Send + Sync + Clone + 'static) -> Duration {
    let t0 = Instant::now();
    let g = pool.group();
    for _ in 0..n {
        g.spawn(task.clone()).unwrap();
    }
    assert!(g.wait_timeout(LONG), "{n} tasks did not finish in {LONG:?}");
    t0.elapsed()
}

/// Issue 11, defect 1: a lock convoy (400 × 2 ms CPU-bound critical
/// sections under one `Mutex`) must not grow a min-2 pool: adding threads
/// only adds waiters. With the hint, the portable rule, and
/// `cpu_parallelism(1)` (the Python binding's setting).
///
/// The bound holds on a machine that other processes leave its CPUs to.
/// Where they take them (a loaded CI runner; reproduced with three `yes`
/// processes on the 2-core VM), the throughput of a convoy swings ±30 %
/// from one window to the next, so a probe can pass by chance, and a lock
/// holder that gets under a quarter of a core looks blocked to the hint
/// (`docs/growth.md`, "What it cannot detect"): 3 runs in 8 then peaked at 6.
/// So each variant gets up to three runs and must stay within the bound in
/// one of them; a controller that grows a convoy fails all three.
#[test]
fn a_mutex_convoy_stays_near_min_threads() {
    let _serial = serial();
    let convoy = |pool: &Pool| {
        let lock = Arc::new(Mutex::new(0u64));
        run_all(pool, 400, move || {
            let mut guard = lock.lock().unwrap();
            spin_for(Duration::from_millis(2));
            *guard += 1;
        })
    };
    let fixed = Pool::builder().min_threads(2).growth(Growth::Fixed).build().unwrap();
    let fixed_time = convoy(&fixed);
    let builders: [(&str, fn() -> wspool::Builder); 3] = [
        ("adaptive", Pool::builder),
        ("adaptive, portable rule", || Pool::builder().monitor_kernel_hint(false)),
        ("adaptive, cpu_parallelism(1)", || Pool::builder().cpu_parallelism(1)),
    ];
    for (what, builder) in builders {
        let (within, runs) = up_to_three_runs(
            || {
                let pool = builder().min_threads(2).build().unwrap();
                let time = convoy(&pool);
                let s = pool.stats();
                println!(
                    "convoy 400 x 2 ms, {what}: {time:?} (Fixed: {fixed_time:?}, ratio {:.2}); peak {} threads, {} injections, {} retired",
                    time.as_secs_f64() / fixed_time.as_secs_f64(),
                    s.peak_threads,
                    s.starvation_injections,
                    s.threads_retired
                );
                s
            },
            |s| s.peak_threads <= 4,
        );
        assert!(within, "{what}: peaks above 4 threads in a convoy: {runs:?}");
    }
}

/// Issue 11, defect 6: without the CPU-clock hint, CPU-bound work must not
/// grow the pool either (probes that do not pay are taken back).
#[test]
fn a_cpu_bound_flood_on_the_portable_rule_peaks_at_4() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).monitor_kernel_hint(false).build().unwrap();
    let time = run_all(&pool, 2000, || spin_for(Duration::from_millis(1)));
    let s = pool.stats();
    println!(
        "2000 x 1 ms CPU, portable rule: {time:?}; peak {} threads, {} injections",
        s.peak_threads, s.starvation_injections
    );
    assert!(s.peak_threads <= 4, "{s:?}");
}

/// With the hint, CPU-bound work is never probed at all.
#[test]
fn a_cpu_bound_flood_with_the_hint_injects_nothing() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).build().unwrap();
    run_all(&pool, 2000, || spin_for(Duration::from_millis(1)));
    let s = pool.stats();
    assert_eq!(s.starvation_injections, 0, "{s:?}");
    assert_eq!(s.peak_threads, 2, "{s:?}");
}

/// Issue 11, defect 2: a worker inside `blocking()` is counted once (by the
/// compensation), not also as a worker blocked inside its task. Two declared
/// 300 ms regions on a min-2 pool with CPU work queued: the compensation
/// lends threads for them, and the monitor adds none.
#[test]
fn declared_blocking_is_counted_once() {
    let _serial = serial();
    for closure_form in [true, false] {
        let pool = Pool::builder().min_threads(2).build().unwrap();
        let g = pool.group();
        for _ in 0..2 {
            if closure_form {
                g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(300)))).unwrap();
            } else {
                g.spawn(|| {
                    wspool::blocking_begin();
                    std::thread::sleep(Duration::from_millis(300));
                    wspool::blocking_end();
                })
                .unwrap();
            }
        }
        for _ in 0..300 {
            g.spawn(|| spin_for(Duration::from_millis(1))).unwrap();
        }
        assert!(g.wait_timeout(LONG));
        let s = pool.stats();
        println!(
            "2 declared regions + 300 x 1 ms CPU: peak {} threads, {} injections",
            s.peak_threads, s.starvation_injections
        );
        // The threads lent for the regions are the compensation's (and its
        // timing); the monitor must add none on top.
        assert_eq!(s.starvation_injections, 0, "{s:?}");
    }
}

/// Undeclared blocking still gets threads fast with the hint (W6's shape),
/// and gets them through probes on the portable rule.
///
/// On the portable rule the peak sits at the bound (8 in every local run):
/// lent threads retire as the sleepers they stood in for wake, so a run
/// whose probes came late peaks lower (a clean-clone CI run: 6 injections,
/// 4 retired, peak 4). As in the convoy test, each variant gets up to three
/// runs and must reach the bound in one; a monitor that stopped lending
/// threads to undeclared sleepers fails all three.
#[test]
fn undeclared_sleeps_get_threads_with_and_without_the_hint() {
    let _serial = serial();
    for hint in [true, false] {
        let (grown, runs) = up_to_three_runs(
            || {
                let pool = Pool::builder().min_threads(2).monitor_kernel_hint(hint).build().unwrap();
                std::thread::sleep(Duration::from_millis(20));
                let time = run_all(&pool, 200, || std::thread::sleep(Duration::from_millis(10)));
                let s = pool.stats();
                println!(
                    "200 x 10 ms undeclared sleeps, hint {hint}: {time:?} (2 threads alone: 1 s); peak {} threads, {} injections, {} retired",
                    s.peak_threads, s.starvation_injections, s.threads_retired
                );
                s
            },
            |s| s.starvation_injections > 0 && s.peak_threads >= 8,
        );
        assert!(grown, "hint {hint}: {runs:?}");
    }
}

/// After a burst of lent threads retired, the survivors sit among many free
/// slots: undeclared blocking among them must still be seen (the sampler
/// once spent its per-tick budget on free slots and injected nothing: 0
/// injections in 500 ms, where a fresh pool got 62 in 45 ms).
#[test]
fn undeclared_blocking_after_a_shrink_still_gets_threads() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).keep_alive(Duration::from_millis(200)).build().unwrap();
    run_all(&pool, 100, || wspool::blocking(|| std::thread::sleep(Duration::from_millis(10))));
    assert!(pool.stats().peak_threads > 50, "{:?}", pool.stats());
    eventually(LONG, "the lent threads retire", || pool.stats().threads == 2);
    let before = pool.stats().starvation_injections;
    let time = run_all(&pool, 100, || std::thread::sleep(Duration::from_millis(10)));
    let s = pool.stats();
    println!("100 x 10 ms undeclared sleeps after a shrink: {time:?}, {} injections", s.starvation_injections - before);
    assert!(s.starvation_injections > before, "no relief after the shrink: {s:?}");
}

/// Issue 11, defect 4: the signals are the pool's own. A neighbour pool
/// spinning on both cores must not suppress relief for a pool whose
/// workers all sleep (60 × 100 ms): it still grows to serve the backlog.
#[test]
fn a_spinning_neighbour_does_not_suppress_relief() {
    let _serial = serial();
    let sleepers = || {
        let pool = Pool::builder().name("starved").min_threads(2).build().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let time = run_all(&pool, 60, || std::thread::sleep(Duration::from_millis(100)));
        (time, pool.stats())
    };
    let (alone, alone_stats) = sleepers();
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
    eventually(LONG, "both spinners running", || spinning.load(SeqCst) == 2);
    let (beside, beside_stats) = sleepers();
    stop.store(true, SeqCst);
    println!(
        "60 x 100 ms sleeps: alone {alone:?} (peak {}), beside a spinning pool {beside:?} (peak {}), ratio {:.2}",
        alone_stats.peak_threads,
        beside_stats.peak_threads,
        beside.as_secs_f64() / alone.as_secs_f64()
    );
    assert!(beside_stats.peak_threads >= 30, "relief suppressed: {beside_stats:?}");
    assert_eq!(spinner.stats().starvation_injections, 0, "the spinners compute");
}

/// A file of the `/proc/self/task` entry of pool `pool_name`'s monitor thread.
#[cfg(target_os = "linux")]
fn monitor_proc_file(pool_name: &str, file: &str) -> String {
    let want = format!("{pool_name}-monitor");
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == want {
            return std::fs::read_to_string(entry.path().join(file)).unwrap();
        }
    }
    panic!("no thread named {want}");
}

/// The monitor thread's own CPU time, from `/proc/self/task/*/schedstat`.
#[cfg(target_os = "linux")]
fn monitor_cpu(pool_name: &str) -> Duration {
    let stat = monitor_proc_file(pool_name, "schedstat");
    Duration::from_nanos(stat.split_whitespace().next().unwrap().parse().unwrap())
}

/// Issue 11, defect 3: the monitor's cost does not grow with the pool.
/// Measured on the monitor thread's own CPU clock over one second: with
/// 256 workers all blocked and a backlog (at `max_threads`: nothing to
/// add, nothing sampled), with 256 workers computing and a backlog below
/// `max_threads` (sampled every tick, nothing to add: the worst steady
/// case, as on 2 cores each of them looks starved of CPU and has its state
/// read), and with 2 idle workers.
#[cfg(target_os = "linux")]
#[test]
fn the_monitor_costs_almost_nothing() {
    let _serial = serial();
    // Debug builds run the same code several times slower.
    let bound = if cfg!(debug_assertions) { 0.05 } else { 0.01 };
    let window = Duration::from_secs(1);
    let measure = |name: &str| {
        let before = monitor_cpu(name);
        std::thread::sleep(window);
        (monitor_cpu(name) - before).as_secs_f64() / window.as_secs_f64()
    };

    let pool = Pool::builder().name("mc-max").min_threads(2).max_threads(256).build().unwrap();
    let gate = Arc::new(common::Gate::default());
    let _open = common::OpenOnDrop(gate.clone());
    for _ in 0..300 {
        let g = gate.clone();
        pool.spawn(move || g.wait()).unwrap();
    }
    eventually(LONG, "256 threads", || pool.stats().threads == 256);
    let at_max = measure("mc-max");
    gate.open();
    drop(pool);

    let pool = Pool::builder().name("mc-cpu").min_threads(256).max_threads(512).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let feeder = std::thread::spawn(move || {
        // Keeps a backlog of CPU-bound tasks until told to stop.
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
    let computing_stats = feeder.join().unwrap();

    let pool = Pool::builder().name("mc-idle").min_threads(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let idle = measure("mc-idle");
    drop(pool);
    println!(
        "monitor CPU: 256 blocked at max_threads {:.3} %, 256 computing below max {:.3} % (peak {} threads), 2 idle {:.4} % of a core",
        at_max * 100.0,
        computing * 100.0,
        computing_stats.peak_threads,
        idle * 100.0
    );
    assert!(at_max <= bound, "{at_max}");
    assert!(computing <= bound, "{computing}");
    assert_eq!(computing_stats.starvation_injections, 0, "{computing_stats:?}");
    assert!(idle <= 0.001, "{idle}");
}

/// The monitor thread's voluntary context switches (how often it slept).
#[cfg(target_os = "linux")]
fn monitor_wakeups(pool_name: &str) -> u64 {
    let status = monitor_proc_file(pool_name, "status");
    let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A pool idle between short bursts (an event loop's: one request per
/// wake-up) kicks its monitor at every wake-up; each kick must start one
/// interval of sleep, not a tick and a new idle wait, or the monitor wakes
/// (and the submitter signals it) once per task. With a 5 ms interval and
/// a task every ~200 µs for half a second the monitor sleeps twice per
/// interval (its timed wait, then its idle wait until the next kick): ~200
/// times, where waking per task gave ~1,500. Allowed: three per interval.
#[cfg(target_os = "linux")]
#[test]
fn a_pool_idle_between_bursts_wakes_its_monitor_per_interval_not_per_task() {
    let _serial = serial();
    let interval = Duration::from_millis(5);
    let pool = Pool::builder().name("mcb").min_threads(2).monitor_interval(interval).build().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let before = monitor_wakeups("mcb");
    let t0 = Instant::now();
    let mut tasks = 0u64;
    while t0.elapsed() < Duration::from_millis(500) {
        pool.submit(|| ()).unwrap().wait().unwrap();
        tasks += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = t0.elapsed();
    let wakeups = monitor_wakeups("mcb") - before;
    let allowed = 3 * (elapsed.as_micros() / interval.as_micros()) as u64 + 10;
    println!("{tasks} tasks in {elapsed:?}: the monitor slept {wakeups} times (allowed {allowed})");
    assert!(tasks > allowed, "too few tasks ({tasks}) to tell: the machine is too slow for this test");
    assert!(wakeups <= allowed, "{wakeups} monitor wake-ups for {tasks} tasks in {elapsed:?}");
}
