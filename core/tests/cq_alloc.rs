//! The completion queue's hot path: after warm-up, a submit + drain round
//! trip allocates nothing of its own on the loop's thread. What remains is
//! the pool's global queue, which allocates one block per many pushes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use wspool::{CompletionQueue, CqEvent, CqOptions, Pool};

struct Counting;

thread_local! {
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn round(cq: &CompletionQueue<[u64; 3]>, n: usize) {
    for i in 0..n {
        cq.submit([i as u64, 0, 0], |x| x[1] = x[0] * 2).unwrap();
    }
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < n {
        assert!(Instant::now() < deadline);
        got += cq.drain(usize::MAX, |e| assert!(matches!(e, CqEvent::Done(x, _) if x[1] == x[0] * 2)));
        std::thread::yield_now();
    }
}

#[test]
fn a_warm_queue_allocates_almost_nothing_per_submission() {
    let pool = Pool::builder().min_threads(2).build().unwrap();
    let cq = CompletionQueue::new(&pool, CqOptions::default()).unwrap();
    round(&cq, 512); // warm-up: nodes, the completion list's capacity
    let before = COUNT.with(Cell::get);
    const N: usize = 256;
    for _ in 0..20 {
        round(&cq, N);
    }
    let per = (COUNT.with(Cell::get) - before) as f64 / (20 * N) as f64;
    // A boxed node or job per submission would be >= 1.
    assert!(per < 0.1, "{per} allocations per submission on the loop's thread");
}
