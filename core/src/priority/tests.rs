//! The selection rules ([`Levels`]) driven the way one worker drives them,
//! with plain numbers for jobs, checked against the promises themselves
//! (not against a copy of the rules): Low behind the normal work queued
//! before it, Low in submission order, Low's aging bound, high before
//! ordinary work with a bounded bypass, nothing lost or run twice.

use std::cell::Cell;
use std::collections::VecDeque;

use proptest::prelude::*;

use super::{HIGH_BURST, LOW_MAX_OVERTAKES, Levels};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Low,
    Normal,
    High,
}

/// One worker taking everything that was queued before it started, in the
/// worker's order (`find_task_prioritized`): `take_first`, the ordinary
/// FIFO (a Low job there is its place: reached, and the look goes on), then
/// `took_ordinary` or `take_rest`. Returns the submission indices in the
/// order they started, and for each Low job how many jobs had started when
/// its place was reached.
fn run_one_worker_reaching(kinds: &[Kind]) -> (Vec<usize>, Vec<usize>) {
    let mut reached_at = vec![usize::MAX; kinds.len()];
    let mut levels = Levels::<usize>::default();
    let high_run = Cell::new(0);
    let mut ordinary = VecDeque::new();
    for (i, &k) in kinds.iter().enumerate() {
        match k {
            Kind::High => levels.high.push_back(i),
            Kind::Low => {
                levels.low_at_place += 1;
                ordinary.push_back(i);
            }
            Kind::Normal => ordinary.push_back(i),
        }
    }
    let mut started = Vec::new();
    loop {
        if let Some(i) = levels.take_first(&high_run) {
            started.push(i);
            continue;
        }
        let mut next = None;
        while let Some(i) = ordinary.pop_front() {
            if kinds[i] == Kind::Low {
                reached_at[i] = started.len();
                levels.low_reached(i);
            } else {
                next = Some(i);
                break;
            }
        }
        match next {
            Some(i) => {
                levels.took_ordinary(&high_run);
                started.push(i);
            }
            None => match levels.take_rest(&high_run) {
                Some(i) => started.push(i),
                None => break,
            },
        }
    }
    assert_eq!(levels.low_at_place, 0);
    (started, reached_at)
}

fn run_one_worker(kinds: &[Kind]) -> Vec<usize> {
    run_one_worker_reaching(kinds).0
}

fn check_promises(kinds: &[Kind], started: &[usize], reached_at: &[usize]) -> Result<(), TestCaseError> {
    let n = kinds.len();
    let mut at = vec![usize::MAX; n];
    for (t, &i) in started.iter().enumerate() {
        prop_assert_eq!(at[i], usize::MAX, "job {} started twice", i);
        at[i] = t;
    }
    prop_assert_eq!(started.len(), n, "every job starts once");
    let mut previous_low_start = None;
    for (i, &k) in kinds.iter().enumerate() {
        if k != Kind::Low {
            continue;
        }
        // Behind every normal job queued before it.
        let place = (0..i).filter(|&j| kinds[j] == Kind::Normal).map(|j| at[j] + 1).max().unwrap_or(0);
        prop_assert!(at[i] >= place, "low {} started before a normal job queued before it", i);
        // Its place is reached by the first look at ordinary work after
        // that: at most one high burst later, or two when an earlier Low job
        // falls due in between (a Low start ends a burst; the next Low job
        // cannot fall due within one burst).
        prop_assert!(reached_at[i] >= place && reached_at[i] <= place + 1 + 2 * HIGH_BURST as usize);
        // After the earlier Low jobs; aged from when its place was reached
        // and it became the oldest Low job waiting.
        let front_since = match previous_low_start {
            Some(p) => {
                prop_assert!(at[i] > p, "low jobs start in submission order");
                reached_at[i].max(p + 1)
            }
            None => reached_at[i],
        };
        prop_assert!(
            at[i] - front_since <= LOW_MAX_OVERTAKES as usize,
            "low {} was overtaken {} times",
            i,
            at[i] - front_since
        );
        previous_low_start = Some(at[i]);
    }
    // High before ordinary work, bypassed only after a full burst: a normal
    // job starting while high work waits follows HIGH_BURST high starts.
    let burst = HIGH_BURST as usize;
    for (t, &i) in started.iter().enumerate() {
        if kinds[i] != Kind::Normal {
            continue;
        }
        let high_waiting = (0..n).any(|j| kinds[j] == Kind::High && at[j] > t);
        if high_waiting {
            prop_assert!(t >= burst, "normal job {} overtook queued high work", i);
            prop_assert!(
                started[t - burst..t].iter().all(|&j| kinds[j] == Kind::High),
                "normal job {} overtook high work without a full burst before it",
                i
            );
        }
        // And the burst is bounded: no more than HIGH_BURST high starts in
        // a row while this normal job waited.
        let queued_before_run = started[..t].iter().rev().take_while(|&&j| kinds[j] == Kind::High).count();
        prop_assert!(
            queued_before_run <= burst,
            "{} high jobs ran in a row before normal job {}",
            queued_before_run,
            i
        );
    }
    Ok(())
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Low), Just(Kind::Normal), Just(Kind::High)]
}

fn cases() -> u32 {
    if cfg!(miri) { 8 } else { std::env::var("WSPOOL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_rules_keep_every_priority_promise(kinds in proptest::collection::vec(kind(), 0..120)) {
        let (started, reached_at) = run_one_worker_reaching(&kinds);
        check_promises(&kinds, &started, &reached_at)?;
    }
}

#[test]
fn low_jobs_queued_first_start_after_the_normal_jobs_queued_after_them() {
    use Kind::*;
    let kinds = [Low, Low, Low, Normal, Normal, Normal, Normal, Normal];
    // Their places are reached at once; five normal jobs overtake them,
    // fewer than the bound, and then nothing else is queued.
    assert_eq!(run_one_worker(&kinds), [3, 4, 5, 6, 7, 0, 1, 2]);
}

#[test]
fn one_low_job_never_spends_another_low_jobs_aging() {
    let mut kinds = vec![Kind::Low; 30];
    kinds.extend([Kind::Normal; 60]);
    let started = run_one_worker(&kinds);
    let k = LOW_MAX_OVERTAKES as usize;
    // The first Low job after K normal ones, then one Low job per K.
    assert_eq!(started[..k], (30..30 + k).collect::<Vec<_>>()[..]);
    assert_eq!(started[k], 0);
}

#[test]
fn a_high_stream_cannot_starve_low_work() {
    let mut kinds = vec![Kind::Low];
    kinds.extend([Kind::Normal; 20]);
    kinds.extend([Kind::High; 10_000]);
    let started = run_one_worker(&kinds);
    let low_at = started.iter().position(|&i| i == 0).unwrap();
    // Its place is reached at the first ordinary take, after one burst.
    assert!(low_at <= (HIGH_BURST + LOW_MAX_OVERTAKES) as usize, "low started after {low_at} others");
}
