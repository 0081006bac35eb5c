//! wspool workloads that both the Rust suite (`benches/compare.rs`) and the
//! C run's Rust peer (`examples/c_run_peer.rs`) measure: one copy, so the
//! two report on the same code.

/// `fib(n)` by plain recursion on one thread: W2's reference, and its check.
pub fn fib_seq(n: u32) -> u64 {
    if n < 2 { n as u64 } else { fib_seq(n - 1) + fib_seq(n - 2) }
}

/// `fib(n)` with [`wspool::Pool::join`] at every level (W2).
pub fn fib_join(p: &wspool::Pool, n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = p.join(|| fib_join(p, n - 1), || fib_join(p, n - 2));
    a + b
}

/// W4 with a group on each root's stack: `roots` tasks spawned through a
/// [`wspool::Group`] from the calling thread, each spawning `children`
/// tasks that run `child` into a [`wspool::Pool::group_scope`], waiting for
/// them, then running `root_done`. Returns when every root has finished.
pub fn w4_group_scope<C, R>(pool: &wspool::Pool, roots: usize, children: usize, child: C, root_done: R)
where
    C: Fn() + Copy + Send + 'static,
    R: Fn() + Copy + Send + 'static,
{
    let outer = pool.group();
    for _ in 0..roots {
        let p = pool.clone();
        outer
            .spawn(move || {
                p.group_scope(|g| {
                    for _ in 0..children {
                        g.spawn(child).expect("spawn child");
                    }
                    g.wait().expect("children");
                });
                root_done();
            })
            .expect("spawn root");
    }
    outer.wait().expect("roots");
}
