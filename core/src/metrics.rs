//! OpenMetrics text export of a pool's [`Stats`] (the Prometheus exposition
//! format's standard successor), for a server's `/metrics` endpoint.
//!
//! Counters end in `_total`, gauges carry the unit in their name (seconds
//! for queue delay, as the format recommends), and the text ends with the
//! mandatory `# EOF`. Families are named `wspool_*`; there are no labels, so
//! a process with several pools exports each under its own prefix.

use std::fmt::Write;

use crate::pool::Pool;
use crate::stats::Stats;

enum Kind {
    Counter,
    Gauge,
}

struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&Stats) -> f64,
}

const fn counter(name: &'static str, help: &'static str, value: fn(&Stats) -> f64) -> Family {
    Family { name, kind: Kind::Counter, help, value }
}

const fn gauge(name: &'static str, help: &'static str, value: fn(&Stats) -> f64) -> Family {
    Family { name, kind: Kind::Gauge, help, value }
}

const FAMILIES: &[Family] = &[
    gauge("threads", "Live worker threads.", |s| s.threads as f64),
    gauge("idle_threads", "Worker threads with nothing to do.", |s| s.idle_threads as f64),
    gauge("blocked_threads", "Worker threads inside a blocking region.", |s| s.blocked_threads as f64),
    gauge("peak_threads", "Most worker threads alive at once.", |s| s.peak_threads as f64),
    gauge("queued_tasks", "Tasks waiting to start.", |s| s.queued as f64),
    counter("submitted_tasks", "Tasks accepted.", |s| s.submitted as f64),
    counter("completed_tasks", "Tasks run to the end, panicked ones included.", |s| s.completed as f64),
    counter("rejected_tasks", "Submissions refused because the queue was full.", |s| s.rejected as f64),
    counter("cancelled_tasks", "Accepted tasks dropped unrun.", |s| s.cancelled as f64),
    counter("expired_tasks", "Accepted tasks not started by their deadline, dropped unrun.", |s| s.expired as f64),
    counter("panicked_tasks", "Tasks that panicked.", |s| s.panicked as f64),
    counter("local_pops", "Tasks a worker took from its own deque.", |s| s.local_pops as f64),
    counter("global_pops", "Tasks taken from the global queue.", |s| s.global_pops as f64),
    counter("steals", "Tasks stolen from another worker's deque.", |s| s.steals as f64),
    counter("spin_hits", "Debounce spins that found work.", |s| s.spin_hits as f64),
    counter("spin_misses", "Debounce spins that parked.", |s| s.spin_misses as f64),
    gauge("spin_threshold_seconds", "Current debounce spin threshold (0: spinning switched off, probes only).", |s| {
        s.spin_threshold_ns as f64 * 1e-9
    }),
    counter("threads_started", "Worker threads started.", |s| s.threads_started as f64),
    counter("threads_retired", "Worker threads retired.", |s| s.threads_retired as f64),
    counter("starvation_injections", "Threads added by the starvation monitor.", |s| s.starvation_injections as f64),
    counter("spawn_failures", "Thread creations the OS refused.", |s| s.spawn_failures as f64),
    counter("stall_episodes", "Stall episodes: queued work stood still while every thread was occupied.", |s| {
        s.stalls as f64
    }),
    gauge("queue_delay_p50_seconds", "Median submit-to-start delay, recent window.", |s| {
        s.queue_delay_p50_ns as f64 * 1e-9
    }),
    gauge("queue_delay_p99_seconds", "99th percentile submit-to-start delay, recent window.", |s| {
        s.queue_delay_p99_ns as f64 * 1e-9
    }),
    gauge("queue_delay_max_seconds", "Largest submit-to-start delay, recent window.", |s| {
        s.queue_delay_max_ns as f64 * 1e-9
    }),
];

impl Stats {
    /// Appends these counters to `out` as OpenMetrics text, every family
    /// named `<prefix>_<name>`, ending with `# EOF`.
    pub fn openmetrics_with_prefix(&self, prefix: &str, out: &mut String) {
        for f in FAMILIES {
            let (kind, suffix) = match f.kind {
                Kind::Counter => ("counter", "_total"),
                Kind::Gauge => ("gauge", ""),
            };
            let v = (f.value)(self);
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# TYPE {prefix}_{} {kind}", f.name);
            let _ = writeln!(out, "# HELP {prefix}_{} {}", f.name, f.help);
            let _ = writeln!(out, "{prefix}_{}{suffix} {v}", f.name);
        }
        out.push_str("# EOF\n");
    }

    /// [`Stats::openmetrics_with_prefix`] with the prefix `wspool`.
    pub fn openmetrics(&self, out: &mut String) {
        self.openmetrics_with_prefix("wspool", out)
    }
}

impl Pool {
    /// Appends a fresh snapshot of this pool's stats to `out` as OpenMetrics text.
    pub fn openmetrics(&self, out: &mut String) {
        self.stats().openmetrics(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_exported_once_and_the_text_ends_with_eof() {
        let s = Stats { submitted: 7, queue_delay_p99_ns: 1_500_000, threads: 2, ..Stats::default() };
        let mut out = String::new();
        s.openmetrics(&mut out);
        assert!(out.ends_with("# EOF\n"));
        assert_eq!(out.matches("# EOF").count(), 1);
        assert!(out.contains("\nwspool_submitted_tasks_total 7\n"));
        assert!(out.contains("\nwspool_queue_delay_p99_seconds 0.0015\n"));
        assert!(out.contains("\nwspool_threads 2\n"));
        let samples = out.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, FAMILIES.len());
    }
}
