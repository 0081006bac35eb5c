//! W1, W2 and W4 for instruction counting under callgrind
//! (`bench/callgrind/workloads.sh`, part of `make bench-callgrind`).
//! Usage: `workloads_callgrind w1|w2|w4 REPS`.
//!
//! One FIXED worker, so no steal, spin or park depends on how valgrind
//! interleaves threads: the counts repeat run to run, and the difference
//! between REPS and REPS = 0 is the workload's own cost, start-up and
//! shutdown excluded. W1: 100,000 tiny tasks spawned from the main thread
//! per rep; W2: `fib_join(20)` submitted from the main thread; W4: 20 roots
//! of 1,000 children each through `w4_group_scope`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use wspool_bench::Countdown;
use wspool_bench::workloads::{fib_join, fib_seq, w4_group_scope};

const W1_TASKS: usize = 100_000;
const W2_FIB: u32 = 20;
const W4_ROOTS: usize = 20;
const W4_CHILDREN: usize = 1_000;

static KIDS: AtomicU64 = AtomicU64::new(0);

fn kid() {
    KIDS.fetch_add(1, Ordering::Relaxed);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(which), Some(reps)) = (args.next(), args.next().and_then(|r| r.parse::<usize>().ok())) else {
        eprintln!("usage: workloads_callgrind w1|w2|w4 REPS");
        std::process::exit(2);
    };
    let pool = wspool::Pool::builder().min_threads(1).growth(wspool::Growth::Fixed).build().expect("pool");
    for _ in 0..reps {
        match which.as_str() {
            "w1" => {
                let c = Countdown::leak();
                c.arm(W1_TASKS);
                (0..W1_TASKS).for_each(|_| pool.spawn(move || c.hit()).expect("spawn"));
                c.wait();
            }
            "w2" => {
                let p = pool.clone();
                let r = pool.submit(move || fib_join(&p, black_box(W2_FIB))).expect("submit").wait().expect("fib");
                assert_eq!(r, fib_seq(W2_FIB));
            }
            "w4" => {
                KIDS.store(0, Ordering::Relaxed);
                w4_group_scope(&pool, W4_ROOTS, W4_CHILDREN, kid, || {});
                assert_eq!(KIDS.load(Ordering::Relaxed), (W4_ROOTS * W4_CHILDREN) as u64);
            }
            _ => {
                eprintln!("usage: workloads_callgrind w1|w2|w4 REPS");
                std::process::exit(2);
            }
        }
    }
}
