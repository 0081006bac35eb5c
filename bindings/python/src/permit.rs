//! Places: the bound on calls *executing* at once (`max_workers`) under
//! `growth="compensate"`, the default.
//!
//! A call on one of the pool's threads takes a place before it runs Python
//! code and gives it back when it returns (a call that `reject="caller_runs"`
//! runs on a submitting thread outside the pool takes none).
//!
//! * A call that waits on work of **its own pool** (`Future.result()`,
//!   `Group.wait()`, a `map` iterator, `concurrent.futures.wait` /
//!   `as_completed`) *lends* its place for the wait: only calls submitted
//!   from the pool's own threads (the work such waits wait on) or waited
//!   for by one of its calls may borrow it, never another call from
//!   outside. So waits cannot make room for more outer calls, each of which
//!   would wait in turn and hold a thread: the calls started from outside
//!   and not yet returned stay at most `max_workers`. A borrower that waits
//!   passes its place on only to what some call waits for, not to its
//!   siblings nobody waits for yet (which would each borrow it, wait and
//!   pass it on: threads growing with fan-out one level down). So the
//!   threads needed grow with nesting depth, not with fan-out.
//! * `with wspool.blocking():` gives the place back to anyone for the region.
//! * A wait on anything else keeps the place (`Pool(1)` stays serial).
//! * When a wait or region ends, the call takes its place back at once,
//!   never waiting for one (a lock it holds may be what the others wait
//!   for). That is the only way the pool goes over `max_workers`: by the
//!   calls whose lent place is still borrowed when their wait ends (their
//!   borrowers still run), and by calls back from `blocking()` while the
//!   pool is full; no call starts until the pool is below the bound again.
//!
//! Ordering: calls from outside the pool start in submission order (the
//! queue `outer`: any of their pool tasks starts the oldest). An inner call,
//! or one some waiting call of the pool waits for, that has not started is
//! *urgent* (`push_urgent`). A thread about to start a call
//! from outside, or waiting for a place, runs urgent calls first, so the
//! work waiters wait on goes ahead of queued outer calls. A thread waiting
//! for a place counts as waiting for the core (`wspool::waiting_begin`), so
//! the pool lends a thread only when every thread is stuck.
//!
//! Counts: `own` calls execute on their own place; `lent` / `relent`
//! calls hold a borrowed one (executing or waiting); `lending_own` calls
//! wait on their own place and offer it to inner or awaited calls,
//! `lending_on` borrowers wait and offer theirs on to awaited calls only.
//! Free places: `max_workers - own - lending_own` less the borrowers beyond
//! the places offered; a negative value is how far the pool is over.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use crate::call::Slot;
use crate::lock;

/// Work that goes ahead of calls from outside: a call submitted from one
/// of the pool's threads or waited for by one of its calls, or a `map`
/// started from one of its threads.
pub(crate) enum Urgent {
    Call(Arc<Slot>),
    Map(Arc<crate::map::MapState>),
}

impl Urgent {
    fn live(&self) -> bool {
        match self {
            Urgent::Call(slot) => slot.claimable(),
            Urgent::Map(map) => map.claimable(),
        }
    }

    fn awaited(&self) -> bool {
        match self {
            Urgent::Call(slot) => slot.is_awaited(),
            Urgent::Map(map) => map.is_awaited(),
        }
    }

    /// Runs the work on this thread, on a place counted as `kind`; returns
    /// the item again if work of it is left.
    fn run(self, places: &Arc<Places>, kind: Kind) -> Option<Urgent> {
        match self {
            Urgent::Call(slot) => {
                match slot.claim() {
                    Some(call) => crate::call::run_claimed(call, &slot, places, kind, false),
                    None => places.give(kind),
                }
                None
            }
            Urgent::Map(map) => {
                crate::map::run_chunks_holding(&map, places, kind);
                map.claimable().then_some(Urgent::Map(map))
            }
        }
    }
}

/// Which place a call executes on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Own,
    /// A place lent by a waiting call that executes on its own place.
    Lent,
    /// A place passed on by a waiting borrower: only for what some call
    /// waits for, never for an inner call nobody waits for yet (a
    /// borrower's siblings would otherwise each borrow it in turn, wait,
    /// and pass it on again: threads growing with fan-out one level down).
    Relent,
}

/// What a region does with the call's place.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RegionKind {
    /// A wait on the pool's own work: the place is lent to inner calls.
    Wait,
    /// `wspool.blocking()`: the place is free for any call.
    Blocking,
}

#[derive(Default)]
struct State {
    own: usize,
    /// Calls holding a `Lent` / `Relent` place (executing or waiting).
    lent: usize,
    relent: usize,
    /// Waiting calls offering their place: `lending_own` their own (to
    /// inner or awaited calls), `lending_on` the one they borrowed (to
    /// awaited calls only).
    lending_own: usize,
    lending_on: usize,
    sleepers: usize,
    /// Inner calls and calls waited for, not started, newest last: the
    /// most deeply nested work is taken first.
    urgent: VecDeque<Urgent>,
    /// Calls submitted from outside the pool, not started, oldest first:
    /// whichever of their pool tasks a thread runs starts the oldest, so
    /// they start in submission order, as on `ThreadPoolExecutor` (the core
    /// takes global work in batches, and a batch taken by a thread that
    /// blocks would otherwise wait behind it while later calls start).
    outer: VecDeque<Arc<Slot>>,
}

impl State {
    /// Places nobody holds: every place is held by a call executing on it
    /// or lending it; borrowers beyond the places offered (their lender's
    /// wait ended first) are how far the pool is over the bound.
    fn free(&self, n: usize) -> isize {
        n as isize
            - self.own as isize
            - self.lending_own as isize
            - self.lent.saturating_sub(self.lending_own) as isize
            - self.relent.saturating_sub(self.lending_on) as isize
    }

    /// The place a call may borrow: `inner` (submitted from the pool's
    /// threads) or `awaited` (some waiting call of the pool waits for it).
    fn borrowable(&self, inner: bool, awaited: bool) -> Option<Kind> {
        if awaited && self.relent < self.lending_on {
            Some(Kind::Relent)
        } else if (inner || awaited) && self.lent < self.lending_own {
            Some(Kind::Lent)
        } else {
            None
        }
    }
}

pub(crate) struct Places {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

/// The place a call on this thread holds, and its open regions. A stack: a
/// call run nested on this thread (an urgent call at the thread cap, or
/// `reject="caller_runs"`) pushes its own entry.
struct Held {
    places: Arc<Places>,
    kind: Kind,
    depth: u32,
    region: Option<RegionKind>,
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

impl Places {
    pub(crate) fn new(n: usize) -> Arc<Places> {
        Arc::new(Places { n, state: Mutex::new(State::default()), cv: Condvar::new() })
    }

    fn wake(&self, st: &State) {
        if st.sleepers > 0 {
            self.cv.notify_all();
        }
    }

    /// Takes a place for a call about to start (the caller is detached).
    /// `inner`: submitted from one of the pool's threads, so it may borrow
    /// a lent place. Urgent calls are run first, on this thread, whenever
    /// one could start; while no place is free the thread counts as waiting.
    pub(crate) fn take(self: &Arc<Self>, inner: bool, awaited: &dyn Fn() -> bool) -> Kind {
        let mut st = lock(&self.state);
        let kind = loop {
            if let Some(item) = st.urgent.pop_back() {
                if !item.live() {
                    continue;
                }
                let kind = st.borrowable(true, item.awaited()).or((st.free(self.n) > 0).then_some(Kind::Own));
                match kind {
                    None => st.urgent.push_back(item),
                    Some(kind) => {
                        self.count_in(&mut st, kind);
                        drop(st);
                        let again = item.run(self, kind);
                        st = lock(&self.state);
                        if let Some(again) = again {
                            st.urgent.push_back(again);
                        }
                        continue;
                    }
                }
            }
            if let Some(kind) = st.borrowable(inner, awaited()) {
                break kind;
            }
            if st.free(self.n) > 0 {
                break Kind::Own;
            }
            // Not counted as waiting for the core: a thread lent now would
            // only take another call from outside and wait here too. What
            // the waiting calls wait for is inner work, which is on the
            // urgent list, and runs here as soon as a place can be lent.
            st.sleepers += 1;
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            st.sleepers -= 1;
        };
        self.count_in(&mut st, kind);
        kind
    }

    fn count_in(&self, st: &mut State, kind: Kind) {
        match kind {
            Kind::Own => st.own += 1,
            Kind::Lent => st.lent += 1,
            Kind::Relent => st.relent += 1,
        }
    }

    /// A call's place comes back.
    pub(crate) fn give(&self, kind: Kind) {
        let mut st = lock(&self.state);
        match kind {
            Kind::Own => st.own -= 1,
            Kind::Lent => st.lent -= 1,
            Kind::Relent => st.relent -= 1,
        }
        self.wake(&st);
    }

    /// Takes a place without waiting for one, for the work a waiter at the
    /// thread cap runs itself (its own place is lent meanwhile).
    pub(crate) fn borrow_now(&self) -> Kind {
        let mut st = lock(&self.state);
        let kind = st.borrowable(true, true).unwrap_or(Kind::Relent);
        self.count_in(&mut st, kind);
        kind
    }

    /// `slot`'s call is waited for by a call of this pool: run it before
    /// calls from outside.
    pub(crate) fn push_urgent(&self, item: Urgent) {
        let mut st = lock(&self.state);
        // Work that started meanwhile leaves from both ends as it is met.
        while st.urgent.front().is_some_and(|u| !u.live()) {
            st.urgent.pop_front();
        }
        st.urgent.push_back(item);
        self.wake(&st);
    }

    /// Something became borrowable (a call is now waited for): threads
    /// waiting for a place look again.
    pub(crate) fn poke(&self) {
        let st = lock(&self.state);
        self.wake(&st);
    }

    /// A call from outside the pool joins the queue of outer calls.
    pub(crate) fn push_outer(&self, slot: Arc<Slot>) {
        lock(&self.state).outer.push_back(slot);
    }

    /// The oldest outer call not started, claimed.
    pub(crate) fn claim_oldest_outer(&self) -> Option<(Arc<Slot>, crate::call::Call)> {
        let mut st = lock(&self.state);
        while let Some(slot) = st.outer.pop_front() {
            if let Some(call) = slot.claim() {
                return Some((slot, call));
            }
        }
        None
    }

    pub(crate) fn outer_pending(&self) -> bool {
        !lock(&self.state).outer.is_empty()
    }

    /// Runs `f` (a call) holding a place taken first (the caller is
    /// detached). A thread that already holds one for this pool without
    /// being in a region (a call run inline by `reject="caller_runs"`
    /// inside another call) does not take a second.
    pub(crate) fn run<R>(self: &Arc<Self>, inner: bool, awaited: &dyn Fn() -> bool, f: impl FnOnce() -> R) -> R {
        let nested_in_call = HELD.with(|h| h.borrow().last().is_some_and(|held| held.depth == 0));
        if nested_in_call {
            return f();
        }
        let kind = self.take(inner, awaited);
        self.run_holding(kind, f)
    }

    /// Runs `f` on a place already counted as `kind`; gives it back after
    /// (also on unwinding: a place is never lost).
    pub(crate) fn run_holding<R>(self: &Arc<Self>, kind: Kind, f: impl FnOnce() -> R) -> R {
        HELD.with(|h| h.borrow_mut().push(Held { places: self.clone(), kind, depth: 0, region: None }));
        struct Give;
        impl Drop for Give {
            fn drop(&mut self) {
                if let Some(held) = HELD.with(|h| h.borrow_mut().pop()) {
                    if held.depth > 0 {
                        // A region left open by the call: closed with it.
                        held.places.leave(held.kind, held.region);
                    }
                    held.places.give(held.kind);
                }
            }
        }
        let _give = Give;
        f()
    }

    fn enter(&self, kind: Kind, region: RegionKind) {
        let mut st = lock(&self.state);
        match (region, kind) {
            (RegionKind::Wait, Kind::Own) => {
                st.own -= 1;
                st.lending_own += 1;
            }
            // A borrower passes on what it borrowed: it stays counted as a
            // borrower, so its lender's place is not lent twice.
            (RegionKind::Wait, _) => st.lending_on += 1,
            (RegionKind::Blocking, Kind::Own) => st.own -= 1,
            (RegionKind::Blocking, Kind::Lent) => st.lent -= 1,
            (RegionKind::Blocking, Kind::Relent) => st.relent -= 1,
        }
        self.wake(&st);
    }

    /// The end of a region: the place is back at once, never waited for.
    fn leave(&self, kind: Kind, region: Option<RegionKind>) {
        let mut st = lock(&self.state);
        match (region, kind) {
            (Some(RegionKind::Wait), Kind::Own) => {
                st.lending_own -= 1;
                st.own += 1;
            }
            (Some(RegionKind::Wait), _) => st.lending_on -= 1,
            (Some(RegionKind::Blocking), Kind::Own) => st.own += 1,
            (Some(RegionKind::Blocking), Kind::Lent) => st.lent += 1,
            (Some(RegionKind::Blocking), Kind::Relent) => st.relent += 1,
            (None, _) => {}
        }
    }

    /// Calls executing now (a diagnostic; at most `max_workers` but for the
    /// calls resumed over the bound, see the module comment).
    pub(crate) fn executing(&self) -> usize {
        let st = lock(&self.state);
        // Borrowers in waits still hold what they borrowed.
        st.own + st.lent + st.relent - st.lending_on
    }
}

/// The calling thread enters a region. `of`: the pool whose work a wait
/// waits on (a wait on another pool's work is no region of this call);
/// None for `blocking()`, which applies to whatever call the thread runs.
/// Never blocks. Returns whether the thread runs a call holding a place.
pub(crate) fn region_enter(region: RegionKind, of: Option<&Arc<Places>>) -> bool {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let Some(held) = h.last_mut() else { return false };
        if let Some(p) = of
            && !Arc::ptr_eq(p, &held.places)
        {
            return false;
        }
        held.depth += 1;
        if held.depth == 1 {
            held.region = Some(region);
            held.places.enter(held.kind, region);
        }
        true
    })
}

/// The calling thread leaves the region `region_enter` opened (the same
/// `of`). Never blocks: the place is taken back at once.
pub(crate) fn region_leave(of: Option<&Arc<Places>>) {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let Some(held) = h.last_mut() else { return };
        if let Some(p) = of
            && !Arc::ptr_eq(p, &held.places)
        {
            return;
        }
        if held.depth == 0 {
            return; // unbalanced: ignored, as blocking_end does
        }
        held.depth -= 1;
        if held.depth == 0 {
            held.places.leave(held.kind, held.region.take());
        }
    });
}
