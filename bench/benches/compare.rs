//! `cargo bench -p wspool-bench --bench compare [-- --quick] [w1 w3 ...]`
//!
//! wspool side by side with rayon, the `threadpool` crate and tokio, in one
//! process, printing markdown tables (medians, min–max, ratios) and a table
//! of the targets of issues 2 and 3. See `bench/src/lib.rs` for the harness
//! and its knobs (`WSPOOL_BENCH_THREADS`, `WSPOOL_BENCH_REPS`,
//! `WSPOOL_BENCH_QUICK`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use wspool_bench::workloads::{fib_join, fib_seq, w4_group_scope};
use wspool_bench::{
    Config, Contender, Countdown, Pacing, Rounds, Summary, Table, cpu, fmt, load, loadavg, percentile, run_rounds,
    summarize,
};

/// Pause before each timed run so the previous contender's threads go idle.
const SETTLE: Duration = Duration::from_millis(20);
/// Other processes' load (in cores) under which the machine counts as quiet.
const QUIET_CORES: f64 = 0.25;

fn pacing(cfg: &Config) -> Pacing {
    let wait = if !cfg.quiet_gate {
        Duration::ZERO
    } else if cfg.quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(2)
    };
    Pacing {
        settle: SETTLE,
        quiet_max_wait: wait,
        quiet_cores: QUIET_CORES,
        retries: if cfg.quiet_gate { 1 } else { 0 },
    }
}

/// What follows a workload's table: wspool's stats lines, then how busy the
/// (shared) machine was while the workload ran.
fn background<T>(r: &Rounds<T>, stats: &[String]) -> String {
    let load = match r.foreign_cores {
        Some(c) => format!("other processes used {} CPU cores on average during the measured runs", fmt(c, 2)),
        None => "the load of other processes is unknown (no /proc/stat)".to_owned(),
    };
    let mut out: String = stats.iter().map(|l| format!("- {l}\n")).collect();
    if !out.is_empty() {
        out.push('\n');
    }
    out += &format!(
        "_Background: {load}; {} of {} rounds started with the machine still busy (> {QUIET_CORES} cores) after the quiet wait; \
         {} runs were repeated because other processes used > {} cores during them._\n",
        r.busy_rounds,
        r.rounds,
        r.retried,
        2.0 * QUIET_CORES
    );
    out
}

/// Everything printed at the end: the targets and whether they are met.
struct Report {
    targets: Table,
    observations: Vec<String>,
}

impl Report {
    fn target(&mut self, name: &str, measured: String, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        self.targets.row(&[name, &measured, verdict]);
    }
}

fn main() {
    let cfg = match Config::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compare: {e}");
            std::process::exit(2);
        }
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("## wspool comparison benchmarks\n");
    println!(
        "{} workers per pool unless stated, {} measured repetitions per contender (after one warm-up), \
         interleaved; median [min–max]. {} CPUs, load average before: {}.{}\n",
        cfg.threads,
        cfg.reps,
        cores,
        loadavg(),
        if cfg.quick { " **Quick mode: smaller workloads, not the reference figures.**" } else { "" }
    );
    let mut report = Report { targets: Table::new(&["Target", "Measured", "Met"]), observations: Vec::new() };
    let t0 = Instant::now();
    type Workload = fn(&Config, &mut Report);
    let workloads: [(&str, Workload); 6] =
        [("w1", w1_flood), ("w2", w2_fib), ("w3", w3_ping_pong), ("w4", w4_nested), ("w5", w5_idle), ("w6", w6_growth)];
    for (name, f) in workloads {
        if cfg.selected(name) {
            eprintln!("compare: running {name} ({:.0} s so far)", t0.elapsed().as_secs_f64());
            f(&cfg, &mut report);
        }
    }
    println!("### Targets\n");
    if report.targets.is_empty() {
        println!("(none measured)\n");
    } else {
        println!("{}", report.targets.render());
    }
    for o in &report.observations {
        println!("- {o}");
    }
    println!("\nLoad average after: {}; the suite took {:.0} s.", loadavg(), t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------
// Pools. Every pool gets its own thread-name prefix (W5 finds its threads by
// name in /proc/self/task).

fn ws_pool(name: &str, threads: usize) -> wspool::Pool {
    wspool::Pool::builder().name(name).min_threads(threads).build().expect("wspool pool")
}

/// wspool's own view of a workload (its stats), printed under the table.
fn ws_stats_line(row: &str, p: &wspool::Pool) -> String {
    let st = p.stats();
    format!(
        "`{row}` pool after all rounds: peak threads {} ({} starvation injections), steals {}, local/global pops {}/{}, \
         spin hits/misses {}/{}, spin threshold {} µs",
        st.peak_threads,
        st.starvation_injections,
        st.steals,
        st.local_pops,
        st.global_pops,
        st.spin_hits,
        st.spin_misses,
        st.spin_threshold_ns / 1000
    )
}

fn rayon_pool(prefix: &'static str, threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{prefix}{i}"))
        .build()
        .expect("rayon pool")
}

fn tp_pool(name: &str, threads: usize) -> threadpool::ThreadPool {
    threadpool::Builder::new().num_threads(threads).thread_name(name.to_owned()).build()
}

fn tokio_rt(name: &str, threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------------------
// Rendering of one-metric workloads.

#[derive(Clone, Copy)]
struct Metric {
    unit: &'static str,
    higher_is_better: bool,
    digits: usize,
}

/// Prints a workload's table; returns each contender's summary and the index
/// of the best peer (non-wspool row).
fn print_single<T>(title: &str, m: Metric, cs: &[Contender<'_, T>], res: &[Vec<f64>]) -> (Vec<Summary>, Option<usize>) {
    let sums: Vec<Summary> = res.iter().map(|v| summarize(v).expect("measurements")).collect();
    let better = |a: f64, b: f64| if m.higher_is_better { a > b } else { a < b };
    let mut best_peer: Option<usize> = None;
    for (i, c) in cs.iter().enumerate() {
        if c.is_peer() && best_peer.is_none_or(|b| better(sums[i].median, sums[b].median)) {
            best_peer = Some(i);
        }
    }
    let mut t = Table::new(&["Implementation", &format!(">Median ({})", m.unit), ">Min–max", ">÷ best peer", "How"]);
    for (i, c) in cs.iter().enumerate() {
        let ratio = best_peer.map(|b| fmt(sums[i].median / sums[b].median, 2) + "×").unwrap_or_default();
        t.row(&[
            if c.is_wspool { format!("**{}**", c.name) } else { c.name.clone() },
            fmt(sums[i].median, m.digits),
            format!("{}–{}", fmt(sums[i].min, m.digits), fmt(sums[i].max, m.digits)),
            ratio,
            c.note.clone(),
        ]);
    }
    println!("### {title}\n\n{}", t.render());
    (sums, best_peer)
}

fn idx(cs: &[Contender<'_, impl Sized>], name: &str) -> Option<usize> {
    cs.iter().position(|c| c.name == name)
}

// ---------------------------------------------------------------------------
// W1 flood: a foreign thread submits N tiny tasks, then waits for all.

fn w1_flood(cfg: &Config, report: &mut Report) {
    let n = cfg.size(1_000_000, 100_000);
    let th = cfg.threads;
    let c = Countdown::leak();
    let per_s = |dt: Duration| n as f64 / dt.as_secs_f64() / 1e6;
    // Each run's submit phase alone (until the last submit returns), per
    // contender: tells the submitter's cost apart from the workers'.
    let submit_rates: Vec<RefCell<Vec<f64>>> = (0..6).map(|_| RefCell::new(Vec::new())).collect();
    let timed = |k: usize, submit: &mut dyn FnMut(), wait: &mut dyn FnMut()| -> f64 {
        let t0 = Instant::now();
        submit();
        let t_submit = t0.elapsed();
        wait();
        let t_all = t0.elapsed();
        submit_rates[k].borrow_mut().push(per_s(t_submit));
        per_s(t_all)
    };
    let timed = &timed;
    let ws = ws_pool("wsb1s", th);
    let wg = ws_pool("wsb1g", th);
    let wb = ws_pool("wsb1b", th);
    let rp = rayon_pool("rayb1-", th);
    let tp = tp_pool("tpb1", th);
    let rt = tokio_rt("tokb1", th);
    let mut cs: Vec<Contender<'_, f64>> = Vec::new();
    cs.push(Contender::new("wspool spawn", "`Pool::spawn`; the last task signals a condvar", true, || {
        c.arm(n);
        timed(
            0,
            &mut || {
                for _ in 0..n {
                    ws.spawn(move || c.hit()).expect("spawn");
                }
            },
            &mut || c.wait(),
        )
    }));
    cs.push(Contender::new("wspool group", "`Group::spawn` + `Group::wait`", true, || {
        c.arm(n);
        let g = wg.group();
        let r = timed(
            1,
            &mut || {
                for _ in 0..n {
                    g.spawn(move || c.bump()).expect("spawn");
                }
            },
            &mut || g.wait().expect("group wait"),
        );
        assert_eq!(c.count(), n);
        r
    }));
    cs.push(Contender::new("rayon", "`ThreadPool::spawn`; the last task signals", false, || {
        c.arm(n);
        timed(
            2,
            &mut || {
                for _ in 0..n {
                    rp.spawn(move || c.hit());
                }
            },
            &mut || c.wait(),
        )
    }));
    cs.push(Contender::new("threadpool", "`ThreadPool::execute`; the last task signals", false, || {
        c.arm(n);
        timed(
            3,
            &mut || {
                for _ in 0..n {
                    tp.execute(move || c.hit());
                }
            },
            &mut || c.wait(),
        )
    }));
    cs.push(Contender::new(
        "tokio",
        "`Handle::spawn(async {..})` from a non-runtime thread, JoinHandle dropped",
        false,
        || {
            c.arm(n);
            let h = rt.handle();
            timed(
                4,
                &mut || {
                    for _ in 0..n {
                        drop(h.spawn(async move { c.hit() }));
                    }
                },
                &mut || c.wait(),
            )
        },
    ));
    // Pushed last: `submit_rates[k]` belongs to `cs[k]`.
    cs.push(Contender::new("wspool spawn_batch", "`Pool::spawn_batch`, 256 tasks per call", true, || {
        c.arm(n);
        timed(
            5,
            &mut || {
                let mut left = n;
                while left > 0 {
                    let k = left.min(256);
                    wb.spawn_batch((0..k).map(|_| move || c.hit())).expect("spawn_batch");
                    left -= k;
                }
            },
            &mut || c.wait(),
        )
    }));
    let res = run_rounds(&mut cs, 1, cfg.reps, pacing(cfg));
    let stats = vec![ws_stats_line(&cs[0].name, &ws), ws_stats_line(&cs[1].name, &wg), ws_stats_line(&cs[5].name, &wb)];
    for (k, r) in submit_rates.iter().enumerate() {
        // Warm-up and repeated runs are in here too; the median shrugs them off.
        if let Some(sm) = summarize(&r.borrow()) {
            cs[k].note += &format!("; submit phase alone {} M/s", fmt(sm.median, 1));
        }
    }
    let title = format!(
        "W1 flood: {n} tiny tasks (a relaxed `fetch_add`) from a foreign thread, then wait for all (M tasks/s, higher is better)"
    );
    let (sums, best) =
        print_single(&title, Metric { unit: "M tasks/s", higher_is_better: true, digits: 2 }, &cs, &res.values);
    println!("{}", background(&res, &stats));
    let ws_best =
        cs.iter().enumerate().filter(|(_, c)| c.is_wspool).max_by(|a, b| sums[a.0].median.total_cmp(&sums[b.0].median));
    if let (Some((i, c)), Some(b)) = (ws_best, best) {
        let v = sums[i].median;
        report.target("W1 flood ≥ 20 M tasks/s", format!("{} M/s ({})", fmt(v, 2), c.name), Some(v >= 20.0));
        let r = v / sums[b].median;
        report.target(
            "W1 flood ≥ 2× best peer",
            format!("{}× {} ({} M/s)", fmt(r, 2), cs[b].name, fmt(sums[b].median, 2)),
            Some(r >= 2.0),
        );
    } else {
        report.target("W1 flood", "wspool not built".into(), None);
    }
}

// ---------------------------------------------------------------------------
// W2 fork-join fib(n), every level forked.

fn fib_ws_scope(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let mut a = 0;
    let b = p.scope(|s| {
        s.spawn(|| a = fib_ws_scope(p, n - 1));
        fib_ws_scope(p, n - 2)
    });
    a + b
}

fn fib_ws_group(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let slot = Arc::new(AtomicU64::new(0));
    let g = p.group();
    let (p2, s2) = (p.clone(), slot.clone());
    g.spawn(move || s2.store(fib_ws_group(&p2, n - 1), Ordering::Relaxed)).expect("group spawn");
    let b = fib_ws_group(p, n - 2);
    g.wait().expect("group wait");
    slot.load(Ordering::Relaxed) + b
}

fn fib_ws_group_scope(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let slot = Arc::new(AtomicU64::new(0));
    let b = p.group_scope(|g| {
        let (p2, s2) = (p.clone(), slot.clone());
        g.spawn(move || s2.store(fib_ws_group_scope(&p2, n - 1), Ordering::Relaxed)).expect("group spawn");
        let b = fib_ws_group_scope(p, n - 2);
        g.wait().expect("group wait");
        b
    });
    slot.load(Ordering::Relaxed) + b
}

fn fib_ws_handle(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let p2 = p.clone();
    let h = p.submit(move || fib_ws_handle(&p2, n - 1)).expect("submit");
    let b = fib_ws_handle(p, n - 2);
    h.wait().expect("task") + b
}

fn fib_rayon_join(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| fib_rayon_join(n - 1), || fib_rayon_join(n - 2));
    a + b
}

fn fib_rayon_scope(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let mut a = 0;
    let b = rayon::scope(|s| {
        s.spawn(|_| a = fib_rayon_scope(n - 1));
        fib_rayon_scope(n - 2)
    });
    a + b
}

fn w2_fib(cfg: &Config, report: &mut Report) {
    let n = 25;
    let expect = fib_seq(n);
    let th = cfg.threads;
    let ms = |dt: Duration| dt.as_secs_f64() * 1e3;
    let mut wss: Vec<wspool::Pool> =
        ["wsb2j", "wsb2s", "wsb2g", "wsb2l", "wsb2h"].iter().map(|name| ws_pool(name, th)).collect();
    // The same `join` on a pool that cannot grow: shows what growth costs here.
    wss.push(
        wspool::Pool::builder()
            .name("wsb2f")
            .min_threads(th)
            .growth(wspool::Growth::Fixed)
            .build()
            .expect("wspool fixed pool"),
    );
    let rp = rayon_pool("rayb2-", th);
    let mut cs: Vec<Contender<'_, f64>> = Vec::new();
    {
        type Fib = fn(&wspool::Pool, u32) -> u64;
        let variants: [(&str, &str, Fib); 6] = [
            ("wspool join", "`Pool::join` at every level, started by one `submit` + `wait`", fib_join),
            ("wspool scope", "`Pool::scope` + `Scope::spawn` of one branch per level", fib_ws_scope),
            (
                "wspool group",
                "`Group::spawn` of one branch + `Group::wait` per level (an `Arc` slot + a pool clone per level)",
                fib_ws_group,
            ),
            (
                "wspool group_scope",
                "`Pool::group_scope` per level: the group on the stack (still an `Arc` slot + a pool clone per level)",
                fib_ws_group_scope,
            ),
            ("wspool submit", "`Pool::submit` of one branch + `TaskHandle::wait` per level", fib_ws_handle),
            ("wspool join, Fixed", "as `wspool join`, on a pool built with `Growth::Fixed`", fib_join),
        ];
        for ((name, note, f), ws) in variants.into_iter().zip(&wss) {
            cs.push(Contender::new(name, note, true, move || {
                let p = ws.clone();
                let t0 = Instant::now();
                let r = ws.submit(move || f(&p, n)).expect("submit").wait().expect("fib task");
                let dt = t0.elapsed();
                assert_eq!(r, expect);
                ms(dt)
            }));
        }
    }
    cs.push(Contender::new("rayon join", "`ThreadPool::install` + `rayon::join` at every level", false, || {
        let t0 = Instant::now();
        let r = rp.install(|| fib_rayon_join(n));
        let dt = t0.elapsed();
        assert_eq!(r, expect);
        ms(dt)
    }));
    cs.push(Contender::new("rayon scope", "`rayon::scope` + `Scope::spawn` of one branch per level", false, || {
        let t0 = Instant::now();
        let r = rp.install(|| fib_rayon_scope(n));
        let dt = t0.elapsed();
        assert_eq!(r, expect);
        ms(dt)
    }));
    cs.push(
        Contender::new("sequential", "plain recursion on one thread (reference, not a peer)", false, || {
            let t0 = Instant::now();
            let r = fib_seq(std::hint::black_box(n));
            let dt = t0.elapsed();
            assert_eq!(r, expect);
            ms(dt)
        })
        .as_reference(),
    );
    let reps = cfg.reps * 3; // each run is a few milliseconds
    let res = run_rounds(&mut cs, 2, reps, pacing(cfg));
    let stats: Vec<String> = wss.iter().enumerate().map(|(i, ws)| ws_stats_line(&cs[i].name, ws)).collect();
    let title = format!("W2 fork-join fib({n}), every level forked (ms, lower is better; {reps} repetitions)");
    let (sums, _) = print_single(&title, Metric { unit: "ms", higher_is_better: false, digits: 2 }, &cs, &res.values);
    println!("{}", background(&res, &stats));
    match (idx(&cs, "wspool join"), idx(&cs, "rayon join")) {
        (Some(w), Some(r)) => {
            let ratio = sums[w].median / sums[r].median;
            report.target(
                "W2 fib(25) `join` ≤ 1.5× `rayon::join` time",
                format!("{}× ({} ms vs {} ms)", fmt(ratio, 2), fmt(sums[w].median, 2), fmt(sums[r].median, 2)),
                Some(ratio <= 1.5),
            );
        }
        _ => report.target("W2 fib(25) join", "wspool not built".into(), None),
    }
}

// ---------------------------------------------------------------------------
// W3 ping-pong: submit one task, wait for it, many times.

/// Runs `one` `iters` times, timing each; returns (p50, p99) in µs.
fn latencies(iters: usize, mut one: impl FnMut()) -> (f64, f64) {
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        one();
        v.push(t0.elapsed().as_nanos() as u64);
    }
    v.sort_unstable();
    let us = |p| percentile(&v, p).expect("samples") as f64 / 1e3;
    (us(50.0), us(99.0))
}

fn w3_ping_pong(cfg: &Config, report: &mut Report) {
    let iters = cfg.size(50_000, 5_000);
    let th = cfg.threads;
    let ws = ws_pool("wsb3h", th);
    let wc = ws_pool("wsb3c", th);
    let rp = rayon_pool("rayb3-", th);
    let tp = tp_pool("tpb3", th);
    let rt = tokio_rt("tokb3", th);
    let (tx, rx) = mpsc::channel::<u32>();
    let (tx, rx) = (&tx, &rx);
    let mut cs: Vec<Contender<'_, (f64, f64)>> = Vec::new();
    {
        cs.push(Contender::new(
            "wspool submit+wait",
            "`Pool::submit` + `TaskHandle::wait` from a foreign thread",
            true,
            || {
                latencies(iters, || {
                    let r = ws.submit(|| 1u32).expect("submit").wait().expect("task");
                    assert_eq!(r, 1);
                })
            },
        ));
        cs.push(Contender::new(
            "wspool spawn+channel",
            "`Pool::spawn` + std `mpsc` channel, as the peers",
            true,
            || {
                latencies(iters, || {
                    let tx = tx.clone();
                    wc.spawn(move || tx.send(1).expect("send")).expect("spawn");
                    assert_eq!(rx.recv().expect("recv"), 1);
                })
            },
        ));
    }
    cs.push(Contender::new("rayon", "`ThreadPool::spawn` + std `mpsc` channel", false, || {
        latencies(iters, || {
            let tx = tx.clone();
            rp.spawn(move || tx.send(1).expect("send"));
            assert_eq!(rx.recv().expect("recv"), 1);
        })
    }));
    cs.push(Contender::new("threadpool", "`ThreadPool::execute` + std `mpsc` channel", false, || {
        latencies(iters, || {
            let tx = tx.clone();
            tp.execute(move || tx.send(1).expect("send"));
            assert_eq!(rx.recv().expect("recv"), 1);
        })
    }));
    cs.push(Contender::new("tokio", "`Handle::spawn(async {..})` + std `mpsc` channel", false, || {
        let h = rt.handle();
        latencies(iters, || {
            let tx = tx.clone();
            drop(h.spawn(async move { tx.send(1).expect("send") }));
            assert_eq!(rx.recv().expect("recv"), 1);
        })
    }));
    cs.push(Contender::new("tokio block_on", "`Runtime::block_on(Handle::spawn(async {..}))`", false, || {
        let h = rt.handle();
        latencies(iters, || {
            let r = rt.block_on(h.spawn(async { 1u32 })).expect("join");
            assert_eq!(r, 1);
        })
    }));
    let res = run_rounds(&mut cs, 1, cfg.reps, pacing(cfg));
    let stats = vec![ws_stats_line(&cs[0].name, &ws), ws_stats_line(&cs[1].name, &wc)];
    let p50: Vec<Summary> =
        res.values.iter().map(|v| summarize(&v.iter().map(|x| x.0).collect::<Vec<_>>()).expect("p50")).collect();
    let p99: Vec<Summary> =
        res.values.iter().map(|v| summarize(&v.iter().map(|x| x.1).collect::<Vec<_>>()).expect("p99")).collect();
    let best = (0..cs.len()).filter(|&i| cs[i].is_peer()).min_by(|&a, &b| p50[a].median.total_cmp(&p50[b].median));
    let mut t = Table::new(&[
        "Implementation",
        ">p50 µs",
        ">p50 min–max",
        ">p99 µs",
        ">p99 min–max",
        ">p50 ÷ best peer",
        "How",
    ]);
    for (i, c) in cs.iter().enumerate() {
        t.row(&[
            if c.is_wspool { format!("**{}**", c.name) } else { c.name.clone() },
            fmt(p50[i].median, 1),
            format!("{}–{}", fmt(p50[i].min, 1), fmt(p50[i].max, 1)),
            fmt(p99[i].median, 1),
            format!("{}–{}", fmt(p99[i].min, 1), fmt(p99[i].max, 1)),
            best.map(|b| fmt(p50[i].median / p50[b].median, 2) + "×").unwrap_or_default(),
            c.note.clone(),
        ]);
    }
    println!(
        "### W3 ping-pong: submit one task, wait for it; {iters} round trips per repetition (µs, lower is better; median of the per-repetition percentiles)\n\n{}",
        t.render()
    );
    println!("{}", background(&res, &stats));
    match (idx(&cs, "wspool submit+wait"), best) {
        (Some(w), Some(b)) => {
            let ws_best = [Some(w), idx(&cs, "wspool spawn+channel")]
                .into_iter()
                .flatten()
                .min_by(|&a, &b| p50[a].median.total_cmp(&p50[b].median))
                .unwrap_or(w);
            let r = p50[ws_best].median / p50[b].median;
            report.target(
                "W3 ping-pong p50 ≤ 0.5× best peer p50",
                format!(
                    "{}× ({} µs {} vs {} µs {}); p99 {} µs",
                    fmt(r, 2),
                    fmt(p50[ws_best].median, 1),
                    cs[ws_best].name,
                    fmt(p50[b].median, 1),
                    cs[b].name,
                    fmt(p99[ws_best].median, 1)
                ),
                Some(r <= 0.5),
            );
        }
        _ => report.target("W3 ping-pong", "wspool not built".into(), None),
    }
}

// ---------------------------------------------------------------------------
// W4 nested: R root tasks each spawn C children and wait for them.

fn w4_nested(cfg: &Config, report: &mut Report) {
    let roots = cfg.size(200, 50);
    let children = 1_000;
    let total = roots * (children + 1);
    let th = cfg.threads;
    let c = Countdown::leak();
    let per_s = |dt: Duration| total as f64 / dt.as_secs_f64() / 1e6;
    let ws = ws_pool("wsb4g", th);
    let wsc = ws_pool("wsb4s", th);
    let wsl = ws_pool("wsb4l", th);
    let rp = rayon_pool("rayb4-", th);
    let rt = tokio_rt("tokb4", th);
    let mut cs: Vec<Contender<'_, f64>> = Vec::new();
    {
        cs.push(Contender::new(
            "wspool group",
            "roots: `Group::spawn` from the main thread; each root: a `Group` of children + `Group::wait`",
            true,
            || {
                c.arm(total);
                let t0 = Instant::now();
                let outer = ws.group();
                for _ in 0..roots {
                    let p = ws.clone();
                    outer
                        .spawn(move || {
                            let g = p.group();
                            for _ in 0..children {
                                g.spawn(move || c.bump()).expect("spawn child");
                            }
                            g.wait().expect("children");
                            c.bump();
                        })
                        .expect("spawn root");
                }
                outer.wait().expect("roots");
                let r = per_s(t0.elapsed());
                assert_eq!(c.count(), total);
                r
            },
        ));
        cs.push(Contender::new(
            "wspool scope",
            "`Pool::scope` of roots; each root: a nested `Pool::scope` of children",
            true,
            || {
                c.arm(total);
                let ws = &wsc;
                let t0 = Instant::now();
                ws.scope(|s| {
                    for _ in 0..roots {
                        s.spawn(move || {
                            ws.scope(|s2| {
                                for _ in 0..children {
                                    s2.spawn(move || c.bump());
                                }
                            });
                            c.bump();
                        });
                    }
                });
                let r = per_s(t0.elapsed());
                assert_eq!(c.count(), total);
                r
            },
        ));
        cs.push(Contender::new(
            "wspool group_scope",
            "roots: `Group::spawn` from the main thread; each root: `Pool::group_scope` of children + `LocalGroup::wait`",
            true,
            || {
                c.arm(total);
                let t0 = Instant::now();
                w4_group_scope(&wsl, roots, children, move || c.bump(), move || c.bump());
                let r = per_s(t0.elapsed());
                assert_eq!(c.count(), total);
                r
            },
        ));
    }
    cs.push(Contender::new(
        "rayon spawn+scope",
        "roots: `ThreadPool::spawn`; each root: `rayon::scope` of children; the last root signals",
        false,
        || {
            c.arm(total);
            let t0 = Instant::now();
            for _ in 0..roots {
                rp.spawn(move || {
                    rayon::scope(|s| {
                        for _ in 0..children {
                            s.spawn(move |_| c.bump());
                        }
                    });
                    c.hit();
                });
            }
            c.wait();
            per_s(t0.elapsed())
        },
    ));
    cs.push(Contender::new(
        "rayon scope+scope",
        "`ThreadPool::scope` of roots; each root: `rayon::scope` of children",
        false,
        || {
            c.arm(total);
            let t0 = Instant::now();
            rp.scope(|s| {
                for _ in 0..roots {
                    s.spawn(move |_| {
                        rayon::scope(|s2| {
                            for _ in 0..children {
                                s2.spawn(move |_| c.bump());
                            }
                        });
                        c.bump();
                    });
                }
            });
            let r = per_s(t0.elapsed());
            assert_eq!(c.count(), total);
            r
        },
    ));
    cs.push(Contender::new(
        "tokio",
        "roots: `Handle::spawn`; each root: `tokio::spawn` children, awaits their JoinHandles",
        false,
        || {
            c.arm(total);
            let h = rt.handle();
            let t0 = Instant::now();
            for _ in 0..roots {
                drop(h.spawn(async move {
                    let hs: Vec<_> = (0..children).map(|_| tokio::spawn(async move { c.bump() })).collect();
                    for j in hs {
                        j.await.expect("child");
                    }
                    c.hit();
                }));
            }
            c.wait();
            per_s(t0.elapsed())
        },
    ));
    let res = run_rounds(&mut cs, 1, cfg.reps, pacing(cfg));
    let stats =
        vec![ws_stats_line(&cs[0].name, &ws), ws_stats_line(&cs[1].name, &wsc), ws_stats_line(&cs[2].name, &wsl)];
    let title = format!(
        "W4 nested: {roots} root tasks each spawn {children} children and wait for them ({total} tasks; M tasks/s, higher is better; \
         `threadpool` has no nested wait: a root blocking a worker would deadlock it)"
    );
    let (sums, _) =
        print_single(&title, Metric { unit: "M tasks/s", higher_is_better: true, digits: 2 }, &cs, &res.values);
    println!("{}", background(&res, &stats));
    let ws_best =
        cs.iter().enumerate().filter(|(_, c)| c.is_wspool).max_by(|a, b| sums[a.0].median.total_cmp(&sums[b.0].median));
    match ws_best {
        Some((i, c)) => report.target(
            "W4 nested ≥ 15 M tasks/s",
            format!("{} M/s ({})", fmt(sums[i].median, 2), c.name),
            Some(sums[i].median >= 15.0),
        ),
        None => report.target("W4 nested", "wspool not built".into(), None),
    }
}

// ---------------------------------------------------------------------------
// W5 idle: CPU used by the pool's threads in the window after a W1 flood.

fn w5_idle(cfg: &Config, report: &mut Report) {
    let n = cfg.size(1_000_000, 100_000);
    let window = Duration::from_millis(cfg.size(2_000, 500) as u64);
    let reps = cfg.reps.min(3);
    let th = cfg.threads;
    let c = Countdown::leak();

    /// Floods `pool` with `n` tasks through `spawn`, waits, then measures the
    /// CPU of the threads named `prefix*` over `window`: ms CPU per second.
    fn measure(
        prefix: &str,
        window: Duration,
        flood: &mut dyn FnMut(),
        foreign: &mut Vec<f64>,
    ) -> (Vec<cpu::ThreadCpu>, bool) {
        flood();
        let (before, precise) = cpu::snapshot(prefix);
        let probe = load::Probe::start();
        std::thread::sleep(window);
        if let Some((f, w)) = probe.and_then(|p| p.finish()) {
            foreign.push(f.max(0) as f64 / w as f64);
        }
        let (after, precise2) = cpu::snapshot(prefix);
        (cpu::delta(&before, &after), precise && precise2)
    }

    let per_s = |ns: u64| ns as f64 / 1e6 / window.as_secs_f64();
    let mut t = Table::new(&[
        "Implementation",
        ">CPU ms per s (median)",
        ">Min–max",
        ">Threads",
        "Per thread, ms per s (the median window)",
        "How",
    ]);
    let mut all_precise = true;
    let mut ws_value: Option<f64> = None;
    let mut foreign = Vec::new();
    type Flood<'a> = Box<dyn FnMut() + 'a>;
    let mut run = |name: &str, note: &str, prefix: &str, is_ws: bool, flood: &mut Flood<'_>| {
        let mut windows = Vec::new();
        for _ in 0..reps {
            std::thread::sleep(SETTLE);
            let (threads, p) = measure(prefix, window, flood, &mut foreign);
            all_precise &= p;
            windows.push((per_s(threads.iter().map(|t| t.ns).sum()), threads));
        }
        let vals: Vec<f64> = windows.iter().map(|w| w.0).collect();
        let s = summarize(&vals).expect("idle samples");
        if is_ws {
            ws_value = Some(s.median);
        }
        windows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (_, mid) = &windows[windows.len() / 2];
        let detail: Vec<String> = mid.iter().map(|t| format!("{} {}", t.name, fmt(per_s(t.ns), 3))).collect();
        t.row(&[
            if is_ws { format!("**{name}**") } else { name.to_owned() },
            fmt(s.median, 3),
            format!("{}–{}", fmt(s.min, 3), fmt(s.max, 3)),
            mid.len().to_string(),
            detail.join(", "),
            note.to_owned(),
        ]);
    };
    {
        let ws = ws_pool("wsb5", th);
        let mut f: Flood<'_> = Box::new(|| {
            c.arm(n);
            for _ in 0..n {
                ws.spawn(move || c.hit()).expect("spawn");
            }
            c.wait();
        });
        run("wspool", "all threads named `wsb5-*` (workers and any helper thread)", "wsb5-", true, &mut f);
        drop(f);
    }
    {
        let rp = rayon_pool("rayb5-", th);
        let mut f: Flood<'_> = Box::new(|| {
            c.arm(n);
            for _ in 0..n {
                rp.spawn(move || c.hit());
            }
            c.wait();
        });
        run("rayon", "worker threads", "rayb5-", false, &mut f);
    }
    {
        let tp = tp_pool("tpb5", th);
        let mut f: Flood<'_> = Box::new(|| {
            c.arm(n);
            for _ in 0..n {
                tp.execute(move || c.hit());
            }
            c.wait();
        });
        run("threadpool", "worker threads", "tpb5", false, &mut f);
    }
    {
        let rt = tokio_rt("tokb5", th);
        let h = rt.handle().clone();
        let mut f: Flood<'_> = Box::new(move || {
            c.arm(n);
            for _ in 0..n {
                drop(h.spawn(async move { c.hit() }));
            }
            c.wait();
        });
        run("tokio", "worker threads", "tokb5", false, &mut f);
        drop(f);
        drop(rt);
    }
    println!(
        "### W5 idle: CPU used by each pool's threads in the {} s after a {n}-task flood ({reps} windows; \
         from `/proc/self/task/*/schedstat`{})\n\n{}",
        window.as_secs_f64(),
        if all_precise { "" } else { "; some figures from `stat` clock ticks, 10 ms resolution" },
        t.render()
    );
    if let Some(f) = summarize(&foreign) {
        println!(
            "_Background: other processes used {} CPU cores on average during the idle windows._\n",
            fmt(f.median, 2)
        );
    }
    match ws_value {
        Some(v) => report.target("W5 idle ≤ 0.2 ms CPU per second", format!("{} ms/s", fmt(v, 3)), Some(v <= 0.2)),
        None => report.target("W5 idle", "wspool not built".into(), None),
    }
}

// ---------------------------------------------------------------------------
// W6 growth: 200 tasks each sleeping 10 ms, on a small pool.

fn w6_growth(cfg: &Config, report: &mut Report) {
    let n = 200;
    let nap = Duration::from_millis(10);
    let fixed = 4;
    let reps = cfg.reps;
    let c = Countdown::leak();
    let ms = |dt: Duration| dt.as_secs_f64() * 1e3;
    // Pool creation is not timed: each repetition builds a fresh pool, lets
    // its threads start, then times from the first submit to the last finish.
    let warm = Duration::from_millis(20);
    let peaks: [RefCell<Vec<wspool::Stats>>; 2] = [RefCell::new(Vec::new()), RefCell::new(Vec::new())];
    let mut cs: Vec<Contender<'_, f64>> = Vec::new();
    {
        for (k, declared) in [(0usize, true), (1, false)] {
            let peaks = &peaks;
            let (name, note) = if declared {
                ("wspool blocking", "min 2 threads, default max; each task `wspool::blocking(|| sleep(10 ms))`")
            } else {
                (
                    "wspool undeclared",
                    "min 2 threads, default max; plain `sleep(10 ms)`: only the starvation monitor can help",
                )
            };
            cs.push(Contender::new(name, note, true, move || {
                let ws = ws_pool("wsb6", 2);
                std::thread::sleep(warm);
                let g = ws.group();
                let t0 = Instant::now();
                for _ in 0..n {
                    if declared {
                        g.spawn(move || wspool::blocking(|| std::thread::sleep(nap))).expect("spawn");
                    } else {
                        g.spawn(move || std::thread::sleep(nap)).expect("spawn");
                    }
                }
                g.wait().expect("group");
                let dt = ms(t0.elapsed());
                peaks[k].borrow_mut().push(ws.stats());
                dt
            }));
        }
    }
    cs.push(Contender::new("rayon", "fixed 4 threads, `ThreadPool::spawn`", false, || {
        let rp = rayon_pool("rayb6-", fixed);
        std::thread::sleep(warm);
        c.arm(n);
        let t0 = Instant::now();
        for _ in 0..n {
            rp.spawn(move || {
                std::thread::sleep(nap);
                c.hit();
            });
        }
        c.wait();
        ms(t0.elapsed())
    }));
    cs.push(Contender::new("threadpool", "fixed 4 threads, `ThreadPool::execute`", false, || {
        let tp = tp_pool("tpb6", fixed);
        std::thread::sleep(warm);
        c.arm(n);
        let t0 = Instant::now();
        for _ in 0..n {
            tp.execute(move || {
                std::thread::sleep(nap);
                c.hit();
            });
        }
        c.wait();
        ms(t0.elapsed())
    }));
    cs.push(Contender::new(
        "tokio spawn_blocking",
        "2 workers; `spawn_blocking` (a separate blocking pool of up to 512 threads; reference, not a fixed-size peer)",
        false,
        || {
            let rt = tokio_rt("tokb6", 2);
            std::thread::sleep(warm);
            c.arm(n);
            let h = rt.handle();
            let t0 = Instant::now();
            for _ in 0..n {
                drop(h.spawn_blocking(move || {
                    std::thread::sleep(nap);
                    c.hit();
                }));
            }
            c.wait();
            ms(t0.elapsed())
        },
    )
    .as_reference());
    let res = run_rounds(&mut cs, 1, reps, pacing(cfg));
    let range = |v: &[wspool::Stats], f: fn(&wspool::Stats) -> u64| {
        let lo = v.iter().map(f).min().unwrap_or(0);
        let hi = v.iter().map(f).max().unwrap_or(0);
        if lo == hi { lo.to_string() } else { format!("{lo}–{hi}") }
    };
    let stats: Vec<String> = peaks
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let v = p.borrow();
            format!(
                "`{}` per run: peak threads {}, threads started {}, starvation injections {}",
                cs[k].name,
                range(&v, |s| s.peak_threads as u64),
                range(&v, |s| s.threads_started),
                range(&v, |s| s.starvation_injections)
            )
        })
        .collect();
    let title = format!(
        "W6 growth: {n} tasks each sleeping {} ms, submitted from a foreign thread (ms wall, lower is better)",
        nap.as_millis()
    );
    let (sums, _) = print_single(&title, Metric { unit: "ms", higher_is_better: false, digits: 1 }, &cs, &res.values);
    println!("{}", background(&res, &stats));
    match (idx(&cs, "wspool blocking"), idx(&cs, "wspool undeclared")) {
        (Some(a), Some(b)) => {
            report.target(
                "W6a declared `blocking` ≤ 25 ms",
                format!("{} ms", fmt(sums[a].median, 1)),
                Some(sums[a].median <= 25.0),
            );
            report.target(
                "W6b undeclared (monitor only) ≤ 120 ms",
                format!("{} ms", fmt(sums[b].median, 1)),
                Some(sums[b].median <= 120.0),
            );
        }
        _ => report.target("W6 growth", "wspool not built".into(), None),
    }
}
