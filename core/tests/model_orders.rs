//! Tests written from the promise: reference models of the orders and
//! bounds that the rustdoc and `docs/scheduling.md` promise, checked
//! against the pool on random sequences of submissions (proptest).
//! Priorities have their own model (`priorities.rs`).
//!
//! What the model says, from the docs (not from the code):
//! - **Where a worker looks** (`docs/scheduling.md`, "Where a worker looks
//!   for work"; `worker.rs`'s module comment): every 61st task the global
//!   queue first; else its own deque, LIFO; else global work, oldest first.
//!   Global work is one FIFO as far as one worker sees it: its inbox holds
//!   batches taken from the global queue in submission order, and "each
//!   batch starts in submission order", so batches do not change the order
//!   a lone worker starts global work in. Each look that finds a job
//!   counts toward the 61 (a task, a lane's turn, or a task that will not
//!   run: it still costs "the pop that finds it"). Which look is the 61st
//!   is not promised (it depends on what the worker did before the test),
//!   so the model accepts every phase of the interval, 0..61.
//! - **Submissions**: from outside the pool to the global queue's tail;
//!   from a pool thread to that thread's deque, or with `global: true` to
//!   the global queue's tail; a lane's task to the lane's own list.
//! - **Lanes** ("Lanes" in `docs/scheduling.md`, `serial.rs`'s module
//!   comment): only a lane's turns are pool jobs, at most `n` of them
//!   (`queued + running <= n`), and always through the global queue; a
//!   new task gets a turn if the lane has room and every queued turn is
//!   owed to an earlier task; a turn runs one task and then goes back to
//!   the global queue's tail if a task left is owed no queued turn. A
//!   lane task that does not run (expired: "expires when its turn comes;
//!   the turn then goes on to the next task"; or cancelled before its turn)
//!   is not pinned down further by the docs: the model accepts both
//!   readings, the turn going back to the tail, or the same turn going on
//!   to the next task at once.
//! - **Deadlines**: a task not started by its deadline never runs and ends
//!   expired; it is still taken where it waits ("an expired task costs a
//!   worker the pop that finds it"), so it takes a look. Deadlines are
//!   either already past at submission or an hour away: no timing is
//!   assumed.
//! - **Cancel**: `TaskHandle::cancel` of a task that has not started
//!   returns true and the task never runs; it stays a cancellation even
//!   past its deadline; the cancelled task keeps its place ("a
//!   cancellation before the pop") and takes a look when reached.
//! - **Endings**: every accepted task ends exactly once: ran, cancelled or
//!   expired; its handle says which; `Stats::expired` and
//!   `Stats::cancelled` count them.
//! - **Groups**: `Group::wait` returns once every task of the group has
//!   ended, its captures dropped, and stats read then count them.
//! - **Batches** (`Pool::spawn_batch_with`, `submit_batch`): their tasks
//!   enter the queue in iteration order, as that many submissions would.
//!
//! A case queues its submissions from outside on workers held at a gate,
//! then opens the gate. On one worker the order is deterministic and must
//! be one the model allows. On 2 to 4 workers (`Growth::Fixed`) the order
//! is not promised; what still holds is checked: a lane never runs more
//! than its width at once (a serial queue never overlaps), a lane's tasks
//! start in submission order as far as that is observable, every task ends
//! exactly once as its fate says, nothing expired ever runs, every group
//! wait returns after its tasks ended, and everything accepted ends.
//!
//! A third property begins `Shutdown::Cancel` while 1 to 4 workers are
//! still held: every queued task ends cancelled, exactly once.
//!
//! Random cases per run (`WSPOOL_PROPTEST_CASES` overrides all three): 128
//! on one worker against the model, 64 on 2-4 workers against the bounds,
//! 64 for the cancelling shutdown; together under a second in
//! `test-release` (0.5-0.7 s measured at a load average of 12 on 2 cores).
//! Each case queues up to 40 calls from outside (single submissions or
//! batches of 2-5; some tasks fan out to 50-90 children, enough to cross
//! the fairness interval), on 3 lanes of random width 1..=3 and 3 groups.
//! Run with
//! `cargo test --profile test-release -p wspool --test model_orders`.

mod common;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{held_single_worker, held_workers, watchdog};
use wspool::{Group, Pool, SerialQueue, Shutdown, SpawnOptions, TaskError, TaskHandle, TaskState};

const LIMIT: Duration = Duration::from_secs(60);
/// `docs/scheduling.md`: "every **61st** task, global work first".
const FAIRNESS_INTERVAL: u32 = 61;
const LANES: usize = 3;
const GROUPS: usize = 3;

// ------------------------------------------------------------ the cases ----

/// Where a task is submitted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Place {
    /// From outside: the global queue. From a task: `global: true`.
    Global,
    /// From a task: its own deque (a plain `spawn`).
    Local,
    /// The lane of that index (a lane of width 1 is a serial queue).
    Lane(usize),
}

/// How a task is meant to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Fate {
    Runs,
    /// Runs: its deadline is an hour away.
    FarDeadline,
    /// Its deadline is already past at submission: it never runs.
    Expires,
    /// Cancelled through its handle right after submission.
    Cancelled,
    /// Past its deadline and cancelled through its handle before anything
    /// reached it: a cancellation.
    CancelledPastDeadline,
}

impl Fate {
    fn cancels(self) -> bool {
        matches!(self, Fate::Cancelled | Fate::CancelledPastDeadline)
    }
    fn past_deadline(self) -> bool {
        matches!(self, Fate::Expires | Fate::CancelledPastDeadline)
    }
}

/// One submission from outside, and what the task submits when it runs.
#[derive(Clone)]
struct Sub {
    place: Place,
    fate: Fate,
    handle: bool,
    group: Option<usize>,
    children: Vec<Child>,
    /// Tasks in this submission: 1 a single call, more a batch call
    /// (`spawn_batch_with`, or `submit_batch` with handles), every task
    /// alike and without children.
    batch: usize,
}

/// A submission from a running task (children submit nothing). It joins
/// its parent's group or none: the parent's membership keeps the group from
/// emptying before the child is counted.
#[derive(Clone)]
struct Child {
    place: Place,
    fate: Fate,
    handle: bool,
    in_parent_group: bool,
    /// As `Sub::batch`.
    batch: usize,
}

/// Compact, so that a minimal failing case reads as a line: place (`G`
/// global, `D` the worker's deque, `L1` lane 1), fate (`run`, `far`, `exp`,
/// `can`, `can-past`), `h` with a handle, `g2` in group 2 (`pg`: the
/// parent's group), then the children in brackets; `4x` before it: a batch
/// of 4 such tasks.
fn describe(f: &mut std::fmt::Formatter<'_>, place: Place, fate: Fate, handle: bool, batch: usize) -> std::fmt::Result {
    {
        if batch > 1 {
            write!(f, "{batch}x")?;
        }
        match place {
            Place::Global => write!(f, "G")?,
            Place::Local => write!(f, "D")?,
            Place::Lane(l) => write!(f, "L{l}")?,
        }
        let fate = match fate {
            Fate::Runs => "run",
            Fate::FarDeadline => "far",
            Fate::Expires => "exp",
            Fate::Cancelled => "can",
            Fate::CancelledPastDeadline => "can-past",
        };
        write!(f, ":{fate}")?;
        if handle {
            write!(f, ":h")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(f, self.place, self.fate, self.handle, self.batch)?;
        if self.in_parent_group {
            write!(f, ":pg")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Sub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(f, self.place, self.fate, self.handle, self.batch)?;
        if let Some(g) = self.group {
            write!(f, ":g{g}")?;
        }
        if !self.children.is_empty() {
            write!(f, "{:?}", self.children)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct Case {
    /// Width of each lane (1: a serial queue).
    widths: Vec<usize>,
    /// Submitted from outside, in this order.
    subs: Vec<Sub>,
}

/// A task of a case, flattened: ids in submission-tree preorder.
#[derive(Clone, Debug)]
struct Spec {
    place: Place,
    fate: Fate,
    handle: bool,
    group: Option<usize>,
    /// What it submits when it runs, in order.
    children: Vec<usize>,
    /// The same, one entry per call (a batch is one call).
    child_calls: Vec<Vec<usize>>,
}

/// The case's tasks, and the ids submitted from outside: in order, and per
/// call (a batch is one call).
fn flatten(case: &Case) -> (Vec<Spec>, Vec<usize>, Vec<Vec<usize>>) {
    let mut specs: Vec<Spec> = Vec::new();
    let mut calls = Vec::new();
    let spec = |place, fate, handle, group| Spec { place, fate, handle, group, children: vec![], child_calls: vec![] };
    for sub in &case.subs {
        let first = specs.len();
        let call: Vec<usize> = (first..first + sub.batch).collect();
        for _ in 0..sub.batch {
            specs.push(spec(sub.place, sub.fate, sub.handle, sub.group));
        }
        for child in &sub.children {
            let c = specs.len();
            let call: Vec<usize> = (c..c + child.batch).collect();
            for _ in 0..child.batch {
                specs.push(spec(child.place, child.fate, child.handle, sub.group.filter(|_| child.in_parent_group)));
            }
            specs[first].children.extend(&call);
            specs[first].child_calls.push(call);
        }
        calls.push(call);
    }
    let foreign = calls.iter().flatten().copied().collect();
    (specs, foreign, calls)
}

mod strategies {
    use super::*;
    use proptest::prelude::*;

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            12 => Just(Fate::Runs),
            2 => Just(Fate::FarDeadline),
            3 => Just(Fate::Expires),
            2 => Just(Fate::Cancelled),
            1 => Just(Fate::CancelledPastDeadline),
        ]
    }

    fn lane() -> impl Strategy<Value = Place> {
        (0..LANES).prop_map(Place::Lane)
    }

    /// A fate a batch without handles can have (it cannot be cancelled).
    fn uncancelled() -> impl Strategy<Value = Fate> {
        prop_oneof![12 => Just(Fate::Runs), 2 => Just(Fate::FarDeadline), 3 => Just(Fate::Expires)]
    }

    fn child_place() -> impl Strategy<Value = Place> {
        prop_oneof![4 => Just(Place::Local), 2 => Just(Place::Global), 2 => lane()]
    }

    fn child() -> impl Strategy<Value = Child> {
        let single =
            (child_place(), fate(), any::<bool>(), any::<bool>()).prop_map(|(place, fate, handle, in_parent_group)| {
                Child { place, fate, handle: handle || fate.cancels(), in_parent_group, batch: 1 }
            });
        // `spawn_batch_with` takes every option; `submit_batch` none (from
        // a pool thread its tasks go to the deque).
        let spawn_batch = (child_place(), uncancelled(), any::<bool>(), 2..6usize).prop_map(
            |(place, fate, in_parent_group, batch)| Child { place, fate, handle: false, in_parent_group, batch },
        );
        let submit_batch = (prop_oneof![Just(Fate::Runs), Just(Fate::Cancelled)], 2..6usize)
            .prop_map(|(fate, batch)| Child { place: Place::Local, fate, handle: true, in_parent_group: false, batch });
        prop_oneof![10 => single, 1 => spawn_batch, 1 => submit_batch]
    }

    fn sub() -> impl Strategy<Value = Sub> {
        let place = prop_oneof![3 => Just(Place::Global), 2 => lane()];
        let group = prop_oneof![1 => Just(None), 1 => (0..GROUPS).prop_map(Some)];
        // Mostly none or a few; sometimes a fan-out long enough to cross
        // the fairness interval (shrinking tries the smaller kinds first).
        let children = prop_oneof![
            14 => proptest::collection::vec(child(), 0..1),
            5 => proptest::collection::vec(child(), 1..5),
            1 => proptest::collection::vec(child(), 50..91),
        ];
        let single = (place, fate(), any::<bool>(), group.clone(), children).prop_map(
            |(place, fate, handle, group, children)| Sub {
                place,
                fate,
                handle: handle || fate.cancels(),
                group,
                children,
                batch: 1,
            },
        );
        let place = prop_oneof![3 => Just(Place::Global), 2 => lane()];
        let spawn_batch = (place, uncancelled(), group, 2..6usize).prop_map(|(place, fate, group, batch)| Sub {
            place,
            fate,
            handle: false,
            group,
            children: vec![],
            batch,
        });
        let submit_batch =
            (prop_oneof![Just(Fate::Runs), Just(Fate::Cancelled)], 2..6usize).prop_map(|(fate, batch)| Sub {
                place: Place::Global,
                fate,
                handle: true,
                group: None,
                children: vec![],
                batch,
            });
        prop_oneof![10 => single, 1 => spawn_batch, 1 => submit_batch]
    }

    pub fn case() -> impl Strategy<Value = Case> {
        (proptest::collection::vec(1..=3usize, LANES), proptest::collection::vec(sub(), 0..40))
            .prop_map(|(widths, subs)| Case { widths, subs })
    }
}

// ----------------------------------------------- the one-worker model ----

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Item {
    Task(usize),
    /// A turn of the lane of that index.
    Turn(usize),
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct LaneModel {
    tasks: VecDeque<usize>,
    /// Turns in the global queue, not started.
    queued: usize,
    /// Turns taking a task now.
    running: usize,
    width: usize,
}

/// One worker's queues, as the docs describe them.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Model {
    global: VecDeque<Item>,
    deque: Vec<Item>,
    /// Looks so far, modulo the fairness interval.
    tick: u32,
    lanes: Vec<LaneModel>,
}

/// Whether a task runs on one worker: its fate says so (a child's cancel
/// always wins there: its parent holds the only worker).
fn runs(specs: &[Spec], id: usize) -> bool {
    matches!(specs[id].fate, Fate::Runs | Fate::FarDeadline)
}

impl Model {
    fn new(widths: &[usize], phase: u32) -> Model {
        let lanes =
            widths.iter().map(|&width| LaneModel { tasks: VecDeque::new(), queued: 0, running: 0, width }).collect();
        Model { global: VecDeque::new(), deque: Vec::new(), tick: phase, lanes }
    }

    fn submit(&mut self, specs: &[Spec], id: usize) {
        match specs[id].place {
            Place::Global => self.global.push_back(Item::Task(id)),
            Place::Local => self.deque.push(Item::Task(id)),
            Place::Lane(l) => {
                let lane = &mut self.lanes[l];
                lane.tasks.push_back(id);
                // A new turn if the lane has room and every queued turn is
                // owed to an earlier task.
                if lane.queued < lane.tasks.len() && lane.queued + lane.running < lane.width {
                    lane.queued += 1;
                    self.global.push_back(Item::Turn(l));
                }
            }
        }
    }

    /// Takes a task: runs it (its children are submitted) or, if its fate
    /// is not to run, ends it unrun. Returns whether it ran.
    fn take(&mut self, specs: &[Spec], id: usize, ran: &mut Vec<usize>) -> bool {
        if !runs(specs, id) {
            return false;
        }
        ran.push(id);
        for &c in &specs[id].children {
            self.submit(specs, c);
        }
        true
    }

    /// After a turn's task: the turn goes back to the tail if a task left
    /// is owed no queued turn.
    fn turn_goes_on(&mut self, l: usize) {
        let lane = &mut self.lanes[l];
        if lane.queued < lane.tasks.len() && lane.queued + lane.running < lane.width {
            lane.queued += 1;
            self.global.push_back(Item::Turn(l));
        }
    }

    /// One look for work. `None` when there is nothing left; otherwise
    /// every state the docs allow after it, with the task that ran in it
    /// (if one did).
    fn step(&self, specs: &[Spec]) -> Option<Vec<(Model, Vec<usize>)>> {
        let mut m = self.clone();
        m.tick = (m.tick + 1) % FAIRNESS_INTERVAL;
        let item = if m.tick == 0 && !m.global.is_empty() {
            m.global.pop_front()
        } else {
            m.deque.pop().or_else(|| m.global.pop_front())
        }?;
        let mut ran = Vec::new();
        match item {
            Item::Task(id) => {
                m.take(specs, id, &mut ran);
                Some(vec![(m, ran)])
            }
            Item::Turn(l) => {
                m.lanes[l].queued -= 1;
                let mut out = Vec::new();
                m.run_turn(specs, l, ran, &mut out);
                Some(out)
            }
        }
    }

    /// A turn of lane `l`: takes the lane's next task. One that does not
    /// run lets the turn either go back to the tail or go on to the next
    /// task at once (both readings of the docs are accepted).
    fn run_turn(mut self, specs: &[Spec], l: usize, mut ran: Vec<usize>, out: &mut Vec<(Model, Vec<usize>)>) {
        let Some(id) = self.lanes[l].tasks.pop_front() else {
            out.push((self, ran));
            return;
        };
        self.lanes[l].running += 1;
        let did_run = self.take(specs, id, &mut ran);
        self.lanes[l].running -= 1;
        if !did_run && !self.lanes[l].tasks.is_empty() {
            self.clone().run_turn(specs, l, ran.clone(), out);
        }
        self.turn_goes_on(l);
        out.push((self, ran));
    }
}

/// Where the pool's order left every order the model allows.
#[derive(Debug)]
struct Divergence {
    /// Tasks the pool and the model agreed on.
    agreed: usize,
    /// What the model allowed next there (`None`: nothing more).
    allowed: Vec<Option<usize>>,
    /// The order the model gives for the phase that got furthest, with
    /// turns going back to the tail.
    model: Vec<usize>,
}

/// Is `observed` (the ids in the order they started) an order the model
/// allows for `case` on one worker?
fn model_allows(case: &Case, observed: &[usize]) -> Result<(), Divergence> {
    let (specs, foreign, _) = flatten(case);
    let mut best = Divergence { agreed: 0, allowed: vec![], model: vec![] };
    let mut best_phase = 0;
    for phase in 0..FAIRNESS_INTERVAL {
        let mut start = Model::new(&case.widths, phase);
        for &id in &foreign {
            start.submit(&specs, id);
        }
        // Depth first over the docs' choices; states met again at a choice
        // are skipped (they were explored already).
        let mut stack = vec![(start, 0usize)];
        let mut seen: HashSet<(Model, usize)> = HashSet::new();
        while let Some((mut m, mut pos)) = stack.pop() {
            loop {
                let Some(mut next) = m.step(&specs) else {
                    if pos == observed.len() {
                        return Ok(());
                    }
                    if pos >= best.agreed {
                        if pos > best.agreed {
                            best.allowed.clear();
                        }
                        best.agreed = pos;
                        best.allowed.push(None);
                        best_phase = phase;
                    }
                    break;
                };
                next.retain(|(_, ran)| {
                    let ok = ran.iter().enumerate().all(|(k, id)| observed.get(pos + k) == Some(id));
                    if !ok && pos >= best.agreed {
                        if pos > best.agreed {
                            best.allowed.clear();
                        }
                        best.agreed = pos;
                        best.allowed.push(ran.first().copied());
                        best_phase = phase;
                    }
                    ok
                });
                if next.len() > 1 {
                    for (alt, ran) in next.drain(1..) {
                        let key = (alt, pos + ran.len());
                        if seen.insert(key.clone()) {
                            stack.push(key);
                        }
                    }
                }
                match next.pop() {
                    Some((n, ran)) => {
                        pos += ran.len();
                        m = n;
                    }
                    None => break,
                }
            }
        }
    }
    best.allowed.sort();
    best.allowed.dedup();
    best.model = model_order(case, best_phase);
    Err(best)
}

/// The model's order for one phase, turns going back to the tail after a
/// task that did not run (the first reading).
fn model_order(case: &Case, phase: u32) -> Vec<usize> {
    let (specs, foreign, _) = flatten(case);
    let mut m = Model::new(&case.widths, phase);
    for &id in &foreign {
        m.submit(&specs, id);
    }
    let mut order = Vec::new();
    while let Some(next) = m.step(&specs) {
        // The last successor of a turn is the one that went back to the tail.
        let (n, ran) = next.into_iter().last().expect("a look has a successor");
        order.extend(ran);
        m = n;
    }
    order
}

// ----------------------------------------------------------- the driver ----

/// How a task ended, as its captured probe saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Ran,
    Cancelled,
    Expired,
}

#[derive(Default)]
struct Record {
    started: bool,
    /// Every ending seen (exactly one is expected), with its sequence number.
    endings: Vec<(Ending, u64)>,
    /// Sequence numbers of the probe's drops (exactly one is expected).
    drops: Vec<u64>,
}

struct LogState {
    seq: u64,
    records: Vec<Record>,
    /// Ids in the order they started.
    order: Vec<usize>,
    /// Each lane's tasks in submission (enqueue) order.
    lane_submitted: Vec<Vec<usize>>,
    lane_running: Vec<usize>,
    lane_peak: Vec<usize>,
    violations: Vec<String>,
}

/// What the tasks saw, under one lock (the tasks' bookkeeping serialises
/// on it; the scheduling it observes does not).
struct Log {
    state: Mutex<LogState>,
    changed: Condvar,
}

impl Log {
    fn new(tasks: usize) -> Log {
        Log {
            state: Mutex::new(LogState {
                seq: 0,
                records: (0..tasks).map(|_| Record::default()).collect(),
                order: Vec::new(),
                lane_submitted: vec![Vec::new(); LANES],
                lane_running: vec![0; LANES],
                lane_peak: vec![0; LANES],
                violations: Vec::new(),
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sequence number after everything logged so far.
    fn mark(&self) -> u64 {
        let mut st = self.lock();
        st.seq += 1;
        st.seq
    }

    /// Blocks until `cond` holds (the watchdog bounds it).
    fn wait_until(&self, cond: impl Fn(&LogState) -> bool) {
        let mut st = self.lock();
        while !cond(&st) {
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Captured by every task: records its start, its ending, and its drop.
struct Probe {
    ctx: Arc<Ctx>,
    id: usize,
    ran: bool,
}

impl Probe {
    /// The task started: checks the lane's width and its FIFO start.
    fn start(&self) {
        let ctx = &self.ctx;
        let mut st = ctx.log.lock();
        let id = self.id;
        st.records[id].started = true;
        st.order.push(id);
        if let Place::Lane(l) = ctx.specs[id].place {
            let width = ctx.widths[l];
            st.lane_running[l] += 1;
            st.lane_peak[l] = st.lane_peak[l].max(st.lane_running[l]);
            if st.lane_running[l] > width {
                let msg = format!("lane {l} of width {width} ran {} tasks at once (task {id})", st.lane_running[l]);
                st.violations.push(msg);
            }
            // FIFO start with at most `width` in flight: every earlier task
            // of the lane has started or ended, but for at most width - 1
            // still in flight beside this one. A task whose cancel was
            // tried is left out: a cancel that won ends it a moment after
            // the lane moved past it.
            let pos = st.lane_submitted[l].iter().position(|&t| t == id);
            match pos {
                None => st.violations.push(format!("task {id} of lane {l} started before its submission returned")),
                Some(pos) => {
                    let behind: Vec<usize> = st.lane_submitted[l][..pos]
                        .iter()
                        .copied()
                        .filter(|&t| {
                            !ctx.specs[t].fate.cancels() && !st.records[t].started && st.records[t].endings.is_empty()
                        })
                        .collect();
                    if behind.len() >= width {
                        let msg = format!(
                            "task {id} of lane {l} (width {width}) started while earlier tasks {behind:?} had not"
                        );
                        st.violations.push(msg);
                    }
                }
            }
        }
    }

    fn finish(mut self) {
        let ctx = self.ctx.clone();
        let mut st = ctx.log.lock();
        if let Place::Lane(l) = ctx.specs[self.id].place {
            st.lane_running[l] -= 1;
        }
        st.seq += 1;
        let seq = st.seq;
        st.records[self.id].endings.push((Ending::Ran, seq));
        drop(st);
        self.ran = true;
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let mut st = self.ctx.log.lock();
        st.seq += 1;
        let seq = st.seq;
        if !self.ran {
            let ending = if wspool::expiring() { Ending::Expired } else { Ending::Cancelled };
            st.records[self.id].endings.push((ending, seq));
        }
        st.records[self.id].drops.push(seq);
        drop(st);
        self.ctx.log.changed.notify_all();
    }
}

/// Everything a case's tasks share.
struct Ctx {
    pool: Pool,
    widths: Vec<usize>,
    lanes: Vec<SerialQueue>,
    /// Held while a task is queued on the lane and its id logged, so that
    /// the log's order is the lane's.
    lane_submit: Vec<Mutex<()>>,
    groups: Vec<Group>,
    specs: Vec<Spec>,
    log: Log,
    handles: Mutex<Vec<(usize, TaskHandle<()>)>>,
    /// Each tried cancel and whether it returned true.
    cancels: Mutex<Vec<(usize, bool)>>,
    past: Instant,
    far: Instant,
}

/// Task `id`'s closure: logs its start, submits its children, logs its end.
fn task(ctx: &Arc<Ctx>, id: usize) -> impl FnOnce() + Send + 'static {
    let probe = Probe { ctx: ctx.clone(), id, ran: false };
    move || {
        probe.start();
        let ctx = probe.ctx.clone();
        for call in &ctx.specs[probe.id].child_calls {
            submit(&ctx, call);
        }
        // Room for another worker to overlap (several workers only).
        std::thread::yield_now();
        probe.finish();
    }
}

/// Submits the tasks `ids` in one call (one task, or a batch of alike
/// tasks), from whichever thread calls it.
fn submit(ctx: &Arc<Ctx>, ids: &[usize]) {
    let spec = &ctx.specs[ids[0]];
    let deadline = match spec.fate {
        Fate::FarDeadline => Some(ctx.far),
        f if f.past_deadline() => Some(ctx.past),
        _ => None,
    };
    let lane = match spec.place {
        Place::Lane(l) => Some(l),
        _ => None,
    };
    let opts = SpawnOptions {
        global: spec.place == Place::Global,
        serial: lane.map(|l| &ctx.lanes[l]),
        group: spec.group.map(|g| &ctx.groups[g]),
        deadline,
        ..Default::default()
    };
    let lane_guard = lane.map(|l| {
        let guard = ctx.lane_submit[l].lock().unwrap_or_else(|e| e.into_inner());
        ctx.log.lock().lane_submitted[l].extend(ids);
        guard
    });
    let handles = match (ids.len(), spec.handle) {
        (1, true) => vec![ctx.pool.submit_with(opts, task(ctx, ids[0])).expect("an unbounded running pool accepts")],
        (1, false) => {
            ctx.pool.spawn_with(opts, task(ctx, ids[0])).expect("an unbounded running pool accepts");
            vec![]
        }
        (_, true) => {
            // No options: a plain batch, to the global queue from outside and
            // to the deque from a pool thread (the strategies keep to that).
            let tasks: Vec<_> = ids.iter().map(|&id| task(ctx, id)).collect();
            ctx.pool.submit_batch(tasks).expect("an unbounded running pool accepts a batch")
        }
        (_, false) => {
            let tasks: Vec<_> = ids.iter().map(|&id| task(ctx, id)).collect();
            ctx.pool.spawn_batch_with(opts, tasks).expect("an unbounded running pool accepts a batch");
            vec![]
        }
    };
    drop(lane_guard);
    for (&id, h) in ids.iter().zip(handles) {
        if spec.fate.cancels() {
            let cancelled = h.cancel();
            ctx.cancels.lock().unwrap().push((id, cancelled));
        }
        ctx.handles.lock().unwrap().push((id, h));
    }
}

/// What a case's run showed.
struct Run {
    order: Vec<usize>,
}

/// How a case's pool ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The gate opens, everything runs, then `Shutdown::Drain`.
    Drain,
    /// `Shutdown::Cancel` begins while every worker is still held: no
    /// worker has taken any of the queued tasks, so each ends cancelled,
    /// "whatever their deadline" (`docs/scheduling.md`).
    CancelWhileHeld,
}

/// Queues `case` from outside on `workers` workers held at a gate, opens
/// the gate (`end` says how the pool ends), waits for the groups (in
/// order) and for every task, and checks every promised bound. Returns
/// the order tasks started in.
fn run_case(case: &Case, workers: usize, end: End) -> Run {
    let case = case.clone();
    watchdog(LIMIT, "a model case", move || {
        let (pool, gate, _guard) =
            if workers == 1 { held_single_worker(Pool::builder()) } else { held_workers(Pool::builder(), workers) };
        let (specs, foreign, calls) = flatten(&case);
        let n = specs.len();
        let now = Instant::now();
        let ctx = Arc::new(Ctx {
            lanes: case.widths.iter().map(|&w| pool.lane(w)).collect(),
            lane_submit: (0..LANES).map(|_| Mutex::new(())).collect(),
            groups: (0..GROUPS).map(|_| pool.group()).collect(),
            pool: pool.clone(),
            widths: case.widths.clone(),
            specs,
            log: Log::new(n),
            handles: Mutex::default(),
            cancels: Mutex::default(),
            past: now,
            far: now + Duration::from_secs(3600),
        });
        for call in &calls {
            submit(&ctx, call);
        }
        // Every cancel so far came before the gate opened: each must win.
        for &(id, cancelled) in ctx.cancels.lock().unwrap().iter() {
            assert!(cancelled, "cancel of task {id}, queued and not started, returned false");
        }
        // A wait off the pool on a task past its deadline expires it itself,
        // without a worker ("Deadlines": its waiter does not wait for a
        // worker to reach it): every other such task from outside is
        // waited for while the workers are still held. It keeps its place
        // in the queue, where a worker later finds it over.
        if end == End::Drain {
            let handles = ctx.handles.lock().unwrap();
            for (id, h) in handles.iter().filter(|(id, _)| ctx.specs[*id].fate == Fate::Expires && id % 2 == 0) {
                assert!(h.wait_for(None), "a wait on task {id}, past its deadline, returns");
                assert_eq!(h.state(), TaskState::Expired, "task {id}, expired by its waiter");
            }
        }
        match end {
            End::Drain => gate.open(),
            End::CancelWhileHeld => {
                let closer = {
                    let pool = pool.clone();
                    std::thread::spawn(move || pool.shutdown(Shutdown::Cancel, None))
                };
                common::eventually(LIMIT, "the shutdown began", || pool.is_shutdown());
                gate.open();
                closer.join().expect("shutdown does not panic").expect("the cancelling shutdown finishes");
            }
        }

        // Groups: each wait returns after every task of its group ended.
        let mut group_marks = Vec::new();
        for (g, group) in ctx.groups.iter().enumerate() {
            group.wait().expect("no task panics");
            group_marks.push((g, ctx.log.mark(), pool.stats()));
        }

        // Which tasks were submitted: those from outside, and the children
        // of those that ran (children submit nothing). Each ends.
        let ran = |st: &LogState, id: usize| st.records[id].endings.first().map(|e| e.0) == Some(Ending::Ran);
        ctx.log.wait_until(|st| foreign.iter().all(|&id| !st.records[id].drops.is_empty()));
        let expected_tasks: Vec<usize> = {
            let st = ctx.log.lock();
            let children = foreign.iter().filter(|&&p| ran(&st, p)).flat_map(|&p| ctx.specs[p].children.clone());
            foreign.iter().copied().chain(children).collect()
        };
        ctx.log.wait_until(|st| expected_tasks.iter().all(|&id| !st.records[id].drops.is_empty()));
        // Every handle reports the ending (waits also order the stats).
        let handles: Vec<(usize, TaskHandle<()>)> = std::mem::take(&mut *ctx.handles.lock().unwrap());
        let mut handle_endings = Vec::new();
        for (id, h) in handles {
            assert!(h.wait_for(None), "an untimed wait returns once the task ended");
            let state = h.state();
            assert!(!h.cancel(), "cancel of task {id} after it ended returned true");
            assert_eq!(h.state(), state, "a late cancel changed task {id}'s state");
            let ending = match h.wait() {
                Ok(()) => Ending::Ran,
                Err(TaskError::Cancelled) => Ending::Cancelled,
                Err(TaskError::Expired) => Ending::Expired,
                Err(e) => panic!("task {id}: unexpected {e:?}"),
            };
            let from_state = match state {
                TaskState::Done => Ending::Ran,
                TaskState::Cancelled => Ending::Cancelled,
                TaskState::Expired => Ending::Expired,
                s => panic!("task {id} ended, yet its state is {s:?}"),
            };
            assert_eq!(ending, from_state, "task {id}: its wait and its state disagree");
            handle_endings.push((id, ending));
        }
        let stats = pool.stats();
        pool.shutdown(Shutdown::Drain, None).expect("the drain finishes");
        // Once shut down, the queue counts nothing, and every task the pool
        // accepted (the gate tasks too) was counted.
        let closed = pool.stats();
        assert_eq!(closed.queued, 0, "Stats::queued after the shutdown");
        assert_eq!(closed.submitted as usize, expected_tasks.len() + workers, "Stats::submitted");

        // Every task ended exactly once, as its fate (and its cancel) says.
        let cancels: Vec<(usize, bool)> = ctx.cancels.lock().unwrap().clone();
        let st = ctx.log.lock();
        assert!(st.violations.is_empty(), "bounds broken: {:#?}", st.violations);
        let (mut ran_total, mut expired, mut cancelled) = (0, 0, 0);
        for id in 0..n {
            let rec = &st.records[id];
            let fate = ctx.specs[id].fate;
            if !expected_tasks.contains(&id) {
                assert!(rec.endings.is_empty() && rec.drops.is_empty(), "task {id} was never submitted, yet ended");
                continue;
            }
            assert_eq!(rec.endings.len(), 1, "task {id} ({fate:?}) ended {:?}: exactly once expected", rec.endings);
            assert_eq!(rec.drops.len(), 1, "task {id}'s captures were dropped {} times", rec.drops.len());
            let ending = rec.endings[0].0;
            let cancel_won = cancels.iter().find(|c| c.0 == id).map(|c| c.1);
            let want = match (fate, cancel_won) {
                _ if end == End::CancelWhileHeld => Ending::Cancelled,
                (Fate::Runs | Fate::FarDeadline, _) => Ending::Ran,
                (Fate::Expires, _) => Ending::Expired,
                (_, Some(true)) => Ending::Cancelled,
                // A child's cancel lost the race to a worker that started it
                // (several workers only; the check after the run asserts it).
                (Fate::CancelledPastDeadline, _) => Ending::Expired,
                (Fate::Cancelled, _) => Ending::Ran,
            };
            assert_eq!(ending, want, "task {id} ({fate:?}, cancel won: {cancel_won:?})");
            assert_eq!(rec.started, ending == Ending::Ran, "task {id} started but did not run, or the reverse");
            ran_total += usize::from(ending == Ending::Ran);
            expired += usize::from(ending == Ending::Expired);
            cancelled += usize::from(ending == Ending::Cancelled);
            if let Some(&(_, h)) = handle_endings.iter().find(|h| h.0 == id) {
                assert_eq!(h, ending, "task {id}: its handle says {h:?}, its probe {ending:?}");
            }
        }
        if workers == 1 {
            let lost: Vec<usize> = cancels.iter().filter(|c| !c.1).map(|c| c.0).collect();
            assert!(
                lost.is_empty(),
                "on one worker a child's cancel always wins (its parent holds the worker): {lost:?}"
            );
        }
        assert_eq!(stats.expired as usize, expired, "Stats::expired");
        assert_eq!(closed.completed as usize, ran_total + workers, "Stats::completed (the gate tasks too)");
        assert_eq!(stats.cancelled as usize, cancelled, "Stats::cancelled");
        for (l, &peak) in st.lane_peak.iter().enumerate() {
            assert!(peak <= case.widths[l], "lane {l}: {peak} at once, width {}", case.widths[l]);
        }
        // Group waits returned after their tasks ended, captures dropped.
        // Stats read after a wait include what it waited for (DESIGN.md):
        // the groups are waited for in order, so after group g's wait the
        // tasks of groups 0..=g that ran count in `completed`, and those
        // that expired in `expired`. (Expired tasks with a handle are left
        // out here: `a_group_wait_returns_after_its_expired_task_is_counted`
        // shows they are counted late, and a rare failure here would hide
        // what else a case finds.)
        let (mut ran_so_far, mut expired_so_far) = (0, 0);
        for (g, mark, stats) in &group_marks {
            for &id in expected_tasks.iter().filter(|&&id| ctx.specs[id].group == Some(*g)) {
                let rec = &st.records[id];
                assert!(
                    rec.endings[0].1 < *mark && rec.drops[0] < *mark,
                    "group {g}'s wait returned before its task {id} ended ({:?}, dropped at {}, wait at {mark})",
                    rec.endings[0],
                    rec.drops[0]
                );
                ran_so_far += usize::from(rec.endings[0].0 == Ending::Ran);
                expired_so_far += usize::from(rec.endings[0].0 == Ending::Expired && !ctx.specs[id].handle);
            }
            assert!(stats.completed as usize >= ran_so_far, "after group {g}'s wait: {stats:?}, {ran_so_far} ran");
            assert!(
                stats.expired as usize >= expired_so_far,
                "after group {g}'s wait: {stats:?}, {expired_so_far} expired"
            );
        }
        Run { order: st.order.clone() }
    })
}

// ---------------------------------------------------------------- tests ----

/// Random cases per run: the default, or `WSPOOL_PROPTEST_CASES`.
fn cases(default: u32) -> u32 {
    std::env::var("WSPOOL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn check_one_worker(case: &Case) -> Result<(), String> {
    let run = run_case(case, 1, End::Drain);
    model_allows(case, &run.order).map_err(|d| {
        format!(
            "one worker started {:?}\nwhich no order the docs allow matches past its first {} tasks: next the model allows {:?}\nmodel order (closest phase, turns back to the tail): {:?}",
            run.order, d.agreed, d.allowed, d.model
        )
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: cases(128), failure_persistence: None, ..Default::default()
    })]

    /// 128 cases: one held worker starts the queued work in an order the
    /// model allows, and keeps every bound.
    #[test]
    fn one_worker_starts_work_in_an_order_the_model_allows(case in strategies::case()) {
        if let Err(e) = check_one_worker(&case) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: cases(64), failure_persistence: None, ..Default::default()
    })]

    /// 64 cases: the same sequences on 2 to 4 workers keep the bounds that
    /// hold whatever the schedule.
    #[test]
    fn several_workers_keep_every_bound(case in strategies::case(), workers in 2..=4usize) {
        run_case(&case, workers, End::Drain);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: cases(64), failure_persistence: None, ..Default::default()
    })]

    /// 64 cases: `Shutdown::Cancel` begun while 1 to 4 workers are held
    /// ends every queued task cancelled, exactly once, whatever its
    /// deadline; group waits return after it.
    #[test]
    fn a_cancelling_shutdown_ends_every_queued_task_cancelled_once(case in strategies::case(), workers in 1..=4usize) {
        run_case(&case, workers, End::CancelWhileHeld);
    }
}

// ------------------------------------------------ the deadline's count ----

/// `docs/scheduling.md` ("Deadlines"): an expired task is counted in
/// `Stats::expired` "before anything a waiter wakes on"; DESIGN.md: stats
/// read after a wait returned include the work that wait waited for. A
/// task with a handle, in a group, past its deadline: once `Group::wait`
/// returns, `Stats::expired` counts it. Repeated to catch the race; no
/// timing is assumed (a pool that keeps the promise passes every round).
///
/// It found `TaskCell::drop_if_pending` counting the expiry after the drop
/// that releases the group's waiter (4 to 19 early waits in 20,000 on a
/// loaded 2-core machine); the count now comes first, for cancellations
/// of handle tasks too.
#[test]
fn a_group_wait_returns_after_its_expired_task_is_counted() {
    const ROUNDS: u64 = 20_000;
    let early = watchdog(LIMIT, "expired handle tasks in a group", || {
        let pool = Pool::builder().min_threads(1).growth(wspool::Growth::Fixed).build().unwrap();
        let group = pool.group();
        let mut early = Vec::new();
        for round in 0..ROUNDS {
            let opts = SpawnOptions { group: Some(&group), deadline: Some(Instant::now()), ..Default::default() };
            let h = pool.submit_with(opts, || ()).unwrap();
            group.wait().unwrap();
            let counted = pool.stats().expired;
            if counted < round + 1 {
                early.push((round, counted));
            }
            assert!(matches!(h.wait(), Err(TaskError::Expired)));
        }
        pool.shutdown(Shutdown::Drain, None).unwrap();
        early
    });
    assert!(
        early.is_empty(),
        "{} of {ROUNDS} group waits returned before Stats::expired counted the expired task (round, expired seen): {:?}",
        early.len(),
        &early[..early.len().min(10)]
    );
}

// ------------------------------------------- the model against the docs ----
//
// The model itself, checked on cases whose order the docs spell out.

fn plain(place: Place) -> Sub {
    Sub { place, fate: Fate::Runs, handle: false, group: None, children: vec![], batch: 1 }
}

fn local_child() -> Child {
    Child { place: Place::Local, fate: Fate::Runs, handle: false, in_parent_group: false, batch: 1 }
}

#[test]
fn the_model_interleaves_serial_queues_one_task_per_turn() {
    // As `queues.rs`'s serial_queues_interleave_fairly: A0 B0 C0 A1 ...
    let mut subs = Vec::new();
    for l in 0..3 {
        for _ in 0..3 {
            subs.push(plain(Place::Lane(l)));
        }
    }
    let case = Case { widths: vec![1, 1, 1], subs };
    assert_eq!(model_order(&case, 0), [0, 3, 6, 1, 4, 7, 2, 5, 8]);
}

#[test]
fn the_model_runs_a_lane_of_two_two_at_a_time_between_other_work() {
    // Lane 0 of width 2: two turns queued at once; each goes back to the
    // tail behind the global task queued meanwhile.
    let subs = vec![
        plain(Place::Lane(0)),
        plain(Place::Lane(0)),
        plain(Place::Lane(0)),
        plain(Place::Global),
        plain(Place::Lane(0)),
    ];
    let case = Case { widths: vec![2, 1, 1], subs };
    assert_eq!(model_order(&case, 0), [0, 1, 3, 2, 4]);
}

#[test]
fn the_model_polls_the_global_queue_every_61st_look() {
    // A task forking 100 children on its deque, with two global tasks
    // queued behind it: the children run LIFO, and the global tasks start
    // at the 61st looks.
    let mut fork = plain(Place::Global);
    fork.children = (0..100).map(|_| local_child()).collect();
    let case = Case { widths: vec![1, 1, 1], subs: vec![fork, plain(Place::Global), plain(Place::Global)] };
    let order = model_order(&case, 0);
    // Look 1 takes the fork (id 0), looks 2..=60 children 100..=42, look 61
    // the global task 101, then the other children, then global task 102.
    let mut expected = vec![0];
    expected.extend((42..=100).rev());
    expected.push(101);
    expected.extend((1..=41).rev());
    expected.push(102);
    assert_eq!(order, expected);
    // Every phase is allowed, but the poll comes exactly every 61 looks.
    assert!(model_allows(&case, &expected).is_ok());
    let mut too_early = expected.clone();
    too_early.swap(59, 60);
    assert!(model_allows(&case, &too_early).is_ok(), "another phase");
    let mut twice_in_a_row: Vec<usize> = vec![0, 101, 102];
    twice_in_a_row.extend((1..=100).rev());
    assert!(model_allows(&case, &twice_in_a_row).is_err(), "two polls one look apart");
}

#[test]
fn the_model_lets_a_skipped_lane_task_pass_its_turn_either_way() {
    // Lane 0 (serial): an expired task, then a task; a global task between.
    let mut expired = plain(Place::Lane(0));
    expired.fate = Fate::Expires;
    let case = Case { widths: vec![1, 1, 1], subs: vec![expired, plain(Place::Lane(0)), plain(Place::Global)] };
    // The turn goes back to the tail (global 2 first) or on to task 1.
    assert!(model_allows(&case, &[2, 1]).is_ok());
    assert!(model_allows(&case, &[1, 2]).is_ok());
    assert!(model_allows(&case, &[2]).is_err());
}

#[test]
fn a_fan_out_crossing_the_fairness_interval_matches_the_model() {
    let mut fork = plain(Place::Global);
    fork.children = (0..100).map(|_| local_child()).collect();
    let case = Case { widths: vec![1, 1, 1], subs: vec![fork, plain(Place::Global), plain(Place::Global)] };
    if let Err(e) = check_one_worker(&case) {
        panic!("{e}");
    }
}
