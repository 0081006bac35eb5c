//! http_axum: an axum HTTP/1.1 server on a current-thread tokio runtime whose
//! CPU-bound and blocking endpoints await work on wspool, with the endpoints
//! of the C and C++ HTTP examples (examples-c/http_common.h,
//! examples-cpp/http_beast.cpp):
//!
//!   /ping          "pong", answered on the runtime's thread (the I/O loop)
//!   /work?n=N      N rounds of splitmix64, the digest in hex (N <= 100000000);
//!                  &deadline_ms=D: due D ms after the request's start (its
//!                  X-Request-Start stamp, else its arrival), answered 503
//!                  "expired" if its work has not started in time to make that;
//!                  &priority=high|normal|low: where it waits among queued work.
//!                  The reply's X-Started header is the order in which the
//!                  work began (0, 1, ...)
//!   /sleep?ms=M    "slept" after M ms inside wspool::blocking, in a lane of
//!                  --sleep-lane (default 2; 0: no lane) (M <= 60000)
//!   /metrics       OpenMetrics: the pool's stats and the server's counters
//!
//!   http_axum [--port P] [--threads N] [--mode wspool|spawn_blocking|rayon]
//!             [--work-deadline-ms D] [--sleep-lane N] [--spin-us U] [--worker-nice N]
//!
//! --mode says where /work and /sleep run, each awaited by its handler:
//!   wspool          (default) `pool.submit_with(..)` with the request's
//!                   priority, deadline and lane, then `.await` on the handle
//!   spawn_blocking  tokio's blocking pool (`tokio::task::spawn_blocking`)
//!   rayon           `rayon::ThreadPool::spawn` and a tokio oneshot channel
//! with --threads threads each (default 2; the wspool pool's min_threads,
//! tokio's max_blocking_threads, rayon's num_threads). spawn_blocking and
//! rayon have no deadlines: there the closure checks its start-by time itself
//! when it starts, and skips the work if late (503 "expired", as wspool's);
//! they have no priorities or lanes. --spin-us and --worker-nice are the
//! wspool pool's spin_max_us and thread_nice (its threads that much nicer
//! than the runtime's), as in the C servers.
//!
//! A client that hangs up drops its handler's future; a drop guard then
//! cancels the queued work (`TaskFuture::cancel`; in the other modes a flag
//! the closure checks when it starts), counted in
//! http_cancelled_client_gone. Work already running runs to its end, awaited
//! in the background so that its ending is counted.
//!
//! Prints "listening on PORT" once ready. SIGINT/SIGTERM: stops accepting,
//! lets requests in flight be answered, closes idle connections, shuts the
//! pool down, waits (at most 30 s) for work still running; prints
//! "http_axum: exit: mode=.. requests=.. submitted=.. done=.. cancelled=.." on
//! stderr and exits 3 if a request handed off never ended (its work ran,
//! expired or was cancelled).

mod deadline;

use std::fmt::Write as _;
use std::future::{Future, IntoFuture};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use wspool::{Pool, Priority, SerialQueue, Shutdown, SpawnOptions, TaskError, TaskFuture};

const WORK_MAX: u64 = 100_000_000;
const SLEEP_MAX_MS: u64 = 60_000;

/// N rounds of splitmix64, as the C examples' work_digest.
fn work_digest(n: u64) -> u64 {
    let mut h = n;
    for i in 0..n {
        let mut z = h.wrapping_add(i).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h = z ^ (z >> 31);
    }
    h
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Wspool,
    SpawnBlocking,
    Rayon,
}

struct Options {
    port: u16,
    threads: usize,
    mode: Mode,
    work_deadline_ms: u64,
    sleep_lane: usize,
    /// wspool's spin_max_us; None: the library's default.
    spin_us: Option<u32>,
    /// wspool's thread_nice: its threads this much nicer than the runtime's.
    worker_nice: u32,
}

/// Where the work runs, by --mode.
enum Exec {
    Wspool { pool: Pool, sleep_lane: Option<SerialQueue> },
    SpawnBlocking,
    Rayon(rayon::ThreadPool),
}

/// The server's counters (the /metrics families http_*).
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    /// Requests whose work was handed off the runtime's thread.
    submitted: AtomicU64,
    /// Their endings: answered, expired, or their client gone (one each).
    done: AtomicU64,
    expired: AtomicU64,
    cancelled_client_gone: AtomicU64,
    answered_late: AtomicU64,
    sleeping: AtomicU64,
    sleep_max_concurrent: AtomicU64,
    /// The order in which /work began on a worker (X-Started).
    work_started: AtomicU64,
}

struct Server {
    opt: Options,
    exec: Exec,
    c: Counters,
    reserve: Mutex<deadline::Reserve>,
}

type Shared = Arc<Server>;

/// How a hand-off ended without a value.
enum Ended {
    Expired,
    Refused,
    Failed,
}

/// Where and how a hand-off waits.
#[derive(Clone, Copy)]
struct How {
    priority: Priority,
    start_by: Option<Instant>,
    lane: bool,
}

/// One hand-off: `submitted` counted when made, `done` once when dropped,
/// which is when its work ended (ran, expired or cancelled), whether or not
/// its handler still waits for it.
struct HandOff(Shared);

impl HandOff {
    fn new(s: &Shared) -> HandOff {
        s.c.submitted.fetch_add(1, Relaxed);
        HandOff(s.clone())
    }
}

impl Drop for HandOff {
    fn drop(&mut self) {
        self.0.c.done.fetch_add(1, Relaxed);
    }
}

/// A wspool task's future that cancels the task if dropped before it ended
/// (its client hung up): dropping a `TaskFuture` only detaches the task, so
/// the handler says "cancel" itself. Work already running is awaited to its
/// end in the background, to count its ending.
struct CancelOnDrop<T: Send + 'static> {
    fut: Option<TaskFuture<T>>,
    handoff: Option<HandOff>,
}

impl<T: Send + 'static> Future for CancelOnDrop<T> {
    type Output = Result<T, TaskError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.fut.as_mut().expect("polled after Ready");
        let out = Pin::new(fut).poll(cx);
        if out.is_ready() {
            self.fut = None;
            self.handoff = None;
        }
        out
    }
}

impl<T: Send + 'static> Drop for CancelOnDrop<T> {
    fn drop(&mut self) {
        let (Some(fut), Some(handoff)) = (self.fut.take(), self.handoff.take()) else { return };
        if fut.cancel() {
            handoff.0.c.cancelled_client_gone.fetch_add(1, Relaxed);
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = fut.await; // at once if cancelled
                drop(handoff);
            });
        }
    }
}

/// Sets its flag when dropped: the closure of a spawn_blocking or rayon
/// hand-off checks it when it starts.
struct GoneOnDrop(Arc<AtomicBool>);

impl Drop for GoneOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// What a spawn_blocking or rayon closure came to.
enum Outcome<T> {
    Ran(T),
    Expired,
    Cancelled,
}

/// Runs `f` off the runtime's thread as --mode says, and awaits it.
async fn offload<T, F>(s: &Shared, how: How, f: F) -> Result<T, Ended>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let handoff = HandOff::new(s);
    let pool_lane = match &s.exec {
        Exec::Wspool { pool, sleep_lane } => Some((pool, if how.lane { sleep_lane.as_ref() } else { None })),
        _ => None,
    };
    if let Some((pool, lane)) = pool_lane {
        let opts = SpawnOptions { priority: how.priority, deadline: how.start_by, serial: lane, ..Default::default() };
        let handle = pool.submit_with(opts, f).map_err(|_| Ended::Refused)?;
        let fut = CancelOnDrop { fut: Some(handle.into_future()), handoff: Some(handoff) };
        return match fut.await {
            Ok(v) => Ok(v),
            Err(TaskError::Expired) => count_expired(s),
            Err(_) => Err(Ended::Failed),
        };
    }
    // spawn_blocking and rayon: the start-by check and the hang-up flag by
    // hand; the hand-off ends with the closure.
    let gone = Arc::new(AtomicBool::new(false));
    let _guard = GoneOnDrop(gone.clone());
    let job = move || {
        let handoff = handoff; // moved in: dropped when the closure ends
        if gone.load(Relaxed) {
            handoff.0.c.cancelled_client_gone.fetch_add(1, Relaxed);
            Outcome::Cancelled
        } else if how.start_by.is_some_and(|d| Instant::now() > d) {
            Outcome::Expired
        } else {
            Outcome::Ran(f())
        }
    };
    let out = match &s.exec {
        Exec::Rayon(pool) => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            pool.spawn(move || {
                let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(job)));
            });
            rx.await.map_err(|_| Ended::Failed)?.map_err(|_| Ended::Failed)?
        }
        _ => tokio::task::spawn_blocking(job).await.map_err(|_| Ended::Failed)?,
    };
    match out {
        Outcome::Ran(v) => Ok(v),
        Outcome::Expired => count_expired(s),
        Outcome::Cancelled => Err(Ended::Failed), // nobody is listening
    }
}

/// Counts an expiry and returns it.
fn count_expired<T>(s: &Shared) -> Result<T, Ended> {
    s.c.expired.fetch_add(1, Relaxed);
    Err(Ended::Expired)
}

/// `key=<digits>` in the query, at most `max`; `Err` if present but bad.
fn query_u64(q: &str, key: &str, max: u64) -> Result<Option<u64>, ()> {
    match query_str(q, key) {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().ok().filter(|x| *x <= max).map(Some).ok_or(())
        }
        Some(_) => Err(()),
    }
}

fn query_str<'a>(q: &'a str, key: &str) -> Option<&'a str> {
    q.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], body.into()).into_response()
}

fn bad_query() -> Response {
    text(StatusCode::BAD_REQUEST, "bad query\n")
}

fn ended(e: Ended) -> Response {
    match e {
        Ended::Expired => text(StatusCode::SERVICE_UNAVAILABLE, "expired\n"),
        Ended::Refused => text(StatusCode::SERVICE_UNAVAILABLE, "refused\n"),
        Ended::Failed => text(StatusCode::INTERNAL_SERVER_ERROR, "failed\n"),
    }
}

async fn ping(State(s): State<Shared>) -> Response {
    s.c.requests.fetch_add(1, Relaxed);
    text(StatusCode::OK, "pong\n")
}

async fn work(State(s): State<Shared>, uri: Uri, headers: HeaderMap) -> Response {
    s.c.requests.fetch_add(1, Relaxed);
    let q = uri.query().unwrap_or("");
    let (Ok(Some(n)), Ok(deadline_ms)) = (query_u64(q, "n", WORK_MAX), query_u64(q, "deadline_ms", SLEEP_MAX_MS))
    else {
        return bad_query();
    };
    let priority = match query_str(q, "priority") {
        None | Some("normal") => Priority::Normal,
        Some("high") => Priority::High,
        Some("low") => Priority::Low,
        Some(_) => return bad_query(),
    };
    let due_ms = deadline_ms.unwrap_or(s.opt.work_deadline_ms);
    let started = headers.get("x-request-start").and_then(|v| v.to_str().ok()).and_then(deadline::request_start);
    let due = (due_ms > 0).then(|| started.unwrap_or_else(Instant::now) + Duration::from_millis(due_ms));
    let start_by = due.map(|d| s.reserve.lock().unwrap().start_by(d, due_ms));
    let order = s.clone();
    let how = How { priority, start_by, lane: false };
    match offload(&s, how, move || (order.c.work_started.fetch_add(1, Relaxed), work_digest(n))).await {
        Ok((seq, digest)) => {
            if let Some(due) = due
                && s.reserve.lock().unwrap().learn(due, Instant::now())
            {
                s.c.answered_late.fetch_add(1, Relaxed);
            }
            let mut r = text(StatusCode::OK, format!("{digest:016x}\n"));
            r.headers_mut().insert("x-started", seq.into());
            r
        }
        Err(e) => ended(e),
    }
}

/// Counts the /sleep handlers sleeping at once, and the most there were.
struct SleepingNow(Shared);

impl SleepingNow {
    fn new(s: Shared) -> SleepingNow {
        let n = s.c.sleeping.fetch_add(1, Relaxed) + 1;
        s.c.sleep_max_concurrent.fetch_max(n, Relaxed);
        SleepingNow(s)
    }
}

impl Drop for SleepingNow {
    fn drop(&mut self) {
        self.0.c.sleeping.fetch_sub(1, Relaxed);
    }
}

async fn sleep(State(s): State<Shared>, uri: Uri) -> Response {
    s.c.requests.fetch_add(1, Relaxed);
    let Ok(Some(ms)) = query_u64(uri.query().unwrap_or(""), "ms", SLEEP_MAX_MS) else {
        return bad_query();
    };
    let counted = s.clone();
    let how = How { priority: Priority::Normal, start_by: None, lane: true };
    let slept = offload(&s, how, move || {
        let _now = SleepingNow::new(counted);
        // The pool lends a thread while this one sleeps (a no-op off the pool).
        wspool::blocking(|| std::thread::sleep(Duration::from_millis(ms)));
    });
    match slept.await {
        Ok(()) => text(StatusCode::OK, "slept\n"),
        Err(e) => ended(e),
    }
}

async fn metrics(State(s): State<Shared>) -> Response {
    s.c.requests.fetch_add(1, Relaxed);
    let mut out = String::new();
    if let Exec::Wspool { pool, .. } = &s.exec {
        pool.openmetrics(&mut out);
        out.truncate(out.len() - "# EOF\n".len()); // ours go before it
    }
    let c = &s.c;
    let families: [(&str, &str, &AtomicU64); 7] = [
        ("http_requests", "HTTP requests routed.", &c.requests),
        ("http_submitted", "Requests whose work was handed off the runtime's thread.", &c.submitted),
        ("http_done", "Endings of handed-off requests: answered, expired or their client gone.", &c.done),
        ("http_expired", "Requests answered 503 because their work had not started by its deadline.", &c.expired),
        ("http_cancelled_client_gone", "Queued work cancelled because its client hung up.", &c.cancelled_client_gone),
        ("http_answered_late", "/work replies handed back after their due time.", &c.answered_late),
        ("http_sleep_max_concurrent", "The most /sleep handlers sleeping at once.", &c.sleep_max_concurrent),
    ];
    for (name, help, v) in families {
        let _ = write!(out, "# TYPE {name} counter\n# HELP {name} {help}\n{name}_total {}\n", v.load(Relaxed));
    }
    out.push_str("# EOF\n");
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}

async fn not_found(State(s): State<Shared>) -> Response {
    s.c.requests.fetch_add(1, Relaxed);
    text(StatusCode::NOT_FOUND, "not found\n")
}

fn usage() -> ! {
    eprintln!(
        "usage: http_axum [--port P] [--threads N] [--mode wspool|spawn_blocking|rayon] \
         [--work-deadline-ms D] [--sleep-lane N] [--spin-us U] [--worker-nice N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Options {
    let mut o = Options {
        port: 0,
        threads: 2,
        mode: Mode::Wspool,
        work_deadline_ms: 0,
        sleep_lane: 2,
        spin_us: None,
        worker_nice: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| usage());
        let num = || v.parse::<u64>().unwrap_or_else(|_| usage());
        match a.as_str() {
            "--port" => o.port = u16::try_from(num()).unwrap_or_else(|_| usage()),
            "--threads" => o.threads = num() as usize,
            "--work-deadline-ms" => o.work_deadline_ms = num(),
            "--sleep-lane" => o.sleep_lane = num() as usize,
            "--spin-us" => o.spin_us = Some(u32::try_from(num()).unwrap_or_else(|_| usage())),
            "--worker-nice" => o.worker_nice = u32::try_from(num()).unwrap_or_else(|_| usage()),
            "--mode" => {
                o.mode = match v.as_str() {
                    "wspool" => Mode::Wspool,
                    "spawn_blocking" => Mode::SpawnBlocking,
                    "rayon" => Mode::Rayon,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    o
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

fn main() {
    let opt = parse_args();
    let exec = match opt.mode {
        Mode::Wspool => {
            let mut b = Pool::builder().name("axum").min_threads(opt.threads).thread_nice(opt.worker_nice);
            if let Some(us) = opt.spin_us {
                b = b.spin_max_us(us);
            }
            let pool = b.build().expect("pool");
            let sleep_lane = (opt.sleep_lane > 0).then(|| pool.lane(opt.sleep_lane));
            Exec::Wspool { pool, sleep_lane }
        }
        Mode::SpawnBlocking => Exec::SpawnBlocking,
        Mode::Rayon => Exec::Rayon(rayon::ThreadPoolBuilder::new().num_threads(opt.threads).build().expect("rayon")),
    };
    // One I/O thread, as the C and C++ servers' one loop; spawn_blocking's pool
    // gets as many threads as the others.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .max_blocking_threads(opt.threads)
        .build()
        .expect("runtime");
    let port = opt.port;
    let server = Arc::new(Server { opt, exec, c: Counters::default(), reserve: Default::default() });
    let app = axum::Router::new()
        .route("/ping", get(ping))
        .route("/work", get(work))
        .route("/sleep", get(sleep))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(server.clone());
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        println!("listening on {}", listener.local_addr().expect("local address").port());
        axum::serve(listener, app).with_graceful_shutdown(stop_signal()).await.expect("serve");
    });
    drop(rt); // waits for spawn_blocking work still running
    match &server.exec {
        Exec::Wspool { pool, .. } => {
            let _ = pool.shutdown(Shutdown::Drain, None);
        }
        Exec::Rayon(_) | Exec::SpawnBlocking => {}
    }
    // rayon has no way to wait for spawned jobs: the closures of requests
    // whose clients left may still be running. Give them (bounded) time.
    let c = &server.c;
    let waited = Instant::now();
    while c.done.load(Relaxed) < c.submitted.load(Relaxed) && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (sub, done) = (c.submitted.load(Relaxed), c.done.load(Relaxed));
    eprintln!(
        "http_axum: exit: mode={:?} requests={} submitted={sub} done={done} cancelled={}",
        server.opt.mode,
        c.requests.load(Relaxed),
        c.cancelled_client_gone.load(Relaxed)
    );
    std::process::exit(if sub == done { 0 } else { 3 });
}
