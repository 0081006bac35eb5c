//! The starvation monitor on real threads (issue 11), for what does not
//! depend on the machine's speed or load: undeclared blocking gets threads,
//! also among the survivors of a shrink and beside a pool spinning on every
//! core. Each scenario blocks its tasks on a barrier that needs more
//! threads than the pool starts with, so only the monitor can finish it;
//! the only time bound is a watchdog that fails a pool that never does.
//!
//! What the controller decides for convoys, CPU floods, undeclared sleeps
//! and streams (peaks, injections, retirements, its cost per tick) is
//! checked deterministically on a simulated pool and clock
//! (`core/src/growth/sim.rs`); the same scenarios' wall-clock figures on
//! real threads, beside a `Fixed` pool, are printed by `make bench`
//! (`bench/examples/monitor.rs`), never asserted.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::Duration;

use common::{eventually, watchdog};
use wspool::{Pool, Stats};

const LONG: Duration = Duration::from_secs(60);

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `n` tasks that each wait, without telling the pool, until `n` of them
/// wait at once; returns the pool's stats once all are done. A pool that
/// never gets `n` threads fails the watchdog.
fn undeclared_barrier(pool: &Pool, n: usize, what: &str) -> Stats {
    let pool = pool.clone();
    watchdog(LONG, what, move || {
        let barrier = Arc::new(Barrier::new(n));
        let g = pool.group();
        for _ in 0..n {
            let b = barrier.clone();
            g.spawn(move || {
                b.wait();
            })
            .unwrap();
        }
        g.wait().unwrap();
        pool.stats()
    })
}

/// Undeclared blocking gets threads: with the hint (everyone blocked: rule
/// 2) and on the portable rule (stalls), on a min-2 pool whose 4 tasks all
/// wait for one another.
#[test]
fn undeclared_blocking_gets_threads_with_and_without_the_hint() {
    let _serial = serial();
    for hint in [true, false] {
        let pool = Pool::builder().min_threads(2).monitor_kernel_hint(hint).build().unwrap();
        let s = undeclared_barrier(&pool, 4, &format!("4 waiting tasks, hint {hint}"));
        assert!(s.starvation_injections > 0 && s.peak_threads >= 4, "hint {hint}: {s:?}");
    }
}

/// After a burst of lent threads retired, the two survivors still get
/// threads for undeclared blocking (the sampler once spent its per-tick
/// budget on the free slots; the deterministic form, which times it, is
/// `growth::sim::tests::undeclared_blocking_after_a_shrink_still_gets_threads`).
#[test]
fn undeclared_blocking_after_a_shrink_still_gets_threads() {
    let _serial = serial();
    let pool = Pool::builder().min_threads(2).keep_alive(Duration::from_millis(100)).build().unwrap();
    let p = pool.clone();
    let grown = watchdog(LONG, "16 tasks in blocking regions", move || {
        let barrier = Arc::new(Barrier::new(16));
        let g = p.group();
        for _ in 0..16 {
            let b = barrier.clone();
            g.spawn(move || {
                wspool::blocking(|| b.wait());
            })
            .unwrap();
        }
        g.wait().unwrap();
        p.stats()
    });
    assert!(grown.peak_threads >= 16, "the regions were lent threads: {grown:?}");
    eventually(LONG, "the lent threads retire", || pool.stats().threads == 2);
    let before = pool.stats().starvation_injections;
    let s = undeclared_barrier(&pool, 4, "4 waiting tasks after a shrink");
    assert!(s.starvation_injections > before, "no relief after the shrink: {s:?}");
}

/// Issue 11, defect 4: the signals are the pool's own. A neighbour pool
/// spinning on both cores does not keep a pool whose tasks all wait from
/// getting threads.
#[test]
fn a_spinning_neighbour_does_not_suppress_relief() {
    let _serial = serial();
    let spinner = Pool::builder().name("spinner").min_threads(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (stop, spinning) = (stop.clone(), spinning.clone());
        spinner
            .spawn(move || {
                spinning.fetch_add(1, SeqCst);
                let mut x = 0u64;
                while !stop.load(SeqCst) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
            .unwrap();
    }
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    let _stop = Stop(stop.clone());
    eventually(LONG, "both spinners running", || spinning.load(SeqCst) == 2);
    let starved = Pool::builder().name("starved").min_threads(2).build().unwrap();
    let s = undeclared_barrier(&starved, 8, "8 waiting tasks beside a spinning pool");
    assert!(s.starvation_injections > 0 && s.peak_threads >= 8, "{s:?}");
    assert_eq!(spinner.stats().starvation_injections, 0, "the spinners compute");
}
