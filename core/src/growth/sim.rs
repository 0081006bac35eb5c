//! A simulated pool and clock for the starvation monitor's tests: the
//! real `Watcher` (so the real `Controller`, `Progress` and `Sampler`)
//! ticks on a scripted pool, so what the monitor decides for a convoy, a
//! CPU flood or undeclared sleeps is checked the same way on any machine,
//! however loaded. The wall-clock figures of the same scenarios on real
//! threads are `make bench`'s (`bench/examples/monitor.rs`).
//!
//! The model, in simulated milliseconds: `cores` CPUs shared equally by
//! the pool's runnable threads and `load` other runnable processes; tasks
//! that compute, sleep without saying so, sleep in a declared region, or
//! compute holding the one lock they all share (FIFO). A thread's CPU
//! clock advances only while it computes, and the kernel reports it asleep
//! while it sleeps, waits for the lock, or is parked. A thread asked to
//! retire leaves between two tasks (never below `min`); one the monitor
//! starts runs `spawn_lag` later; a declared region lends replacements as
//! `Registry::compensate_blocked` does. Each monitor tick happens `wait()`
//! after the previous one, as the monitor thread's `pause` would.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::monitor::{Params, Watched, Watcher};
use super::sample::{DECLARED, IN_TASK, Signals};
use crate::dump::{MonitorAction, MonitorReason};

/// One task, in simulated ms.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Task {
    /// Computes for this much CPU time.
    Cpu(f64),
    /// Sleeps this long without telling the pool (`recv`, a foreign lock).
    Sleep(f64),
    /// Computes this much CPU time holding the lock every `Locked` task shares.
    Locked(f64),
    /// Sleeps this long inside `wspool::blocking`.
    Declared(f64),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Doing {
    Idle,
    /// CPU time left.
    Cpu(f64),
    /// Until when.
    Sleep(f64),
    /// CPU time it needs once it holds the lock.
    WaitLock(f64),
    HoldLock(f64),
    /// Until when.
    Declared(f64),
}

struct Thread {
    id: u64,
    slot: usize,
    cpu_ns: f64,
    doing: Doing,
    /// Simulated ms at which the thread starts running.
    starts_at: f64,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    occupied: bool,
    completed: u64,
    cpu_clock: u64,
    in_task: u64,
    tid: u64,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) peak: usize,
    /// Threads the monitor started.
    pub(crate) injected: usize,
    /// Threads a declared region lent.
    pub(crate) lent: usize,
    pub(crate) retired: usize,
    pub(crate) done: u64,
    /// Simulated ms when the queue was last seen empty with every task done
    /// (the run's end), or of the last step.
    pub(crate) end_ms: f64,
    /// Simulated ms of the monitor's first injection.
    pub(crate) first_injection_ms: Option<f64>,
    pub(crate) ticks: u64,
    /// The most CPU clocks, and thread states, a single tick read.
    pub(crate) clock_reads_per_tick: usize,
    pub(crate) state_reads_per_tick: usize,
}

struct State {
    t: f64,
    threads: Vec<Thread>,
    slots: Vec<Slot>,
    high_water: usize,
    queue: VecDeque<Task>,
    /// (simulated ms, task), in time order.
    arrivals: VecDeque<(f64, Task)>,
    lock_held: bool,
    lock_waiters: VecDeque<u64>,
    retire: usize,
    next_id: u64,
    out: Outcome,
}

/// A scripted pool (see the module comment).
pub(crate) struct Sim {
    p: Params,
    /// The machine's CPUs.
    pub(crate) cores: f64,
    /// Other runnable processes competing for them.
    pub(crate) load: f64,
    /// Simulated ms before a thread the monitor starts runs.
    pub(crate) spawn_lag: f64,
    t0: Instant,
    st: RefCell<State>,
    clock_reads: Cell<usize>,
    state_reads: Cell<usize>,
    /// What the monitor recorded for snapshots: (simulated ms, action, reason).
    pub(crate) decisions: RefCell<Vec<(f64, MonitorAction, MonitorReason)>>,
}

/// Simulated time step, in ms.
const STEP: f64 = 0.05;

impl Sim {
    /// A pool of `p.min` threads on a 2-core machine nobody else uses.
    pub(crate) fn new(p: Params) -> Sim {
        let st = State {
            t: 0.0,
            threads: Vec::new(),
            slots: vec![Slot::default(); p.max],
            high_water: 0,
            queue: VecDeque::new(),
            arrivals: VecDeque::new(),
            lock_held: false,
            lock_waiters: VecDeque::new(),
            retire: 0,
            next_id: 1,
            out: Outcome::default(),
        };
        let sim = Sim {
            p,
            cores: 2.0,
            load: 0.0,
            spawn_lag: 0.2,
            t0: Instant::now(),
            st: RefCell::new(st),
            clock_reads: Cell::new(0),
            state_reads: Cell::new(0),
            decisions: RefCell::new(Vec::new()),
        };
        for slot in 0..p.min {
            sim.start_thread(slot, 0.0);
        }
        sim
    }

    /// The pool after a shrink: slots up to `high_water` were used, and
    /// the `p.min` survivors sit in `slots`.
    pub(crate) fn after_shrink(p: Params, high_water: usize, slots: &[usize]) -> Sim {
        let sim = Sim::new(Params { min: 0, ..p });
        let sim = Sim { p, ..sim };
        for &slot in slots {
            sim.start_thread(slot, 0.0);
        }
        sim.st.borrow_mut().high_water = high_water;
        sim
    }

    pub(crate) fn submit(&self, n: usize, task: Task) {
        let mut st = self.st.borrow_mut();
        st.queue.extend(std::iter::repeat_n(task, n));
    }

    /// `n` tasks arriving one every `every` ms from `from`.
    pub(crate) fn arrive(&self, n: usize, from: f64, every: f64, task: Task) {
        let mut st = self.st.borrow_mut();
        st.arrivals.extend((0..n).map(|i| (from + every * i as f64, task)));
    }

    fn start_thread(&self, slot: usize, starts_at: f64) {
        let mut st = self.st.borrow_mut();
        let id = st.next_id;
        st.next_id += 1;
        st.threads.push(Thread { id, slot, cpu_ns: 0.0, doing: Doing::Idle, starts_at });
        st.slots[slot].occupied = true;
        st.slots[slot].cpu_clock = 0;
        st.high_water = st.high_water.max(slot + 1);
        let n = st.threads.len();
        st.out.peak = st.out.peak.max(n);
    }

    /// Claims the lowest free slot, as `Registry::claim_slot` does.
    fn spawn(&self, lag: f64) -> bool {
        let (free, t) = {
            let st = self.st.borrow();
            if st.threads.len() >= self.p.max {
                return false;
            }
            (st.slots.iter().position(|s| !s.occupied), st.t)
        };
        let Some(slot) = free else { return false };
        self.start_thread(slot, t + lag);
        true
    }

    /// Runs until every task submitted or scheduled is done, or `limit_ms`.
    pub(crate) fn run(&self, limit_ms: f64) -> Outcome {
        let mut watcher = Watcher::new(self.p);
        let mut next_tick = self.p.interval.as_secs_f64() * 1e3;
        // The monitor sleeps until a submission while the pool is idle.
        let mut asleep_until_kick = false;
        loop {
            let (t, drained) = {
                let st = self.st.borrow();
                let busy = st.threads.iter().any(|th| th.doing != Doing::Idle);
                (st.t, st.queue.is_empty() && st.arrivals.is_empty() && !busy)
            };
            if drained || t >= limit_ms {
                let mut st = self.st.borrow_mut();
                st.out.end_ms = t;
                return st.out;
            }
            let arrived = self.step();
            if asleep_until_kick {
                if arrived {
                    asleep_until_kick = false;
                    next_tick = t + self.p.interval.as_secs_f64() * 1e3;
                }
                continue;
            }
            if t >= next_tick {
                let idle = {
                    let st = self.st.borrow();
                    st.queue.is_empty() && st.threads.iter().all(|th| th.doing == Doing::Idle)
                };
                if idle {
                    asleep_until_kick = true;
                    continue;
                }
                self.clock_reads.set(0);
                self.state_reads.set(0);
                watcher.tick(self, false);
                let mut st = self.st.borrow_mut();
                st.out.ticks += 1;
                st.out.clock_reads_per_tick = st.out.clock_reads_per_tick.max(self.clock_reads.get());
                st.out.state_reads_per_tick = st.out.state_reads_per_tick.max(self.state_reads.get());
                next_tick = t + watcher.wait().as_secs_f64() * 1e3;
            }
        }
    }

    /// One `STEP`; returns whether a task arrived.
    fn step(&self) -> bool {
        let mut lend = 0;
        let arrived;
        {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            let t = st.t;
            let before = st.queue.len();
            while st.arrivals.front().is_some_and(|&(at, _)| at <= t) {
                let (_, task) = st.arrivals.pop_front().unwrap_or((0.0, Task::Cpu(0.0)));
                st.queue.push_back(task);
            }
            arrived = st.queue.len() > before;
            // Between two tasks: retire if asked (never below min), else
            // take the next task.
            let mut i = 0;
            while i < st.threads.len() {
                let th = &st.threads[i];
                if th.doing != Doing::Idle || th.starts_at > t {
                    i += 1;
                    continue;
                }
                if st.slots[th.slot].cpu_clock == 0 {
                    // Started: its clock and id are published, as a worker does.
                    let (slot, id) = (th.slot, th.id);
                    st.slots[slot].cpu_clock = id;
                    st.slots[slot].tid = id;
                }
                if st.retire > 0 && st.threads.len() > self.p.min {
                    st.retire -= 1;
                    let th = st.threads.swap_remove(i);
                    st.slots[th.slot].occupied = false;
                    st.slots[th.slot].cpu_clock = 0;
                    st.out.retired += 1;
                    continue;
                }
                let Some(task) = st.queue.pop_front() else {
                    i += 1;
                    continue;
                };
                let slot = st.threads[i].slot;
                st.slots[slot].in_task = IN_TASK;
                st.threads[i].doing = match task {
                    Task::Cpu(ms) => Doing::Cpu(ms),
                    Task::Sleep(ms) => Doing::Sleep(t + ms),
                    Task::Locked(ms) => {
                        let id = st.threads[i].id;
                        st.lock_waiters.push_back(id);
                        Doing::WaitLock(ms)
                    }
                    Task::Declared(ms) => {
                        st.slots[slot].in_task = DECLARED;
                        // `compensate_blocked`: keep min threads runnable
                        // while work is queued and nobody idle can take it.
                        let declared =
                            st.threads.iter().filter(|th| matches!(th.doing, Doing::Declared(_))).count() + 1;
                        let idle = (st.threads.iter().enumerate())
                            .any(|(j, th)| j != i && th.doing == Doing::Idle && th.starts_at <= t);
                        if !st.queue.is_empty() && !idle {
                            lend += self.p.min.saturating_sub(st.threads.len() - declared).min(2);
                        }
                        Doing::Declared(t + ms)
                    }
                };
                i += 1;
            }
            // The lock goes to its first waiter.
            if !st.lock_held
                && let Some(id) = st.lock_waiters.pop_front()
                && let Some(th) = st.threads.iter_mut().find(|th| th.id == id)
                && let Doing::WaitLock(ms) = th.doing
            {
                th.doing = Doing::HoldLock(ms);
                st.lock_held = true;
            }
            let runnable = st
                .threads
                .iter()
                .filter(|th| th.starts_at > t || matches!(th.doing, Doing::Cpu(_) | Doing::HoldLock(_)))
                .count() as f64;
            let share = if runnable > 0.0 { (self.cores / (runnable + self.load)).min(1.0) } else { 0.0 };
            let mut done = Vec::new();
            for th in &mut st.threads {
                let finished = match &mut th.doing {
                    Doing::Cpu(left) | Doing::HoldLock(left) => {
                        th.cpu_ns += share * STEP * 1e6;
                        *left -= share * STEP;
                        *left <= 0.0
                    }
                    Doing::Sleep(until) | Doing::Declared(until) => *until <= t + STEP,
                    Doing::Idle | Doing::WaitLock(_) => false,
                };
                if finished {
                    if matches!(th.doing, Doing::HoldLock(_)) {
                        st.lock_held = false;
                    }
                    th.doing = Doing::Idle;
                    done.push(th.slot);
                }
            }
            for slot in done {
                st.slots[slot].completed += 1;
                st.slots[slot].in_task = 0;
                st.out.done += 1;
            }
            st.t = t + STEP;
        }
        for _ in 0..lend {
            if self.spawn(0.0) {
                self.st.borrow_mut().out.lent += 1;
            }
        }
        arrived
    }

    fn thread(&self, id: u64) -> Option<(Doing, f64, bool)> {
        let st = self.st.borrow();
        st.threads.iter().find(|th| th.id == id).map(|th| (th.doing, th.cpu_ns, th.starts_at > st.t))
    }
}

impl Signals for Sim {
    fn high_water(&self) -> usize {
        self.st.borrow().high_water
    }
    fn occupied(&self, slot: usize) -> bool {
        self.st.borrow().slots[slot].occupied
    }
    fn completed(&self, slot: usize) -> u64 {
        self.st.borrow().slots[slot].completed
    }
    fn cpu_clock(&self, slot: usize) -> u64 {
        self.st.borrow().slots[slot].cpu_clock
    }
    fn in_task(&self, slot: usize) -> u64 {
        self.st.borrow().slots[slot].in_task
    }
    fn tid(&self, slot: usize) -> u64 {
        self.st.borrow().slots[slot].tid
    }
    fn read_cpu_clock(&self, clock: u64) -> Option<u64> {
        self.clock_reads.set(self.clock_reads.get() + 1);
        self.thread(clock).map(|(_, cpu_ns, _)| cpu_ns as u64)
    }
    fn asleep(&self, tid: u64) -> Option<bool> {
        self.state_reads.set(self.state_reads.get() + 1);
        let (doing, _, starting) = self.thread(tid)?;
        Some(!starting && !matches!(doing, Doing::Cpu(_) | Doing::HoldLock(_)))
    }
}

impl Watched for Sim {
    fn now(&self) -> Instant {
        self.t0 + Duration::from_secs_f64(self.st.borrow().t / 1e3)
    }
    fn live_threads(&self) -> usize {
        self.st.borrow().threads.len()
    }
    fn max_threads(&self) -> usize {
        self.p.max
    }
    fn has_visible_work(&self) -> bool {
        !self.st.borrow().queue.is_empty()
    }
    fn sleep_counts(&self) -> (usize, usize) {
        let st = self.st.borrow();
        let parked = st.threads.iter().filter(|th| th.doing == Doing::Idle && th.starts_at <= st.t).count();
        (0, parked)
    }
    fn queued_now(&self) -> usize {
        self.st.borrow().queue.len()
    }
    fn compensated(&self) -> (usize, usize) {
        let st = self.st.borrow();
        (st.threads.iter().filter(|th| matches!(th.doing, Doing::Declared(_))).count(), 0)
    }
    fn inject_worker(&self) -> bool {
        let started = self.spawn(self.spawn_lag);
        if started {
            let mut st = self.st.borrow_mut();
            st.out.injected += 1;
            if st.out.first_injection_ms.is_none() {
                st.out.first_injection_ms = Some(st.t);
            }
        }
        started
    }
    fn request_retirements(&self, n: usize) {
        self.st.borrow_mut().retire += n;
    }
    fn cancel_retirements(&self) {
        self.st.borrow_mut().retire = 0;
    }
    fn record_decision(&self, action: MonitorAction, reason: MonitorReason) {
        let t = self.st.borrow().t;
        self.decisions.borrow_mut().push((t, action, reason));
    }
}

/// The scenarios of the monitor's real-thread tests (`core/tests/monitor.rs`
/// and `growth.rs` before issue 30), each with the claim it made.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::growth::sample::SAMPLE_PER_TICK;

    const MS: Duration = Duration::from_millis(1);

    /// The default pool of the real tests on the 2-core machine they ran on.
    fn params(hint: bool) -> Params {
        Params { interval: 5 * MS, min: 2, max: 256, cores: 2.0, hint }
    }

    fn run(p: Params, load: f64, tasks: usize, task: Task) -> Outcome {
        let mut sim = Sim::new(p);
        sim.load = load;
        sim.submit(tasks, task);
        let out = sim.run(600_000.0);
        assert_eq!(out.done, tasks as u64, "the run ended before its tasks: {out:?}");
        out
    }

    /// Issue 11, defect 1: a lock convoy (400 × 2 ms of CPU under one lock)
    /// must not grow a min-2 pool: threads added to it only wait. With the
    /// hint, the portable rule and `cpu_parallelism(1)`.
    #[test]
    fn a_mutex_convoy_stays_near_min_threads() {
        let cases = [
            ("hint", params(true)),
            ("portable rule", params(false)),
            ("cpu_parallelism(1)", Params { cores: 1.0, ..params(true) }),
        ];
        for (what, p) in cases {
            let out = run(p, 0.0, 400, Task::Locked(2.0));
            assert!(out.peak <= 4, "{what}: {out:?}");
        }
    }

    /// Issue 11, defect 6: without the hint, probes of CPU-bound work do not
    /// pay and are taken back, also with two other processes on the cores.
    #[test]
    fn a_cpu_bound_flood_on_the_portable_rule_peaks_at_4() {
        for load in [0.0, 2.0] {
            let out = run(params(false), load, 2000, Task::Cpu(1.0));
            assert!(out.peak <= 4, "load {load}: {out:?}");
            assert!(out.retired > 0 || out.injected == 0, "load {load}: probes are given back: {out:?}");
        }
    }

    /// With the hint, CPU-bound work is never probed, short or long tasks,
    /// loaded machine or not.
    #[test]
    fn a_cpu_bound_flood_with_the_hint_injects_nothing() {
        for load in [0.0, 2.0] {
            for (n, ms) in [(2000, 1.0), (16, 15.0)] {
                let out = run(params(true), load, n, Task::Cpu(ms));
                assert_eq!((out.injected, out.peak), (0, 2), "load {load}, {n} x {ms} ms: {out:?}");
            }
        }
    }

    /// Issue 11, defect 2: threads in declared regions are the compensation's
    /// (which lends for them); the monitor adds none on top.
    #[test]
    fn declared_blocking_is_counted_once() {
        let sim = Sim::new(params(true));
        sim.submit(2, Task::Declared(300.0));
        sim.submit(300, Task::Cpu(1.0));
        let out = sim.run(600_000.0);
        assert_eq!(out.done, 302, "{out:?}");
        assert!(out.lent > 0, "the compensation lends: {out:?}");
        assert_eq!(out.injected, 0, "{out:?}");
    }

    /// Undeclared sleeps (200 × 10 ms) get threads: at once with the hint,
    /// through probes on the portable rule; also beside two busy processes.
    #[test]
    fn undeclared_sleeps_get_threads_with_and_without_the_hint() {
        for hint in [true, false] {
            for load in [0.0, 2.0] {
                let out = run(params(hint), load, 200, Task::Sleep(10.0));
                assert!(out.injected > 0 && out.peak >= 8, "hint {hint}, load {load}: {out:?}");
            }
        }
    }

    /// Issue 26: every thread the monitor adds or takes back is recorded with
    /// its reason, on the simulated clock. Undeclared sleeps without the
    /// hint: a stall adds the first thread (after `STALL` intervals with
    /// nothing completed, the reason says how long, with the queue then),
    /// probes add more; with the hint, blocked workers add threads at once.
    /// A convoy's probes are rolled back, with the throughput before and after.
    #[test]
    fn the_monitor_records_each_decision_with_its_reason() {
        let decisions = |hint: bool, task: Task, n: usize| {
            let sim = Sim::new(params(hint));
            sim.submit(n, task);
            sim.run(600_000.0);
            sim.decisions.take()
        };
        // 200 tasks of 200 ms: nothing completes for 100 ms (20 intervals).
        let d = decisions(false, Task::Sleep(200.0), 200);
        let (t, action, reason) = d[0];
        assert_eq!(action, MonitorAction::Added(1), "{d:?}");
        let MonitorReason::Stalled { for_, queued } = reason else { panic!("first decision: {d:?}") };
        assert!(for_ >= Duration::from_millis(100) && for_ < Duration::from_millis(110), "{d:?}");
        assert_eq!(queued, 198, "{d:?}");
        assert!((100.0..=110.0).contains(&t), "{t}");
        // 10 ms sleeps: probes pay, and say by how much.
        let d = decisions(false, Task::Sleep(10.0), 400);
        assert!(d.iter().any(|(_, _, r)| matches!(r, MonitorReason::ProbeStarted { .. })), "{d:?}");
        let kept = d.iter().find_map(|(_, a, r)| match r {
            MonitorReason::ProbeKept { before_per_s, after_per_s } => Some((*a, *before_per_s, *after_per_s)),
            _ => None,
        });
        let Some((MonitorAction::Added(n), before, after)) = kept else { panic!("no probe kept: {d:?}") };
        assert!(n >= 1 && after > before, "{n} {before} {after}: {d:?}");
        let d = decisions(true, Task::Sleep(10.0), 200);
        assert!(
            matches!(d[0], (_, MonitorAction::Added(2), MonitorReason::AllBlocked { queued }) if queued > 190),
            "{d:?}"
        );
        let d = decisions(false, Task::Locked(2.0), 400);
        let rolled = d.iter().find_map(|(_, a, r)| match r {
            MonitorReason::ProbeRolledBack { before_per_s, after_per_s } => Some((*a, *before_per_s, *after_per_s)),
            _ => None,
        });
        let Some((MonitorAction::Retired(n), before, after)) = rolled else { panic!("no rollback: {d:?}") };
        assert!(n >= 1 && before > 0.0 && after < before * 1.8, "{n} {before} {after}: {d:?}");
    }

    /// After a burst of lent threads retired, the two survivors sit among 62
    /// free slots: their blocking is seen as fast as on a fresh pool (the
    /// sampler once spent its per-tick budget on free slots and injected
    /// nothing for 500 ms).
    #[test]
    fn undeclared_blocking_after_a_shrink_still_gets_threads() {
        let fresh = Sim::new(params(true));
        fresh.submit(100, Task::Sleep(10.0));
        let fresh = fresh.run(600_000.0);
        let shrunk = Sim::after_shrink(params(true), 64, &[37, 62]);
        shrunk.submit(100, Task::Sleep(10.0));
        let shrunk = shrunk.run(600_000.0);
        let (Some(first), Some(fresh_first)) = (shrunk.first_injection_ms, fresh.first_injection_ms) else {
            panic!("no relief: fresh {fresh:?}, after a shrink {shrunk:?}");
        };
        assert!(first <= fresh_first, "first injection at {first} ms, {fresh_first} ms on a fresh pool: {shrunk:?}");
    }

    /// Issue 11, defect 4: the signals are the pool's own. Processes spinning
    /// on both cores do not suppress relief for a pool whose workers all
    /// sleep (60 × 100 ms).
    #[test]
    fn a_spinning_neighbour_does_not_suppress_relief() {
        for load in [0.0, 2.0, 8.0] {
            let out = run(params(true), load, 60, Task::Sleep(100.0));
            assert!(out.peak >= 30, "load {load}: {out:?}");
        }
    }

    /// Issue 11, defect 3: a tick's cost does not grow with the pool. 256
    /// workers computing below `max_threads`: every tick samples (the worst
    /// steady case), at most `SAMPLE_PER_TICK` of them, and adds nobody. At
    /// `max_threads` with everyone blocked: ticks ten times less often.
    #[test]
    fn the_monitor_reads_a_bounded_number_of_threads_per_tick() {
        let sim = Sim::new(Params { min: 256, max: 512, ..params(true) });
        sim.submit(2000, Task::Cpu(2.0));
        let out = sim.run(1000.0);
        assert!(out.ticks > 100, "{out:?}");
        assert!(out.clock_reads_per_tick <= SAMPLE_PER_TICK && out.state_reads_per_tick <= SAMPLE_PER_TICK, "{out:?}");
        assert_eq!(out.injected, 0, "{out:?}");

        let sim = Sim::new(params(true));
        sim.submit(300, Task::Sleep(10_000.0));
        let out = sim.run(2000.0);
        assert_eq!(out.peak, 256, "{out:?}");
        // Ticking every interval would be 400 ticks.
        assert!(out.ticks < 100, "{out:?}");
        assert!(out.clock_reads_per_tick <= SAMPLE_PER_TICK, "{out:?}");
    }

    /// Seed 000: a foreign producer sends 200 tasks/s for 3 s, each sleeping
    /// 20 ms without saying so, to a 2-thread pool (which alone would take
    /// 6 s). The monitor absorbs it: the backlog is gone 1.5 s after the
    /// producer stops, without overshooting to more than 16 threads.
    #[test]
    fn seed_000_steady_stream_of_undeclared_blocking_recovers() {
        for load in [0.0, 2.0] {
            let mut sim = Sim::new(params(true));
            sim.load = load;
            sim.arrive(600, 0.0, 5.0, Task::Sleep(20.0));
            let out = sim.run(600_000.0);
            assert_eq!(out.done, 600, "{out:?}");
            assert!(out.injected > 0, "the monitor had to act: {out:?}");
            assert!(out.end_ms <= 3000.0 + 1500.0, "load {load}: {out:?}");
            assert!(out.peak <= 16, "load {load}: {out:?}");
        }
    }
}
