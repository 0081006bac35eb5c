//! Issue 38.2: after `fork()`, a pool created in the child works whatever
//! the parent's other threads were doing (DESIGN.md, "After fork()"). The
//! label table kept its names behind a process-wide mutex that every
//! snapshot took (`Pool::dump`, and the monitor's stall reports); a child
//! forked while a snapshot held it inherited it locked, and its first new
//! label hung. Here the parent's threads take snapshots without pause
//! while it forks; each child builds a pool, runs a task under a label the
//! process has never seen, takes a snapshot and exits 0. A child that hangs
//! is killed by its own alarm (the watchdog), which fails the test.
//!
//! Its own test binary: it forks, and the child must not share its process
//! with other tests' threads more than it has to.

#![cfg(all(unix, not(miri)))]

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier};

use wspool::{Growth, Label, Pool, SpawnOptions};

/// Forks per run. Before the fix, with 8 labelled threads and 3 threads
/// taking snapshots, about 1 child in 20 hung (see the CHANGELOG).
const FORKS: usize = 200;
/// The child's watchdog, in seconds: far longer than a child takes (a few
/// ms), and what turns a hang into a failure.
const CHILD_ALARM_S: u32 = 20;

/// The child's whole life; its exit status is the number of things that went
/// wrong. Nothing here prints or unwinds (a panic is caught and counted).
fn child(i: usize) -> i32 {
    // SAFETY: alarm only arms a timer; SIGALRM's default action ends the child.
    unsafe { libc::alarm(CHILD_ALARM_S) };
    let run = std::panic::catch_unwind(|| {
        let pool = Pool::builder().min_threads(2).build().expect("a pool in the child");
        let label = Label::intern(&format!("fork-child-{i}"));
        let opts = SpawnOptions { label: Some(label), ..SpawnOptions::default() };
        let task = pool.submit_with(opts, || 7).expect("accepted");
        let mut bad = i32::from(!matches!(task.wait(), Ok(7)));
        let dump = pool.dump();
        bad += i32::from(dump.threads.is_empty());
        bad += i32::from(label.as_str() != format!("fork-child-{i}"));
        bad += i32::from(pool.shutdown(wspool::Shutdown::Drain, None).is_err());
        bad
    });
    run.unwrap_or(100)
}

#[test]
fn a_child_forked_while_snapshots_are_taken_can_use_labels() {
    let threads = 8;
    let pool = Pool::builder().min_threads(threads).max_threads(threads).growth(Growth::Fixed).build().unwrap();
    // Every worker inside a labelled task, held: each snapshot looks up
    // `threads` labels.
    let held = Arc::new(Barrier::new(threads + 1));
    let release = Arc::new(Barrier::new(threads + 1));
    for _ in 0..threads {
        let (held, release) = (held.clone(), release.clone());
        let opts = SpawnOptions { label: Some(Label::new("parent-held")), ..SpawnOptions::default() };
        pool.spawn_with(opts, move || {
            held.wait();
            release.wait();
        })
        .unwrap();
    }
    held.wait();
    let stop = Arc::new(AtomicBool::new(false));
    let snapshotters: Vec<_> = (0..3)
        .map(|_| {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    drop(pool.dump());
                }
            })
        })
        .collect();

    let (mut hung, mut failed) = (Vec::new(), Vec::new());
    for i in 0..FORKS {
        // SAFETY: the child only runs `child` and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = child(i);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: waits for our own child.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
        if libc::WIFSIGNALED(status) {
            hung.push((i, libc::WTERMSIG(status)));
        } else if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            failed.push((i, status));
        }
    }
    stop.store(true, SeqCst);
    for s in snapshotters {
        s.join().unwrap();
    }
    release.wait();
    assert!(
        hung.is_empty() && failed.is_empty(),
        "of {FORKS} children, {} were killed by a signal (SIGALRM {}: the watchdog, a hang): {hung:?}; \
         {} exited with failures: {failed:?}",
        hung.len(),
        libc::SIGALRM,
        failed.len(),
    );
}
