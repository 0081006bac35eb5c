//! A `/work` request's deadline: the rule of the C and C++ HTTP examples
//! (examples-c/http_deadline.h), in Rust.
//!
//! A `/work` request is due D ms after it started: when a proxy (or the
//! client) stamped it with `X-Request-Start`, else when this server read it.
//! The pool's deadline is when the work must *start*, so the server submits
//! it with the due time minus a reserve learnt from the served replies: each
//! reply handed back after its due time raises the reserve by a quarter of
//! how late it was (at least [`STEP_NS`]), each one on time lowers it by
//! `STEP_NS / (LATE_PER - 1)`, so that about one reply in [`LATE_PER`] is
//! late. A request is never reserved more than half its allowance, and the
//! reserve never learns past half the longest allowance submitted.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// 50 µs per late reply.
pub const STEP_NS: u64 = 50_000;
/// The share of served replies let be late: 1 in 1000.
pub const LATE_PER: u64 = 1000;

/// The learnt reserve. One per server.
#[derive(Debug)]
pub struct Reserve {
    reserve_ns: u64,
    ceiling_ns: u64,
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve { reserve_ns: 1_000_000, ceiling_ns: 0 } // 1 ms until learnt
    }
}

impl Reserve {
    /// The pool deadline of a request whose answer is due at `due`, `due_ms`
    /// after its start: `due` minus the reserve, or minus half of `due_ms` if
    /// that is less. A deadline already past is returned as it is: the request
    /// expires where a worker meets it.
    pub fn start_by(&mut self, due: Instant, due_ms: u64) -> Instant {
        let half = due_ms * 500_000;
        self.ceiling_ns = self.ceiling_ns.max(half);
        let back = Duration::from_nanos(self.reserve_ns.min(half));
        due.checked_sub(back).unwrap_or(due)
    }

    /// A served reply due at `due` was handed back at `now`; true if late.
    pub fn learn(&mut self, due: Instant, now: Instant) -> bool {
        let r = self.reserve_ns;
        if now > due {
            let up = ((now - due).as_nanos() as u64 / 4).max(STEP_NS);
            self.reserve_ns = if r + up <= self.ceiling_ns { r + up } else { r.max(self.ceiling_ns) };
            true
        } else {
            self.reserve_ns = r.saturating_sub(STEP_NS / (LATE_PER - 1));
            false
        }
    }

    /// The reserve now, in ns.
    #[cfg(test)]
    pub fn reserve_ns(&self) -> u64 {
        self.reserve_ns
    }
}

/// `X-Request-Start`: "t=" (optional) and the time since the epoch, in s
/// with a fraction, else in s, ms, µs or ns by magnitude. When the request
/// started, on the monotonic clock; `None` (ignored) when unreadable or more
/// than a minute old. A stamp from the future (clocks a little apart) is now.
pub fn request_start(v: &str) -> Option<Instant> {
    let v = v.trim_matches(' ');
    let v = v.strip_prefix("t=").unwrap_or(v);
    let (whole, frac) = match v.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (v, None),
    };
    if whole.is_empty() || whole.len() > 19 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let stamp_ns = match frac {
        Some(f) => {
            if !f.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let digits = &f[..f.len().min(9)];
            let scale = 10u64.pow(9 - digits.len() as u32);
            whole.checked_mul(1_000_000_000)? + digits.parse::<u64>().unwrap_or(0) * scale
        }
        None if whole >= 100_000_000_000_000_000 => whole,
        None if whole >= 100_000_000_000_000 => whole * 1_000,
        None if whole >= 100_000_000_000 => whole * 1_000_000,
        None => whole.checked_mul(1_000_000_000)?,
    };
    let real = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_nanos() as u64;
    let age = Duration::from_nanos(real.saturating_sub(stamp_ns));
    if age > Duration::from_secs(60) {
        return None;
    }
    Instant::now().checked_sub(age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_in_every_unit_and_garbage() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let second_ago = now - Duration::from_secs(1);
        for s in [
            format!("t={}", second_ago.as_micros()),
            format!("{}", second_ago.as_millis()),
            format!("t={:.3}", second_ago.as_secs_f64()),
            format!(" {} ", second_ago.as_nanos()),
        ] {
            let age = Instant::now() - request_start(&s).unwrap_or_else(|| panic!("{s}"));
            assert!(age >= Duration::from_millis(990) && age < Duration::from_secs(30), "{s}: {age:?}");
        }
        let stale = now - Duration::from_secs(120);
        for s in ["soon", "t=12x", "", "t=", &format!("t={}", stale.as_micros())] {
            assert_eq!(request_start(s), None, "{s}");
        }
    }

    #[test]
    fn reserve_rises_when_late_and_stays_within_half_the_allowance() {
        let mut r = Reserve::default();
        let due = Instant::now() + Duration::from_millis(20);
        assert_eq!(due - r.start_by(due, 20), Duration::from_millis(1));
        // 40 ms late: up by a quarter of it, capped at half of the 20 ms allowance.
        assert!(r.learn(due, due + Duration::from_millis(40)));
        assert_eq!(r.reserve_ns(), 10_000_000);
        assert_eq!(due - r.start_by(due, 20), Duration::from_millis(10));
        // A 4 ms allowance is reserved at most 2 ms, whatever was learnt.
        assert_eq!(due - r.start_by(due, 4), Duration::from_millis(2));
        // On time: down by one step's share.
        assert!(!r.learn(due, due));
        assert_eq!(r.reserve_ns(), 10_000_000 - STEP_NS / (LATE_PER - 1));
    }
}
