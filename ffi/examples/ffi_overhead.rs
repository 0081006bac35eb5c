//! What the C ABI layer costs: W1 (flood) and W3 (ping-pong) run through the
//! Rust API and through the C entry points, in the same process, same pool
//! settings, alternating. `cargo run --release -p wspool-ffi --example ffi_overhead`
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use wspool as c; // the C entry points (this crate's lib is named `wspool`)

const N: usize = 1_000_000;
const ROUNDS: usize = 20_000;

struct Done {
    count: AtomicUsize,
    flag: Mutex<bool>,
    cv: Condvar,
}
impl Done {
    fn new() -> Arc<Done> {
        Arc::new(Done { count: AtomicUsize::new(0), flag: Mutex::new(false), cv: Condvar::new() })
    }
    fn hit(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == N {
            *self.flag.lock().unwrap() = true;
            self.cv.notify_one();
        }
    }
    fn wait(&self) {
        let mut f = self.flag.lock().unwrap();
        while !*f {
            f = self.cv.wait(f).unwrap();
        }
    }
}

unsafe extern "C" fn c_tiny(arg: *mut c_void) {
    // SAFETY: arg is the Done kept alive by the caller until wait() returns.
    unsafe { (*(arg as *const Done)).hit() }
}
unsafe extern "C" fn c_nop(_: *mut c_void) {}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rust_pool = wspool_core::Pool::builder().min_threads(2).growth(wspool_core::Growth::Fixed).build().unwrap();
    let mut cfg = std::mem::MaybeUninit::<c::wspool_config>::uninit();
    let mut cp: *mut c::wspool = ptr::null_mut();
    // SAFETY: plain C API use.
    unsafe {
        c::wspool_config_init(cfg.as_mut_ptr());
        let cfg = cfg.assume_init_mut();
        cfg.min_threads = 2;
        cfg.growth = c::WSPOOL_GROWTH_FIXED;
        assert_eq!(c::wspool_create(cfg, &mut cp), 0);
    }
    let (mut w1_rust, mut w1_c, mut w3_rust, mut w3_c) = (vec![], vec![], vec![], vec![]);
    for _ in 0..5 {
        let d = Done::new();
        let t = Instant::now();
        for _ in 0..N {
            let d = d.clone();
            rust_pool.spawn(move || d.hit()).ok().unwrap();
        }
        d.wait();
        w1_rust.push(N as f64 / t.elapsed().as_secs_f64() / 1e6);

        let d = Done::new();
        let t = Instant::now();
        for _ in 0..N {
            // SAFETY: `d` outlives the tasks (we wait below).
            unsafe { c::wspool_submit(cp, Some(c_tiny), Arc::as_ptr(&d) as *mut c_void) };
        }
        d.wait();
        w1_c.push(N as f64 / t.elapsed().as_secs_f64() / 1e6);

        let mut lat = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            rust_pool.submit(|| ()).ok().unwrap().wait().ok().unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        w3_rust.push(median(lat));
        let mut lat = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let mut task: *mut c::wspool_task = ptr::null_mut();
            // SAFETY: plain C API use.
            unsafe {
                c::wspool_submit_ex(cp, Some(c_nop), ptr::null_mut(), ptr::null(), &mut task);
                c::wspool_task_wait(task, -1);
                c::wspool_task_release(task);
            }
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        w3_c.push(median(lat));
    }
    println!("W1 flood, M tasks/s:  Rust API {:.2}   C API {:.2}", median(w1_rust), median(w1_c));
    println!("W3 ping-pong p50, us: Rust API {:.2}   C API {:.2}", median(w3_rust), median(w3_c));
    // SAFETY: created above.
    unsafe { c::wspool_destroy(cp) };
}
