//! `make demo`: the pool working, and what its stats say about it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use wspool::{Growth, Pool};

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = wspool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn print_stats(label: &str, pool: &Pool) {
    let s = pool.stats();
    println!(
        "  [{label}] threads={} idle={} blocked={} peak={} submitted={} completed={} local={} global={} steals={} \
         spin hits/misses={}/{} threshold={}us injections={} queue-delay p50/p99/max={}/{}/{}us",
        s.threads,
        s.idle_threads,
        s.blocked_threads,
        s.peak_threads,
        s.submitted,
        s.completed,
        s.local_pops,
        s.global_pops,
        s.steals,
        s.spin_hits,
        s.spin_misses,
        s.spin_threshold_ns / 1000,
        s.starvation_injections,
        s.queue_delay_p50_ns / 1000,
        s.queue_delay_p99_ns / 1000,
        s.queue_delay_max_ns / 1000,
    );
}

fn main() {
    let pool =
        Pool::builder().name("demo").min_threads(2).keep_alive(Duration::from_millis(300)).build().expect("pool");
    println!("wspool demo: {} workers (max {})", pool.min_threads(), pool.max_threads());

    // 1. Flood: one foreign thread submits a million tiny tasks.
    const N: u64 = 1_000_000;
    let counter = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let t = Instant::now();
    for _ in 0..N {
        let (c, done) = (counter.clone(), done_tx.clone());
        pool.spawn(move || {
            if c.fetch_add(1, Relaxed) + 1 == N {
                let _ = done.send(());
            }
        })
        .expect("spawn");
    }
    done_rx.recv().expect("the last task signals");
    let el = t.elapsed();
    println!(
        "1. flood (cold pool): 1,000,000 tasks in {:.1} ms = {:.1} M tasks/s (counter = {})",
        el.as_secs_f64() * 1e3,
        1.0 / el.as_secs_f64(),
        counter.load(Relaxed)
    );
    print_stats("flood", &pool);

    // 2. Fork-join: fib(25) with join at every level, no heap allocation.
    let t = Instant::now();
    let v = pool.submit(|| fib(25)).expect("submit").wait().expect("fib");
    println!("2. fork-join: fib(25) = {v} in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);

    // 3. Sync-over-async (seed 000): tasks wait on inner tasks; helping
    //    means no extra threads are needed.
    let t = Instant::now();
    let handles: Vec<_> = (0..200)
        .map(|i| {
            let p = pool.clone();
            pool.submit(move || p.submit(move || i * 2).expect("inner").wait().expect("inner result")).expect("outer")
        })
        .collect();
    let sum: u64 = handles.into_iter().map(|h| h.wait().expect("outer result")).sum();
    println!(
        "3. nested waits: 200 outer tasks each waiting on an inner one, sum = {sum}, {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    // 4. Blocking work declared with `blocking`: the pool lends threads.
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| wspool::blocking(|| std::thread::sleep(Duration::from_millis(10)))).expect("spawn");
    }
    g.wait().expect("ok");
    println!("4. 100 x 10 ms blocking sleeps on 2 workers: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    print_stats("after blocking burst", &pool);

    // 5. Undeclared blocking: the starvation monitor adds threads.
    let t = Instant::now();
    let g = pool.group();
    for _ in 0..100 {
        g.spawn(|| std::thread::sleep(Duration::from_millis(10))).expect("spawn");
    }
    g.wait().expect("ok");
    println!("5. 100 x 10 ms undeclared sleeps: {:.1} ms (monitor-injected threads)", t.elapsed().as_secs_f64() * 1e3);
    print_stats("after undeclared burst", &pool);

    // 6. Serial queue: per-key order.
    let q = pool.serial();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..10 {
        let o = order.clone();
        q.spawn(move || o.lock().unwrap().push(i)).expect("serial");
    }
    let last = q.submit(|| ()).expect("serial");
    last.wait().expect("ok");
    println!("6. serial queue order: {:?}", order.lock().unwrap());

    // 7. Idle: extra threads retire after keep-alive; an idle pool sleeps.
    std::thread::sleep(Duration::from_millis(600));
    print_stats("idle after keep-alive", &pool);
    let growth =
        if pool.stats().threads as usize == pool.min_threads() { "back to min_threads" } else { "still shrinking" };
    println!("7. idle: {growth}");
    let _ = Growth::Adaptive;
    pool.shutdown(wspool::Shutdown::Drain, Some(Duration::from_secs(5))).expect("shutdown");
    println!("shut down cleanly");
}
