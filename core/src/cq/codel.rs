//! The overload signal: CoDel's control law reduced to a flag.
//!
//! Delays are observed twice: each submission's queue delay (submit to
//! start) when a pool thread starts it, and, at each submission made while
//! others still wait, the estimated age of the oldest waiting one (see
//! `Inner::on_submit`), which sees a queue building a whole queue delay
//! before a start could. The queue is *overloaded* once every delay observed
//! for `interval` has been above `target` (a standing queue, not a burst),
//! and recovers at the first delay below `target`, or when a start leaves
//! nothing of this queue waiting (an empty queue has no standing delay).
//! CoDel's defaults (5 ms target, 100 ms interval) suit a server whose
//! requests take well under the target; a server that sheds load on the
//! signal wants an interval near the target, so that the queue that builds
//! before the signal trips stays near the target too.
//!
//! The observations are lock-free and racy between threads (a heuristic);
//! only the flip of the flag is exact, done by the queue under its lock so
//! that the signals it delivers alternate.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// Default CoDel target: 5 ms of queue delay.
pub const DEFAULT_OVERLOAD_TARGET: Duration = Duration::from_millis(5);
/// Default CoDel interval: 100 ms above the target.
pub const DEFAULT_OVERLOAD_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) struct Codel {
    target_ns: u64,
    interval_ns: u64,
    /// When the delay, above target since, will have been so for an
    /// interval (ns on the queue's clock); 0 = the delay is below target.
    above_until: AtomicU64,
    overloaded: AtomicBool,
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
        }
    }

    pub(crate) fn is_overloaded(&self) -> bool {
        self.overloaded.load(Relaxed)
    }

    /// One start's delay at `now`; `drained` when that start left nothing
    /// waiting. Returns the state the flag should flip to, if any (then
    /// call `commit` under the queue's lock).
    pub(crate) fn observe(&self, delay_ns: u64, now: u64, drained: bool) -> Option<bool> {
        let over = self.overloaded.load(Relaxed);
        if delay_ns < self.target_ns || drained {
            if self.above_until.load(Relaxed) != 0 {
                self.above_until.store(0, Relaxed);
            }
            return over.then_some(false);
        }
        let until = self.above_until.load(Relaxed);
        if until == 0 {
            let _ = self.above_until.compare_exchange(0, now.saturating_add(self.interval_ns).max(1), Relaxed, Relaxed);
            // An interval of zero trips at the first delay above target.
            return (!over && self.interval_ns == 0).then_some(true);
        }
        (!over && now >= until).then_some(true)
    }

    /// Flips the flag to `to`; false when another thread already did.
    pub(crate) fn commit(&self, to: bool) -> bool {
        self.overloaded.compare_exchange(!to, to, SeqCst, SeqCst).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn trips_after_an_interval_above_target_and_recovers_below() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(c.observe(10 * MS, 1000 * MS, false), None, "first delay above target starts the interval");
        assert_eq!(c.observe(10 * MS, 1050 * MS, false), None, "half an interval: a burst, not a standing queue");
        assert_eq!(c.observe(10 * MS, 1100 * MS, false), Some(true));
        assert!(c.commit(true));
        assert!(!c.commit(true), "only one thread flips it");
        assert!(c.is_overloaded());
        assert_eq!(c.observe(10 * MS, 1200 * MS, false), None, "already overloaded");
        assert_eq!(c.observe(MS, 1201 * MS, false), Some(false));
        assert!(c.commit(false));
        assert_eq!(c.observe(10 * MS, 1202 * MS, false), None, "a new interval starts from scratch");
        assert_eq!(c.observe(10 * MS, 1250 * MS, false), None);
    }

    #[test]
    fn a_dip_below_target_restarts_the_interval() {
        let c = Codel::new(Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(c.observe(10 * MS, 0, false), None);
        assert_eq!(c.observe(MS, 60 * MS, false), None);
        assert_eq!(c.observe(10 * MS, 80 * MS, false), None);
        assert_eq!(c.observe(10 * MS, 150 * MS, false), None, "only 70 ms above target since the dip");
        assert_eq!(c.observe(10 * MS, 180 * MS, false), Some(true));
    }

    #[test]
    fn an_emptied_queue_recovers_even_with_a_late_start() {
        let c = Codel::new(Duration::from_millis(5), Duration::ZERO);
        assert_eq!(c.observe(10 * MS, 5 * MS, false), Some(true), "interval 0 trips at once");
        assert!(c.commit(true));
        assert_eq!(c.observe(50 * MS, 6 * MS, true), Some(false), "nothing left waiting: no standing queue");
    }
}
