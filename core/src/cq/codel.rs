//! The overload signal: CoDel's control law over estimated queue delays,
//! reduced to a state and an admission test.
//!
//! Delays are observed twice: each submission's queue delay (submit to
//! start) when a pool thread starts it, and, at each submission made while
//! others still wait, an estimate of how long that submission will wait
//! ([`Codel::on_submit`]), which sees a queue building before any of it
//! starts. The queue is *overloaded* once every delay observed for
//! `interval` has been above `target` (a standing queue, not a burst), or
//! at once when a delay reaches `target + interval`: a burst the interval
//! is there to absorb cannot leave a longer wait than that, so the queue
//! that builds before the signal trips never holds more than that either.
//!
//! While overloaded, [`Codel::admit`] says whether a submission made now
//! would wait at least `target`: a server that refuses work exactly then
//! admits just enough to keep the standing queue at the target, instead of
//! refusing everything until the queue has emptied and then admitting
//! everything until the signal trips again (a saw-tooth whose peaks are the
//! served requests' tail). A refusal is also evidence: work is arriving
//! faster than the pool takes it, however short the queue that the
//! refusals keep. So a queue whose admission test is asked recovers only
//! once, since the last refusal (or trip), it admitted more work than the
//! target's standing queue plus an `interval` of the pool's time (each
//! admission counted at the average gap between starts): the pool then kept
//! up with the demand for an interval. Wall time without refusals would not
//! do: a loop that stalled, asking nothing, has not shown the overload is
//! over, however empty the queue it finds afterwards. It then recovers at
//! that admission test, or at a start whose delay fell below half the
//! target or that left nothing waiting. A
//! reactor that pauses reading instead of asking never refuses, and
//! recovers at such a start. Only starts and admission tests recover it:
//! starts measure; a submission's estimate only ever trips it.
//!
//! The wait estimate is the larger of two: the age of the oldest waiting
//! submission (bounded by the time since the newer of the last started
//! submission's timestamp and the queue's last empty -> non-empty
//! transition, so it errs high), and the submissions waiting times the
//! average gap between starts while the queue was busy (the rate at which
//! the pool actually takes this queue's work: blocked threads, other
//! submitters and CPU contention included). The first sees a pool that
//! stopped taking work; the second sees a queue growing, a whole queue
//! delay before its head gets old.
//!
//! CoDel's defaults (5 ms target, 100 ms interval) suit a server whose
//! requests take well under the target; a server that sheds load on the
//! signal wants an interval near the target, so that the queue that builds
//! before the signal trips stays near the target too.
//!
//! The observations are lock-free and racy between threads (a heuristic);
//! only the flip of the state is exact, done by the queue under its lock so
//! that the signals it delivers alternate.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// Default CoDel target: 5 ms of queue delay.
pub const DEFAULT_OVERLOAD_TARGET: Duration = Duration::from_millis(5);
/// Default CoDel interval: 100 ms above the target.
pub const DEFAULT_OVERLOAD_INTERVAL: Duration = Duration::from_millis(100);

/// Weight of a new gap in the average: 1 / 2^GAP_SHIFT.
const GAP_SHIFT: u32 = 3;
/// A gap counts as at most this many times the average.
const GAP_CLAMP: u64 = 4;

pub(crate) struct Codel {
    target_ns: u64,
    interval_ns: u64,
    /// When the delay, above target since, will have been so for an
    /// interval (ns on the queue's clock); 0 = the delay is below target.
    above_until: AtomicU64,
    overloaded: AtomicBool,
    /// Submission time of the most recently started submission (ns).
    head_mark: AtomicU64,
    /// When the not-started count last went from 0 to 1 (ns).
    nonempty_since: AtomicU64,
    /// The last start: its time (ns) << 1, low bit set when it left work
    /// waiting (so the gap to the next start is the pool's pace, not a lull
    /// between arrivals).
    last_start: AtomicU64,
    /// Average gap between starts while work was waiting (ns); 0 = none yet.
    gap_ns: AtomicU64,
    /// Whether `admit` ever answered "refuse" (a server that asks).
    refused: AtomicBool,
    /// Work admitted since the last refusal or trip (ns of the pool's
    /// time, at the average gap between starts).
    admitted_ns: AtomicU64,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl Codel {
    pub(crate) fn new(target: Duration, interval: Duration) -> Codel {
        Codel {
            target_ns: ns(target),
            interval_ns: ns(interval),
            above_until: AtomicU64::new(0),
            overloaded: AtomicBool::new(false),
            head_mark: AtomicU64::new(0),
            nonempty_since: AtomicU64::new(0),
            last_start: AtomicU64::new(0),
            gap_ns: AtomicU64::new(0),
            refused: AtomicBool::new(false),
            admitted_ns: AtomicU64::new(0),
        }
    }

    /// The state (signalled by `Overloaded` / `Recovered`).
    pub(crate) fn is_overloaded(&self) -> bool {
        self.overloaded.load(Relaxed)
    }

    /// The admission test for a submission made at `now` with `queued` not
    /// started ahead: refuse (true) while overloaded when it would wait at
    /// least the target. The second value is the state to flip to, if any
    /// (recovery, after an interval without a refusal).
    pub(crate) fn admit(&self, now: u64, queued: usize) -> (bool, Option<bool>) {
        if !self.is_overloaded() {
            return (false, None);
        }
        if self.wait_estimate(now, queued) >= self.target_ns {
            if !self.refused.load(Relaxed) {
                self.refused.store(true, Relaxed);
            }
            if self.admitted_ns.load(Relaxed) != 0 {
                self.admitted_ns.store(0, Relaxed);
            }
            return (true, None);
        }
        // Before any pace is known, an admission counts as a target's worth.
        let gap = match self.gap_ns.load(Relaxed) {
            0 => self.target_ns,
            g => g,
        };
        let admitted = self.admitted_ns.load(Relaxed).saturating_add(gap);
        self.admitted_ns.store(admitted, Relaxed);
        (false, self.quiet().then_some(false))
    }

    /// Nothing refused: never asked, or since the last refusal more work
    /// admitted than the target's queue plus an interval of the pool's time.
    fn quiet(&self) -> bool {
        !self.refused.load(Relaxed) || self.admitted_ns.load(Relaxed) >= self.target_ns.saturating_add(self.interval_ns)
    }

    /// How long a submission made at `now` would wait, `queued` ahead of it.
    fn wait_estimate(&self, now: u64, queued: usize) -> u64 {
        if queued == 0 {
            return 0;
        }
        let since = self.head_mark.load(Relaxed).max(self.nonempty_since.load(Relaxed));
        let paced = (queued as u64).saturating_mul(self.gap_ns.load(Relaxed));
        now.saturating_sub(since).max(paced)
    }

    /// A submission at `now` found `was_queued` not started. Returns the
    /// state to flip to, if any (then call `commit` under the queue's lock).
    pub(crate) fn on_submit(&self, now: u64, was_queued: usize) -> Option<bool> {
        if was_queued == 0 {
            self.nonempty_since.store(now, Relaxed);
            return None;
        }
        self.observe(self.wait_estimate(now, was_queued), now, false, false)
    }

    /// A submission made at `submitted` started at `now`, leaving `left`
    /// not started. Returns the state to flip to, if any.
    pub(crate) fn on_start(&self, submitted: u64, now: u64, left: usize) -> Option<bool> {
        self.head_mark.store(submitted, Relaxed);
        let prev = self.last_start.swap((now << 1) | (left > 0) as u64, Relaxed);
        if prev & 1 == 1 {
            let avg = self.gap_ns.load(Relaxed);
            // One sample moves the average at most 4x its value: a pool
            // thread preempted for 20 ms between two 50 us starts is not a
            // pace (it would make every waiting submission look 50 times
            // longer, for a dozen starts), while a real slow-down still
            // shows within a few starts.
            let gap = match avg {
                0 => now.saturating_sub(prev >> 1),
                a => now.saturating_sub(prev >> 1).min(a.saturating_mul(GAP_CLAMP)),
            };
            let next = if avg == 0 { gap } else { avg - (avg >> GAP_SHIFT) + (gap >> GAP_SHIFT) };
            self.gap_ns.store(next.max(1), Relaxed);
        }
        self.observe(now.saturating_sub(submitted), now, left == 0, true)
    }

    /// One delay observed at `now`; `drained` when a start left nothing
    /// waiting; `measured` for a start's delay (only those recover).
    fn observe(&self, delay_ns: u64, now: u64, drained: bool, measured: bool) -> Option<bool> {
        let over = self.overloaded.load(Relaxed);
        if delay_ns < self.target_ns || drained {
            if self.above_until.load(Relaxed) != 0 {
                self.above_until.store(0, Relaxed);
            }
            let recover = measured && (drained || delay_ns < self.target_ns / 2) && self.quiet();
            return (over && recover).then_some(false);
        }
        if delay_ns >= self.target_ns.saturating_add(self.interval_ns) {
            // Past what a burst can explain (with an interval of zero: the
            // first delay at or above target).
            return (!over).then_some(true);
        }
        let until = self.above_until.load(Relaxed);
        if until == 0 {
            let _ = self.above_until.compare_exchange(0, now.saturating_add(self.interval_ns).max(1), Relaxed, Relaxed);
            return None;
        }
        (!over && now >= until).then_some(true)
    }

    /// Flips the state to `to`; false when another thread already did. A
    /// trip restarts the admissions that can show the overload is over.
    pub(crate) fn commit(&self, to: bool) -> bool {
        let flipped = self.overloaded.compare_exchange(!to, to, SeqCst, SeqCst).is_ok();
        if flipped && to {
            self.admitted_ns.store(0, Relaxed);
        }
        flipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A start at `now` (ms) of a submission that waited `delay` (ms).
    fn start(c: &Codel, delay: u64, now: u64, left: usize) -> Option<bool> {
        c.on_start((now - delay) * MS, now * MS, left)
    }

    #[test]
    fn trips_after_an_interval_above_target_and_recovers_below_half_of_it() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(start(&c, 10, 1000, 5), None, "first delay above target starts the interval");
        assert_eq!(start(&c, 10, 1050, 5), None, "half an interval: a burst, not a standing queue");
        assert_eq!(start(&c, 10, 1100, 5), Some(true));
        assert!(c.commit(true));
        assert!(!c.commit(true), "only one thread flips it");
        assert!(c.is_overloaded());
        assert_eq!(start(&c, 10, 1200, 5), None, "already overloaded");
        assert_eq!(start(&c, 4, 1201, 5), None, "below target but not below half: the queue stands at target");
        assert_eq!(start(&c, 2, 1202, 5), Some(false));
        assert!(c.commit(false));
        assert_eq!(start(&c, 10, 1203, 5), None, "a new interval starts from scratch");
        assert_eq!(start(&c, 10, 1250, 5), None);
    }

    #[test]
    fn a_wait_past_target_plus_interval_trips_at_once() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(start(&c, 104, 1000, 5), None, "104 ms: could still be a burst draining");
        assert_eq!(start(&c, 105, 1001, 5), Some(true), "105 ms: no burst the interval absorbs leaves this");
        assert!(c.commit(true));
        assert_eq!(start(&c, 200, 1002, 5), None, "already overloaded");
    }

    #[test]
    fn a_dip_below_target_restarts_the_interval() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(start(&c, 10, 100, 5), None);
        assert_eq!(start(&c, 1, 160, 5), None);
        assert_eq!(start(&c, 10, 180, 5), None);
        assert_eq!(start(&c, 10, 250, 5), None, "only 70 ms above target since the dip");
        assert_eq!(start(&c, 10, 280, 5), Some(true));
    }

    #[test]
    fn an_emptied_queue_recovers_even_with_a_late_start() {
        let c = Codel::new(Duration::from_millis(5), Duration::ZERO);
        assert_eq!(start(&c, 10, 15, 3), Some(true), "interval 0 trips at once");
        assert!(c.commit(true));
        assert_eq!(start(&c, 50, 66, 0), Some(false), "nothing left waiting: no standing queue");
    }

    #[test]
    fn a_growing_queue_trips_on_its_pace_before_its_head_is_old() {
        let c = Codel::new(Duration::from_millis(5), Duration::ZERO);
        // Starts 1 ms apart while work waits: the pool takes 1,000 a second.
        for t in 0..4 {
            assert_eq!(start(&c, 0, 100 + t, 1), None);
        }
        c.on_submit(103 * MS, 0);
        assert_eq!(c.on_submit(103 * MS + 1, 3), None, "3 ahead: ~3 ms, below target");
        assert_eq!(c.on_submit(103 * MS + 2, 8), Some(true), "8 ahead: ~8 ms, though the head is 2 ns old");
    }

    #[test]
    fn one_long_gap_between_starts_is_not_a_pace() {
        let c = Codel::new(Duration::from_millis(5), Duration::ZERO);
        paced(&c); // 1 ms between starts
        start(&c, 0, 130, 1); // a thread preempted: 27 ms before the next start
        c.on_submit(130 * MS, 0);
        assert_eq!(c.on_submit(130 * MS + 1, 3), None, "3 ahead: ~4 ms (without the clamp ~13 ms)");
        for t in 131..160 {
            start(&c, 0, 2 * t - 131, 1); // a real slow-down to 2 ms a start
        }
        c.on_submit(189 * MS, 0);
        assert_eq!(c.on_submit(189 * MS + 1, 3), Some(true), "3 ahead at ~2 ms each: 6 ms");
    }

    #[test]
    fn submits_trip_but_only_starts_recover() {
        let c = Codel::new(Duration::from_millis(5), Duration::ZERO);
        assert!(c.commit(true));
        c.on_submit(10 * MS, 0);
        assert_eq!(c.on_submit(10 * MS + 1, 1), None, "an estimate below target does not recover");
        assert!(c.is_overloaded());
    }

    /// 1 ms between starts while work waits, the last at 103 ms, and the
    /// queue last became non-empty at 103 ms.
    fn paced(c: &Codel) -> u64 {
        for t in 0..4 {
            start(c, 0, 100 + t, 1);
        }
        c.on_submit(103 * MS, 0);
        103 * MS + 10
    }

    #[test]
    fn while_overloaded_admit_refuses_only_what_would_wait_past_the_target() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        let now = paced(&c);
        assert_eq!(c.admit(now, 20), (false, None), "not overloaded: admit (a burst is absorbed)");
        assert!(c.commit(true));
        assert_eq!(c.admit(now, 20), (true, None), "20 ahead at 1 ms each: 20 ms");
        assert_eq!(c.admit(now, 5), (true, None), "5 ahead: 5 ms, at the target");
        assert_eq!(c.admit(now, 2), (false, None), "2 ahead: 2 ms, admitted to keep the queue at the target");
        assert_eq!(c.admit(now, 0), (false, None), "nothing waits");
        assert_eq!(c.admit(now + 6 * MS, 1), (true, None), "one ahead, waiting 6 ms: the pool is not taking work");
    }

    #[test]
    fn refusals_hold_the_state_until_the_pool_kept_up_for_an_interval() {
        // Target 5 ms, interval 10 ms, 1 ms between starts: recovery takes
        // more than 15 admissions with no refusal between them.
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(10));
        let now = paced(&c);
        assert!(c.commit(true));
        assert!(c.admit(now, 20).0);
        assert_eq!(c.on_start(now, now + MS, 0), None, "drained, but only because requests are refused");
        for k in 1..15 {
            assert_eq!(c.admit(now + k * MS, 0), (false, None), "admission {k}: {k} ms of work");
        }
        assert!(c.admit(now + 15 * MS, 20).0, "refused again: the count restarts");
        for k in 16..30 {
            assert_eq!(c.admit(now + k * MS, 0), (false, None), "admission {}", k - 15);
        }
        assert_eq!(c.admit(now + 30 * MS, 0), (false, Some(false)), "15 ms of work admitted, none refused");
        assert!(c.commit(false));
        assert_eq!(c.admit(now + 31 * MS, 20), (false, None), "recovered: admit until it trips again");
    }

    #[test]
    fn a_stall_that_asked_nothing_does_not_recover() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(10));
        let now = paced(&c);
        assert!(c.commit(true));
        assert!(c.admit(now, 20).0);
        // The loop stalls 30 ms; the pool empties the queue meanwhile.
        assert_eq!(c.on_start(now, now + 29 * MS, 0), None, "drained, but nobody was admitted meanwhile");
        assert_eq!(c.admit(now + 30 * MS, 0), (false, None), "one admission is not an interval of work");
    }

    #[test]
    fn a_trip_restarts_the_count_of_admitted_work() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(10));
        let now = paced(&c);
        assert!(c.commit(true));
        assert!(c.admit(now, 20).0);
        for k in 1..15 {
            c.admit(now + k * MS, 0);
        }
        assert!(c.commit(false) && c.commit(true), "recovered, then tripped again");
        assert_eq!(c.admit(now + 16 * MS, 0), (false, None), "admissions of the last episode do not count");
    }

    #[test]
    fn without_refusals_a_draining_start_recovers() {
        // A reactor that pauses reading never asks `admit`.
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(10));
        assert!(c.commit(true));
        assert_eq!(c.on_start(0, 20 * MS, 0), Some(false));
    }
}
