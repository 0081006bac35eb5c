//! Diagnosis: what a pool is doing now ([`crate::Pool::dump`]), the stall
//! report that writes itself, and the monitor's recent decisions.
//!
//! Nothing here costs a task anything. A snapshot reads what the workers
//! already publish for the scheduler and the monitor (`WorkerCounters`:
//! `in_task`, the pop and completion counters, `stalled`) plus fields
//! written only on slow paths or by tasks that ask: `activity` (before and
//! after a spin, an idle park or a wait's park), `wait_note`/`wait_id` (by
//! a wait that did not succeed at once), `origin` (once per thread) and
//! `label` (around labelled tasks only). "Since when" is not a timestamp
//! per task: every snapshot (`Registry::dump_at`, which the monitor thread
//! also takes at each tick while work is queued) remembers, per worker,
//! the first time it saw the worker's task sequence (tasks taken plus
//! tasks completed) and state unchanged, and per queue the first time it
//! saw its head not move while it was not empty. A duration in a snapshot
//! is therefore a lower bound ("for at least"), exact to one observation
//! interval (the monitor's: `Builder::monitor_interval` on a pool that
//! grows, at least 50 ms on one that only watches). Every pool has one.
//!
//! A snapshot is a sample, not a transaction: the workers keep running
//! while it is taken (no lock they take per task is held; the lanes' own
//! locks and the priority levels' lock, which only prioritized tasks take,
//! are taken one at a time, briefly, to read their lengths), so two
//! fields of one snapshot may come from slightly different instants, and
//! a task may have finished by the time the snapshot is read.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::registry::Registry;
use crate::stats::WorkerCounters;
use crate::sync::lock;

/// `WorkerCounters::activity`: between tasks, looking for work.
pub(crate) const SEARCHING: u8 = 0;
/// In a debounce spin.
pub(crate) const SPINNING: u8 = 1;
/// Parked in the sleep system, idle.
pub(crate) const PARKED: u8 = 2;

/// `WorkerCounters::origin`: started at build, for blocking or by policy.
pub(crate) const ORIGIN_STARTED: u8 = 0;
/// Added by the starvation monitor.
pub(crate) const ORIGIN_INJECTED: u8 = 1;
/// Lent by the compensation: started to stand in for threads blocked in
/// declared regions or parked in waits.
pub(crate) const ORIGIN_LENT: u8 = 2;

/// What a wait waits on (`WaitNote` kinds).
pub(crate) const WAIT_TASK: u64 = 1;
pub(crate) const WAIT_GROUP: u64 = 2;
pub(crate) const WAIT_OTHER: u64 = 3;

/// Monitor decisions kept for snapshots.
const DECISIONS_KEPT: usize = 16;
/// Default time queued work must stand still (every thread occupied)
/// before a stall is reported.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(1);

/// A packed `wait_note` for a task run by the thread whose `Here` is at
/// `runner` (0: not running): kind in the low byte, the address above it
/// (user-space addresses fit in 56 bits on every 64-bit target we build).
pub(crate) fn task_note(runner: usize) -> u64 {
    WAIT_TASK | ((runner as u64) << 8)
}

/// Marks a worker's slot with what its wait waits on, and puts the outer
/// mark back when dropped (waits nest: a helping wait runs a task that waits).
pub(crate) struct WaitMark<'a> {
    counters: &'a WorkerCounters,
    outer: (u64, usize),
}

impl<'a> WaitMark<'a> {
    #[inline]
    pub(crate) fn set(counters: &'a WorkerCounters, (note, id): (u64, usize)) -> WaitMark<'a> {
        let outer = (counters.wait_note.swap(note, Relaxed), counters.wait_id.swap(id, Relaxed));
        WaitMark { counters, outer }
    }
}

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        self.counters.wait_note.store(self.outer.0, Relaxed);
        self.counters.wait_id.store(self.outer.1, Relaxed);
    }
}

/// A snapshot of a pool ([`crate::Pool::dump`]). `Display` prints the
/// human report (`docs/diagnosis.md` shows how to read it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PoolDump {
    /// The pool's name (thread-name prefix).
    pub name: String,
    /// Live worker threads.
    pub live_threads: usize,
    /// Configured lower bound of threads.
    pub min_threads: usize,
    /// Configured upper bound of threads.
    pub max_threads: usize,
    /// Tasks waiting to start, all queues.
    pub queued: usize,
    /// Stall episodes reported so far (`Stats::stalls`).
    pub stalls: u64,
    /// One record per occupied worker slot.
    pub threads: Vec<ThreadDump>,
    /// The global queue first, then the priority levels (`priority high`,
    /// `priority low`, once priorities were used), then every live lane
    /// and serial queue.
    pub queues: Vec<QueueDump>,
    /// The monitor's recent decisions, oldest first.
    pub decisions: Vec<MonitorDecision>,
}

/// One pool thread in a [`PoolDump`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadDump {
    /// Worker index (`wspool::current_index()` on that thread).
    pub index: usize,
    /// The kernel thread id (Linux), 0 where unknown.
    pub os_tid: u64,
    /// What it is doing.
    pub state: ThreadState,
    /// How long the thread has been in this state, at least (the first
    /// observation of it; `None`: seen in it for the first time now).
    pub for_at_least: Option<Duration>,
    /// Added by the starvation monitor.
    pub injected: bool,
    /// Lent by the compensation: started to stand in for a thread blocked
    /// in a declared region or parked in a wait (it retires when no longer
    /// needed: at once under `Compensate`, after `keep_alive` otherwise).
    pub lent: bool,
    /// Waiting, parked, with nothing of its wait's region to run: counted
    /// by the compensation, which lends a thread when no thread at all is
    /// left to run queued work.
    pub parked_in_wait: bool,
    /// Jobs in its own deque (work its tasks spawned).
    pub deque_len: usize,
    /// Global work it took in a batch and has not started.
    pub inbox_len: usize,
    /// Tasks it took so far (a sequence number: unchanged between two
    /// snapshots while it runs the same task).
    pub tasks_taken: u64,
    /// The label of the innermost labelled task the thread is running,
    /// blocking or waiting inside ([`SpawnOptions::label`](crate::SpawnOptions::label),
    /// [`with_label`](crate::with_label)); `None` for an unlabelled task
    /// and between tasks.
    pub label: Option<&'static str>,
}

/// What a pool thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadState {
    /// Running a task.
    Running,
    /// Running a task inside a declared blocking region
    /// ([`crate::blocking`]): the pool lent a thread for it.
    Blocking,
    /// Waiting on a task, a group or another wait (join, scope), helping
    /// with its own work meanwhile or parked.
    Waiting {
        /// The kind of thing awaited.
        on: WaitTarget,
        /// The address of what it waits on: equal ids are the same object.
        id: usize,
        /// The worker running the awaited task, when known.
        holder: Option<usize>,
    },
    /// Between tasks, looking for work.
    Searching,
    /// Idle, in a debounce spin.
    Spinning,
    /// Idle, parked.
    Parked,
}

/// What a waiting thread waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitTarget {
    /// A task handle.
    Task,
    /// A group (heap, placed or scoped).
    Group,
    /// A `join`'s other half or a scope's tasks.
    Other,
}

/// One queue in a [`PoolDump`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueDump {
    /// `global`, `priority high`, `priority low`, or `lane 0x…/N` (N: its
    /// limit; a serial queue is 1).
    pub name: String,
    /// Tasks queued.
    pub len: usize,
    /// Tasks of the lane running now (0 for the global queue).
    pub running: usize,
    /// How long its oldest task has waited, at least: the queue's head has
    /// not moved for that long while it was not empty. `None` when empty
    /// or seen moving (or not empty) for the first time now.
    pub oldest_at_least: Option<Duration>,
    /// Global queue only: global work workers took in a batch and have not
    /// started (older than `len`'s; not counted in it).
    pub in_inboxes: usize,
}

/// A decision of the starvation monitor, with its reason.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MonitorDecision {
    /// How long before the snapshot it was taken.
    pub ago: Duration,
    /// Live threads when it was taken.
    pub threads: usize,
    /// What it did.
    pub action: MonitorAction,
    /// Why.
    pub reason: MonitorReason,
}

/// What the monitor did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MonitorAction {
    /// Added this many threads.
    Added(usize),
    /// Asked this many threads to retire.
    Retired(usize),
}

/// Why.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum MonitorReason {
    /// Queued work stopped moving (no completion) for this long.
    Stalled {
        /// How long nothing completed.
        for_: Duration,
        /// Tasks queued then.
        queued: usize,
    },
    /// Every worker in a task was blocked (its CPU clock stood still).
    AllBlocked {
        /// Tasks queued then.
        queued: usize,
    },
    /// A throughput probe starts (completions per second before).
    ProbeStarted {
        /// Completions per second before the probe.
        before_per_s: f64,
    },
    /// A probe raised throughput enough: its threads are added back for good.
    ProbeKept {
        /// Completions per second without the probe's threads.
        before_per_s: f64,
        /// With them.
        after_per_s: f64,
    },
    /// A probe did not pay: its threads (and unproven stall threads) go.
    ProbeRolledBack {
        /// Completions per second without the probe's threads.
        before_per_s: f64,
        /// With them.
        after_per_s: f64,
    },
    /// A probe's threads are taken back to measure without them.
    ProbeMeasuringWithout {
        /// Completions per second with the probe's threads.
        with_per_s: f64,
    },
    /// A thread above `min_threads` was idle past keep-alive.
    IdleRetired {
        /// Its keep-alive.
        idle: Duration,
    },
}

/// A decision as recorded, with its time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision {
    pub(crate) at: Instant,
    pub(crate) threads: usize,
    pub(crate) action: MonitorAction,
    pub(crate) reason: MonitorReason,
}

/// A stall report callback.
pub(crate) type StallHandler = Arc<dyn Fn(&PoolDump) + Send + Sync>;

/// The registry's diagnosis state. Everything behind a lock is touched only
/// by snapshots, the monitor thread, lane creation and idle retirement.
pub(crate) struct Diagnostics {
    observed: Mutex<Observed>,
    decisions: Mutex<VecDeque<Decision>>,
    stall: Mutex<StallWatch>,
    /// Stall episodes reported (`Stats::stalls`).
    pub(crate) stalls: AtomicU64,
    /// Lanes and serial queues alive (`Weak`: a dropped queue whose tasks
    /// are done disappears from snapshots).
    lanes: Mutex<Vec<Weak<dyn LaneProbe>>>,
    /// Number of `lanes` entries at the last purge of dead ones.
    lanes_purged: AtomicUsize,
}

/// What a snapshot reads of a lane.
pub(crate) trait LaneProbe: Send + Sync {
    /// (queued, running, limit, tasks started so far)
    fn probe(&self) -> (usize, usize, usize, u64);
}

#[derive(Default)]
struct Observed {
    /// Per worker slot: (sequence, state code, first seen).
    workers: Vec<Option<(u64, u64, Instant)>>,
    /// Per queue (0: global; else a lane's address): (head mark, first seen
    /// not empty with that head).
    queues: HashMap<usize, (u64, Instant)>,
}

struct StallWatch {
    handler: Option<StallHandler>,
    after: Duration,
    /// `WSPOOL_STALL_REPORT` set (to anything but `0` or empty).
    to_stderr: bool,
    /// (progress mark, first seen) while every thread is occupied and work
    /// is queued; `None` otherwise.
    still_since: Option<(u64, Instant)>,
    /// This episode was reported.
    reported: bool,
}

impl Default for Diagnostics {
    fn default() -> Self {
        let to_stderr = std::env::var_os("WSPOOL_STALL_REPORT").is_some_and(|v| !v.is_empty() && v != "0");
        Diagnostics {
            observed: Mutex::default(),
            decisions: Mutex::new(VecDeque::with_capacity(DECISIONS_KEPT)),
            stall: Mutex::new(StallWatch {
                handler: None,
                after: DEFAULT_STALL_AFTER,
                to_stderr,
                still_since: None,
                reported: false,
            }),
            stalls: AtomicU64::new(0),
            lanes: Mutex::new(Vec::new()),
            lanes_purged: AtomicUsize::new(0),
        }
    }
}

/// A worker's task sequence: tasks taken plus tasks completed (moves at
/// every task start and end, never per nested help only).
fn sequence(c: &WorkerCounters) -> u64 {
    c.local_pops.load(Relaxed) + c.global_pops.load(Relaxed) + c.steals.load(Relaxed) + c.completed.load(Relaxed)
}

/// A worker's state from what it publishes, and a code that changes with it.
fn state_of(c: &WorkerCounters, holder_of: impl Fn(u64) -> Option<usize>) -> (ThreadState, u64) {
    let in_task = c.in_task.load(Relaxed);
    let note = c.wait_note.load(Relaxed);
    let id = c.wait_id.load(Relaxed);
    let state = match in_task {
        crate::growth::IN_TASK => ThreadState::Running,
        crate::growth::DECLARED => ThreadState::Blocking,
        _ if note != 0 => {
            let on = match note & 0xff {
                WAIT_TASK => WaitTarget::Task,
                WAIT_GROUP => WaitTarget::Group,
                _ => WaitTarget::Other,
            };
            ThreadState::Waiting { on, id, holder: holder_of(note >> 8) }
        }
        _ => match c.activity.load(Relaxed) {
            SPINNING => ThreadState::Spinning,
            PARKED => ThreadState::Parked,
            _ => ThreadState::Searching,
        },
    };
    let code = match state {
        ThreadState::Running => 1,
        ThreadState::Blocking => 2,
        ThreadState::Waiting { .. } => 3 ^ (note << 8) ^ (id as u64).rotate_left(17),
        ThreadState::Searching => 4,
        ThreadState::Spinning => 5,
        ThreadState::Parked => 6,
    };
    (state, code)
}

impl Diagnostics {
    /// Registers a lane for snapshots (at its creation).
    pub(crate) fn add_lane(&self, lane: Weak<dyn LaneProbe>) {
        let mut lanes = lock(&self.lanes);
        // Dead entries are purged whenever the list doubled since the last
        // purge: creating lanes in a loop stays linear.
        if lanes.len() >= 2 * self.lanes_purged.load(Relaxed).max(8) {
            lanes.retain(|l| l.strong_count() > 0);
            self.lanes_purged.store(lanes.len(), Relaxed);
        }
        lanes.push(lane);
    }

    /// Records a monitor decision (only when the monitor decides).
    pub(crate) fn record(&self, d: Decision) {
        let mut ring = lock(&self.decisions);
        if ring.len() == DECISIONS_KEPT {
            ring.pop_front();
        }
        ring.push_back(d);
    }

    /// Sets the stall report's callback (None: stderr if opted in, else
    /// nothing) and threshold.
    pub(crate) fn set_stall_handler(&self, after: Duration, handler: Option<StallHandler>) {
        let mut st = lock(&self.stall);
        st.after = after;
        st.handler = handler;
    }
}

impl Registry {
    /// A snapshot: see the module comment.
    pub(crate) fn dump(self: &Arc<Self>) -> PoolDump {
        self.dump_at(Instant::now())
    }

    pub(crate) fn dump_at(self: &Arc<Self>, now: Instant) -> PoolDump {
        let n = self.high_water.load(std::sync::atomic::Ordering::Acquire);
        let heres: Vec<usize> = self.slots[..n].iter().map(|s| s.counters.here_addr.load(Relaxed)).collect();
        let holder_of = |h: u64| (h != 0).then(|| heres.iter().position(|&a| a as u64 == h)).flatten();
        let mut threads = Vec::new();
        let mut queues = Vec::new();
        {
            let mut obs = lock(&self.diag.observed);
            if obs.workers.len() < self.slots.len() {
                obs.workers.resize(self.slots.len(), None);
            }
            for (index, slot) in self.slots[..n].iter().enumerate() {
                if !slot.occupied.load(Relaxed) {
                    obs.workers[index] = None;
                    continue;
                }
                let c = &slot.counters;
                let seq = sequence(c);
                let (state, code) = state_of(c, holder_of);
                let since = match obs.workers[index] {
                    Some((s, k, t)) if s == seq && k == code => t,
                    _ => {
                        obs.workers[index] = Some((seq, code, now));
                        now
                    }
                };
                let for_at_least = (since < now).then(|| now - since);
                threads.push(ThreadDump {
                    index,
                    os_tid: c.tid.load(Relaxed),
                    state,
                    for_at_least,
                    injected: c.origin.load(Relaxed) == ORIGIN_INJECTED,
                    lent: c.origin.load(Relaxed) == ORIGIN_LENT,
                    parked_in_wait: matches!(state, ThreadState::Waiting { .. }) && c.activity.load(Relaxed) == PARKED,
                    deque_len: slot.stealer.len(),
                    inbox_len: slot.inbox.len(),
                    tasks_taken: c.local_pops.load(Relaxed) + c.global_pops.load(Relaxed) + c.steals.load(Relaxed),
                    label: crate::label::shown(c, state),
                });
            }
            // The global queue's progress is global work started (its
            // head also moves when a stuck waiter looks through it and puts
            // jobs back, which is no progress).
            let started: u64 = self.slots[..n].iter().map(|s| s.counters.global_pops.load(Relaxed)).sum();
            // The priority levels, once priorities were used. Their keys
            // (1, 2) are no address. A Low task is listed under its level
            // also while it waits at its place in the global queue.
            let levels = self.prio.probe();
            let low_at_place = levels.as_ref().map_or(0, |l| l.2);
            let global_len = self.injector.len().saturating_sub(low_at_place);
            let oldest = observe_queue(&mut obs.queues, 0, started, global_len, now);
            let in_inboxes = self.slots[..n].iter().map(|s| s.inbox.len()).sum();
            queues.push(QueueDump {
                name: "global".into(),
                len: global_len,
                running: 0,
                oldest_at_least: oldest,
                in_inboxes,
            });
            let mut live = vec![0usize];
            if let Some((high, low, _)) = levels {
                for (key, name, level) in [(1usize, "priority high", high), (2, "priority low", low)] {
                    let oldest = observe_queue(&mut obs.queues, key, level.taken, level.len, now);
                    live.push(key);
                    queues.push(QueueDump {
                        name: name.into(),
                        len: level.len,
                        running: 0,
                        in_inboxes: 0,
                        oldest_at_least: oldest,
                    });
                }
            }
            let lanes: Vec<Arc<dyn LaneProbe>> = lock(&self.diag.lanes).iter().filter_map(Weak::upgrade).collect();
            live.reserve(lanes.len());
            for lane in &lanes {
                let key = Arc::as_ptr(lane) as *const () as usize;
                let (len, running, limit, started) = lane.probe();
                let oldest = observe_queue(&mut obs.queues, key, started, len, now);
                live.push(key);
                queues.push(QueueDump {
                    name: format!("lane {key:#x}/{limit}"),
                    len,
                    running,
                    in_inboxes: 0,
                    oldest_at_least: oldest,
                });
            }
            obs.queues.retain(|k, _| live.contains(k));
        }
        let decisions = lock(&self.diag.decisions)
            .iter()
            .map(|d| MonitorDecision {
                ago: now.saturating_duration_since(d.at),
                threads: d.threads,
                action: d.action,
                reason: d.reason,
            })
            .collect();
        PoolDump {
            name: self.config.name.clone(),
            live_threads: self.live_threads(),
            min_threads: self.config.min_threads,
            max_threads: self.config.max_threads,
            queued: self.queued_now(),
            stalls: self.diag.stalls.load(Relaxed),
            threads,
            queues,
            decisions,
        }
    }

    /// The monitor thread's look for a stall (every tick, whatever the
    /// growth policy): work queued, no thread idle (parked idle, searching
    /// or spinning), and no task taken or finished for `after`. Reported
    /// once per episode; an episode ends when work moves or the queues empty.
    pub(crate) fn watch_stall(self: &Arc<Self>, now: Instant) {
        let n = self.high_water.load(std::sync::atomic::Ordering::Acquire);
        // Progress is a task taken or finished by a worker (not the
        // global queue's head: stuck waiters look through it and put jobs back).
        let mark: u64 = self.slots[..n].iter().map(|s| sequence(&s.counters)).sum();
        let (searching, sleeping) = self.sleep.counts();
        let spinning = self.sleep.spinners();
        let occupied = searching + sleeping + spinning == 0 && self.starting.load(Relaxed) == 0;
        let queued = self.queued_now() > 0;
        let stuck = occupied && queued;
        if queued {
            // Durations in snapshots come from these observations (one per
            // tick while work is queued; nothing when the pool keeps up).
            drop(self.dump_at(now));
        }
        let report = {
            let mut st = lock(&self.diag.stall);
            match st.still_since {
                Some((m, _)) if stuck && m == mark => {}
                _ if stuck => {
                    st.still_since = Some((mark, now));
                    st.reported = false;
                }
                _ => {
                    st.still_since = None;
                    st.reported = false;
                }
            }
            match st.still_since {
                Some((_, since)) if !st.reported && now.saturating_duration_since(since) >= st.after => {
                    st.reported = true;
                    Some((st.handler.clone(), st.to_stderr))
                }
                _ => None,
            }
        };
        let Some((handler, to_stderr)) = report else { return };
        self.diag.stalls.fetch_add(1, Relaxed);
        if handler.is_none() && !to_stderr {
            return;
        }
        let dump = self.dump_at(now);
        match handler {
            Some(h) => {
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&dump))) {
                    crate::registry::drop_payload(p);
                }
            }
            None => eprintln!("wspool: stall: queued work has not moved while every thread is occupied\n{dump}"),
        }
    }
}

impl Registry {
    /// Keeps a decision of the monitor (or of an idle worker's retirement)
    /// for snapshots.
    pub(crate) fn record_decision(&self, action: MonitorAction, reason: MonitorReason) {
        self.diag.record(Decision { at: Instant::now(), threads: self.live_threads(), action, reason });
    }
}

/// The oldest task's age bound for one queue: its head `mark` unchanged
/// while `len > 0` since the recorded instant.
fn observe_queue(
    seen: &mut HashMap<usize, (u64, Instant)>,
    key: usize,
    mark: u64,
    len: usize,
    now: Instant,
) -> Option<Duration> {
    if len == 0 {
        seen.remove(&key);
        return None;
    }
    let entry = seen.entry(key).or_insert((mark, now));
    if entry.0 != mark {
        *entry = (mark, now);
    }
    (entry.1 < now).then(|| now - entry.1)
}

impl fmt::Display for PoolDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pool {:?}: {} threads (min {}, max {}), {} queued, {} stall episodes",
            self.name, self.live_threads, self.min_threads, self.max_threads, self.queued, self.stalls
        )?;
        writeln!(f, "threads:")?;
        for t in &self.threads {
            write!(f, "  #{:<3} tid {:<8} {}", t.index, t.os_tid, crate::label::Labelled(t.state, t.label))?;
            if let Some(d) = t.for_at_least {
                write!(f, " for >= {}", Ms(d))?;
            }
            write!(f, " (tasks taken {}", t.tasks_taken)?;
            if t.deque_len + t.inbox_len > 0 {
                write!(f, ", deque {}, inbox {}", t.deque_len, t.inbox_len)?;
            }
            if t.parked_in_wait {
                write!(f, ", parked: counted for lending")?;
            }
            if t.injected {
                write!(f, ", added by the monitor")?;
            }
            if t.lent {
                write!(f, ", lent for a blocked or waiting thread")?;
            }
            writeln!(f, ")")?;
        }
        writeln!(f, "queues:")?;
        for q in &self.queues {
            write!(f, "  {}: {} queued", q.name, q.len)?;
            if q.running > 0 {
                write!(f, ", {} running", q.running)?;
            }
            if q.in_inboxes > 0 {
                write!(f, ", {} more in workers' inboxes", q.in_inboxes)?;
            }
            if let Some(d) = q.oldest_at_least {
                write!(f, ", oldest waiting >= {}", Ms(d))?;
            }
            writeln!(f)?;
        }
        if self.decisions.is_empty() {
            writeln!(f, "monitor decisions: none")?;
        } else {
            writeln!(f, "monitor decisions (oldest first):")?;
            for d in &self.decisions {
                writeln!(f, "  {} ago, at {} threads: {}, {}", Ms(d.ago), d.threads, d.action, d.reason)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for ThreadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadState::Running => f.write_str("running a task"),
            ThreadState::Blocking => f.write_str("in a declared blocking region"),
            ThreadState::Waiting { on, id, holder } => {
                let what = match on {
                    WaitTarget::Task => "task",
                    WaitTarget::Group => "group",
                    WaitTarget::Other => "join/scope",
                };
                write!(f, "waiting on {what} {id:#x}")?;
                if let Some(h) = holder {
                    write!(f, " (run by #{h})")?;
                }
                Ok(())
            }
            ThreadState::Searching => f.write_str("looking for work"),
            ThreadState::Spinning => f.write_str("idle, spinning"),
            ThreadState::Parked => f.write_str("idle, parked"),
        }
    }
}

impl fmt::Display for MonitorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MonitorAction::Added(n) => write!(f, "added {n} thread{}", if *n == 1 { "" } else { "s" }),
            MonitorAction::Retired(n) => write!(f, "retired {n} thread{}", if *n == 1 { "" } else { "s" }),
        }
    }
}

impl fmt::Display for MonitorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MonitorReason::Stalled { for_, queued } => {
                write!(f, "queued work stopped moving for {} with {queued} queued", Ms(*for_))
            }
            MonitorReason::AllBlocked { queued } => {
                write!(f, "every worker in a task was blocked (CPU clock still) with {queued} queued")
            }
            MonitorReason::ProbeStarted { before_per_s } => {
                write!(f, "probe: does a thread more raise {before_per_s:.1} tasks/s?")
            }
            MonitorReason::ProbeMeasuringWithout { with_per_s } => {
                write!(f, "probe: {with_per_s:.1} tasks/s with them; measuring without")
            }
            MonitorReason::ProbeKept { before_per_s, after_per_s } => {
                write!(f, "probe kept: {before_per_s:.1} -> {after_per_s:.1} tasks/s")
            }
            MonitorReason::ProbeRolledBack { before_per_s, after_per_s } => {
                write!(f, "probe rolled back: {before_per_s:.1} -> {after_per_s:.1} tasks/s")
            }
            MonitorReason::IdleRetired { idle } => write!(f, "idle for {}", Ms(*idle)),
        }
    }
}

/// A duration in milliseconds, as the report prints it.
struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::{Duration, Instant};

    use crate::{Growth, Pool};

    /// A `Fixed` pool of `threads` without its monitor thread: the test is
    /// the only caller of `watch_stall`, on its own clock.
    fn unwatched_fixed_pool(threads: usize) -> Pool {
        Pool::builder()
            .min_threads(threads)
            .max_threads(threads)
            .growth(Growth::Fixed)
            .without_monitor_thread()
            .build()
            .unwrap()
    }

    /// A stalled pool, the sender of its tokens, its stall reports' count and their texts.
    type Stalled = (Pool, mpsc::Sender<()>, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>);

    /// A 1-thread [`unwatched_fixed_pool`] whose stall reports are counted,
    /// with `queued` tasks behind one that waits for tokens. Each task takes
    /// a token when it starts.
    fn stalled_pool(queued: usize) -> Stalled {
        let pool = unwatched_fixed_pool(1);
        let reports = Arc::new(AtomicUsize::new(0));
        let texts = Arc::new(Mutex::new(Vec::new()));
        let (r, t) = (reports.clone(), texts.clone());
        pool.registry().diag.set_stall_handler(
            Duration::from_secs(1),
            Some(Arc::new(move |d: &crate::PoolDump| {
                r.fetch_add(1, SeqCst);
                t.lock().unwrap().push(d.to_string());
            })),
        );
        let (tx, rx) = mpsc::channel::<()>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..=queued {
            let rx = rx.clone();
            pool.spawn(move || rx.lock().unwrap().recv().unwrap()).unwrap();
        }
        // The first task has started (the queue holds the rest) and waits.
        let start = Instant::now();
        while pool.registry().queued_now() != queued {
            assert!(start.elapsed() < Duration::from_secs(60), "the first task never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        (pool, tx, reports, texts)
    }

    fn completed_after(pool: &Pool, done: u64) {
        let start = Instant::now();
        while pool.stats().completed < done {
            assert!(start.elapsed() < Duration::from_secs(60), "a released task never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One report per episode: none before the threshold, one at it, none
    /// again while the episode lasts, and a new one only after work moved
    /// and then stood still for the threshold again. Counted in stats.
    #[test]
    fn a_stall_is_reported_once_per_episode() {
        let (pool, tx, reports, texts) = stalled_pool(3);
        let registry = pool.registry();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        registry.watch_stall(at(0));
        registry.watch_stall(at(999));
        assert_eq!(reports.load(SeqCst), 0, "before the threshold");
        registry.watch_stall(at(1000));
        assert_eq!(reports.load(SeqCst), 1);
        for ms in [1500, 3000, 10_000] {
            registry.watch_stall(at(ms));
        }
        assert_eq!(reports.load(SeqCst), 1, "the same episode is reported once");
        assert_eq!(pool.stats().stalls, 1);
        let text = texts.lock().unwrap()[0].clone();
        assert!(text.contains("3 queued") && text.contains("running a task"), "{text}");
        // Work moves: the episode ends; a new stall is a new episode.
        tx.send(()).unwrap();
        completed_after(&pool, 1);
        registry.watch_stall(at(10_500));
        registry.watch_stall(at(11_000));
        assert_eq!(reports.load(SeqCst), 1, "moved half a second ago");
        registry.watch_stall(at(11_500));
        assert_eq!(reports.load(SeqCst), 2);
        assert_eq!(pool.stats().stalls, 2);
        // One token per task still waiting (3 of the 4); a fourth found the
        // receiver gone whenever the last task finished before it was sent.
        for _ in 0..3 {
            tx.send(()).unwrap();
        }
    }

    /// A long backlog that keeps moving is not a stall, however long it
    /// lasts: one task finishes every 900 ms (simulated) for 9 s.
    #[test]
    fn a_long_but_progressing_backlog_is_not_reported() {
        let (pool, tx, reports, _) = stalled_pool(10);
        let registry = pool.registry();
        let t0 = Instant::now();
        for i in 0..10u64 {
            registry.watch_stall(t0 + Duration::from_millis(900 * i));
            tx.send(()).unwrap();
            completed_after(&pool, i + 1);
        }
        registry.watch_stall(t0 + Duration::from_millis(9000));
        assert_eq!(reports.load(SeqCst), 0);
        assert_eq!(pool.stats().stalls, 0);
        tx.send(()).unwrap();
    }

    /// Nothing queued and a thread idle: no stall, whatever the clock says.
    #[test]
    fn a_pool_with_an_idle_thread_is_not_stalled() {
        let pool = unwatched_fixed_pool(2);
        let reports = Arc::new(AtomicUsize::new(0));
        let r = reports.clone();
        pool.registry().diag.set_stall_handler(
            Duration::from_secs(1),
            Some(Arc::new(move |_: &crate::PoolDump| {
                r.fetch_add(1, SeqCst);
            })),
        );
        let t0 = Instant::now();
        for s in 0..5 {
            pool.registry().watch_stall(t0 + Duration::from_secs(s));
        }
        assert_eq!(reports.load(SeqCst), 0);
    }
}
