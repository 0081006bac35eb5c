//! Deadlines (issue 29): a task not started by its deadline is never run and
//! ends as expired, exactly once, through every submission kind; expiry is
//! told apart from cancellation (`wspool::expiring`, `TaskState::Expired`,
//! `CqStatus::Expired`) and counted in `Stats::expired` and OpenMetrics.
//!
//! No test depends on timing: a task meant to expire gets a deadline that
//! has already passed (or passes while the only worker is held by a gate),
//! and one meant to run gets a deadline an hour away.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Outcomes, Tracked, held_single_worker, watchdog};
use wspool::{CompletionQueue, CqEvent, CqOptions, CqStatus, Pool, Shutdown, SpawnOptions, TaskError, TaskState};

const LIMIT: Duration = Duration::from_secs(60);

fn past() -> Option<Instant> {
    Some(Instant::now())
}

fn far() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(3600))
}

/// Captured by a task: on drop without having run, records whether the drop
/// was an expiry (`wspool::expiring()` true during the drop).
struct Probe {
    outcomes: Arc<Outcomes>,
    expired_drops: Arc<AtomicUsize>,
    ran: bool,
}

impl Probe {
    fn new(outcomes: &Arc<Outcomes>, expired_drops: &Arc<AtomicUsize>) -> Probe {
        Probe { outcomes: outcomes.clone(), expired_drops: expired_drops.clone(), ran: false }
    }
    fn run(mut self) {
        self.ran = true;
        self.outcomes.ran.fetch_add(1, SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.ran {
            self.outcomes.dropped_unrun.fetch_add(1, SeqCst);
            if wspool::expiring() {
                self.expired_drops.fetch_add(1, SeqCst);
            }
        }
    }
}

#[test]
fn a_spawned_task_past_its_deadline_is_dropped_as_expired_and_counted() {
    watchdog(LIMIT, "spawn with deadlines", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let expired = Arc::new(AtomicUsize::new(0));
        let g = pool.group();
        for i in 0..10 {
            let p = Probe::new(&outcomes, &expired);
            let deadline = if i % 2 == 0 { past() } else { far() };
            pool.spawn_with(SpawnOptions { deadline, group: Some(&g), ..Default::default() }, move || p.run()).unwrap();
        }
        gate.open();
        g.wait().unwrap();
        assert_eq!(outcomes.ran.load(SeqCst), 5, "the tasks whose deadline is an hour away ran");
        assert_eq!(outcomes.dropped_unrun.load(SeqCst), 5, "the late ones never ran");
        assert_eq!(expired.load(SeqCst), 5, "and each was dropped with expiring() true");
        assert!(!wspool::expiring(), "the flag is set only during the drop");
        let s = pool.stats();
        assert_eq!(s.expired, 5);
        assert_eq!(s.cancelled, 0, "an expiry is not a cancellation");
        // The gate task and the five that ran.
        assert_eq!(s.completed, 6, "an expired task is not a completion");
        let mut text = String::new();
        pool.openmetrics(&mut text);
        assert!(text.contains("\nwspool_expired_tasks_total 5\n"), "{text}");
    });
}

#[test]
fn a_handle_reports_expired_and_its_waiter_expires_it_without_a_worker() {
    watchdog(LIMIT, "waiter-side expiry", || {
        // The only worker stays held until the wait returned: the waiter
        // itself must expire the task at its deadline.
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let expired = Arc::new(AtomicUsize::new(0));
        let p = Probe::new(&outcomes, &expired);
        let deadline = Some(Instant::now() + Duration::from_millis(20));
        let h = pool.submit_with(SpawnOptions { deadline, ..Default::default() }, move || p.run()).unwrap();
        assert_eq!(h.state(), TaskState::Pending);
        assert!(h.wait_for(None), "an untimed foreign wait ends at the deadline");
        assert_eq!(h.state(), TaskState::Expired);
        assert_eq!(expired.load(SeqCst), 1);
        assert!(!h.cancel(), "an expired task cannot be cancelled");
        assert!(matches!(h.wait(), Err(TaskError::Expired)));
        gate.open();
        pool.shutdown(Shutdown::Drain, None).unwrap();
        let s = pool.stats();
        assert_eq!((s.expired, s.cancelled), (1, 0), "expired once, by the waiter; the worker's pop found a tombstone");
        assert_eq!(outcomes.ran.load(SeqCst), 0);
    });
}

#[test]
fn a_timed_wait_shorter_than_the_deadline_leaves_the_task_pending() {
    watchdog(LIMIT, "timed wait before the deadline", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let h = pool.submit_with(SpawnOptions { deadline: far(), ..Default::default() }, || 7).unwrap();
        assert!(!h.wait_timeout(Duration::from_millis(1)));
        assert_eq!(h.state(), TaskState::Pending);
        gate.open();
        assert_eq!(h.wait().unwrap(), 7);
    });
}

#[test]
fn a_worker_reaching_a_late_handled_task_expires_it() {
    watchdog(LIMIT, "worker-side expiry of a handle", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let g = pool.group();
        let h =
            pool.submit_with(SpawnOptions { deadline: past(), group: Some(&g), ..Default::default() }, || 1).unwrap();
        gate.open();
        // The group empties when the worker's pop dropped the task: nobody
        // waited on the handle before.
        g.wait().unwrap();
        assert_eq!(h.state(), TaskState::Expired);
        assert!(matches!(h.wait(), Err(TaskError::Expired)));
        assert_eq!(pool.stats().expired, 1);
    });
}

#[test]
fn cancel_before_the_pop_is_a_cancellation_even_past_the_deadline() {
    watchdog(LIMIT, "cancel wins over a later expiry", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let expired = Arc::new(AtomicUsize::new(0));
        let p = Probe::new(&outcomes, &expired);
        let h = pool.submit_with(SpawnOptions { deadline: past(), ..Default::default() }, move || p.run()).unwrap();
        assert!(h.cancel());
        assert_eq!(h.state(), TaskState::Cancelled);
        assert_eq!(expired.load(SeqCst), 0);
        // Late tasks queued when a Cancel shutdown comes are cancelled, not
        // expired: nothing popped them.
        let t = Tracked::new(&outcomes);
        pool.spawn_with(SpawnOptions { deadline: past(), ..Default::default() }, move || t.run()).unwrap();
        gate.open();
        pool.shutdown(Shutdown::Cancel, None).unwrap();
        let s = pool.stats();
        assert_eq!(s.expired + s.cancelled, 2);
        assert_eq!(outcomes.dropped_unrun.load(SeqCst), 2);
        assert_eq!(outcomes.ran.load(SeqCst), 0);
    });
}

#[test]
fn serial_tasks_past_their_deadline_are_skipped_in_order() {
    watchdog(LIMIT, "serial deadlines", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let q = pool.serial();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for i in 0..6 {
            let order = order.clone();
            let deadline = if i % 3 == 1 { past() } else { far() };
            let opts = SpawnOptions { deadline, serial: Some(&q), ..Default::default() };
            handles.push(pool.submit_with(opts, move || order.lock().unwrap().push(i)).unwrap());
        }
        gate.open();
        let states: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.wait_for(Some(LIMIT));
                h.state()
            })
            .collect();
        assert_eq!(*order.lock().unwrap(), vec![0, 2, 3, 5]);
        assert_eq!(states.iter().filter(|s| **s == TaskState::Expired).count(), 2);
        assert_eq!(pool.stats().expired, 2);
    });
}

#[test]
fn serial_spawns_expire_too() {
    watchdog(LIMIT, "serial spawn deadlines", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let q = pool.serial();
        let g = pool.group();
        let outcomes = Arc::new(Outcomes::default());
        let expired = Arc::new(AtomicUsize::new(0));
        for i in 0..4 {
            let p = Probe::new(&outcomes, &expired);
            let deadline = if i % 2 == 0 { past() } else { None };
            let opts = SpawnOptions { deadline, serial: Some(&q), group: Some(&g), ..Default::default() };
            pool.spawn_with(opts, move || p.run()).unwrap();
        }
        gate.open();
        g.wait().unwrap();
        assert_eq!((outcomes.ran.load(SeqCst), expired.load(SeqCst)), (2, 2));
        assert_eq!(pool.stats().expired, 2);
    });
}

#[test]
fn a_completion_queue_reports_expired() {
    watchdog(LIMIT, "cq deadlines", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let cq = CompletionQueue::<u32>::new(&pool, CqOptions::default()).unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..4u32 {
            let ran = ran.clone();
            let deadline = if i % 2 == 0 { past() } else { far() };
            cq.submit_with(SpawnOptions { deadline, ..Default::default() }, i, move |_| {
                ran.fetch_add(1, SeqCst);
            })
            .unwrap();
        }
        gate.open();
        let mut got = Vec::new();
        while got.len() < 4 {
            cq.drain(usize::MAX, |e| {
                if let CqEvent::Done(i, s) = e {
                    got.push((i, s));
                }
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        got.sort_by_key(|(i, _)| *i);
        let statuses: Vec<_> = got.iter().map(|(_, s)| *s).collect();
        assert_eq!(statuses, [CqStatus::Expired, CqStatus::Ran, CqStatus::Expired, CqStatus::Ran]);
        assert_eq!(ran.load(SeqCst), 2);
        assert_eq!(pool.stats().expired, 2);
    });
}

#[test]
fn a_batch_with_a_deadline_expires_each_task() {
    watchdog(LIMIT, "batch deadlines", || {
        let (pool, gate, _guard) = held_single_worker(Pool::builder());
        let outcomes = Arc::new(Outcomes::default());
        let expired = Arc::new(AtomicUsize::new(0));
        let g = pool.group();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let p = Probe::new(&outcomes, &expired);
                move || p.run()
            })
            .collect();
        pool.spawn_batch_with(SpawnOptions { deadline: past(), group: Some(&g), ..Default::default() }, tasks).unwrap();
        gate.open();
        g.wait().unwrap();
        assert_eq!((outcomes.ran.load(SeqCst), expired.load(SeqCst)), (0, 8));
        assert_eq!(pool.stats().expired, 8);
    });
}
