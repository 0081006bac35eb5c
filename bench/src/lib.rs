//! The harness behind `cargo bench -p wspool-bench --bench compare`.
//!
//! No criterion: the workloads compare whole thread pools in one process, and
//! what matters is that every contender is measured the same way. The harness
//! runs contenders in interleaved rounds (round `r` starts with contender
//! `r mod n`, so none always runs first or right after the same neighbour),
//! after an unrecorded warm-up round, with a short settle pause before every
//! run so one pool's spinning threads do not eat the next pool's CPU. It
//! reports medians and the min–max spread, and prints markdown tables.
//!
//! The development machine is a shared 2-core box, so the harness also
//! watches the rest of the machine (`/proc/stat` busy time minus this
//! process's CPU time): before each round it waits, up to a limit, for other
//! processes to go quiet; a run of 50 ms or more during which they were busy
//! anyway is repeated once; and every table says how much CPU
//! other processes used while it was measured.
//!
//! Knobs (environment, or `--quick` on the command line):
//! - `WSPOOL_BENCH_THREADS` workers per pool (default 2, the dev machine's cores)
//! - `WSPOOL_BENCH_REPS` measured repetitions per contender (default 9; quick 3)
//! - `WSPOOL_BENCH_QUICK=1` or `--quick`: smaller workloads, for a smoke run
//! - `WSPOOL_BENCH_QUIET=0`: do not wait for other processes to go quiet
//!   before each round and do not repeat disturbed runs (the default waits
//!   up to 2 s per round, 0.5 s in quick mode, and repeats a disturbed run once)
//! - positional arguments select workloads by prefix (`w1`, `w3`, ...)

pub mod workloads;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Settings of one benchmark run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Worker threads per pool.
    pub threads: usize,
    /// Measured repetitions per contender.
    pub reps: usize,
    /// Smaller workloads for a fast smoke run.
    pub quick: bool,
    /// Workload selectors (lower-case prefixes such as `w1`); empty = all.
    pub filter: Vec<String>,
    /// Wait for other processes to go quiet before each round
    /// (`WSPOOL_BENCH_QUIET=0` turns it off).
    pub quiet_gate: bool,
}

impl Config {
    /// Defaults: 2 threads, 9 repetitions (3 in quick mode), every workload.
    pub fn default_for(quick: bool) -> Config {
        Config { threads: 2, reps: if quick { 3 } else { 9 }, quick, filter: Vec::new(), quiet_gate: true }
    }

    /// Reads the command line (`cargo bench` passes `--bench`; unknown
    /// `--flags` are ignored) and the `WSPOOL_BENCH_*` environment.
    pub fn parse<I, S>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Config, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut quick = matches!(env("WSPOOL_BENCH_QUICK").as_deref(), Some(v) if v != "0" && !v.is_empty());
        let mut filter = Vec::new();
        for a in args {
            let a = a.as_ref();
            if a == "--quick" {
                quick = true;
            } else if a.starts_with('-') {
                // `--bench`, `--nocapture`, ...: what cargo and libtest pass.
            } else {
                filter.push(a.to_ascii_lowercase());
            }
        }
        let mut cfg = Config::default_for(quick);
        cfg.filter = filter;
        if let Some(v) = env("WSPOOL_BENCH_THREADS") {
            cfg.threads = parse_positive("WSPOOL_BENCH_THREADS", &v, 1024)?;
        }
        if let Some(v) = env("WSPOOL_BENCH_QUIET") {
            cfg.quiet_gate = !matches!(v.trim(), "0" | "no" | "off" | "false");
        }
        if let Some(v) = env("WSPOOL_BENCH_REPS") {
            cfg.reps = parse_positive("WSPOOL_BENCH_REPS", &v, 10_000)?;
        }
        Ok(cfg)
    }

    /// Whether the workload named `name` (e.g. `"w3"`) was selected.
    pub fn selected(&self, name: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| name.starts_with(f.as_str()) || f.starts_with(name))
    }

    /// `full` normally, `quick` in quick mode.
    pub fn size(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

fn parse_positive(name: &str, v: &str, max: usize) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 && n <= max => Ok(n),
        _ => Err(format!("{name}={v:?}: expected an integer from 1 to {max}")),
    }
}

/// Median, min and max of a set of measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

/// Summarises `values`; `None` when empty or when a value is NaN.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Summary { median, min: v[0], max: v[n - 1] })
}

/// Nearest-rank percentile `p` (0 < p <= 100) of an ascending slice.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// One contender of a workload: a name, a note for the table, and a closure
/// that performs one timed repetition and returns its measurement.
pub struct Contender<'a, T> {
    /// Row label, e.g. `"wspool spawn"`.
    pub name: String,
    /// What exactly it does (API used, thread count), for the table.
    pub note: String,
    /// Whether this is one of wspool's rows (ratios compare against peers).
    pub is_wspool: bool,
    /// A reference row (e.g. sequential code): neither wspool nor a peer.
    pub reference: bool,
    run: Box<dyn FnMut() -> T + 'a>,
}

impl<'a, T> Contender<'a, T> {
    /// A contender; `run` performs one repetition and returns its measurement.
    pub fn new(name: &str, note: &str, is_wspool: bool, run: impl FnMut() -> T + 'a) -> Self {
        Contender { name: name.to_owned(), note: note.to_owned(), is_wspool, reference: false, run: Box::new(run) }
    }

    /// Marks this contender as a reference row, not a peer.
    pub fn as_reference(mut self) -> Self {
        self.is_wspool = false;
        self.reference = true;
        self
    }

    /// Whether this is a peer (not wspool, not a reference).
    pub fn is_peer(&self) -> bool {
        !self.is_wspool && !self.reference
    }
}

/// How [`run_rounds`] paces the runs.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// Pause before every run, so the previous contender's threads go idle.
    pub settle: Duration,
    /// Before each round, wait (at most this long) until other processes use
    /// less than `quiet_cores` of CPU; `Duration::ZERO` disables the gate.
    pub quiet_max_wait: Duration,
    /// The foreign load (in cores) under which the machine counts as quiet.
    pub quiet_cores: f64,
    /// A measured run of at least [`RETRY_MIN_WALL`] during which other
    /// processes used more than `2 × quiet_cores` is run again, at most this
    /// many times (the last try is kept whatever the load).
    pub retries: usize,
}

/// Runs shorter than this are never retried: `/proc/stat` counts in 10 ms
/// ticks, too coarse to judge them.
pub const RETRY_MIN_WALL: Duration = Duration::from_millis(50);

impl Pacing {
    /// No pauses, no gate, no retries (for tests).
    pub const NONE: Pacing =
        Pacing { settle: Duration::ZERO, quiet_max_wait: Duration::ZERO, quiet_cores: 0.0, retries: 0 };
}

/// What [`run_rounds`] measured.
#[derive(Debug, Clone)]
pub struct Rounds<T> {
    /// Each contender's measurements, in contender order.
    pub values: Vec<Vec<T>>,
    /// CPU used by other processes during the measured runs, in cores
    /// (`None` when `/proc/stat` is unreadable).
    pub foreign_cores: Option<f64>,
    /// Rounds that started although the machine was still busy after the
    /// quiet gate's maximum wait.
    pub busy_rounds: usize,
    /// Rounds in all (warm-up included).
    pub rounds: usize,
    /// Measured runs repeated because other processes were busy during them.
    pub retried: usize,
}

/// Runs `warmup` unrecorded rounds and `reps` recorded rounds over all
/// contenders, interleaved and rotated, paced by `pacing`.
pub fn run_rounds<T>(contenders: &mut [Contender<'_, T>], warmup: usize, reps: usize, pacing: Pacing) -> Rounds<T> {
    let n = contenders.len();
    let mut values: Vec<Vec<T>> = (0..n).map(|_| Vec::with_capacity(reps)).collect();
    let (mut busy_rounds, mut retried) = (0, 0);
    let (mut foreign_ns, mut wall_ns, mut probe_ok) = (0i128, 0i128, true);
    for round in 0..warmup + reps {
        if !pacing.quiet_max_wait.is_zero() && !load::wait_for_quiet(pacing.quiet_cores, pacing.quiet_max_wait) {
            busy_rounds += 1;
        }
        for k in 0..n {
            let i = (round + k) % n;
            if !pacing.settle.is_zero() {
                std::thread::sleep(pacing.settle);
            }
            if round < warmup {
                (contenders[i].run)();
                continue;
            }
            let mut tries = 0;
            loop {
                let probe = load::Probe::start();
                let v = (contenders[i].run)();
                let Some((f, w)) = probe.and_then(|p| p.finish()) else {
                    probe_ok = false;
                    values[i].push(v);
                    break;
                };
                let busy = w >= RETRY_MIN_WALL.as_nanos() as i128 && f as f64 > 2.0 * pacing.quiet_cores * w as f64;
                if busy && tries < pacing.retries {
                    tries += 1;
                    retried += 1;
                    if !pacing.settle.is_zero() {
                        std::thread::sleep(pacing.settle);
                    }
                    continue;
                }
                foreign_ns += f;
                wall_ns += w;
                values[i].push(v);
                break;
            }
        }
    }
    let foreign_cores = (probe_ok && wall_ns > 0).then(|| (foreign_ns.max(0) as f64) / wall_ns as f64);
    Rounds { values, foreign_cores, busy_rounds, rounds: warmup + reps, retried }
}

/// Machine load caused by other processes (the dev machine is shared).
pub mod load {
    use super::*;

    /// Busy CPU time of the whole machine, in ns, from `/proc/stat`
    /// (user + nice + system + irq + softirq + steal; 10 ms resolution).
    pub fn machine_busy_ns() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/stat").ok()?;
        let line = s.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        let ticks = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
        // SAFETY: sysconf has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let tck = if tck > 0 { tck as u64 } else { 100 };
        Some(ticks * (1_000_000_000 / tck))
    }

    /// Measures the CPU that other processes use over an interval.
    pub struct Probe {
        wall: Instant,
        busy: u64,
        own: u64,
    }

    impl Probe {
        /// Starts the interval; `None` without `/proc/stat`.
        pub fn start() -> Option<Probe> {
            Some(Probe { busy: machine_busy_ns()?, own: cpu::process_ns(), wall: Instant::now() })
        }

        /// (foreign CPU ns, wall ns) since `start`. The foreign figure is
        /// the machine's busy time minus this process's CPU time, so it can
        /// come out slightly negative from the tick resolution.
        pub fn finish(self) -> Option<(i128, i128)> {
            let wall = self.wall.elapsed().as_nanos() as i128;
            let busy = machine_busy_ns()? as i128 - self.busy as i128;
            let own = cpu::process_ns() as i128 - self.own as i128;
            Some((busy - own, wall))
        }
    }

    /// Waits until other processes use less than `cores` CPUs over a 100 ms
    /// window, at most `max_wait`; true if the machine was found quiet.
    pub fn wait_for_quiet(cores: f64, max_wait: Duration) -> bool {
        let start = Instant::now();
        loop {
            let Some(p) = Probe::start() else { return true };
            std::thread::sleep(Duration::from_millis(100));
            let Some((f, w)) = p.finish() else { return true };
            if (f as f64) < cores * w as f64 {
                return true;
            }
            if start.elapsed() >= max_wait {
                return false;
            }
        }
    }
}

/// A one-shot completion signal counted down by tasks: the task that brings
/// the count to the target wakes the waiter. The count is a relaxed
/// `fetch_add` (the "tiny task" of the flood workloads); only the last task
/// touches the mutex.
pub struct Countdown {
    count: AtomicUsize,
    target: AtomicUsize,
    done: Mutex<bool>,
    cv: Condvar,
}

impl Default for Countdown {
    fn default() -> Self {
        Countdown::new()
    }
}

impl Countdown {
    /// A countdown with no target armed.
    pub const fn new() -> Countdown {
        Countdown {
            count: AtomicUsize::new(0),
            target: AtomicUsize::new(usize::MAX),
            done: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    /// A leaked countdown, so tasks can capture it as `&'static` without
    /// touching a reference count per task.
    pub fn leak() -> &'static Countdown {
        Box::leak(Box::new(Countdown::new()))
    }

    /// Resets the count and arms `target` hits. Call only while no task of
    /// a previous round is still running.
    pub fn arm(&self, target: usize) {
        self.count.store(0, Ordering::Relaxed);
        *self.done.lock().expect("countdown lock") = false;
        self.target.store(target, Ordering::Release);
    }

    /// One task's work: a relaxed increment; the last one signals.
    #[inline]
    pub fn hit(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target.load(Ordering::Relaxed) {
            *self.done.lock().expect("countdown lock") = true;
            self.cv.notify_all();
        }
    }

    /// A relaxed increment that never signals (for waits done another way).
    #[inline]
    pub fn bump(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Blocks until the armed target was reached.
    pub fn wait(&self) {
        let mut done = self.done.lock().expect("countdown lock");
        while !*done {
            done = self.cv.wait(done).expect("countdown lock");
        }
    }

    /// Blocks until the target was reached or `timeout` passed; true if reached.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut done = self.done.lock().expect("countdown lock");
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            done = self.cv.wait_timeout(done, deadline - now).expect("countdown lock").0;
        }
        true
    }

    /// The current count.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

/// CPU accounting of the threads of this process, by thread-name prefix.
pub mod cpu {
    use super::*;

    /// One thread's CPU time.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ThreadCpu {
        /// The thread's name (`comm`, at most 15 bytes).
        pub name: String,
        /// CPU time consumed so far, in ns.
        pub ns: u64,
    }

    /// CPU time per thread id of the threads whose name starts with `prefix`.
    /// Uses `/proc/self/task/<tid>/schedstat` (nanoseconds on CPU) and falls
    /// back to `stat`'s utime + stime (clock ticks) where schedstat is absent.
    /// The flag says whether every figure had nanosecond precision.
    pub fn snapshot(prefix: &str) -> (HashMap<u32, ThreadCpu>, bool) {
        let mut map = HashMap::new();
        let mut precise = true;
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return (map, false) };
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let base = entry.path();
            let Ok(comm) = std::fs::read_to_string(base.join("comm")) else { continue };
            let name = comm.trim_end().to_owned();
            if !name.starts_with(prefix) {
                continue;
            }
            if let Some(ns) = std::fs::read_to_string(base.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()))
            {
                map.insert(tid, ThreadCpu { name, ns });
            } else if let Some(ns) = std::fs::read_to_string(base.join("stat")).ok().and_then(|s| stat_cpu_ns(&s)) {
                precise = false;
                map.insert(tid, ThreadCpu { name, ns });
            }
        }
        (map, precise)
    }

    /// utime + stime of a `/proc/<pid>/task/<tid>/stat` line, in ns.
    pub fn stat_cpu_ns(stat: &str) -> Option<u64> {
        // The command name is in parentheses and may contain spaces.
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After ')': state is field 3 overall, utime 14, stime 15.
        let utime: u64 = f.get(11)?.parse().ok()?;
        let stime: u64 = f.get(12)?.parse().ok()?;
        // SAFETY: sysconf has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let tck = if tck > 0 { tck as u64 } else { 100 };
        Some((utime + stime) * (1_000_000_000 / tck))
    }

    /// CPU nanoseconds spent between two snapshots, per thread of the later
    /// one, busiest first (threads born in between count from zero; threads
    /// that exited in between are lost).
    pub fn delta(before: &HashMap<u32, ThreadCpu>, after: &HashMap<u32, ThreadCpu>) -> Vec<ThreadCpu> {
        let mut v: Vec<ThreadCpu> = after
            .iter()
            .map(|(tid, t)| ThreadCpu {
                name: t.name.clone(),
                ns: t.ns.saturating_sub(before.get(tid).map(|b| b.ns).unwrap_or(0)),
            })
            .collect();
        v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.name.cmp(&b.name)));
        v
    }

    fn clock_ns(clock: libc::clockid_t) -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: ts is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        if rc != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// CPU time of the whole process.
    pub fn process_ns() -> u64 {
        clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
    }

    /// CPU time of the calling thread.
    pub fn thread_ns() -> u64 {
        clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
    }
}

/// A markdown table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns; a name starting with `>` is right-aligned (the `>` is dropped).
    pub fn new(columns: &[&str]) -> Table {
        Table {
            header: columns.iter().map(|c| c.trim_start_matches('>').to_owned()).collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are an error.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) {
        assert!(cells.len() <= self.header.len(), "row has more cells than the table has columns");
        let mut r: Vec<String> = cells.iter().map(|c| c.as_ref().replace('|', "\\|")).collect();
        r.resize(self.header.len(), String::new());
        self.rows.push(r);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as padded markdown.
    pub fn render(&self) -> String {
        let w: Vec<usize> = (0..self.header.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].chars().count(), 3])
                    .max()
                    .unwrap_or(3)
            })
            .collect();
        let mut s = String::new();
        let line = |s: &mut String, cells: &[String]| {
            s.push('|');
            for (i, c) in cells.iter().enumerate() {
                let pad = w[i] - c.chars().count();
                if self.right[i] {
                    let _ = write!(s, " {}{} |", " ".repeat(pad), c);
                } else {
                    let _ = write!(s, " {}{} |", c, " ".repeat(pad));
                }
            }
            s.push('\n');
        };
        line(&mut s, &self.header);
        s.push('|');
        for (i, &wi) in w.iter().enumerate() {
            if self.right[i] {
                let _ = write!(s, " {}: |", "-".repeat(wi - 1));
            } else {
                let _ = write!(s, " {} |", "-".repeat(wi));
            }
        }
        s.push('\n');
        for r in &self.rows {
            line(&mut s, r);
        }
        s
    }
}

/// Formats a number with `digits` decimals, or "n/a" for NaN/inf.
pub fn fmt(v: f64, digits: usize) -> String {
    if v.is_finite() { format!("{v:.digits$}") } else { "n/a".to_owned() }
}

/// The system load averages, for the report header.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn config_defaults_and_overrides() {
        let c = Config::parse(["--bench"], env_of(&[])).unwrap();
        assert_eq!(c, Config::default_for(false));
        let c = Config::parse(["--bench", "--quick", "W3"], env_of(&[("WSPOOL_BENCH_THREADS", "4")])).unwrap();
        assert!(c.quick);
        assert_eq!(c.threads, 4);
        assert_eq!(c.reps, 3);
        assert!(c.selected("w3") && !c.selected("w1"));
        let c = Config::parse(Vec::<String>::new(), env_of(&[("WSPOOL_BENCH_QUICK", "1"), ("WSPOOL_BENCH_REPS", "5")]))
            .unwrap();
        assert!(c.quick && c.reps == 5 && c.selected("w6"));
        assert!(Config::parse(Vec::<String>::new(), env_of(&[("WSPOOL_BENCH_THREADS", "0")])).is_err());
        assert!(Config::parse(Vec::<String>::new(), env_of(&[("WSPOOL_BENCH_REPS", "x")])).is_err());
        assert!(!Config::parse(Vec::<String>::new(), env_of(&[("WSPOOL_BENCH_QUICK", "0")])).unwrap().quick);
        assert!(!Config::parse(Vec::<String>::new(), env_of(&[("WSPOOL_BENCH_QUIET", "0")])).unwrap().quiet_gate);
    }

    #[test]
    fn summaries_and_percentiles() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]), Some(Summary { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::NAN]), None);
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 1.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&v, 0.0), None);
    }

    #[test]
    fn rounds_interleave_and_drop_warmup() {
        let log = std::cell::RefCell::new(Vec::new());
        let (mut a, mut b) = (0, 100);
        let mut cs = vec![
            Contender::new("a", "", true, || {
                log.borrow_mut().push('a');
                a += 1;
                a
            }),
            Contender::new("b", "", false, || {
                log.borrow_mut().push('b');
                b += 1;
                b
            }),
        ];
        let out = run_rounds(&mut cs, 1, 3, Pacing::NONE);
        drop(cs);
        assert_eq!(out.values, vec![vec![2, 3, 4], vec![102, 103, 104]]);
        assert_eq!((out.rounds, out.busy_rounds, out.retried), (4, 0, 0));
        assert_eq!(log.into_inner().into_iter().collect::<String>(), "abbaabba");
    }

    #[test]
    fn countdown_signals_once_target_reached() {
        let c = Countdown::leak();
        c.arm(1000);
        let hs: Vec<_> = (0..4).map(|_| std::thread::spawn(move || (0..250).for_each(|_| c.hit()))).collect();
        c.wait();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(c.count(), 1000);
        c.arm(1);
        assert!(!c.wait_timeout(Duration::from_millis(1)));
        c.hit();
        assert!(c.wait_timeout(Duration::from_secs(5)));
    }

    #[test]
    fn table_renders_markdown() {
        let mut t = Table::new(&["Name", ">Value"]);
        t.row(&["a|b", "1.0"]);
        t.row(&["long name"]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "| Name      | Value |");
        assert_eq!(lines[1], "| --------- | ----: |");
        assert_eq!(lines[2], "| a\\|b      |   1.0 |");
        assert_eq!(lines[3], "| long name |       |");
    }

    #[test]
    fn stat_line_parsing() {
        let line = "1234 (wsb w(1) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0";
        // SAFETY: sysconf has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        assert_eq!(cpu::stat_cpu_ns(line), Some(300 * (1_000_000_000 / tck)));
        assert_eq!(cpu::stat_cpu_ns("garbage"), None);
        let (me, _) = cpu::snapshot("");
        assert!(!me.is_empty());
        let mut before = HashMap::new();
        before.insert(1, cpu::ThreadCpu { name: "a".into(), ns: 10 });
        let mut after = before.clone();
        after.get_mut(&1).unwrap().ns = 15;
        after.insert(2, cpu::ThreadCpu { name: "b".into(), ns: 7 });
        let d = cpu::delta(&before, &after);
        assert_eq!(d, vec![cpu::ThreadCpu { name: "b".into(), ns: 7 }, cpu::ThreadCpu { name: "a".into(), ns: 5 }]);
        let p = load::Probe::start().expect("/proc/stat");
        let (_, wall) = p.finish().expect("/proc/stat");
        assert!(wall >= 0);
    }
}
