//! Profiling aid: the W4 nested workload alone (`cargo run --release -p wspool --example w4`).
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

fn main() {
    let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
    let counter = AtomicU64::new(0);
    let mode = std::env::args().nth(1).unwrap_or_default();
    for round in 0..20 {
        let t = Instant::now();
        if mode == "w2" {
            fn fib(n: u64) -> u64 {
                if n < 2 {
                    return n;
                }
                let (a, b) = wspool::join(|| fib(n - 1), || fib(n - 2));
                a + b
            }
            let v = pool.submit(|| fib(25)).unwrap().wait().unwrap();
            assert_eq!(v, 75025);
            if round % 5 == 0 {
                eprintln!("w2 round {round}: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
            }
            continue;
        } else if mode == "w1" {
            let g = pool.group();
            for _ in 0..1_000_000 {
                let c = &counter as *const AtomicU64 as usize;
                pool.spawn(move || unsafe {
                    (*(c as *const AtomicU64)).fetch_add(1, Relaxed);
                })
                .unwrap();
            }
            while counter.load(Relaxed) < (round + 1) * 1_000_000 {
                std::hint::spin_loop();
            }
            drop(g);
        } else {
            pool.scope(|s| {
                for _ in 0..200 {
                    s.spawn(|| {
                        wspool::Pool::builder();
                        pool.scope(|s2| {
                            for _ in 0..1000 {
                                s2.spawn(|| {
                                    counter.fetch_add(1, Relaxed);
                                });
                            }
                        });
                    });
                }
            });
        }
        let el = t.elapsed();
        if round % 5 == 0 {
            eprintln!(
                "{mode} round {round}: {:.2} M tasks/s",
                if mode == "w2" {
                    fn fib(n: u64) -> u64 {
                        if n < 2 {
                            return n;
                        }
                        let (a, b) = wspool::join(|| fib(n - 1), || fib(n - 2));
                        a + b
                    }
                    let v = pool.submit(|| fib(25)).unwrap().wait().unwrap();
                    assert_eq!(v, 75025);
                    if round % 5 == 0 {
                        eprintln!("w2 round {round}: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
                    }
                    continue;
                } else if mode == "w1" {
                    1.0
                } else {
                    0.2002
                } / el.as_secs_f64()
            );
        }
    }
    eprintln!("{:?}", pool.stats());
}
