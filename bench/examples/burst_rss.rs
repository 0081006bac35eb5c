//! What a burst costs in memory, and whether the pool gives it back
//! (`make bench-memory`): a task on a 2-worker pool spawns 2,000,000 tiny
//! local jobs (each worker's own deque grows to hold them), then the pool
//! drains them and goes idle. Prints the process's resident set before the
//! burst, at its height (measured by the spawning task after its last
//! spawn) and after it, once the pool has been idle for 200 ms.

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

fn main() {
    let pool = wspool::Pool::builder().min_threads(2).growth(wspool::Growth::Fixed).build().expect("pool");
    std::thread::sleep(Duration::from_millis(100));
    let before = rss_mib();
    let done = Arc::new(AtomicUsize::new(0));
    let (peak_tx, peak_rx) = mpsc::channel();
    let (p, d) = (pool.clone(), done.clone());
    pool.spawn(move || {
        for _ in 0..JOBS {
            let d = d.clone();
            p.spawn(move || {
                d.fetch_add(1, Relaxed);
            })
            .expect("spawn");
        }
        peak_tx.send(rss_mib()).expect("send");
    })
    .expect("spawn");
    let during = peak_rx.recv().expect("peak");
    while done.load(Relaxed) < JOBS {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_mib();
    println!("| burst of {JOBS} local spawns | before | during | after (idle) |");
    println!("|---|---:|---:|---:|");
    println!("| resident set, MiB | {before:.1} | {during:.1} | {after:.1} |");
}
