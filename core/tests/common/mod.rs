//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Counts how a task ended: run, or dropped unrun (the cancel path).
#[derive(Default)]
pub struct Outcomes {
    pub ran: AtomicUsize,
    pub dropped_unrun: AtomicUsize,
}

/// Captured by a task closure: `run()` marks it run; dropping it without
/// `run()` counts as a cancellation. Exactly one of the two happens.
pub struct Tracked {
    outcomes: Arc<Outcomes>,
    ran: bool,
}

impl Tracked {
    pub fn new(outcomes: &Arc<Outcomes>) -> Tracked {
        Tracked { outcomes: outcomes.clone(), ran: false }
    }
    pub fn run(mut self) {
        self.ran = true;
        self.outcomes.ran.fetch_add(1, SeqCst);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.ran {
            self.outcomes.dropped_unrun.fetch_add(1, SeqCst);
        }
    }
}

/// Polls `cond` until it holds; panics with `what` after `limit` (a hang
/// guard, not a performance assertion).
pub fn eventually(limit: Duration, what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A gate tasks block on until opened.
#[derive(Default)]
pub struct Gate {
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    pub fn wait(&self) {
        let mut g = self.open.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
    }
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// Opens the gate when dropped, so a failing assertion cannot leave pool
/// threads blocked forever (the pool's drop would wait for them).
pub struct OpenOnDrop(pub std::sync::Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Runs `f` on its own thread and returns its result; panics with `what`
/// if it has not finished within `limit`. A deadlock then fails the test
/// instead of hanging the harness: the stuck thread is leaked, and the
/// pool it holds is never dropped (its drop would wait for the stuck
/// tasks). A panic inside `f` is re-raised here.
pub fn watchdog<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("watchdog-body".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("start the watchdog's thread");
    match rx.recv_timeout(limit) {
        Ok(value) => {
            let _ = handle.join();
            value
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => unreachable!("the body sends before it ends"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: {what} did not finish within {limit:?} (deadlock or lost wake-up)")
        }
    }
}

/// What a child test process left behind.
pub struct ChildRun {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ChildRun {
    /// The signal that killed the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        #[cfg(unix)]
        {
            std::os::unix::process::ExitStatusExt::signal(&self.status)
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

/// True in a child started by [`run_child`] with this `key`.
pub fn in_child(key: &str) -> bool {
    std::env::var_os(key).is_some()
}

/// Reruns test `name` of this test binary in a child process with `key`
/// set in its environment, so a crash (SIGSEGV, abort) fails one test
/// instead of killing the harness. The child is killed after `limit`
/// (a hang guard), which panics here.
pub fn run_child(name: &str, key: &str, limit: Duration) -> ChildRun {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(key, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the child test process");
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child test {name} did not finish within {limit:?} (hang)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ChildRun { status, stdout: out_reader.join().unwrap_or_default(), stderr: err_reader.join().unwrap_or_default() }
}

/// A 1-thread Fixed pool (from `builder`) whose only worker is held by a
/// gate task until the returned guard drops or the gate opens: what is
/// submitted next waits in the queue.
pub fn held_single_worker(builder: wspool::Builder) -> (wspool::Pool, Arc<Gate>, OpenOnDrop) {
    let pool = builder.min_threads(1).growth(wspool::Growth::Fixed).build().unwrap();
    let gate = Arc::new(Gate::default());
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (gate, started) = (gate.clone(), started.clone());
        pool.spawn(move || {
            started.store(true, SeqCst);
            gate.wait();
        })
        .unwrap();
    }
    eventually(Duration::from_secs(10), "the only worker is held", || started.load(SeqCst));
    let guard = OpenOnDrop(gate.clone());
    (pool, gate, guard)
}

/// A Fixed pool of `workers` threads (from `builder`), every worker held by
/// its own gate task until the returned guard drops or the gate opens: what
/// is submitted next waits in the queue. Each gate task is submitted only
/// once the previous one started, so each lands on a free worker.
pub fn held_workers(builder: wspool::Builder, workers: usize) -> (wspool::Pool, Arc<Gate>, OpenOnDrop) {
    let pool = builder.min_threads(workers).growth(wspool::Growth::Fixed).build().unwrap();
    let gate = Arc::new(Gate::default());
    let guard = OpenOnDrop(gate.clone());
    let started = Arc::new(AtomicUsize::new(0));
    for held in 1..=workers {
        let (g, s) = (gate.clone(), started.clone());
        pool.spawn(move || {
            s.fetch_add(1, SeqCst);
            g.wait();
        })
        .unwrap();
        eventually(Duration::from_secs(10), "every worker is held", || started.load(SeqCst) == held);
    }
    (pool, gate, guard)
}

/// A Fixed 2-thread pool with one worker held for 200 ms by a task of
/// `group`, so the other worker is the only one free.
pub fn pool_with_one_free_worker() -> (wspool::Pool, wspool::Group) {
    let pool = wspool::Pool::builder().min_threads(2).growth(wspool::Growth::Fixed).build().unwrap();
    let group = pool.group();
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = started.clone();
    group
        .spawn(move || {
            s.store(true, SeqCst);
            std::thread::sleep(Duration::from_millis(200));
        })
        .unwrap();
    eventually(Duration::from_secs(10), "one worker is held", || started.load(SeqCst));
    (pool, group)
}

thread_local! {
    /// Set while a test task is inside its wait on this thread.
    static IN_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// On a pool with one free worker (`pool_with_one_free_worker`), task T1
/// waits on the group whose task holds the other worker, through `wait`;
/// while T1 waits, task T2 is submitted. Returns whether T2 ran on T1's
/// thread inside that wait (help-while-waiting ran it nested).
pub fn ran_inside_the_wait(what: &str, wait: fn(&wspool::Group) -> Result<(), wspool::TaskError>) -> bool {
    watchdog(Duration::from_secs(10), what, move || {
        let (pool, group) = pool_with_one_free_worker();
        let waiting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t1 = {
            let (group, waiting) = (group.clone(), waiting.clone());
            pool.submit(move || {
                IN_WAIT.with(|w| w.set(true));
                waiting.store(true, SeqCst);
                let r = wait(&group);
                IN_WAIT.with(|w| w.set(false));
                r
            })
            .unwrap()
        };
        eventually(Duration::from_secs(10), "T1 waits", || waiting.load(SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        let t2 = pool.submit(|| IN_WAIT.with(|w| w.get())).unwrap();
        t1.wait().unwrap().unwrap();
        t2.wait().unwrap()
    })
}
