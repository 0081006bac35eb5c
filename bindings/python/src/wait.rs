//! How a Python thread waits on the pool: always with the GIL released.
//!
//! Off the pool a waiter first spins briefly (a round trip to a spinning
//! worker is a few microseconds; parking costs tens), then parks in slices
//! and checks for signals between them. Workers debounce the GIL hand-off
//! (`handoff_debounce`). An asyncio loop that just submitted a call waits
//! for it the same way for as long, yielding its CPU between looks
//! (`yield_until`). This spin-while-waiting logic is binding-local; it
//! could move into the core's `TaskHandle` wait.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// How long one slice of an interruptible wait lasts: the bound on how late
/// Ctrl-C is noticed by a thread waiting on the pool.
pub(crate) const SIGNAL_SLICE: Duration = Duration::from_millis(50);
/// Bumped whenever a Python thread releases the GIL to wait on the pool
/// (see `handoff_debounce`).
pub(crate) static WAIT_EPOCH: AtomicU64 = AtomicU64::new(0);
/// One worker at a time may debounce the GIL hand-off.
static HANDOFF_SPINNER: AtomicBool = AtomicBool::new(false);

/// Converts a Python timeout (seconds, None = forever) to a deadline.
pub(crate) fn deadline_of(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() => Err(PyValueError::new_err("timeout must be a number, not NaN")),
        Some(t) if t <= 0.0 => Ok(Some(Instant::now())),
        Some(t) => Ok(Instant::now().checked_add(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX))),
    }
}

pub(crate) fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// Waits with the GIL released until `done(slice)` says the awaited thing
/// finished or the deadline passes. The wait runs in slices with a signal
/// check between them, so Ctrl-C interrupts it; off the pool a short spin
/// on `probe` comes first. The wait is a [`Region`]: the call's permit is
/// given back, and on a pool thread (of any wspool pool) a pool allowed to
/// grow lends a thread meanwhile, and the core's waits inside it run no
/// other task on this thread (nor do its timed waits: every wait here is a
/// timed slice).
pub(crate) fn wait_released<F>(
    py: Python<'_>,
    timeout: Option<f64>,
    probe: Option<&(dyn Fn() -> bool + Sync)>,
    done: F,
) -> PyResult<bool>
where
    F: Fn(Option<Duration>) -> bool + Sync,
{
    let deadline = deadline_of(timeout)?;
    let on_pool = wspool::current_index().is_some();
    if !on_pool
        && let Some(probe) = probe
        && py.detach(|| {
            WAIT_EPOCH.fetch_add(1, Ordering::SeqCst);
            spin_until(probe, remaining(deadline))
        })
    {
        return Ok(true);
    }
    let _region = Region::enter(py);
    loop {
        let slice = remaining(deadline).map_or(SIGNAL_SLICE, |r| r.min(SIGNAL_SLICE));
        let finished = py.detach(|| {
            WAIT_EPOCH.fetch_add(1, Ordering::SeqCst);
            done(Some(slice))
        });
        if finished {
            return Ok(true);
        }
        py.check_signals()?;
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return Ok(false);
        }
    }
}

/// A wait seen by the pool, for its whole length (not per slice): the
/// call's permit goes back (`permit.rs`), and on a pool thread it is a
/// blocking region, so the core lends a thread and runs no other task on
/// this one. Dropped attached; the permit is taken back detached.
pub(crate) struct Region<'py>(Python<'py>);

impl<'py> Region<'py> {
    pub(crate) fn enter(py: Python<'py>) -> Region<'py> {
        crate::permit::region_enter();
        wspool::blocking_begin();
        Region(py)
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        wspool::blocking_end();
        self.0.detach(crate::permit::region_leave);
    }
}

/// The longest a waiting thread spins (GIL released) before it parks. A
/// round trip to a spinning worker takes a few microseconds; parking and
/// being woken costs tens (much more when the CPU has gone idle), so short
/// tasks are awaited spinning. `WSPOOL_WAIT_SPIN_US` overrides it (0: never).
fn spin_limit() -> Duration {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let us = std::env::var("WSPOOL_WAIT_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(50u64);
        Duration::from_micros(us)
    })
}

/// Whether waiters spin at all, learnt like the core's debounce (seed 004):
/// the outcomes of the last 16 spins (1 = the task finished while we spun).
/// A spin only pays when the awaited worker runs on another CPU at the same
/// time; when both share one (a loaded machine), spinning just delays it.
/// So more than four misses among the last 16 turn spinning off. Then a
/// learner that only hears of its own spins (`probe_every`) still spins one
/// wait in 32, to notice when spinning would pay again; the asyncio loop's
/// learner hears of every call instead (`loop_learn`) and never probes.
struct SpinLearner {
    ring: AtomicU32,
    tries: AtomicU32,
    probe_every: u32,
}

impl SpinLearner {
    const fn new(probe_every: u32) -> SpinLearner {
        SpinLearner { ring: AtomicU32::new(u32::MAX), tries: AtomicU32::new(0), probe_every }
    }

    fn worthwhile(&self) -> bool {
        (!self.ring.load(Ordering::Relaxed) & 0xffff).count_ones() <= 4
            || (self.probe_every != 0 && self.tries.fetch_add(1, Ordering::Relaxed).is_multiple_of(self.probe_every))
    }

    fn record(&self, hit: bool) {
        // Racy read-modify-write on purpose: an occasional lost update only
        // nudges a heuristic.
        let ring = self.ring.load(Ordering::Relaxed);
        self.ring.store((ring << 1) | u32::from(hit), Ordering::Relaxed);
    }
}

/// Threads waiting on a task (`Future.result()` and the like).
static WAIT_SPINS: SpinLearner = SpinLearner::new(32);
/// asyncio loops waiting for the call they just submitted (`yield_until`).
static LOOP_SPINS: SpinLearner = SpinLearner::new(0);

/// GIL hand-off debounce. A worker picks up a freshly submitted task in
/// about a microsecond, while the submitting thread still holds the GIL on
/// its way to `result()`. Attaching at once would put the worker to sleep on
/// the GIL's condition variable and cost a full wake-up when the submitter
/// releases it a moment later. So a worker that got a task submitted within
/// the last few microseconds first spins (one worker at a time, bounded)
/// until some thread enters a pool wait, which happens right after that
/// thread released the GIL.
pub(crate) fn handoff_debounce(submitted: Instant, epoch: u64, submit_cpu: i32) {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    let limit = *LIMIT.get_or_init(|| {
        let us = std::env::var("WSPOOL_HANDOFF_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(20u64);
        Duration::from_micros(us)
    });
    if submitted.elapsed() >= limit || WAIT_EPOCH.load(Ordering::SeqCst) != epoch {
        return;
    }
    if submit_cpu >= 0 && current_cpu() == submit_cpu {
        // Woken onto the submitter's own CPU: spinning would only keep the
        // submitter from reaching its wait.
        return;
    }
    if HANDOFF_SPINNER.swap(true, Ordering::Acquire) {
        return;
    }
    while WAIT_EPOCH.load(Ordering::SeqCst) == epoch && submitted.elapsed() < limit {
        for _ in 0..16 {
            std::hint::spin_loop();
        }
    }
    HANDOFF_SPINNER.store(false, Ordering::Release);
}

/// The CPU this thread runs on now, or -1 where that is unknown.
pub(crate) fn current_cpu() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no arguments, no memory touched; -1 on failure.
        unsafe { libc::sched_getcpu() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        -1
    }
}

/// Spins (GIL released by the caller) until `probe()` or the spin limit.
fn spin_until(probe: &(dyn Fn() -> bool + Sync), left: Option<Duration>) -> bool {
    let limit = left.map_or(spin_limit(), |l| l.min(spin_limit()));
    if limit.is_zero() || !WAIT_SPINS.worthwhile() {
        return false;
    }
    let hit = look_until(probe, limit, || {
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    });
    WAIT_SPINS.record(hit);
    hit
}

/// Whether an asyncio loop should wait for the call it is about to submit
/// (`yield_until`): whether the recent calls it could have waited for were
/// over within the spin limit.
pub(crate) fn loop_wait_worthwhile() -> bool {
    !spin_limit().is_zero() && LOOP_SPINS.worthwhile()
}

/// Tells the loop's learner how long a call it did not wait for took, from
/// its submission to the end of its Python part. Unlike a probe (a wait
/// that may miss), this costs nothing: a long call submitted while waiting
/// is off is not waited for, and the loop does not hand it the GIL.
pub(crate) fn loop_learn(took: Duration) {
    LOOP_SPINS.record(took < spin_limit());
}

/// An asyncio loop's wait (GIL released by the caller) for the call it just
/// handed to the pool, up to the spin limit. It gives its CPU away between
/// looks instead of spinning: the worker it woke is often queued on this
/// very CPU (measured on a 2-core VM: a pure spin caught no call at all,
/// this catches nearly all short ones), and where nothing else wants the
/// CPU the yield returns at once.
pub(crate) fn yield_until(probe: &(dyn Fn() -> bool + Sync)) -> bool {
    let hit = probe() || look_until(probe, spin_limit(), std::thread::yield_now);
    LOOP_SPINS.record(hit);
    hit
}

fn look_until(probe: &(dyn Fn() -> bool + Sync), limit: Duration, pause: impl Fn()) -> bool {
    let start = Instant::now();
    loop {
        pause();
        if probe() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
    }
}

/// Waits for `probe()` by sleeping in growing steps (50 µs to 2 ms), for
/// at most `limit`: for conditions the core has no wait for (pool stats).
pub(crate) fn poll_until(probe: &(dyn Fn() -> bool + Sync), limit: Option<Duration>) -> bool {
    let deadline = limit.map(|l| Instant::now() + l);
    let mut step = Duration::from_micros(50);
    loop {
        if probe() {
            return true;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        std::thread::sleep(remaining(deadline).map_or(step, |r| r.min(step)));
        step = (step * 2).min(Duration::from_millis(2));
    }
}
