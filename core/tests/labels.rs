//! Issue 26, "what a task is": labels given at submission
//! (`SpawnOptions::label`) and shown by `Pool::dump` on the thread running,
//! blocking or waiting inside the task. Every state is set up with gates
//! and read by polling snapshots under a watchdog, never with sleeps.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::{Gate, OpenOnDrop, eventually, watchdog};
use wspool::{Growth, Label, Pool, PoolDump, Priority, SpawnOptions, TaskError, ThreadState};

const LIMIT: Duration = Duration::from_secs(60);
/// How long a snapshot may take to show a label: shorter than the
/// watchdog's limit, so a label never shown fails with the last snapshot.
const SHOW_LIMIT: Duration = Duration::from_secs(20);

fn fixed(n: usize) -> Pool {
    Pool::builder().min_threads(n).max_threads(n).growth(Growth::Fixed).build().unwrap()
}

fn thread(dump: &PoolDump, index: usize) -> Option<(ThreadState, Option<&'static str>)> {
    dump.threads.iter().find(|t| t.index == index).map(|t| (t.state, t.label))
}

/// Records the worker index a task runs on (+1: 0 is "not yet").
fn record(slot: &AtomicUsize) {
    slot.store(wspool::current_index().expect("a pool thread") + 1, SeqCst);
}

fn recorded(slot: &AtomicUsize) -> usize {
    eventually(LIMIT, "the task started", || slot.load(SeqCst) != 0);
    slot.load(SeqCst) - 1
}

/// Polls snapshots until thread `index` is in a task with `label` shown
/// (a hang guard, not a timing), and returns that snapshot.
fn until_labelled(pool: &Pool, index: usize, label: Option<&str>, what: &str) -> PoolDump {
    let deadline = Instant::now() + SHOW_LIMIT;
    loop {
        let d = pool.dump();
        if let Some((state, shown)) = thread(&d, index)
            && matches!(state, ThreadState::Running | ThreadState::Blocking | ThreadState::Waiting { .. })
            && shown == label
        {
            return d;
        }
        assert!(Instant::now() < deadline, "{what}: thread #{index} never showed {label:?}; last snapshot:\n{d}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A gate holds a labelled task running and an unlabelled one beside it:
/// the snapshot shows the label on the first thread only, and the report
/// writes it. A third task, labelled, waits on the held labelled one: its
/// thread shows its own label while waiting.
#[test]
fn a_held_labelled_task_shows_its_label_and_an_unlabelled_one_none() {
    watchdog(LIMIT, "labelled and unlabelled tasks held", || {
        let pool = fixed(3);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let (labelled, plain, waiter) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let opts = SpawnOptions { label: Some(Label::new("parse_request")), ..SpawnOptions::default() };
        let (g, r) = (gate.clone(), labelled.clone());
        let held = pool
            .submit_with(opts, move || {
                record(&r);
                g.wait();
            })
            .unwrap();
        let (g, r) = (gate.clone(), plain.clone());
        pool.spawn(move || {
            record(&r);
            g.wait();
        })
        .unwrap();
        // The waiter is submitted only once both held tasks run on threads of
        // their own: a wait may run the task it waits for itself (documented),
        // and had the waiter started first, the held task would have run
        // inside it, on its thread, showing the inner label (about 1 run in
        // 1,500 at load 5). Forcing the order leaves one schedule.
        let (labelled, plain) = (recorded(&labelled), recorded(&plain));
        let w = waiter.clone();
        let waiting = SpawnOptions { label: Some(Label::new("await_parse")), ..SpawnOptions::default() };
        pool.spawn_with(waiting, move || {
            record(&w);
            held.wait().unwrap();
        })
        .unwrap();
        let waiter = recorded(&waiter);
        assert!(waiter != labelled && waiter != plain, "three threads, one task each");
        until_labelled(&pool, labelled, Some("parse_request"), "the held labelled task");
        let d = until_labelled(&pool, waiter, Some("await_parse"), "the labelled waiter");
        assert!(matches!(thread(&d, waiter), Some((ThreadState::Waiting { .. }, _))), "{d}");
        assert_eq!(thread(&d, plain), Some((ThreadState::Running, None)), "an unlabelled task shows none:\n{d}");
        let text = d.to_string();
        assert!(text.contains("running \"parse_request\""), "{text}");
        assert!(text.contains(", inside \"await_parse\""), "{text}");
        assert!(text.contains("running a task"), "the unlabelled one: {text}");
        gate.open();
        // Between tasks nothing is shown, whatever ran last.
        eventually(LIMIT, "every thread idle, unlabelled", || {
            let d = pool.dump();
            d.threads.len() == 3
                && d.threads.iter().all(|t| matches!(t.state, ThreadState::Parked | ThreadState::Spinning))
                && d.threads.iter().all(|t| t.label.is_none())
        });
    });
}

/// Every submission kind that takes `SpawnOptions` carries the label: spawn
/// and submit with a group, a serial queue, a lane (with and without a
/// handle), a batch, a priority, a deadline, and a completion queue; the
/// label made from the caller's location shows as "file:line".
#[test]
fn every_submission_kind_carries_the_label() {
    watchdog(LIMIT, "labels through every submission kind", || {
        let pool = fixed(1);
        let group = pool.group();
        let serial = pool.serial();
        let lane = pool.lane(2);
        let caller = Label::caller();
        assert!(caller.as_str().starts_with("core/tests/labels.rs:"), "{}", caller.as_str());
        let far = Instant::now() + Duration::from_secs(3600);
        type Submit<'a> = Box<dyn FnOnce(SpawnOptions<'_>, Box<dyn FnOnce() + Send>) + 'a>;
        let kinds: Vec<(&str, SpawnOptions<'_>, Submit<'_>)> = vec![
            ("spawn", SpawnOptions::default(), Box::new(|o, f| pool.spawn_with(o, f).unwrap())),
            ("submit", SpawnOptions::default(), Box::new(|o, f| drop(pool.submit_with(o, f).unwrap()))),
            (
                "group spawn",
                SpawnOptions { group: Some(&group), ..Default::default() },
                Box::new(|o, f| pool.spawn_with(o, f).unwrap()),
            ),
            (
                "group submit",
                SpawnOptions { group: Some(&group), ..Default::default() },
                Box::new(|o, f| drop(pool.submit_with(o, f).unwrap())),
            ),
            (
                "serial spawn",
                SpawnOptions { serial: Some(&serial), ..Default::default() },
                Box::new(|o, f| pool.spawn_with(o, f).unwrap()),
            ),
            (
                "serial submit",
                SpawnOptions { serial: Some(&serial), ..Default::default() },
                Box::new(|o, f| drop(pool.submit_with(o, f).unwrap())),
            ),
            (
                "lane spawn",
                SpawnOptions { serial: Some(&lane), ..Default::default() },
                Box::new(|o, f| pool.spawn_with(o, f).unwrap()),
            ),
            ("batch", SpawnOptions::default(), Box::new(|o, f| pool.spawn_batch_with(o, [f]).unwrap())),
            (
                "high priority",
                SpawnOptions { priority: Priority::High, ..Default::default() },
                Box::new(|o, f| pool.spawn_with(o, f).unwrap()),
            ),
            (
                "low priority submit",
                SpawnOptions { priority: Priority::Low, ..Default::default() },
                Box::new(|o, f| drop(pool.submit_with(o, f).unwrap())),
            ),
            (
                "deadline",
                SpawnOptions { deadline: Some(far), ..Default::default() },
                Box::new(|o, f| pool.spawn_with(o, f).unwrap()),
            ),
            (
                "deadline submit",
                SpawnOptions { deadline: Some(far), ..Default::default() },
                Box::new(|o, f| drop(pool.submit_with(o, f).unwrap())),
            ),
            ("caller", SpawnOptions::default(), Box::new(|o, f| pool.spawn_with(o, f).unwrap())),
        ];
        for (name, opts, submit) in kinds {
            let label = if name == "caller" { caller } else { Label::intern(&format!("kind {name}")) };
            let gate = Arc::new(Gate::default());
            let _open = OpenOnDrop(gate.clone());
            let (started, (done_tx, done_rx)) = (Arc::new(AtomicUsize::new(0)), mpsc::channel());
            let (g, s) = (gate.clone(), started.clone());
            submit(
                SpawnOptions { label: Some(label), ..opts },
                Box::new(move || {
                    record(&s);
                    g.wait();
                    done_tx.send(()).unwrap();
                }),
            );
            let index = recorded(&started);
            until_labelled(&pool, index, Some(label.as_str()), name);
            gate.open();
            done_rx.recv().unwrap();
        }
        // A completion queue's submission goes through `spawn_with` too.
        let cq = wspool::CompletionQueue::<u32>::new(&pool, wspool::CqOptions::default()).unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let (g, s) = (gate.clone(), Arc::new(AtomicUsize::new(0)));
        let s2 = s.clone();
        let opts = SpawnOptions { label: Some(Label::new("cq work")), ..Default::default() };
        cq.submit_with(opts, 7, move |_| {
            record(&s2);
            g.wait();
        })
        .unwrap();
        let index = recorded(&s);
        until_labelled(&pool, index, Some("cq work"), "completion queue");
        gate.open();
    });
}

/// A refused labelled submission hands back the caller's own closure
/// (the label wraps it only once accepted).
#[test]
fn a_refused_labelled_submission_returns_the_callers_closure() {
    let pool = fixed(1);
    pool.shutdown(wspool::Shutdown::Drain, None).unwrap();
    let opts = SpawnOptions { label: Some(Label::new("refused")), ..SpawnOptions::default() };
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let err = pool
        .spawn_with(opts, move || {
            r.fetch_add(1, SeqCst);
        })
        .unwrap_err();
    (err.into_task())();
    let r = ran.clone();
    let serial = pool.serial();
    let err =
        pool.submit_with(SpawnOptions { serial: Some(&serial), ..opts }, move || r.fetch_add(1, SeqCst)).unwrap_err();
    (err.into_task())();
    assert_eq!(ran.load(SeqCst), 2);
}

/// A labelled task that panics puts the outer label back: nested inside a
/// labelled task (a waiter running it inline), the outer task shows its
/// own label again; at the top level (the worker catches the panic), the
/// next, unlabelled task on that thread shows none.
#[test]
fn a_panicking_labelled_task_restores_the_outer_label() {
    watchdog(LIMIT, "panicking labelled tasks", || {
        let pool = fixed(1);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let started = Arc::new(AtomicUsize::new(0));
        let (g, s, p) = (gate.clone(), started.clone(), pool.clone());
        let outer = SpawnOptions { label: Some(Label::new("outer")), ..SpawnOptions::default() };
        let done = pool
            .submit_with(outer, move || {
                let inner = SpawnOptions { label: Some(Label::new("inner panics")), ..SpawnOptions::default() };
                let h = p.submit_with(inner, || panic!("inner task panics")).unwrap();
                // The only worker is this one: the wait runs the task inline.
                assert!(matches!(h.wait(), Err(TaskError::Panicked(_))));
                record(&s);
                g.wait();
            })
            .unwrap();
        let index = recorded(&started);
        until_labelled(&pool, index, Some("outer"), "the outer task after its inner one panicked");
        gate.open();
        done.wait().unwrap();

        // Top level: the worker's own catch ends the labelled task.
        let top = SpawnOptions { label: Some(Label::new("top panics")), ..SpawnOptions::default() };
        pool.spawn_with(top, || panic!("top-level task panics")).unwrap();
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let started = Arc::new(AtomicUsize::new(0));
        let (g, s) = (gate.clone(), started.clone());
        pool.spawn(move || {
            record(&s);
            g.wait();
        })
        .unwrap();
        let index = recorded(&started);
        let d = until_labelled(&pool, index, None, "the unlabelled task after a labelled one panicked");
        assert_eq!(pool.stats().panicked, 2, "{d}");
    });
}

/// Nested labelled tasks on one thread: a labelled task waits on another
/// labelled task, which its wait runs (inline through a handle, or by
/// helping with its group's work). While the inner one is held its label
/// shows; once it returns, the outer label shows again.
#[test]
fn a_labelled_wait_running_a_labelled_task_shows_the_innermost() {
    for through_group in [false, true] {
        watchdog(LIMIT, "nested labelled tasks", move || {
            let pool = fixed(1);
            let (inner_gate, outer_gate) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
            let (_o1, _o2) = (OpenOnDrop(inner_gate.clone()), OpenOnDrop(outer_gate.clone()));
            let (inner_started, outer_resumed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let (ig, og, is, or, p) =
                (inner_gate.clone(), outer_gate.clone(), inner_started.clone(), outer_resumed.clone(), pool.clone());
            let outer = SpawnOptions { label: Some(Label::new("outer waits")), ..SpawnOptions::default() };
            let done = pool
                .submit_with(outer, move || {
                    let inner = move || {
                        record(&is);
                        ig.wait();
                    };
                    let label = Some(Label::new("inner helped"));
                    if through_group {
                        let group = p.group();
                        p.spawn_with(SpawnOptions { group: Some(&group), label, ..SpawnOptions::default() }, inner)
                            .unwrap();
                        group.wait().unwrap();
                    } else {
                        p.submit_with(SpawnOptions { label, ..SpawnOptions::default() }, inner)
                            .unwrap()
                            .wait()
                            .unwrap();
                    }
                    record(&or);
                    og.wait();
                })
                .unwrap();
            let index = recorded(&inner_started);
            until_labelled(&pool, index, Some("inner helped"), "the inner task run by the wait");
            inner_gate.open();
            let resumed = recorded(&outer_resumed);
            assert_eq!(resumed, index, "one thread");
            until_labelled(&pool, index, Some("outer waits"), "the outer task after its wait");
            outer_gate.open();
            done.wait().unwrap();
        });
    }
}

/// `with_label` labels a phase of a task's own work, nested inside the
/// task's label, and restores it after; off the pool it just runs.
#[test]
fn with_label_labels_a_phase_and_restores_the_task_label() {
    watchdog(LIMIT, "with_label phases", || {
        assert_eq!(wspool::with_label(Label::new("off pool"), || 5), 5);
        let pool = fixed(1);
        let (phase_gate, after_gate) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
        let (_o1, _o2) = (OpenOnDrop(phase_gate.clone()), OpenOnDrop(after_gate.clone()));
        let (in_phase, after) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (pg, ag, ip, af) = (phase_gate.clone(), after_gate.clone(), in_phase.clone(), after.clone());
        let opts = SpawnOptions { label: Some(Label::new("request")), ..SpawnOptions::default() };
        pool.spawn_with(opts, move || {
            wspool::with_label(Label::new("request: decode"), || {
                record(&ip);
                pg.wait();
            });
            record(&af);
            ag.wait();
        })
        .unwrap();
        let index = recorded(&in_phase);
        until_labelled(&pool, index, Some("request: decode"), "the phase");
        phase_gate.open();
        recorded(&after);
        until_labelled(&pool, index, Some("request"), "the task after its phase");
    });
}
