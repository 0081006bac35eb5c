//! `submit_cancellable`: a queued submission cancelled through its handle
//! never runs and completes as cancelled, at once, on the cancelling thread.

use super::*;
use crate::TaskState;

/// A one-thread pool whose only worker is held by a gated task.
fn held_pool() -> (Pool, CompletionQueue<usize>, Gate) {
    let p = Pool::builder().min_threads(1).max_threads(1).growth(crate::Growth::Fixed).build().unwrap();
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    cq.submit(0usize, move |_| {
        s.store(true, SeqCst);
        g.wait();
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.load(SeqCst) {
        assert!(Instant::now() < deadline, "the holding task never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    (p, cq, gate)
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_cancelled_submission_completes_as_cancelled_before_any_worker_reaches_it() {
    let (p, cq, gate) = held_pool();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let h = cq
        .submit_cancellable(crate::SpawnOptions::default(), 1, move |_| {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    assert_eq!(h.state(), TaskState::Pending);
    assert!(h.cancel(), "a queued submission cancels");
    assert!(!h.cancel(), "only once");
    assert_eq!(h.state(), TaskState::Cancelled);
    // The worker is still held: the completion came from the cancel itself.
    let got = done(drain_all(&cq, 1));
    assert_eq!(got, vec![(1, CqStatus::Cancelled)]);
    assert_eq!(cq.pending(), 1, "only the holding task is left");
    gate.open();
    let got = done(drain_all(&cq, 1));
    assert_eq!(got, vec![(0, CqStatus::Ran)]);
    p.shutdown(Shutdown::Drain, None).unwrap();
    assert_eq!(ran.load(SeqCst), 0, "the cancelled work never ran");
    assert_eq!(p.stats().cancelled, 1);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_submission_that_ran_cannot_be_cancelled_and_comes_back_once() {
    let p = pool(1);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let h = cq.submit_cancellable(crate::SpawnOptions::default(), 7usize, |x| *x += 1).unwrap();
    assert_eq!(done(drain_all(&cq, 1)), vec![(8, CqStatus::Ran)]);
    assert!(!h.cancel());
    // The completion is queued from inside the task, so the loop may drain it a
    // moment before the handle reads Done: a wait (here, off the loop) settles it.
    assert!(h.wait_for(Some(Duration::from_secs(30))));
    assert_eq!(h.state(), TaskState::Done);
    drop(h);
    assert_eq!(cq.pending(), 0);
    assert_eq!(cq.drain(usize::MAX, |_| panic!("nothing more comes back")), 0);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_cancellable_submission_past_its_deadline_expires_and_cancel_says_so() {
    let (_p, cq, gate) = held_pool();
    let opts = crate::SpawnOptions { deadline: Some(Instant::now()), ..Default::default() };
    let h = cq.submit_cancellable(opts, 2, |_| panic!("an expired submission never runs")).unwrap();
    gate.open();
    let got = done(drain_all(&cq, 2));
    assert!(got.contains(&(2, CqStatus::Expired)), "{got:?}");
    assert_eq!(h.state(), TaskState::Expired);
    assert!(!h.cancel(), "an expired submission is not cancelled again");
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_cancelled_submission_in_a_lane_frees_its_turn_for_the_next() {
    let p = pool(2);
    let cq = CompletionQueue::new(&p, CqOptions::default()).unwrap();
    let lane = p.lane(1);
    let gate = Gate::new();
    let g = gate.clone();
    let in_lane = crate::SpawnOptions { serial: Some(&lane), ..Default::default() };
    cq.submit_with(in_lane, 0usize, move |_| g.wait()).unwrap();
    let h = cq.submit_cancellable(in_lane, 1, |_| panic!("cancelled in the lane")).unwrap();
    cq.submit_with(in_lane, 2, |x| *x += 10).unwrap();
    assert!(h.cancel());
    assert_eq!(done(drain_all(&cq, 1)), vec![(1, CqStatus::Cancelled)]);
    gate.open();
    let mut got = done(drain_all(&cq, 2));
    got.sort_by_key(|(i, _)| *i);
    assert_eq!(got, vec![(0, CqStatus::Ran), (12, CqStatus::Ran)]);
}

#[test]
#[cfg_attr(miri, ignore = "starts pool threads")]
fn a_refused_cancellable_submission_gives_its_item_back_and_leaves_nothing_pending() {
    let p = pool(1);
    let cq = CompletionQueue::new(&p, CqOptions { cap: 1, ..Default::default() }).unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    let first = cq.submit_cancellable(crate::SpawnOptions::default(), 0usize, move |_| g.wait()).unwrap();
    let e = cq.submit_cancellable(crate::SpawnOptions::default(), 5, |_| {}).unwrap_err();
    assert_eq!((e.kind, e.item), (CqRefusal::Full, 5));
    gate.open();
    assert_eq!(done(drain_all(&cq, 1)), vec![(0, CqStatus::Ran)]);
    assert!(first.wait_for(Some(Duration::from_secs(30))));
    assert_eq!(first.state(), TaskState::Done);
    p.shutdown(Shutdown::Drain, None).unwrap();
    let e = cq.submit_cancellable(crate::SpawnOptions::default(), 6, |_| {}).unwrap_err();
    assert_eq!((e.kind, e.item), (CqRefusal::Shutdown, 6));
    assert_eq!(cq.pending(), 0);
}
