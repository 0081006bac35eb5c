//! The W1 flood through `Pool::spawn`, instrumented for callgrind: the Rust
//! twin of `bench/callgrind/flood.c` (run both with `make bench-callgrind`).
//! Usage: `flood_callgrind N [BATCH]`; BATCH > 0 submits through
//! `Pool::spawn_batch`, BATCH tasks per call.
//!
//! A foreign thread (main) submits N tiny tasks to 2 FIXED workers and waits
//! for the last one. Callgrind client requests cut the run into phases (see
//! the C file): counters zeroed before the measured flood, dumped as
//! "submit" after the last submission and as "drain" after the last task.
//! Outside valgrind the requests are no-ops.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};

use wspool::{Growth, Pool};

/// Callgrind's client requests (valgrind/callgrind.h), issued with
/// valgrind's "special instruction" sequence: a no-op on real hardware.
mod callgrind {
    const BASE: usize = ((b'C' as usize) << 24) | ((b'T' as usize) << 16);
    const DUMP_STATS_AT: usize = BASE + 3;
    const ZERO_STATS: usize = BASE + 1;

    #[cfg(target_arch = "x86_64")]
    fn request(code: usize, arg: usize) {
        let args: [usize; 6] = [code, arg, 0, 0, 0, 0];
        let mut result: usize = 0;
        // SAFETY: the rotations of rdi add up to 128 bits (rdi is unchanged)
        // and `xchg rbx, rbx` changes nothing; valgrind recognises the
        // sequence and reads `args` through rax, storing its answer in rdx.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
                inout("rdx") result,
                in("rax") args.as_ptr(),
                inout("rdi") 0usize => _,
            );
        }
        let _ = result;
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn request(_code: usize, _arg: usize) {}

    pub fn zero_stats() {
        request(ZERO_STATS, 0);
    }

    pub fn dump_stats_at(what: &'static std::ffi::CStr) {
        request(DUMP_STATS_AT, what.as_ptr() as usize);
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(0);
static DONE: Mutex<bool> = Mutex::new(false);
static DONE_CV: Condvar = Condvar::new();

fn tiny() {
    if COUNTER.fetch_add(1, Relaxed) + 1 == TARGET.load(Relaxed) {
        *DONE.lock().unwrap() = true;
        DONE_CV.notify_one();
    }
}

fn flood(pool: &Pool, n: usize, batch: usize, measured: bool) {
    COUNTER.store(0, Relaxed);
    TARGET.store(n, Relaxed);
    *DONE.lock().unwrap() = false;
    if measured {
        callgrind::zero_stats();
    }
    if batch == 0 {
        for _ in 0..n {
            pool.spawn(tiny).expect("spawn");
        }
    } else {
        let mut left = n;
        while left > 0 {
            let k = left.min(batch);
            pool.spawn_batch((0..k).map(|_| tiny)).expect("spawn_batch");
            left -= k;
        }
    }
    if measured {
        callgrind::dump_stats_at(c"submit");
    }
    let mut done = DONE.lock().unwrap();
    while !*done {
        done = DONE_CV.wait(done).unwrap();
    }
    drop(done);
    if measured {
        callgrind::dump_stats_at(c"drain");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(200_000, |a| a.parse().expect("N"));
    let batch: usize = args.next().map_or(0, |a| a.parse().expect("BATCH"));
    let pool = Pool::builder().min_threads(2).growth(Growth::Fixed).build().expect("pool");
    flood(&pool, 1000, batch, false);
    if n > 0 {
        flood(&pool, n, batch, true);
    }
    println!("flood: {n} tasks ran (batch {batch})");
}
