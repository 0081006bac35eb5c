//! How a Python thread waits on the pool: always with the GIL released.
//!
//! Off the pool a waiter first spins briefly (a round trip to a spinning
//! worker is a few microseconds; parking costs tens), then parks in slices
//! and checks for signals between them. Workers debounce the GIL hand-off
//! (`handoff_debounce`). An asyncio loop that just submitted a call waits
//! for it the same way for as long, yielding its CPU between looks
//! (`yield_until`). This spin-while-waiting logic is binding-local; it
//! could move into the core's `TaskHandle` wait.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::permit::{Places, RegionKind};

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

/// What a wait waits on, as the pool sees it.
#[derive(Clone, Copy)]
pub(crate) enum WaitOn<'a> {
    /// Work of the pool whose thread this is. `places`: that pool's
    /// (growth="compensate"), to which the waiting call lends its place;
    /// `core_counts`: the wait is the core's own (a group's), which counts
    /// itself as waiting when it parks.
    Own { places: Option<&'a Arc<Places>>, core_counts: bool },
    /// Anything else (another pool's work, the pool's shutdown): the call
    /// keeps its place, and no thread is lent.
    Foreign,
}

/// Waits with the GIL released until `done(slice)` says the awaited thing
/// finished or the deadline passes. The wait runs in slices with a signal
/// check between them, so Ctrl-C interrupts it; off the pool a short spin
/// on `probe` comes first. A wait on the pool's own work is a [`Region`]
/// (see `WaitOn`); before each slice `help()` may run the awaited work on
/// this thread (at the thread cap) and say so.
pub(crate) fn wait_released<F>(
    py: Python<'_>,
    timeout: Option<f64>,
    probe: Option<&(dyn Fn() -> bool + Sync)>,
    done: F,
    on: WaitOn<'_>,
    help: Option<&dyn Fn() -> bool>,
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
    let region = Region::enter(on);
    let mut first = true;
    loop {
        if let Some(help) = help
            && help()
        {
            continue; // the awaited work ran here: look again
        }
        if !first {
            region.count_waiting();
        }
        let mut slice = remaining(deadline).map_or(SIGNAL_SLICE, |r| r.min(SIGNAL_SLICE));
        if first {
            slice = slice.min(WAIT_GRACE);
            first = false;
        }
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

/// A wait on the pool's own work, for its whole length (not per slice):
/// under growth="compensate" the call lends its place (`permit.rs`) and the
/// core counts the thread as waiting, so a thread is lent only if every
/// thread is stuck; under other growth policies it is a blocking region
/// (a thread lent at once). A foreign wait is no region.
///
/// The core counts the thread as waiting only after `WAIT_GRACE`: most
/// awaited calls are over sooner, and a waiter counted while the call that
/// would wake it is finishing makes the pool look stuck and lend a thread
/// nobody needs (one that then stays while work is queued).
pub(crate) struct Region<'a> {
    on: WaitOn<'a>,
    counted: std::cell::Cell<bool>,
}

/// How long a wait on the pool's own work goes before the core counts it.
const WAIT_GRACE: Duration = Duration::from_millis(2);

impl<'a> Region<'a> {
    pub(crate) fn enter(on: WaitOn<'a>) -> Region<'a> {
        match on {
            WaitOn::Own { places: Some(p), .. } => {
                let _ = crate::permit::region_enter(RegionKind::Wait, Some(p));
            }
            WaitOn::Own { places: None, .. } => wspool::blocking_begin(),
            WaitOn::Foreign => {}
        }
        Region { on, counted: std::cell::Cell::new(false) }
    }

    /// The wait goes on past the grace period: the core counts it now.
    fn count_waiting(&self) {
        if let WaitOn::Own { places: Some(_), core_counts: false, .. } = self.on
            && !self.counted.replace(true)
        {
            wspool::waiting_begin();
        }
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        match self.on {
            WaitOn::Own { places: Some(p), .. } => {
                if self.counted.get() {
                    wspool::waiting_end();
                }
                crate::permit::region_leave(Some(p));
            }
            WaitOn::Own { places: None, .. } => wspool::blocking_end(),
            WaitOn::Foreign => {}
        }
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
