//! W1, W2 and W4 of `make bench`, through only the API every revision since
//! the first round has (`Pool::builder`, `spawn`, `join`, `group`, `scope`),
//! with rayon in the same process for W2 and W4. `bench/tools/core_ab.sh`
//! builds it against two trees and runs the builds in turns.
//!
//! Usage: wspool-core-ab REPS [w1] [w2] [w4] (default: all three). Prints
//! one line per workload: the median of REPS runs (M tasks/s, or ms for W2)
//! and the median ratio to rayon.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

static COUNT: AtomicUsize = AtomicUsize::new(0);
const FLOOD: usize = 1_000_000;
static FLOOD_DONE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

fn bump() {
    COUNT.fetch_add(1, Relaxed);
}

/// W1's task: the last one signals the waiting submitter, as in the
/// compare bench (a spinning submitter would take a core from the workers).
fn flood_task() {
    if COUNT.fetch_add(1, Relaxed) + 1 == FLOOD {
        *FLOOD_DONE.0.lock().unwrap() = true;
        FLOOD_DONE.1.notify_one();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn fib_join(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = p.join(|| fib_join(p, n - 1), || fib_join(p, n - 2));
    a + b
}

fn fib_rayon(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

const ROOTS: usize = 200;
const CHILDREN: usize = 1000;

fn m_per_s(tasks: usize, t0: Instant) -> f64 {
    tasks as f64 / t0.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(9);
    let want = |w: &str| args.len() <= 1 || args[1..].iter().any(|a| a == w);
    let threads = 2;
    let pool = || wspool::Pool::builder().min_threads(threads).build().expect("pool");
    let (w1, w2, w4g, w4s) = (pool(), pool(), pool(), pool());
    let rp = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("rayon");
    let mut rows: [(&str, Vec<f64>, Vec<f64>); 4] = Default::default();
    rows[0].0 = "W1 spawn flood, M tasks/s";
    rows[1].0 = "W2 fib(25) join, ms (÷ rayon::join)";
    rows[2].0 = "W4 group, M tasks/s (÷ rayon scope+scope)";
    rows[3].0 = "W4 scope, M tasks/s (÷ rayon scope+scope)";
    for _ in 0..=reps {
        if want("w1") {
            w1_flood(&w1, &mut rows[0].1);
        }
        if want("w2") {
            let p = w2.clone();
            let t0 = Instant::now();
            assert_eq!(w2.submit(move || fib_join(&p, 25)).expect("submit").wait().expect("fib"), 75025);
            let join_ms = t0.elapsed().as_secs_f64() * 1e3;
            let t0 = Instant::now();
            assert_eq!(rp.install(|| fib_rayon(25)), 75025);
            rows[1].1.push(join_ms);
            rows[1].2.push(join_ms / (t0.elapsed().as_secs_f64() * 1e3));
        }
        if want("w4") {
            w4(&w4g, &w4s, &rp, &mut rows[2..]);
        }
    }
    for (name, values, ratios) in rows {
        if values.len() < 2 {
            continue;
        }
        // The first round is a warm-up.
        let (values, ratios) = (values[1..].to_vec(), ratios.get(1..).map(<[f64]>::to_vec).unwrap_or_default());
        let ratio = if ratios.is_empty() { String::new() } else { format!(" ({:.2})", median(ratios)) };
        println!("{name}: {:.2}{ratio}", median(values));
    }
}

/// W1: a flood from this (foreign) thread.
fn w1_flood(pool: &wspool::Pool, rates: &mut Vec<f64>) {
    COUNT.store(0, Relaxed);
    *FLOOD_DONE.0.lock().unwrap() = false;
    let t0 = Instant::now();
    for _ in 0..FLOOD {
        pool.spawn(flood_task).expect("spawn");
    }
    let mut done = FLOOD_DONE.0.lock().unwrap();
    while !*done {
        done = FLOOD_DONE.1.wait(done).unwrap();
    }
    drop(done);
    rates.push(m_per_s(FLOOD, t0));
}

/// W4 through a group per root and through nested scopes, each against
/// rayon's scope+scope run just before.
fn w4(w4g: &wspool::Pool, w4s: &wspool::Pool, rp: &rayon::ThreadPool, rows: &mut [(&str, Vec<f64>, Vec<f64>)]) {
    let total = ROOTS * (CHILDREN + 1);
    let t0 = Instant::now();
    rp.scope(|s| {
        for _ in 0..ROOTS {
            s.spawn(|_| rayon::scope(|s2| (0..CHILDREN).for_each(|_| s2.spawn(|_| bump()))));
        }
    });
    let rayon_rate = m_per_s(total, t0);

    let t0 = Instant::now();
    let outer = w4g.group();
    for _ in 0..ROOTS {
        let p = w4g.clone();
        outer
            .spawn(move || {
                let g = p.group();
                for _ in 0..CHILDREN {
                    g.spawn(bump).expect("child");
                }
                let _ = g.wait();
            })
            .expect("root");
    }
    let _ = outer.wait();
    let rate = m_per_s(total, t0);
    rows[0].1.push(rate);
    rows[0].2.push(rate / rayon_rate);

    let t0 = Instant::now();
    w4s.scope(|s| {
        for _ in 0..ROOTS {
            s.spawn(|| w4s.scope(|s2| (0..CHILDREN).for_each(|_| s2.spawn(bump))));
        }
    });
    let rate = m_per_s(total, t0);
    rows[1].1.push(rate);
    rows[1].2.push(rate / rayon_rate);
}
