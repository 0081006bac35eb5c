//! A peer in the C benchmark run (`make bench-c`): W1, W2, W3, W4 and W7
//! through wspool's Rust API or through rayon, and W1 and W7 through
//! tokio's runtime (`Handle::spawn`), measured as `bench/c/common.h`
//! measures the C peers and printed in its "KEY VALUE" lines, so that
//! `bench/c/report.py` compares them with oneTBB's figures from the same
//! interleaved rounds (issue 15: "Rust W4 ≥ 1× oneTBB's figure from the C
//! run"). Usage: `c_run_peer wspool|rayon|tokio`; `BENCH_THREADS` worker threads
//! each (default 2), as the C peers.
//!
//! W2 and W4 run once unmeasured, then `W_REPS` times, and print the
//! median (`warm_median` in common.h); W1 runs once per process, as the C
//! floods do.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use wspool_bench::Countdown;
use wspool_bench::workloads::{fib_join, fib_seq, w4_group_scope};

// The sizes of bench/c/common.h.
const W1_TASKS: usize = 1_000_000;
const W2_FIB: u32 = 25;
const W4_ROOTS: usize = 200;
const W4_CHILDREN: usize = 1_000;
const W_WARM: usize = 1;
const W_REPS: usize = 5;
const W3_ROUNDS: usize = 50_000;
const W7_PRODUCERS: usize = 4;
const W7_TASKS_EACH: usize = 250_000;

/// Worker threads per pool: `BENCH_THREADS` as `bench_threads()` in common.h.
fn threads() -> usize {
    std::env::var("BENCH_THREADS").ok().and_then(|s| s.parse().ok()).filter(|&n| n > 0).unwrap_or(2)
}

/// W3: `round_trip` hands one empty task to the pool and returns once it
/// ran; prints p50/p99 as `report_latency` in common.h.
fn w3(mut round_trip: impl FnMut()) {
    let mut ns: Vec<u128> = (0..W3_ROUNDS)
        .map(|_| {
            let t0 = Instant::now();
            round_trip();
            t0.elapsed().as_nanos()
        })
        .collect();
    ns.sort_unstable();
    println!("W3_p50_us {:.2}", ns[W3_ROUNDS / 2] as f64 / 1e3);
    println!("W3_p99_us {:.2}", ns[W3_ROUNDS * 99 / 100] as f64 / 1e3);
}

/// W4's count, on a cache line of its own (as `flood` in flood_task.h).
#[repr(align(64))]
struct Kids(AtomicU64);
static KIDS: Kids = Kids(AtomicU64::new(0));

fn kid() {
    KIDS.0.fetch_add(1, Ordering::Relaxed);
}

fn warm_median(mut measure: impl FnMut() -> f64) -> f64 {
    for _ in 0..W_WARM {
        measure();
    }
    let mut v: Vec<f64> = (0..W_REPS).map(|_| measure()).collect();
    v.sort_by(f64::total_cmp);
    v[W_REPS / 2]
}

fn w1_mtps(flood: impl FnOnce(&'static Countdown)) -> f64 {
    let c = Countdown::leak();
    c.arm(W1_TASKS);
    let t0 = Instant::now();
    flood(c);
    c.wait();
    W1_TASKS as f64 / t0.elapsed().as_secs_f64() / 1e6
}

/// W7: `W7_PRODUCERS` threads, released together, each calling `produce`
/// (`W7_TASKS_EACH` submissions of `Countdown::hit`); timed from their
/// release to the last task's completion, as `w7_start` in common.h.
fn w7_mtps(produce: impl Fn(&'static Countdown) + Sync) -> f64 {
    let total = W7_PRODUCERS * W7_TASKS_EACH;
    let c = Countdown::leak();
    c.arm(total);
    let go = std::sync::Barrier::new(W7_PRODUCERS + 1);
    std::thread::scope(|s| {
        for _ in 0..W7_PRODUCERS {
            s.spawn(|| {
                go.wait();
                produce(c);
            });
        }
        go.wait();
        let t0 = Instant::now();
        c.wait();
        total as f64 / t0.elapsed().as_secs_f64() / 1e6
    })
}

/// W4 with detached children: `spawn_roots` submits `W4_ROOTS` roots that
/// each spawn `W4_CHILDREN` children calling `Countdown::hit`; timed until
/// the last child ran.
fn w4d_mtps(spawn_roots: impl FnOnce(&'static Countdown)) -> f64 {
    let c = Countdown::leak();
    c.arm(W4_ROOTS * W4_CHILDREN);
    let t0 = Instant::now();
    spawn_roots(c);
    c.wait();
    (W4_ROOTS * (W4_CHILDREN + 1)) as f64 / t0.elapsed().as_secs_f64() / 1e6
}

fn w2_ms(fib: impl Fn(u32) -> u64) -> f64 {
    let t0 = Instant::now();
    let r = fib(black_box(W2_FIB));
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(r, fib_seq(W2_FIB), "fib wrong");
    ms
}

fn w4_mtps(run: impl FnOnce()) -> f64 {
    KIDS.0.store(0, Ordering::Relaxed);
    let t0 = Instant::now();
    run();
    let dt = t0.elapsed();
    assert_eq!(KIDS.0.load(Ordering::Relaxed), (W4_ROOTS * W4_CHILDREN) as u64, "W4 count wrong");
    (W4_ROOTS * (W4_CHILDREN + 1)) as f64 / dt.as_secs_f64() / 1e6
}

fn wspool_peer() {
    let pool = wspool::Pool::builder()
        .name("c-peer")
        .min_threads(threads())
        .max_threads(threads())
        .growth(wspool::Growth::Fixed)
        .build()
        .expect("pool");
    println!("W1_mtps {:.2}", w1_mtps(|c| (0..W1_TASKS).for_each(|_| pool.spawn(move || c.hit()).expect("spawn"))));

    // From a foreign thread, as the C run's `wspool_submit_ex` + wait.
    println!(
        "W2_ms {:.2}",
        warm_median(|| {
            w2_ms(|n| {
                let p = pool.clone();
                pool.submit(move || fib_join(&p, n)).expect("submit").wait().expect("fib")
            })
        })
    );

    // As the C run's `wspool_submit_ex` + `wspool_task_wait`.
    w3(|| pool.submit(|| ()).expect("submit").wait().expect("nop"));

    // As the C run: the roots through a heap group, each root's children
    // through a group on its stack.
    println!("W4_mtps {:.2}", warm_median(|| w4_mtps(|| w4_group_scope(&pool, W4_ROOTS, W4_CHILDREN, kid, || {}))));

    println!(
        "W4d_mtps {:.2}",
        warm_median(|| {
            w4d_mtps(|c| {
                for _ in 0..W4_ROOTS {
                    let p = pool.clone();
                    pool.spawn(move || (0..W4_CHILDREN).for_each(|_| p.spawn(move || c.hit()).expect("child")))
                        .expect("root");
                }
            })
        })
    );

    println!(
        "W7_mtps {:.2}",
        w7_mtps(|c| (0..W7_TASKS_EACH).for_each(|_| pool.spawn(move || c.hit()).expect("spawn")))
    );
}

fn rayon_peer() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .thread_name(|i| format!("c-peer-rayon{i}"))
        .build()
        .expect("rayon pool");
    println!("W1_mtps {:.2}", w1_mtps(|c| (0..W1_TASKS).for_each(|_| pool.spawn(move || c.hit()))));

    fn fib(n: u32) -> u64 {
        if n < 2 {
            return n as u64;
        }
        let (a, b) = rayon::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }
    println!("W2_ms {:.2}", warm_median(|| w2_ms(|n| pool.install(|| fib(n)))));

    // rayon's round trip from a foreign thread: `install` injects the job
    // and blocks on a latch until a worker ran it.
    w3(|| pool.install(|| ()));

    println!(
        "W4_mtps {:.2}",
        warm_median(|| {
            w4_mtps(|| {
                pool.scope(|roots| {
                    for _ in 0..W4_ROOTS {
                        roots.spawn(|_| {
                            rayon::scope(|kids| {
                                for _ in 0..W4_CHILDREN {
                                    kids.spawn(|_| kid());
                                }
                            })
                        });
                    }
                })
            })
        })
    );

    println!(
        "W4d_mtps {:.2}",
        warm_median(|| {
            w4d_mtps(|c| {
                for _ in 0..W4_ROOTS {
                    pool.spawn(move || (0..W4_CHILDREN).for_each(|_| rayon::spawn(move || c.hit())));
                }
            })
        })
    );

    println!("W7_mtps {:.2}", w7_mtps(|c| (0..W7_TASKS_EACH).for_each(|_| pool.spawn(move || c.hit()))));
}

/// tokio's multi-threaded runtime as a pool of `BENCH_THREADS` workers:
/// tasks spawned from foreign threads through its `Handle` (what an
/// HTTP server's blocking work would use without a pool).
fn tokio_peer() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads())
        .thread_name("c-peer-tokio")
        .build()
        .expect("tokio runtime");
    let h = rt.handle();
    println!("W1_mtps {:.2}", w1_mtps(|c| (0..W1_TASKS).for_each(|_| drop(h.spawn(async move { c.hit() })))));
    println!("W7_mtps {:.2}", w7_mtps(|c| (0..W7_TASKS_EACH).for_each(|_| drop(h.spawn(async move { c.hit() })))));
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("wspool") => wspool_peer(),
        Some("rayon") => rayon_peer(),
        Some("tokio") => tokio_peer(),
        _ => {
            eprintln!("usage: c_run_peer wspool|rayon|tokio");
            std::process::exit(2);
        }
    }
}
