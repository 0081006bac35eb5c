//! Heuristic debounce spinning (seed 004).
//!
//! A worker that is woken, runs a little, and would go idle again within
//! `threshold` is ping-ponging between idle and busy: parking and being
//! woken again costs two system calls and a cold start. Such a worker spins
//! (keeps scanning the queues) for at most `threshold` before parking. The
//! last [`RING`] spin outcomes drive `threshold`: more than two misses halve
//! it (spinning then stops triggering), a hit with at most one miss in the
//! ring doubles it (up to `spin_max`). A worker that is never woken in quick succession never spins,
//! so an idle pool burns no CPU.

use std::time::{Duration, Instant};

/// How many recent spins the heuristic remembers.
pub(crate) const RING: u32 = 10;
/// Where the threshold starts (seed 004).
pub(crate) const INITIAL_THRESHOLD: Duration = Duration::from_micros(50);
/// The threshold never shrinks below this, so a genuinely ping-ponging
/// worker (sub-5 µs tasks) can still earn its spinning back.
pub(crate) const MIN_THRESHOLD: Duration = Duration::from_micros(5);

/// Per-worker debounce state. Owned by one thread; no atomics.
#[derive(Debug)]
pub(crate) struct Debounce {
    threshold: Duration,
    max: Duration,
    /// Bit i = 1: the i-th recorded spin found work.
    ring: u16,
    recorded: u32,
    woken_at: Option<Instant>,
}

impl Debounce {
    /// `spin_max` of zero disables spinning.
    pub(crate) fn new(spin_max: Duration) -> Debounce {
        Debounce { threshold: INITIAL_THRESHOLD.min(spin_max), max: spin_max, ring: 0, recorded: 0, woken_at: None }
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
        if self.max.is_zero() || self.threshold.is_zero() {
            return None;
        }
        (now.saturating_duration_since(woken_at) < self.threshold).then_some(self.threshold)
    }

    /// Feeds back a spin's outcome and retunes the threshold.
    pub(crate) fn record(&mut self, hit: bool) {
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
            self.threshold = (self.threshold / 2).max(MIN_THRESHOLD.min(self.max));
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
        for _ in 0..20 {
            d.record(false);
        }
        assert_eq!(d.threshold(), MIN_THRESHOLD);
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
    fn zero_cap_disables_spinning() {
        let mut d = Debounce::new(Duration::ZERO);
        let t0 = Instant::now();
        d.woken(t0);
        assert_eq!(d.spin_budget(t0), None);
    }
}
