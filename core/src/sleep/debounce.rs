//! Heuristic debounce spinning (seed 004).
//!
//! A worker that is woken, runs a little, and would go idle again within
//! `threshold` is ping-ponging between idle and busy: parking and being
//! woken again costs two system calls and a cold start. Such a worker spins
//! (keeps scanning the queues) for at most `threshold` before parking. The
//! last [`RING`] spin outcomes drive `threshold`: more than two misses halve
//! it, a hit with at most one miss in the ring doubles it (up to
//! `spin_max`). Halved below [`MIN_THRESHOLD`], spinning switches off (the
//! seed's "until spinning is no longer triggered"): a floor would leave a
//! worker whose tasks are shorter than the floor spinning after every one of
//! them however rarely it finds work, which is what an event loop's pool
//! sees (one request per wake-up, the next one 100 µs away): the loop pays
//! for those spins in CPU. While off, one quick idle moment in
//! [`PROBE_EVERY`] still spins for `MIN_THRESHOLD`; a probe that finds work
//! switches spinning back on there, with a fresh ring. A worker that is
//! never woken in quick succession never spins, so an idle pool burns no
//! CPU.

use std::time::{Duration, Instant};

/// How many recent spins the heuristic remembers.
pub(crate) const RING: u32 = 10;
/// Where the threshold starts (seed 004).
pub(crate) const INITIAL_THRESHOLD: Duration = Duration::from_micros(50);
/// The smallest threshold; halving below it switches spinning off.
pub(crate) const MIN_THRESHOLD: Duration = Duration::from_micros(5);
/// While spinning is off, one quick idle moment in this many spins anyway
/// (for `MIN_THRESHOLD`): the probe that notices ping-pong coming back.
pub(crate) const PROBE_EVERY: u32 = 16;

/// Per-worker debounce state. Owned by one thread; no atomics.
#[derive(Debug)]
pub(crate) struct Debounce {
    /// Zero (with a non-zero `max`): spinning is off, only probes spin.
    threshold: Duration,
    max: Duration,
    /// Bit i = 1: the i-th recorded spin found work.
    ring: u16,
    recorded: u32,
    woken_at: Option<Instant>,
    /// Quick idle moments since the last probe, while off.
    since_probe: u32,
}

impl Debounce {
    /// `spin_max` of zero disables spinning.
    pub(crate) fn new(spin_max: Duration) -> Debounce {
        Debounce {
            threshold: INITIAL_THRESHOLD.min(spin_max),
            max: spin_max,
            ring: 0,
            recorded: 0,
            woken_at: None,
            since_probe: 0,
        }
    }

    pub(crate) fn threshold(&self) -> Duration {
        self.threshold
    }

    /// The worker just returned from a park with a wake-up.
    pub(crate) fn woken(&mut self, now: Instant) {
        self.woken_at = Some(now);
    }

    /// The worker found nothing to do and is about to park. Returns how long
    /// to spin first, if this is a ping-pong (woken less than `threshold`
    /// ago). Each wake-up is judged once.
    pub(crate) fn spin_budget(&mut self, now: Instant) -> Option<Duration> {
        let woken_at = self.woken_at.take()?;
        if self.max.is_zero() {
            return None;
        }
        let busy = now.saturating_duration_since(woken_at);
        if self.threshold.is_zero() {
            let floor = self.floor();
            if busy >= floor {
                return None;
            }
            self.since_probe += 1;
            if self.since_probe < PROBE_EVERY {
                return None;
            }
            self.since_probe = 0;
            return Some(floor);
        }
        (busy < self.threshold).then_some(self.threshold)
    }

    fn floor(&self) -> Duration {
        MIN_THRESHOLD.min(self.max)
    }

    /// Spinning is off: only probes spin.
    #[cfg(test)]
    pub(crate) fn is_off(&self) -> bool {
        self.threshold.is_zero() && !self.max.is_zero()
    }

    /// Feeds back a spin's outcome and retunes the threshold.
    pub(crate) fn record(&mut self, hit: bool) {
        if self.threshold.is_zero() {
            // A probe: a hit switches spinning back on, judged afresh.
            if hit {
                self.threshold = self.floor();
                self.ring = 0;
                self.recorded = 0;
            }
            return;
        }
        let slot = self.recorded % RING;
        if hit {
            self.ring |= 1 << slot;
        } else {
            self.ring &= !(1 << slot);
        }
        self.recorded = self.recorded.wrapping_add(1);
        // Wrap in whole rings so the modulus stays aligned.
        if self.recorded == RING * 1000 {
            self.recorded = RING;
        }
        let filled = self.recorded.min(RING);
        let mask: u16 = ((1u32 << filled) - 1) as u16;
        let hits = (self.ring & mask).count_ones();
        let misses = filled - hits;
        if misses > 2 {
            let half = self.threshold / 2;
            self.threshold = if half < self.floor() { Duration::ZERO } else { half };
            self.since_probe = 0;
        } else if hit && misses <= 1 {
            self.threshold = (self.threshold * 2).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn spins_only_after_a_quick_wake() {
        let mut d = Debounce::new(us(500));
        let t0 = Instant::now();
        assert_eq!(d.spin_budget(t0), None, "never woken: park at once");
        d.woken(t0);
        assert_eq!(d.spin_budget(t0 + us(10)), Some(us(50)));
        assert_eq!(d.spin_budget(t0 + us(10)), None, "one judgement per wake-up");
        d.woken(t0);
        assert_eq!(d.spin_budget(t0 + us(80)), None, "busy longer than the threshold");
    }

    #[test]
    fn misses_shrink_and_hits_grow_within_bounds() {
        let mut d = Debounce::new(us(500));
        for _ in 0..3 {
            d.record(false);
        }
        assert_eq!(d.threshold(), us(25), "third miss halves");
        d.record(false);
        d.record(false);
        assert_eq!(d.threshold(), us(6) + Duration::from_nanos(250), "halved down to the floor");
        assert!(!d.is_off());
        d.record(false);
        assert!(d.is_off(), "halving below the floor switches spinning off");
        d.record(true);
        assert_eq!(d.threshold(), MIN_THRESHOLD, "a probe hit switches it back on at the floor");
        for _ in 0..10 {
            d.record(true);
        }
        for _ in 0..20 {
            d.record(true);
        }
        assert_eq!(d.threshold(), us(500), "capped at spin_max");
    }

    #[test]
    fn two_misses_in_ten_hold_the_threshold() {
        let mut d = Debounce::new(us(500));
        for _ in 0..8 {
            d.record(true);
        }
        let before = d.threshold();
        d.record(false);
        d.record(false);
        assert_eq!(d.threshold(), before);
    }

    #[test]
    fn while_off_one_quick_idle_moment_in_probe_every_spins() {
        let mut d = Debounce::new(us(500));
        for _ in 0..6 {
            d.record(false);
        }
        assert!(d.is_off());
        let t0 = Instant::now();
        let mut probes = 0;
        for _ in 0..PROBE_EVERY * 4 {
            d.woken(t0);
            if let Some(budget) = d.spin_budget(t0 + us(1)) {
                assert_eq!(budget, MIN_THRESHOLD);
                probes += 1;
                d.record(false);
            }
            d.woken(t0);
            assert_eq!(d.spin_budget(t0 + MIN_THRESHOLD), None, "a slow idle moment neither spins nor counts");
        }
        assert_eq!(probes, 4);
        assert!(d.is_off(), "missed probes keep spinning off");
    }

    #[test]
    fn a_worker_that_finds_work_in_one_spin_of_fifteen_stops_spinning() {
        // The event-loop pattern: tasks of 1 µs, the next one rarely within
        // a spin. Spins per idle moment must fall well below one.
        let mut d = Debounce::new(us(500));
        let t0 = Instant::now();
        let mut spins = 0;
        let moments = 3000;
        for i in 0..moments {
            d.woken(t0);
            if d.spin_budget(t0 + us(1)).is_some() {
                spins += 1;
                d.record(i % 15 == 0);
            }
        }
        assert!(spins < moments / 5, "{spins} spins in {moments} idle moments");
    }

    #[test]
    fn a_worker_that_mostly_finds_work_keeps_spinning() {
        let mut d = Debounce::new(us(500));
        let t0 = Instant::now();
        let mut spins = 0;
        for i in 0..1000 {
            d.woken(t0);
            if d.spin_budget(t0 + us(1)).is_some() {
                spins += 1;
                d.record(i % 10 != 0);
            }
        }
        assert_eq!(spins, 1000);
        assert_eq!(d.threshold(), us(500));
    }

    #[test]
    fn zero_cap_disables_spinning() {
        let mut d = Debounce::new(Duration::ZERO);
        let t0 = Instant::now();
        d.woken(t0);
        assert_eq!(d.spin_budget(t0), None);
    }
}
