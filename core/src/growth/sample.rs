//! What the starvation monitor reads each tick, at a cost bounded
//! independently of the number of threads: the pool's own completions
//! (summed from the per-worker counters, at most `SCAN_PER_TICK` slots per
//! tick) and the state of at most `SAMPLE_PER_TICK` workers.
//!
//! The hint that tells a blocked worker from a computing one (Linux): each
//! worker's CPU clock (`pthread_getcpuclockid`, captured at thread start)
//! and, only when that clock barely moved, its thread's scheduler state
//! (`/proc/self/task/<tid>/stat`). A worker is *blocked* over the window
//! between two samples when it is inside a task, finished at most one task
//! during the window (so the window is not idle time between many short
//! tasks), ran for less than `BUSY_SHARE` of it, and is asleep in the
//! kernel now (not running nor waiting for a CPU): it sleeps, waits in
//! `recv`, or waits for a lock. Otherwise it is *busy*: a thread that got
//! little CPU because the machine is oversubscribed is runnable, not
//! asleep. (The state is read rather than the scheduler's wait-time
//! counters because those are only brought up to date when a waiting
//! thread finally runs.) Workers outside a task (searching, or parked in a
//! wait) are not classified, and workers inside a declared blocking region
//! are not sampled: the compensation counts those in a region or parked in
//! a wait (`Compensation::blocked`, `waiting`), and the monitor takes them
//! out of the pool it judges, so none is counted twice.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::registry::Registry;

/// What `Progress` and `Sampler` read: the workers' counters and the
/// kernel's view of their threads. One seam, so that the controller's tests
/// (`sim.rs`) script what a pool shows; production reads the registry
/// (`impl Signals for Registry`), with the loads and system calls it always
/// made: the methods are inlined into the monomorphised callers.
pub(crate) trait Signals {
    /// Slots `[0, high_water)` may hold a thread.
    fn high_water(&self) -> usize;
    fn occupied(&self, slot: usize) -> bool;
    /// The slot's completions (never goes back).
    fn completed(&self, slot: usize) -> u64;
    /// The slot's thread's CPU clock handle, 0 before it started.
    fn cpu_clock(&self, slot: usize) -> u64;
    /// The slot's `in_task` mark (`IN_TASK`, `DECLARED` or 0).
    fn in_task(&self, slot: usize) -> u64;
    fn tid(&self, slot: usize) -> u64;
    /// CPU time of the thread with this clock, None once it is gone.
    fn read_cpu_clock(&self, clock: u64) -> Option<u64>;
    /// Is the thread asleep in the kernel? None when unreadable.
    fn asleep(&self, tid: u64) -> Option<bool>;
}

impl Signals for Registry {
    #[inline]
    fn high_water(&self) -> usize {
        self.high_water.load(Relaxed)
    }
    #[inline]
    fn occupied(&self, slot: usize) -> bool {
        self.slots[slot].occupied.load(Relaxed)
    }
    #[inline]
    fn completed(&self, slot: usize) -> u64 {
        self.slots[slot].counters.completed.load(Relaxed)
    }
    #[inline]
    fn cpu_clock(&self, slot: usize) -> u64 {
        self.slots[slot].counters.cpu_clock.load(Relaxed)
    }
    #[inline]
    fn in_task(&self, slot: usize) -> u64 {
        self.slots[slot].counters.in_task.load(Relaxed)
    }
    #[inline]
    fn tid(&self, slot: usize) -> u64 {
        self.slots[slot].counters.tid.load(Relaxed)
    }
    #[inline]
    fn read_cpu_clock(&self, clock: u64) -> Option<u64> {
        read_cpu_clock(clock)
    }
    #[inline]
    fn asleep(&self, tid: u64) -> Option<bool> {
        asleep(tid)
    }
}

/// Workers sampled per tick.
pub(crate) const SAMPLE_PER_TICK: usize = 8;
/// Worker completion counters read per tick.
const SCAN_PER_TICK: usize = 512;
/// A worker that ran at least this share of the wall time is busy.
const BUSY_SHARE: f64 = 0.25;

/// Values of `WorkerCounters::in_task`.
pub(crate) const IN_TASK: u64 = 1;
/// The worker is inside a declared blocking region (or a wait past the
/// help-depth cap): the compensation counts it, the monitor must not.
pub(crate) const DECLARED: u64 = 2;

/// A running total of the pool's completions. Slots past `SCAN_PER_TICK`
/// are read in turn, so with more workers than that the total lags by a
/// few ticks; every slot's counter only grows, so nothing is lost.
pub(crate) struct Progress {
    last: Vec<u64>,
    total: u64,
    cursor: usize,
}

impl Progress {
    pub(crate) fn new(slots: usize) -> Progress {
        Progress { last: vec![0; slots], total: 0, cursor: 0 }
    }

    /// Reads the next batch of counters; returns the running total.
    pub(crate) fn update(&mut self, pool: &impl Signals) -> u64 {
        let n = pool.high_water().min(self.last.len());
        for _ in 0..n.min(SCAN_PER_TICK) {
            if self.cursor >= n {
                self.cursor = 0;
            }
            let now = pool.completed(self.cursor);
            // A slot's counter never goes back: it outlives the threads that use it.
            self.total += now.wrapping_sub(self.last[self.cursor]);
            self.last[self.cursor] = now;
            self.cursor += 1;
        }
        self.total
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Unknown,
    Blocked,
    Busy,
}

#[derive(Clone, Copy)]
struct Entry {
    generation: u32,
    clock: u64,
    cpu_ns: u64,
    /// The slot's completions.
    done: u64,
    at: Instant,
    class: Class,
    /// CPU share over the last window (counted in `Sampler::shares`).
    share: f64,
}

/// One reading of a worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    pub(crate) clock: u64,
    pub(crate) tid: u64,
    pub(crate) in_task: bool,
    pub(crate) done: u64,
    pub(crate) cpu_ns: u64,
}

/// What the classified workers add up to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Estimate {
    /// Share of classified workers that are blocked inside a task.
    pub(crate) blocked_share: f64,
    /// CPU the classified workers use, in cores, scaled to all of them.
    pub(crate) cores_per_worker: f64,
}

/// Per-slot CPU clock samples, taken a bounded number at a time. The
/// classification of every slot sampled in this generation is kept in
/// running totals, so an estimate costs nothing extra.
pub(crate) struct Sampler {
    entries: Vec<Entry>,
    cursor: usize,
    generation: u32,
    blocked: usize,
    busy: usize,
    shares: f64,
}

impl Sampler {
    pub(crate) fn new(slots: usize) -> Sampler {
        let entry = Entry {
            generation: 0,
            clock: 0,
            cpu_ns: 0,
            done: 0,
            at: Instant::now(),
            class: Class::Unknown,
            share: 0.0,
        };
        Sampler { entries: vec![entry; slots], cursor: 0, generation: 1, blocked: 0, busy: 0, shares: 0.0 }
    }

    /// Forgets every sample: a window that spans a pause (idle workers, an
    /// idle pool) would read idle time as blocked time.
    pub(crate) fn reset(&mut self) {
        // Generation 0 marks an empty entry.
        self.generation = self.generation.wrapping_add(1).max(1);
        self.blocked = 0;
        self.busy = 0;
        self.shares = 0.0;
    }

    /// Samples the next `SAMPLE_PER_TICK` occupied slots.
    pub(crate) fn sample(&mut self, pool: &impl Signals, now: Instant) {
        let n = pool.high_water().min(self.entries.len());
        // Free slots (threads retired since the pool was larger) are passed
        // over without using up the tick's budget: otherwise the survivors of
        // a shrink are read once every high_water / SAMPLE_PER_TICK ticks and
        // blocking among them goes unseen for hundreds of ms. A pass over
        // the `occupied` flags is one relaxed load per slot.
        let mut sampled = 0;
        for _ in 0..n {
            if sampled == SAMPLE_PER_TICK {
                break;
            }
            if self.cursor >= n {
                self.cursor = 0;
            }
            if !pool.occupied(self.cursor) {
                self.record(self.cursor, None, now, |_| None);
                self.cursor += 1;
                continue;
            }
            sampled += 1;
            let slot = self.cursor;
            let clock = pool.cpu_clock(slot);
            let in_task = pool.in_task(slot);
            let occupied = pool.occupied(slot);
            let reading = if occupied && clock != 0 && in_task != DECLARED {
                pool.read_cpu_clock(clock).map(|cpu_ns| Reading {
                    clock,
                    tid: pool.tid(slot),
                    in_task: in_task == IN_TASK,
                    done: pool.completed(slot),
                    cpu_ns,
                })
            } else {
                None
            };
            self.record(slot, reading, now, |tid| pool.asleep(tid));
            self.cursor += 1;
        }
    }

    /// Classifies the window since the slot's previous reading. `asleep`
    /// says whether a thread is asleep in the kernel now.
    fn record(&mut self, index: usize, reading: Option<Reading>, now: Instant, asleep: impl Fn(u64) -> Option<bool>) {
        let old = self.entries[index];
        if old.generation == self.generation {
            match old.class {
                Class::Blocked => self.blocked -= 1,
                Class::Busy => self.busy -= 1,
                Class::Unknown => {}
            }
            self.shares -= old.share;
        }
        let Some(r) = reading else {
            self.entries[index].class = Class::Unknown;
            self.entries[index].generation = 0;
            return;
        };
        let mut entry = Entry {
            generation: self.generation,
            clock: r.clock,
            cpu_ns: r.cpu_ns,
            done: r.done,
            at: now,
            class: Class::Unknown,
            share: 0.0,
        };
        let wall = now.saturating_duration_since(old.at).as_nanos() as f64;
        if old.generation != self.generation || old.clock != r.clock || wall <= 0.0 {
            self.entries[index] = entry;
            return;
        }
        let share = (r.cpu_ns.saturating_sub(old.cpu_ns) as f64 / wall).min(1.0);
        entry.share = share;
        let busy = share >= BUSY_SHARE || r.done.wrapping_sub(old.done) > 1;
        entry.class = if !r.in_task {
            // Between tasks, or parked in a wait (which the compensation
            // counts): neither blocked in a task nor available for the queue.
            Class::Unknown
        } else if busy || asleep(r.tid) != Some(true) {
            // An unreadable state (the thread is gone) proves nothing: busy.
            Class::Busy
        } else {
            Class::Blocked
        };
        match entry.class {
            Class::Blocked => self.blocked += 1,
            Class::Busy => self.busy += 1,
            Class::Unknown => {}
        }
        self.shares += share;
        self.entries[index] = entry;
    }

    /// None until some worker has been sampled twice in this generation.
    pub(crate) fn estimate(&self) -> Option<Estimate> {
        let classified = self.blocked + self.busy;
        (classified > 0).then(|| Estimate {
            blocked_share: self.blocked as f64 / classified as f64,
            cores_per_worker: self.shares.max(0.0) / classified as f64,
        })
    }
}

/// Whether this platform can give the monitor its hint at all.
/// Not under Miri, which has no per-thread CPU clock, no `gettid` and no
/// `/proc`: there the pool runs as on a platform without the hint (the
/// monitor judges by progress alone), which is a configuration it
/// supports anyway.
const HINT_PLATFORM: bool = cfg!(all(any(target_os = "linux", target_os = "android"), not(miri)));

/// Whether the hint works here and now: per-thread CPU clocks, and a
/// readable `/proc/self/task/<tid>/stat`.
pub(crate) fn hint_available() -> bool {
    HINT_PLATFORM && read_cpu_clock(current_cpu_clock()).is_some() && asleep(current_tid()).is_some()
}

/// The calling thread's CPU clock, as a handle for `read_cpu_clock`; 0
/// where there is none.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
pub(crate) fn current_cpu_clock() -> u64 {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self is the calling thread, and `clock` is a valid
    // out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    // Thread CPU clock ids are negative on Linux; 0 (CLOCK_REALTIME) is
    // never one, so it can mean "none".
    if rc == 0 { u64::from(clock as u32) } else { 0 }
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
pub(crate) fn current_cpu_clock() -> u64 {
    0
}

/// CPU time, in ns, of the thread whose clock `clock` is. None when the
/// thread is gone.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
pub(crate) fn read_cpu_clock(clock: u64) -> Option<u64> {
    if clock == 0 {
        return None;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; an invalid clock id (a thread that has
    // exited) is answered with EINVAL, not undefined behaviour.
    let rc = unsafe { libc::clock_gettime(clock as u32 as libc::clockid_t, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
pub(crate) fn read_cpu_clock(_clock: u64) -> Option<u64> {
    None
}

/// The calling thread's kernel id, 0 where there is none.
pub(crate) fn current_tid() -> u64 {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
    {
        // The raw system call, not glibc's `gettid`: with LTO the standard
        // library's weak declaration of `gettid` becomes ours too, and a
        // fully static program then links it as null (tests/c/install_test.sh).
        // SAFETY: SYS_gettid takes no arguments and cannot fail.
        (unsafe { libc::syscall(libc::SYS_gettid) }) as u64
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
    {
        0
    }
}

/// Is thread `tid` of this process asleep in the kernel (any state but
/// running or runnable)? None when its stat cannot be read.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
fn asleep(tid: u64) -> Option<bool> {
    use std::io::Read;
    if tid == 0 {
        return None;
    }
    let mut buf = [0u8; 512];
    let mut file = std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok()?;
    let n = file.read(&mut buf).ok()?;
    // "tid (comm) S ...": the state follows the last ')' (comm may hold any byte).
    let close = buf[..n].iter().rposition(|&b| b == b')')?;
    let state = buf[close + 1..n].iter().find(|b| !b.is_ascii_whitespace())?;
    Some(*state != b'R')
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
fn asleep(_tid: u64) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The kernel's view of two real threads: one computing, one asleep.
    /// Each runs until told to stop, and the window opens once the sleeper
    /// sleeps, so a loaded machine can only delay the readings, not change
    /// them: however little CPU the spinner gets, it is running or waiting
    /// to run (busy); the sleeper is neither.
    #[test]
    fn a_sleeping_thread_is_told_from_a_spinning_one() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        if !hint_available() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (release, parked) = std::sync::mpsc::channel::<()>();
        let mut parked = Some(parked);
        let mut spawn = |spin: bool| {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = stop.clone();
            let parked = if spin { None } else { parked.take() };
            let handle = std::thread::spawn(move || {
                tx.send((current_cpu_clock(), current_tid())).unwrap();
                match parked {
                    Some(parked) => drop(parked.recv()),
                    None => {
                        while !stop.load(SeqCst) {
                            std::hint::spin_loop();
                        }
                    }
                }
            });
            (rx.recv().unwrap(), handle)
        };
        let ((c0, t0), a) = spawn(true);
        let ((c1, t1), b) = spawn(false);
        let start = Instant::now();
        while asleep(t1) != Some(true) {
            assert!(start.elapsed() < Duration::from_secs(60), "the sleeper never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        let read =
            |clock, tid| read_cpu_clock(clock).map(|cpu_ns| Reading { clock, tid, in_task: true, done: 0, cpu_ns });
        let mut s = Sampler::new(2);
        let first = Instant::now();
        s.record(0, read(c0, t0), first, asleep);
        s.record(1, read(c1, t1), first, asleep);
        assert_eq!(s.estimate(), None, "one reading classifies nobody");
        std::thread::sleep(Duration::from_millis(40));
        let later = Instant::now();
        s.record(0, read(c0, t0), later, asleep);
        s.record(1, read(c1, t1), later, asleep);
        stop.store(true, SeqCst);
        drop(release);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(s.entries[0].class, Class::Busy);
        assert_eq!(s.entries[1].class, Class::Blocked);
        s.reset();
        assert_eq!(s.estimate(), None, "a reset forgets every window");
    }

    #[test]
    fn windows_are_classified_by_cpu_state_and_completions() {
        let mut s = Sampler::new(1);
        let t0 = Instant::now();
        let mut step = |ms: u64, cpu_ns: u64, done: u64, asleep_now: bool| {
            let r = Reading { clock: 8, tid: 1, in_task: true, done, cpu_ns };
            s.record(0, Some(r), t0 + Duration::from_millis(ms), |_| Some(asleep_now));
            s.estimate().map(|e| e.blocked_share)
        };
        assert_eq!(step(0, 0, 0, true), None);
        assert_eq!(step(10, 0, 0, true), Some(1.0), "no CPU, asleep: blocked");
        assert_eq!(step(20, 0, 0, false), Some(0.0), "no CPU but runnable: busy");
        assert_eq!(step(30, 9_000_000, 0, true), Some(0.0), "it ran: busy");
        assert_eq!(step(40, 9_000_000, 5, true), Some(0.0), "many short tasks: busy");
        let mut s2 = Sampler::new(1);
        let r = |clock| Some(Reading { clock, tid: 1, in_task: true, done: 0, cpu_ns: 0 });
        s2.record(0, r(8), t0, |_| Some(true));
        s2.record(0, r(9), t0 + Duration::from_millis(5), |_| Some(true));
        assert_eq!(s2.estimate(), None, "a new thread in the slot starts a new window");
        s2.record(0, None, t0 + Duration::from_millis(10), |_| Some(true));
        assert_eq!(s2.estimate(), None, "a gone thread drops out");
    }
}
