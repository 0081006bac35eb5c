use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use super::*;
use crate::pool::Shutdown;

/// What a held task waits on. The test opens it; so does its drop, so a
/// failing assertion releases the task instead of hanging the pool's drop.
struct Gate(Arc<AtomicBool>);

struct GateWaiter(Arc<AtomicBool>);

impl Gate {
    fn new() -> Gate {
        Gate(Arc::new(AtomicBool::new(false)))
    }
    fn clone(&self) -> GateWaiter {
        GateWaiter(self.0.clone())
    }
    fn open(&self) {
        self.0.store(true, SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

impl GateWaiter {
    fn wait(&self) {
        while !self.0.load(SeqCst) {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

fn pool(n: usize) -> Pool {
    Pool::builder().min_threads(n).build().unwrap()
}

/// Drains until `want` completions came back (a generous hang guard).
fn drain_all<T: Send + 'static>(cq: &CompletionQueue<T>, want: usize) -> Vec<CqEvent<T>> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    while got < want {
        assert!(Instant::now() < deadline, "completions did not come back ({got} of {want})");
        got += cq.drain(usize::MAX, |e| out.push(e));
        if got < want {
            wait_readable(cq, Duration::from_millis(50));
        }
    }
    out
}

#[cfg(unix)]
fn wait_readable<T: Send + 'static>(cq: &CompletionQueue<T>, t: Duration) -> bool {
    let mut p = libc::pollfd { fd: cq.fd().unwrap(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, t.as_millis() as i32) == 1 }
}

/// Whether the fd turns unreadable by itself (a stale readiness is cleared
/// by the thread that caused it); false after a generous hang guard.
fn becomes_unreadable<T: Send + 'static>(cq: &CompletionQueue<T>) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while wait_readable(cq, Duration::ZERO) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn done<T>(events: Vec<CqEvent<T>>) -> Vec<(T, CqStatus)> {
    events
        .into_iter()
        .filter_map(|e| match e {
            CqEvent::Done(t, s) => Some((t, s)),
            CqEvent::Signal(_) => None,
        })
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn every_submission_comes_back_once_with_its_result() {
    let p = pool(2);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    for i in 0..1000u64 {
        cq.submit((i, 0u64), |(x, y)| *y = *x * 2).unwrap();
    }
    let mut got = done(drain_all(&cq, 1000));
    got.sort_by_key(|((i, _), _)| *i);
    assert_eq!(got.len(), 1000);
    for (k, ((i, y), s)) in got.into_iter().enumerate() {
        assert_eq!((i, y, s), (k as u64, 2 * k as u64, CqStatus::Ran));
    }
    assert_eq!(cq.pending(), 0);
    assert!(becomes_unreadable(&cq), "an empty queue leaves the fd unreadable");
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn no_wake_up_is_lost_and_a_stale_one_clears_itself() {
    // The loop drains only when the fd says so while two workers complete
    // concurrently and wake it outside the queue's lock: a lost wake-up
    // leaves completions undrained until the deadline fails the test. A
    // drain that took a completion before its worker's write landed leaves
    // a stale readiness, which must clear without another drain.
    let p = pool(2);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    for round in 0..200 {
        for i in 0..50u32 {
            cq.submit(i, |_| {}).unwrap();
        }
        let mut got = 0;
        while got < 50 {
            assert!(Instant::now() < deadline, "round {round}: {got} of 50 came back; a wake-up was lost");
            if wait_readable(&cq, Duration::from_millis(100)) {
                got += cq.drain(usize::MAX, |_| {});
            }
        }
        assert_eq!(cq.pending(), 0);
        assert!(becomes_unreadable(&cq), "round {round}: a stale readiness stayed");
    }
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_wake_up_that_lands_after_its_drain_is_cleared_by_its_waker() {
    let p = pool(1);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    // What `complete` does, with its waker held between unlock and write.
    let make_ready = |v: u32| {
        cq.inner.pending.fetch_add(1, SeqCst);
        let mut r = lock(&cq.inner.ready);
        r.done.push_back(Box::new(Node { item: Some(v), status: CqStatus::Ran, submitted_ns: 0 }));
        cq.inner.mark_ready(&mut r).expect("empty -> ready owes a wake-up")
    };
    let seen = make_ready(1);
    assert!(!wait_readable(&cq, Duration::ZERO), "not written yet");
    assert_eq!(cq.drain(usize::MAX, |_| {}), 1, "a drain takes it before the write");
    cq.inner.wake_loop(Some(seen));
    assert!(!wait_readable(&cq, Duration::ZERO), "the late write found its work drained and cleared itself");
    // Without a drain in between, the write stands.
    let seen = make_ready(2);
    cq.inner.wake_loop(Some(seen));
    assert!(wait_readable(&cq, Duration::ZERO));
    assert_eq!(cq.drain(usize::MAX, |_| {}), 1);
    assert!(!wait_readable(&cq, Duration::ZERO));
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_callback_that_unwinds_leaves_the_rest_of_the_batch_owed() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    for i in 0..10u32 {
        cq.submit(i, |_| {}).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while lock(&cq.inner.ready).done.len() < 10 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut seen = Vec::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        cq.drain(usize::MAX, |e| {
            if let CqEvent::Done(i, _) = e {
                seen.push(i);
                if i == 3 {
                    panic!("callback fails");
                }
            }
        })
    }));
    assert!(r.is_err());
    assert!(wait_readable(&cq, Duration::ZERO), "what is left is announced again");
    let rest: Vec<u32> = done(drain_all(&cq, 6)).into_iter().map(|(i, _)| i).collect();
    assert_eq!(seen, vec![0, 1, 2, 3]);
    assert_eq!(rest, vec![4, 5, 6, 7, 8, 9], "the rest of the batch, in order, once");
    assert_eq!(cq.pending(), 0);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn completions_come_back_in_completion_order() {
    // Each work stamps the order it finished in; one worker finishes them one
    // at a time, so the drain must hand them back in stamp order.
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let clock = Arc::new(AtomicUsize::new(0));
    for _ in 0..300 {
        let c = clock.clone();
        cq.submit(usize::MAX, move |stamp| *stamp = c.fetch_add(1, SeqCst)).unwrap();
    }
    let got: Vec<usize> = done(drain_all(&cq, 300)).into_iter().map(|(i, _)| i).collect();
    assert_eq!(got, (0..300).collect::<Vec<_>>());
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn the_fd_wakes_once_per_batch_and_drain_clears_it() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    assert!(!wait_readable(&cq, Duration::ZERO));
    for i in 0..50 {
        cq.submit(i, |_| {}).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while cq.inner.queued.load(SeqCst) != 0 || lock(&cq.inner.ready).done.len() < 50 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    // 50 completions, one wake: the eventfd counter is 1 (a pipe holds 1 byte).
    let fd = cq.fd().unwrap();
    let mut buf = [0u8; 8];
    // SAFETY: reading into a live buffer; puts the same count back after.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
    assert!(n > 0);
    if cfg!(target_os = "linux") {
        assert_eq!(u64::from_ne_bytes(buf), 1, "one wake-up for the whole batch");
    }
    cq.inner.wake.wake();
    assert_eq!(cq.drain(10, |_| {}), 10, "bounded drain");
    assert!(wait_readable(&cq, Duration::ZERO), "work left: still readable (level semantics)");
    assert_eq!(cq.drain(usize::MAX, |_| {}), 40);
    assert!(!wait_readable(&cq, Duration::ZERO), "drained: cleared by drain itself");
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_wake_callback_runs_per_batch_and_after_a_bounded_drain() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    let opts = CqOptions {
        wake: Some(Box::new(move || {
            w.fetch_add(1, SeqCst);
        })),
        ..CqOptions::default()
    };
    let cq = CompletionQueue::new(&p, opts).unwrap();
    assert_eq!(cq.fd(), None);
    let gate = Gate::new();
    let g = gate.clone();
    cq.submit(0, move |_| {
        g.wait();
    })
    .unwrap();
    for i in 1..20 {
        cq.submit(i, |_| {}).unwrap();
    }
    gate.open();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lock(&cq.inner.ready).done.len() < 20 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(wakes.load(SeqCst), 1, "20 completions in one batch: one wake");
    assert_eq!(cq.drain(5, |_| {}), 5);
    assert_eq!(wakes.load(SeqCst), 2, "a bounded drain that left work owes a wake");
    assert_eq!(cq.drain(usize::MAX, |_| {}), 15);
    assert_eq!(wakes.load(SeqCst), 2);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_panic_is_a_status_and_the_payload_comes_back() {
    let p = pool(2);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    cq.submit(String::from("kept"), |_| panic!("boom")).unwrap();
    let got = done(drain_all(&cq, 1));
    assert_eq!(got, vec![(String::from("kept"), CqStatus::Panicked)]);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_cancel_shutdown_completes_queued_work_as_cancelled_exactly_once() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    let ran = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let s0 = started.clone();
    cq.submit(0usize, move |_| {
        s0.store(1, SeqCst);
        g.wait();
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.load(SeqCst) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 1..200usize {
        let r = ran.clone();
        cq.submit(i, move |_| {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    let p2 = p.clone();
    let shut = std::thread::spawn(move || p2.shutdown(Shutdown::Cancel, None));
    // The queued 199 are dropped unrun by the shutdown while the first blocks.
    while !p.is_shutdown() {
        assert!(Instant::now() < deadline, "the shutdown did not begin");
        std::thread::sleep(Duration::from_millis(1));
    }
    gate.open();
    shut.join().unwrap().unwrap();
    let got = done(drain_all(&cq, 200));
    assert_eq!(got.len(), 200);
    let mut ids: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    ids.sort();
    assert_eq!(ids, (0..200).collect::<Vec<_>>(), "each exactly once");
    let cancelled = got.iter().filter(|(_, s)| *s == CqStatus::Cancelled).count();
    assert_eq!(cancelled + ran.load(SeqCst) + 1, 200);
    assert_eq!(ran.load(SeqCst), 0, "a cancel shutdown runs none of the queued work");
    assert_eq!(cq.pending(), 0);
    let e = cq.submit(7, |_| {}).unwrap_err();
    assert_eq!((e.kind, e.item), (CqRefusal::Shutdown, 7), "refused: the payload comes back, no completion");
    assert_eq!(cq.drain(usize::MAX, |_| panic!("a refused submission completed")), 0);
    assert_eq!(cq.pending(), 0);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn close_cancel_skips_unstarted_work_and_waits_for_every_completion() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    let ran = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let s0 = started.clone();
    cq.submit(0usize, move |_| {
        s0.store(1, SeqCst);
        g.wait();
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.load(SeqCst) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 1..50usize {
        let r = ran.clone();
        cq.submit(i, move |_| {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        gate.open();
    });
    let mut seen = Vec::new();
    cq.close(CloseMode::Cancel, Some(Duration::from_secs(30)), |e| {
        if let CqEvent::Done(i, s) = e {
            seen.push((i, s))
        }
    })
    .unwrap();
    opener.join().unwrap();
    assert_eq!(seen.len(), 50);
    assert_eq!(ran.load(SeqCst), 0, "nothing queued ran after close(Cancel)");
    assert_eq!(seen.iter().filter(|(_, s)| *s == CqStatus::Cancelled).count(), 49);
    assert_eq!(cq.pending(), 0);
    assert_eq!(cq.submit(1, |_| {}).unwrap_err().kind, CqRefusal::Closed);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn close_drain_runs_everything_and_times_out_on_a_stuck_task() {
    let p = pool(2);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    cq.submit(0usize, move |_| {
        g.wait();
    })
    .unwrap();
    for i in 1..20usize {
        cq.submit(i, |_| {}).unwrap();
    }
    let mut n = 0;
    let r = cq.close(CloseMode::Drain, Some(Duration::from_millis(50)), |_| n += 1);
    assert!(r.is_err(), "the gated task holds the close");
    assert_eq!(cq.pending(), 1);
    gate.open();
    cq.close(CloseMode::Drain, Some(Duration::from_secs(30)), |e| {
        assert!(matches!(e, CqEvent::Done(_, CqStatus::Ran)));
        n += 1
    })
    .unwrap();
    assert_eq!(n, 20);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn cap_refuses_and_watermarks_signal_in_order() {
    let p = pool(2);
    let opts = CqOptions { cap: 8, high_water: 6, low_water: 2, overload_target: None, ..CqOptions::default() };
    let cq = CompletionQueue::new(&p, opts).unwrap();
    let gate = Gate::new();
    for i in 0..8usize {
        let g = gate.clone();
        cq.submit(i, move |_| {
            if i == 0 {
                g.wait();
            }
        })
        .unwrap();
    }
    let e = cq.submit(99, |_| {}).unwrap_err();
    assert_eq!((e.kind, e.item), (CqRefusal::Full, 99));
    gate.open();
    let mut trace = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while trace.iter().filter(|t: &&String| t.starts_with('d')).count() < 8 {
        assert!(Instant::now() < deadline);
        cq.drain(usize::MAX, |e| {
            trace.push(match e {
                CqEvent::Done(_, _) => format!("d{}", cq.pending()),
                CqEvent::Signal(s) => format!("{s:?}"),
            })
        });
        wait_readable(&cq, Duration::from_millis(10));
    }
    assert_eq!(trace[0], "HighWater", "delivered first, before the completions");
    let low = trace.iter().position(|t| t == "LowWater").expect("LowWater delivered");
    assert_eq!(trace[low - 1], "d2", "right after the completion that brought pending to low_water");
    assert_eq!(trace.iter().filter(|t| t.ends_with("Water")).count(), 2);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn standing_queue_delay_signals_overload_then_recovery() {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let opts = CqOptions {
        overload_target: Some(Duration::from_millis(2)),
        overload_interval: Duration::from_millis(10),
        ..CqOptions::default()
    };
    let cq = CompletionQueue::new(&p, opts).unwrap();
    // 40 tasks of 2 ms on one thread: each waits for all before it.
    for i in 0..40usize {
        cq.submit(i, |_| std::thread::sleep(Duration::from_millis(2))).unwrap();
    }
    // A reactor that pauses on the state, and never asks the admission test.
    let mut signals = Vec::new();
    let mut flagged = false;
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 40 {
        assert!(Instant::now() < deadline);
        flagged |= cq.overload_state();
        got += cq.drain(usize::MAX, |e| {
            if let CqEvent::Signal(s) = e {
                signals.push(s)
            }
        });
        wait_readable(&cq, Duration::from_millis(5));
    }
    assert!(flagged, "the state was seen overloaded while the queue stood");
    assert_eq!(signals, vec![CqSignal::Overloaded, CqSignal::Recovered], "the last start emptied the queue");
    assert!(!cq.overload_state() && !cq.overloaded());
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_server_refusing_on_the_admission_test_holds_the_state_and_keeps_admitting() {
    // Offered twice what one thread serves, refusing whatever `overloaded()`
    // refuses: the queue must trip once and then stay overloaded while it
    // keeps admitting some work (the queue held near the target), not flap
    // between refusing everything and admitting everything. Sleeps, not CPU,
    // so a loaded machine slows both sides alike.
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let opts = CqOptions {
        overload_target: Some(Duration::from_millis(2)),
        overload_interval: Duration::from_millis(50),
        ..CqOptions::default()
    };
    let cq = CompletionQueue::new(&p, opts).unwrap();
    let mut signals = Vec::new();
    fn on_signal(signals: &mut Vec<CqSignal>) -> impl FnMut(CqEvent<()>) + '_ {
        move |e| {
            if let CqEvent::Signal(s) = e {
                signals.push(s)
            }
        }
    }
    let (mut refused, mut admitted_while_overloaded) = (0, 0);
    for _ in 0..600 {
        for _ in 0..2 {
            if cq.overloaded() {
                refused += 1;
            } else {
                admitted_while_overloaded += cq.overload_state() as usize;
                cq.submit((), |_| std::thread::sleep(Duration::from_millis(1))).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(1));
        cq.drain(usize::MAX, on_signal(&mut signals));
    }
    assert!(refused > 0, "twice the capacity was offered");
    assert!(admitted_while_overloaded > 0, "while overloaded, work that would wait less than the target is admitted");
    let trips = signals.iter().filter(|s| **s == CqSignal::Overloaded).count();
    assert!((1..=2).contains(&trips), "no saw-tooth between refusing all and admitting all: {signals:?}");
    // The offered load stops; the server keeps asking (as each new request
    // would): an interval without a refusal recovers it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while signals.last() != Some(&CqSignal::Recovered) {
        assert!(Instant::now() < deadline, "never recovered: {signals:?}");
        assert!(!cq.overloaded() || cq.pending() > 0, "an empty queue admits");
        cq.drain(usize::MAX, on_signal(&mut signals));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!cq.overload_state());
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn submitting_from_done_and_from_many_threads_keeps_exactly_once() {
    let p = pool(2);
    let cq = Arc::new(CompletionQueue::new(&p, CqOptions::default()).unwrap());
    let ts: Vec<_> = (0..4)
        .map(|t| {
            let cq = cq.clone();
            std::thread::spawn(move || {
                for i in 0..500usize {
                    cq.submit(t * 1000 + i, |_| {}).unwrap();
                }
            })
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().unwrap());
    let mut seen = vec![0u8; 4000];
    let mut resubmitted = 0;
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 2000 + 100 {
        assert!(Instant::now() < deadline);
        got += cq.drain(64, |e| {
            if let CqEvent::Done(i, CqStatus::Ran) = e {
                seen[i] += 1;
                if i < 100 && resubmitted < 100 {
                    resubmitted += 1;
                    cq.submit(3900 + resubmitted - 1, |_| {}).unwrap();
                }
            }
        });
        wait_readable(&cq, Duration::from_millis(10));
    }
    assert!(seen.iter().all(|&c| c <= 1));
    assert_eq!(seen.iter().map(|&c| c as usize).sum::<usize>(), 2100);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_building_queue_trips_the_signal_before_anything_starts() {
    // The only worker is held, so no start can report a delay: the signal
    // must come from the submit side's estimate of the head's age.
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let opts = CqOptions {
        overload_target: Some(Duration::from_millis(2)),
        overload_interval: Duration::ZERO,
        ..CqOptions::default()
    };
    let cq = CompletionQueue::new(&p, opts).unwrap();
    let gate = Gate::new();
    let started = Arc::new(AtomicUsize::new(0));
    let (g, s0) = (gate.clone(), started.clone());
    cq.submit(0usize, move |_| {
        s0.store(1, SeqCst);
        g.wait();
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.load(SeqCst) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    cq.submit(1, |_| {}).unwrap();
    assert!(!cq.overloaded());
    std::thread::sleep(Duration::from_millis(5));
    cq.submit(2, |_| {}).unwrap();
    assert!(cq.overload_state(), "the head has waited 5 ms > 2 ms: overloaded before any start");
    assert!(cq.overloaded(), "and a new submission would wait past the target: refused");
    gate.open();
    // (Having refused, it now recovers only after admitting an interval's
    // work: `codel` tests, and the server test above.)
    let mut signals = Vec::new();
    let mut got = 0;
    while got < 3 {
        assert!(Instant::now() < deadline, "{got} of 3");
        got += cq.drain(usize::MAX, |e| {
            if let CqEvent::Signal(s) = e {
                signals.push(s)
            }
        });
        wait_readable(&cq, Duration::from_millis(5));
    }
    assert_eq!(signals, vec![CqSignal::Overloaded]);
}

/// A queue's shared state alone, waking through a callback: no pool and no
/// fd, so the node handling runs under Miri.
fn bare_inner<T>() -> Arc<Inner<T>> {
    Arc::new(Inner::new(Wake::callback(Box::new(|| {})), None))
}

/// A job as `submit` makes it, its counts taken.
fn counted_job<T: Send + 'static>(inner: &Arc<Inner<T>>, item: T) -> Job<T> {
    inner.pending.fetch_add(1, AcqRel);
    inner.queued.fetch_add(1, AcqRel);
    Job {
        inner: inner.clone(),
        node: Some(Box::new(Node { item: Some(item), status: CqStatus::Ran, submitted_ns: 0 })),
    }
}

struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("the refused work's capture panics on drop");
    }
}

fn take_back_is_disarmed() -> bool {
    !TAKE_BACK_ARMED.with(Cell::get) && TAKE_BACK_NODE.with(Cell::get).is_null()
}

#[test]
fn take_back_returns_the_node_and_the_counts() {
    let inner = bare_inner::<String>();
    let job = counted_job(&inner, String::from("back"));
    let mut node = take_back(&inner, move || job.run(|s: &mut String| s.push_str(" ran")));
    assert_eq!(node.item.take().as_deref(), Some("back"), "taken back unrun");
    assert!(take_back_is_disarmed());
    assert_eq!((inner.pending.load(SeqCst), inner.queued.load(SeqCst)), (0, 0));
    assert!(lock(&inner.ready).done.is_empty(), "a refused job does not complete");
}

#[test]
fn a_take_back_unwound_by_the_refused_closure_leaves_the_thread_clean() {
    // Issue 30, item 3: the refused job's closure panics while it is
    // dropped, after its node was taken back. The unwind must leave no
    // take-back state behind: the next job on this thread runs and
    // completes, and the queue's counts are given back (a `close` waits
    // for `pending` to reach zero).
    let inner = bare_inner::<u32>();
    let job = counted_job(&inner, 1);
    let bomb = PanicOnDrop;
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        take_back(&inner, move || {
            job.run(move |x: &mut u32| {
                let _keep = &bomb;
                *x += 1;
            })
        })
    }));
    assert!(unwound.is_err(), "the closure's drop panicked through take_back");
    assert!(take_back_is_disarmed(), "an unwind left the take-back slots set");
    assert_eq!((inner.pending.load(SeqCst), inner.queued.load(SeqCst)), (0, 0), "counts given back");
    let job = counted_job(&inner, 5);
    job.run(|x| *x *= 3);
    let done: Vec<_> = lock(&inner.ready).done.drain(..).map(|mut n| (n.item.take(), n.status)).collect();
    assert_eq!(done, vec![(Some(15), CqStatus::Ran)], "the next job on this thread ran and completed");
}

#[test]
fn a_submission_made_while_a_take_back_unwinds_is_taken_back_or_run_on_its_own() {
    // The refused closure's drop submits to another queue, refused too
    // (nested take-back), then panics: both counts come back, and each
    // queue keeps its own node.
    let outer = bare_inner::<u8>();
    let nested = bare_inner::<String>();
    struct SubmitThenPanic(Arc<Inner<String>>);
    impl Drop for SubmitThenPanic {
        fn drop(&mut self) {
            let job = counted_job(&self.0, String::from("nested"));
            let mut node = take_back(&self.0, move || job.run(|_| unreachable!("taken back")));
            assert_eq!(node.item.take().as_deref(), Some("nested"));
            let ran = counted_job(&self.0, String::from("run"));
            ran.run(|s| s.push('!'));
            panic!("then the drop panics");
        }
    }
    let job = counted_job(&outer, 9);
    let bomb = SubmitThenPanic(nested.clone());
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        take_back(&outer, move || {
            job.run(move |_| {
                let _keep = &bomb;
            })
        })
    }));
    assert!(unwound.is_err());
    assert!(take_back_is_disarmed());
    assert_eq!(outer.pending.load(SeqCst), 0);
    assert_eq!(nested.pending.load(SeqCst), 1, "the nested job that ran is owed to its drain");
    let done: Vec<_> = lock(&nested.ready).done.drain(..).map(|mut n| (n.item.take(), n.status)).collect();
    assert_eq!(done, vec![(Some(String::from("run!")), CqStatus::Ran)]);
    assert!(lock(&outer.ready).done.is_empty());
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads (Miri: see the bare-state tests above)")]
fn a_refused_submission_unwinding_on_a_pool_thread_leaves_later_completions_intact() {
    // Issue 30, item 3, through the public calls: on the only thread of a
    // pool, a submission to a queue of a shut-down pool is refused, and
    // its closure panics while dropped. Later submissions run on that same
    // thread: each must complete, and both queues' `close` must return.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let live = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
        let dead = pool(1);
        dead.shutdown(Shutdown::Drain, None).unwrap();
        let cq_dead = Arc::new(CompletionQueue::<u32>::new(&dead, CqOptions::default()).unwrap());
        let cq_live = CompletionQueue::<u32>::new(&live, CqOptions::default()).unwrap();
        let c = cq_dead.clone();
        let h = live
            .submit(move || {
                let bomb = PanicOnDrop;
                catch_unwind(AssertUnwindSafe(|| {
                    c.submit(1, move |_| {
                        let _keep = &bomb;
                    })
                }))
                .is_err()
            })
            .unwrap();
        assert!(h.wait().unwrap(), "the refused closure's drop unwound out of submit");
        for i in 0..8 {
            cq_live.submit(i, |x| *x += 100).unwrap();
        }
        let mut got = Vec::new();
        cq_live.close(CloseMode::Drain, None, |e| got.extend(done(vec![e]))).unwrap();
        got.sort_by_key(|(x, _)| *x);
        assert_eq!(got, (100..108).map(|x| (x, CqStatus::Ran)).collect::<Vec<_>>());
        assert_eq!(cq_dead.pending(), 0, "the refused submission's count was given back");
        cq_dead.close(CloseMode::Drain, None, |_| panic!("a refused submission completed")).unwrap();
        tx.send(()).unwrap();
    });
    // A watchdog, not a measurement: before the fix the first `close` waited forever.
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the completions or a close never came (a take-back pointer left dangling?)");
}

mod cancel;
