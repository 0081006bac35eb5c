//! What a burst costs in memory, and whether the pool gives it back
//! (`make bench-memory`), in two ways a burst can end:
//!
//! - *parked*: a task on a 2-worker pool spawns 2,000,000 tiny local jobs
//!   (each worker's own deque grows to hold them), then the pool drains
//!   them and its workers park;
//! - *retired*: on a `Compensate` pool of one thread blocked in a declared
//!   region, the thread lent for it runs the same burst and retires right
//!   after its last job, without parking first (issue 38.3: its slot kept
//!   the grown buffers).
//!
//! Each runs in a process of its own (this program starts itself again),
//! so one's leftovers do not count in the other's figures. Prints the
//! resident set before the burst, at its height (measured by the spawning
//! task after its last spawn) and after it, once the pool has been idle
//! for 200 ms.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::time::Duration;

const JOBS: usize = 2_000_000;

/// Resident set in MiB, from /proc/self/statm (pages).
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    pages * page / (1024.0 * 1024.0)
}

/// Spawns the burst from a task on `pool`; returns the resident set after
/// the last spawn. `last` runs as the burst's last job (spawned first,
/// popped last by the spawning worker).
fn burst(pool: &wspool::Pool, done: &Arc<AtomicUsize>, last: impl FnOnce() + Send + 'static) -> f64 {
    let (peak_tx, peak_rx) = mpsc::channel();
    let (p, d) = (pool.clone(), done.clone());
    pool.spawn(move || {
        let d2 = d.clone();
        p.spawn(move || {
            last();
            d2.fetch_add(1, Relaxed);
        })
        .expect("spawn");
        for _ in 1..JOBS {
            let d = d.clone();
            p.spawn(move || {
                d.fetch_add(1, Relaxed);
            })
            .expect("spawn");
        }
        peak_tx.send(rss_mib()).expect("send");
    })
    .expect("spawn");
    peak_rx.recv().expect("peak")
}

fn parked() -> (f64, f64, f64) {
    let pool = wspool::Pool::builder().min_threads(2).growth(wspool::Growth::Fixed).build().expect("pool");
    std::thread::sleep(Duration::from_millis(100));
    let before = rss_mib();
    let done = Arc::new(AtomicUsize::new(0));
    let during = burst(&pool, &done, || {});
    while done.load(Relaxed) < JOBS {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    (before, during, rss_mib())
}

/// As `core/src/growth/retire_tests.rs`: the burst's last job lets the
/// blocked thread out of its region and waits until it is out, so the
/// lent thread is surplus and retires as that job returns (its slot then
/// holds what it kept; the one thread left parks and keeps nothing).
fn retired() -> (f64, f64, f64) {
    let pool =
        wspool::Pool::builder().min_threads(1).max_threads(2).growth(wspool::Growth::Compensate).build().expect("pool");
    std::thread::sleep(Duration::from_millis(100));
    let before = rss_mib();
    let (in_region_tx, in_region_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (out_tx, out_rx) = mpsc::channel();
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    pool.spawn(move || {
        wspool::blocking(|| {
            in_region_tx.send(()).expect("send");
            release_rx.recv().expect("release");
        });
        out_tx.send(()).expect("send");
        // Held in a task until the lent thread has gone: otherwise this
        // thread, idle first, could be the one that retires.
        let _ = hold_rx.recv();
    })
    .expect("spawn");
    in_region_rx.recv().expect("in region");
    let done = Arc::new(AtomicUsize::new(0));
    let during = burst(&pool, &done, move || {
        release_tx.send(()).expect("send");
        out_rx.recv().expect("out");
    });
    while pool.stats().threads_retired < 1 || done.load(Relaxed) < JOBS {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(hold_tx);
    std::thread::sleep(Duration::from_millis(200));
    (before, during, rss_mib())
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("parked") => print_row("workers park after it", parked()),
        Some("retired") => print_row("the lent thread retires after it", retired()),
        _ => {
            println!("| burst of {JOBS} local spawns, resident set (MiB) | before | during | after (idle) |");
            println!("|---|---:|---:|---:|");
            for which in ["parked", "retired"] {
                let status = std::process::Command::new(std::env::current_exe().expect("this program"))
                    .arg(which)
                    .status()
                    .expect("run");
                assert!(status.success(), "{which}: {status}");
            }
        }
    }
}

fn print_row(what: &str, (before, during, after): (f64, f64, f64)) {
    println!("| {what} | {before:.1} | {during:.1} | {after:.1} |");
}
