//! Issue 26: what `Pool::dump` costs on a 256-thread pool, and that the pool
//! keeps running meanwhile (no global stop): 2,000 snapshots are taken while
//! another thread feeds tiny tasks, and the tasks completed meanwhile are
//! counted. Prints wall-clock figures (not a test: nothing is asserted on
//! them).
//!
//!     cargo run --release -p wspool-bench --example dump_cost
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

fn main() {
    let pool = wspool::Pool::builder().min_threads(256).max_threads(256).growth(wspool::Growth::Fixed).build().unwrap();
    let (p, stop) = (pool.clone(), Arc::new(AtomicBool::new(false)));
    let s = stop.clone();
    let feeder = std::thread::spawn(move || {
        let mut fed = 0u64;
        while !s.load(Relaxed) {
            if p.spawn(|| {
                std::hint::black_box(0);
            })
            .is_ok()
            {
                fed += 1;
            }
            if fed.is_multiple_of(1000) {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        fed
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = pool.stats().completed;
    let mut times: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            let d = pool.dump();
            let took = t.elapsed();
            assert_eq!(d.threads.len(), 256);
            took
        })
        .collect();
    let during = pool.stats().completed - before;
    stop.store(true, Relaxed);
    feeder.join().unwrap();
    times.sort();
    let t = Instant::now();
    let text = pool.dump().to_string();
    let text_took = t.elapsed();
    println!(
        "256-thread pool, 2000 snapshots: median {:?}, p99 {:?}, max {:?}; one snapshot with its text report {:?} ({} bytes); tasks completed while they were taken: {during}",
        times[1000],
        times[1980],
        times[1999],
        text_took,
        text.len()
    );
}
