//! Parking and waking workers. Items are `pub` only so the loom models can
//! reach them under `--cfg loom`; the module itself is private. The protocol is written up in `README.md`
//! next to this file; the `loom` model in `core/tests/loom.rs` checks it.

mod debounce;

pub(crate) use debounce::Debounce;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, AtomicUsize, Condvar, Mutex, fence, lock_model as lock};

/// One sleeping worker adds this to `Sleep::state`.
const SLEEPER: u64 = 1 << 32;
const SEARCHER: u64 = 1;

fn searching(state: u64) -> usize {
    (state & 0xFFFF_FFFF) as usize
}

fn sleeping(state: u64) -> usize {
    (state >> 32) as usize
}

/// How a `park` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// Someone handed this worker a wake-up (or it found work before
    /// sleeping). The worker is now counted as searching.
    Notified {
        /// The CPU the waking thread ran on, if it woke the worker from its
        /// sleep and the platform says.
        from_cpu: Option<usize>,
    },
    /// The timeout passed with no wake-up. The worker is counted as
    /// searching: it must either search or retire through `stop_searching`.
    TimedOut,
}

/// The pool's idle bookkeeping.
pub struct Sleep {
    /// Low 32 bits: workers searching for work (woken and not yet busy, or
    /// out of local work and scanning). High 32 bits: workers parked, which
    /// is always `sleepers.len()` once the `sleepers` lock is released.
    ///
    /// Invariant (no lost wake-up): a submitter that pushed a job and then
    /// read `state` (after a SeqCst fence) either sees a searcher, which is
    /// guaranteed to re-scan the queues after it stops searching, or wakes a
    /// sleeper. Every transition into "sleeping" is a SeqCst RMW here
    /// followed by a re-scan of the queues.
    state: AtomicU64,
    /// Parked workers: idle ones, and waiters (see [`Lists`]).
    sleepers: Mutex<Lists>,
    /// `waiters.len()`, readable without the lock: a push checks it before
    /// looking for a waiter of its region. On a line of its own: waiters
    /// write it at every park, submitters read `state` at every push.
    waiting: CachePadded<AtomicUsize>,
    /// Which regions have a waiter parked: the OR of [`region_bit`] over
    /// `waiters` (`NO_REGION` adds nothing), rewritten under the `sleepers`
    /// lock whenever the list changes, so it is exact up to hash
    /// collisions. A push of region work reads it with one load and takes
    /// the lock only when its region's bit is set (README rule 2): a pool
    /// with no region waiter parked pays one load of a line that only
    /// waiters write.
    waiter_regions: CachePadded<AtomicU64>,
    /// Workers in a debounce spin: idle, neither searching nor parked, and
    /// looking at the global queue (README rule 5). Capped at half the live
    /// workers. A global push that sees one wakes nobody (`notify_global`):
    /// the spinner takes the job, or hands the wake-up on when it stops.
    /// On a line of its own: spinners write it once per spin, and it must
    /// not share one with `state`.
    spinning: CachePadded<AtomicUsize>,
    /// One parker per worker slot.
    parkers: Box<[Parker]>,
}

/// Parked workers, in two lists so that new work wakes an idle worker
/// before a waiter (a waiter can run only work of its own region, and
/// would otherwise be handed unrelated work while an idle worker sleeps).
pub struct Lists {
    /// Idle workers, most recent last (woken first: warm cache). Counted
    /// in the high half of `state`.
    idle: Vec<usize>,
    /// Workers parked inside a wait, with the isolation region whose work
    /// they may run (`NO_REGION`: none). Not counted in `state`: they are
    /// neither idle nor searching.
    waiters: Vec<(usize, u64)>,
}

/// A waiter that runs no work while it waits (a timed wait, a wait inside
/// a blocking region): only its latch wakes it.
pub const NO_REGION: u64 = 0;

/// A region's bit in `Sleep::waiter_regions` (0 for `NO_REGION`): one of
/// 64, by a multiplicative hash, since regions are counted per thread and
/// their low bits alone would collide for every thread's n-th region.
#[inline]
fn region_bit(region: u64) -> u64 {
    if region == NO_REGION { 0 } else { 1 << (region.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) }
}

impl Sleep {
    /// Bookkeeping for `slots` workers.
    pub fn new(slots: usize) -> Sleep {
        Sleep {
            state: AtomicU64::new(0),
            sleepers: Mutex::new(Lists { idle: Vec::with_capacity(slots), waiters: Vec::new() }),
            waiting: CachePadded::new(AtomicUsize::new(0)),
            waiter_regions: CachePadded::new(AtomicU64::new(0)),
            spinning: CachePadded::new(AtomicUsize::new(0)),
            parkers: (0..slots).map(|_| Parker::new()).collect(),
        }
    }

    /// Workers parked inside a wait now (for the loom models).
    #[cfg(loom)]
    pub fn waiters(&self) -> usize {
        self.waiting.load(SeqCst)
    }

    /// (searching, sleeping)
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state.load(SeqCst);
        (searching(s), sleeping(s))
    }

    /// A worker out of local work asks to search. At most half the live
    /// workers search at once (tokio's cap), so a burst of idle workers does
    /// not hammer the injector and each other's deques.
    pub fn try_start_searching(&self, live_workers: usize) -> bool {
        let s = self.state.load(SeqCst);
        if 2 * searching(s) >= live_workers.max(1) {
            return false;
        }
        self.state.fetch_add(SEARCHER, SeqCst);
        true
    }

    /// An idle worker asks to spin. At most half the live workers (at least
    /// one) spin at once: more find nothing more, and only take cores from
    /// the threads that make the work (a submitter sharing 2 cores with 2
    /// spinning workers gets two thirds of one).
    pub fn try_start_spinning(&self, live_workers: usize) -> bool {
        if self.spinning.fetch_add(1, SeqCst) >= (live_workers / 2).max(1) {
            self.spinning.fetch_sub(1, SeqCst);
            return false;
        }
        true
    }

    /// The spinner found work or gave up. Returns true when it was the last
    /// spinner: a global push may have skipped its wake-up because of it,
    /// so the caller must then re-check the global queue and call
    /// [`Sleep::notify_global`] if global work is visible (one that gave up
    /// parks instead, and its park re-scans).
    pub fn stop_spinning(&self) -> bool {
        let last = self.spinning.fetch_sub(1, SeqCst) == 1;
        if last {
            // Order the decrement before the caller's re-check (pairs with
            // the submitter's fence before it reads `spinning`).
            fence(SeqCst);
        }
        last
    }

    /// Workers spinning now.
    pub fn spinners(&self) -> usize {
        self.spinning.load(SeqCst)
    }

    /// A new thread is born searching (it will scan the queues first thing).
    pub fn add_searcher(&self) {
        self.state.fetch_add(SEARCHER, SeqCst);
    }

    /// The worker found work or is leaving. Returns true when it was the last
    /// searcher: the caller must then re-check the queues and call
    /// [`Sleep::notify_one`] if work is visible, so remaining work is not left
    /// waiting for the next submission.
    pub fn stop_searching(&self) -> bool {
        let last = searching(self.state.fetch_sub(SEARCHER, SeqCst)) == 1;
        if last {
            // Order the decrement before the caller's scan of the queues
            // (pairs with the submitter's fence; loom checks fence pairs).
            fence(SeqCst);
        }
        last
    }

    /// Called after publishing work: wakes one sleeper, but only when
    /// nobody is already searching (no thundering herd). The caller must
    /// order its publication before this call with a SeqCst fence (or, in
    /// production, a SeqCst read-modify-write such as the injector's push,
    /// which x86 and the C++20 model both order like one).
    pub fn notify_one(&self) -> bool {
        let s = self.state.load(SeqCst);
        if searching(s) > 0 || sleeping(s) == 0 {
            return false;
        }
        self.wake_sleeper(true)
    }

    /// [`Sleep::notify_one`] for work published to the global queue, which
    /// a spinning worker looks at too: wakes nobody while one spins (no
    /// system call while an awake worker is about to take the job). The
    /// last spinner to stop hands the wake-up on (`stop_spinning`).
    #[inline]
    pub fn notify_global(&self) -> bool {
        // Same fence as notify_one: the caller's, before both loads.
        // `spinning` is read only when a wake-up is otherwise due: spinners
        // write it at every spin, so reading it on every push would cost a
        // flood's submitter a cache miss per task.
        let s = self.state.load(SeqCst);
        if searching(s) > 0 || sleeping(s) == 0 || self.spinning.load(SeqCst) > 0 {
            return false;
        }
        self.wake_sleeper(true)
    }

    /// After a pool thread pushed work of its isolation `region` onto an
    /// empty deque or the global queue (and fenced, as for
    /// [`Sleep::notify_one`]): wakes an idle worker if nobody searches (a
    /// searcher will find the job), and also a parked waiter of the same
    /// region if there is one (README rule 2): the waiter may run the job
    /// and is otherwise asleep, while the idle worker or the searcher may
    /// take other work first and leave this job queued behind it.
    pub fn notify_for_push(&self, region: u64) -> bool {
        let s = self.state.load(SeqCst);
        let woke_idle = searching(s) == 0 && sleeping(s) > 0 && self.wake_sleeper(true);
        self.wake_waiter_of(region) || woke_idle
    }

    /// After a pool thread pushed work of its `region` onto a deque that
    /// was not empty (rayon's rule: an earlier push already offered work to
    /// idle workers): wakes a parked waiter of that region, if one exists,
    /// so it helps instead of sleeping while the job waits behind the
    /// pusher's task. One load when no such waiter is parked. No fence
    /// before that load (a fence per push is what rayon's rule saves): a
    /// waiter registering at that very moment can miss this push, if its
    /// re-check also misses it (the push still in the pusher's store
    /// buffer); the job then runs when the pusher or a thief next looks at
    /// that deque, as every job pushed onto a non-empty deque does.
    #[inline]
    pub fn notify_waiter_for_push(&self, region: u64) -> bool {
        // The common case, no waiter parked at all, costs a load and a
        // branch, the bit test is out of line (callgrind, W2 `join` on one
        // worker, instructions per task: 186.8 before this rule, 197.8 with
        // the bit computed inline, 190.8 so).
        if self.waiter_regions.load(SeqCst) == 0 {
            return false;
        }
        self.wake_waiter_of(region)
    }

    /// The local-push half of the Dekker pair: the caller has just pushed
    /// onto its own deque (a Release store); the SeqCst fence orders that
    /// store before the read of `state`, as a parking worker's fence orders
    /// its registration before its re-scan. Remove it and both sides can
    /// miss each other (`core/tests/loom.rs`, `local_push_races_park`).
    #[inline]
    pub fn notify_after_local_push(&self, region: u64) -> bool {
        // `make test-loom` also runs the models without this fence
        // (the mutant wspool_mutant_no_push_fence, `sync::mutant!`) and
        // requires them to fail.
        if !crate::sync::mutant!(wspool_mutant_no_push_fence) {
            fence(SeqCst);
        }
        self.notify_for_push(region)
    }

    /// Wakes a parked waiter of `region`, if any. Also used for a job of
    /// `region` met in the global queue by another waiter (`wait.rs`).
    #[inline]
    pub fn wake_waiter_of(&self, region: u64) -> bool {
        // SeqCst, after the caller's fence (or SeqCst push): pairs with the
        // waiter's SeqCst update of `waiter_regions` and the fence before
        // its re-check, as `state` does for idle workers.
        let bits = self.waiter_regions.load(SeqCst);
        if bits == 0 {
            return false;
        }
        self.wake_waiter_in(bits, region)
    }

    #[cold]
    #[inline(never)]
    fn wake_waiter_in(&self, bits: u64, region: u64) -> bool {
        if bits & region_bit(region) == 0 {
            return false;
        }
        let index = {
            let mut lists = lock(&self.sleepers);
            let Some(pos) = lists.waiters.iter().rposition(|&(_, r)| r == region) else {
                return false;
            };
            self.waiting.fetch_sub(1, SeqCst);
            let index = lists.waiters.swap_remove(pos).0;
            self.rewrite_waiter_regions(&lists);
            index
        };
        self.parkers[index].unpark();
        true
    }

    /// `waiter_regions` from the list; called under the `sleepers` lock,
    /// which every writer holds, so no update is lost.
    fn rewrite_waiter_regions(&self, lists: &Lists) {
        let bits = lists.waiters.iter().fold(0, |bits, &(_, r)| bits | region_bit(r));
        self.waiter_regions.store(bits, SeqCst);
    }

    /// Wakes everybody (shutdown).
    pub fn notify_all(&self) {
        while self.wake_sleeper(false) {}
    }

    fn wake_sleeper(&self, only_if_no_searcher: bool) -> bool {
        let index = {
            let mut lists = lock(&self.sleepers);
            if only_if_no_searcher && searching(self.state.load(SeqCst)) > 0 {
                return false;
            }
            let Some(index) = lists.idle.pop() else {
                return false;
            };
            // sleeping - 1, searching + 1: the woken worker searches.
            self.state.fetch_add(SEARCHER.wrapping_sub(SLEEPER), SeqCst);
            index
        };
        self.parkers[index].unpark();
        true
    }

    /// Wakes worker `index` if it is parked (a latch it waits on was set).
    /// A no-op when it is awake: it re-checks its latch before parking.
    pub fn wake_worker(&self, index: usize) -> bool {
        if self.cancel_wait(index) || self.cancel_sleep(index) {
            self.parkers[index].unpark();
            true
        } else {
            false
        }
    }

    /// Takes `index` off the idle list if nobody has woken it yet.
    /// On success the worker counts as searching again.
    fn cancel_sleep(&self, index: usize) -> bool {
        let mut lists = lock(&self.sleepers);
        match lists.idle.iter().rposition(|&i| i == index) {
            Some(pos) => {
                lists.idle.swap_remove(pos);
                self.state.fetch_add(SEARCHER.wrapping_sub(SLEEPER), SeqCst);
                true
            }
            None => false,
        }
    }

    /// Takes `index` off the waiters list if nobody has woken it yet.
    fn cancel_wait(&self, index: usize) -> bool {
        // The caller changed a condition (set a latch) that the waiter
        // re-checks after registering: fence so this read and that re-check
        // cannot both miss (the waiter fences in `park_waiter`).
        fence(SeqCst);
        if self.waiting.load(SeqCst) == 0 {
            return false;
        }
        let mut lists = lock(&self.sleepers);
        match lists.waiters.iter().position(|&(i, _)| i == index) {
            Some(pos) => {
                lists.waiters.swap_remove(pos);
                self.waiting.fetch_sub(1, SeqCst);
                self.rewrite_waiter_regions(&lists);
                true
            }
            None => false,
        }
    }

    /// Parks worker `index` inside a wait. It is woken by `wake_worker`
    /// (its latch was set), by work of its `region` (`NO_REGION`: never)
    /// pushed onto a deque or the global queue ([`Sleep::notify_for_push`],
    /// [`Sleep::notify_waiter_for_push`]) or met in the global queue by
    /// another waiter ([`Sleep::wake_waiter_of`]), or by the timeout.
    /// `ready` re-checks the latch and the region's work after the worker
    /// is registered (the same Dekker argument as [`Sleep::park`]). A
    /// waiter is neither idle nor searching: it never takes a submitter's
    /// wake-up from an idle worker.
    pub fn park_waiter(&self, index: usize, region: u64, timeout: Option<Duration>, ready: impl Fn() -> bool) -> Wake {
        {
            let mut lists = lock(&self.sleepers);
            lists.waiters.push((index, region));
            self.waiter_regions.fetch_or(region_bit(region), SeqCst);
            self.waiting.fetch_add(1, SeqCst);
        }
        fence(SeqCst);
        if ready() && self.cancel_wait(index) {
            return Wake::Notified { from_cpu: None };
        }
        let parker = &self.parkers[index];
        if let Some(from_cpu) = parker.park(timeout) {
            return Wake::Notified { from_cpu };
        }
        if self.cancel_wait(index) {
            return Wake::TimedOut;
        }
        // A waker took us off the list between the timeout and
        // `cancel_wait`; its unpark is on its way. Consume it.
        Wake::Notified { from_cpu: parker.park(None).flatten() }
    }

    /// Parks worker `index`. `was_searching` says whether it currently counts
    /// as a searcher. After the worker is registered as sleeping,
    /// `recheck(scan_queues)` says whether to stay awake: it must always
    /// check what ends a sleep without a push (shutdown), and scan the
    /// queues only when `scan_queues`, which is when no searcher remains
    /// (tokio's rule: only the last searcher to park scans). That closes the
    /// race with a submitter that read `state` before this registration: it
    /// either saw a searcher, which scans before it parks or stops searching
    /// (`stop_searching`), or saw none, and then this worker scans. So n
    /// workers going idle together cost one scan of every queue, not n.
    /// `timeout` bounds the sleep (idle retirement).
    pub fn park(
        &self,
        index: usize,
        was_searching: bool,
        timeout: Option<Duration>,
        recheck: impl Fn(bool) -> bool,
    ) -> Wake {
        let searchers_left = {
            let mut lists = lock(&self.sleepers);
            lists.idle.push(index);
            let delta = if was_searching { SLEEPER.wrapping_sub(SEARCHER) } else { SLEEPER };
            searching(self.state.fetch_add(delta, SeqCst).wrapping_add(delta))
        };
        // Registered as sleeping before the re-scan below: pairs with the
        // fence (or SeqCst push) a submitter issues before reading `state`.
        fence(SeqCst);
        if recheck(searchers_left == 0) && self.cancel_sleep(index) {
            return Wake::Notified { from_cpu: None };
        }
        let parker = &self.parkers[index];
        if let Some(from_cpu) = parker.park(timeout) {
            return Wake::Notified { from_cpu };
        }
        if self.cancel_sleep(index) {
            return Wake::TimedOut;
        }
        // A waker popped us between the timeout and `cancel_sleep`; its
        // unpark is on its way. Consume it so the next park starts clean.
        Wake::Notified { from_cpu: parker.park(None).flatten() }
    }
}

/// The CPU the calling thread runs on, if the platform says (Linux:
/// `sched_getcpu`, a vDSO or rseq read, no system call). Unknown under
/// Miri, which has no `sched_getcpu` and no CPUs to tell apart: the
/// debounce then judges every wake-up as from another CPU, as it does on
/// platforms without the call.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments, no memory.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

#[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
pub(crate) fn current_cpu() -> Option<usize> {
    None
}

/// A one-shot wake-up per worker: `Some(the waker's CPU, if known)` while
/// one is pending.
struct Parker {
    notified: Mutex<Option<Option<usize>>>,
    cv: Condvar,
}

impl Parker {
    fn new() -> Parker {
        Parker { notified: Mutex::new(None), cv: Condvar::new() }
    }

    /// Consumes the wake-up and returns the waker's CPU (if known), or None
    /// on timeout.
    fn park(&self, timeout: Option<Duration>) -> Option<Option<usize>> {
        let mut notified = lock(&self.notified);
        #[cfg(not(loom))]
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        while notified.is_none() {
            match timeout {
                #[cfg(not(loom))]
                Some(_) => {
                    let now = std::time::Instant::now();
                    let deadline = deadline.unwrap_or(now);
                    if now >= deadline {
                        return None;
                    }
                    notified = match self.cv.wait_timeout(notified, deadline - now) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
                // Under loom a timeout is modelled as "may time out at once".
                #[cfg(loom)]
                Some(_) => return None,
                None => {
                    notified = match self.cv.wait(notified) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                }
            }
        }
        notified.take()
    }

    /// Signals after unlocking: a parker woken while the notifier still
    /// held the lock would find it taken, sleep on it, and cost the
    /// notifier's unlock a second futex wake (profiled in a flood: 4 % of
    /// the time in the contended lock path under `park`). No wake-up is
    /// lost: a parker checks the flag under the lock and releases it only
    /// inside `wait`, so it either sees the flag or is already waiting
    /// when the signal comes.
    fn unpark(&self) {
        let cpu = current_cpu();
        *lock(&self.notified) = Some(cpu);
        self.cv.notify_one();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn notify_skips_when_searching_and_wakes_when_not() {
        let sleep = Arc::new(Sleep::new(2));
        sleep.add_searcher();
        assert!(!sleep.notify_one(), "nobody sleeps yet");
        let s2 = sleep.clone();
        let t = std::thread::spawn(move || s2.park(0, true, None, |_| false));
        while sleep.counts().1 == 0 {
            std::thread::yield_now();
        }
        assert_eq!(sleep.counts(), (0, 1));
        sleep.add_searcher();
        assert!(!sleep.notify_one(), "a searcher exists: no wake");
        assert!(sleep.stop_searching(), "was the last searcher");
        assert!(sleep.notify_one());
        assert!(matches!(t.join().unwrap(), Wake::Notified { .. }));
        assert_eq!(sleep.counts(), (1, 0), "the woken worker searches");
    }

    #[test]
    fn park_times_out_and_counts_as_searching() {
        let sleep = Sleep::new(1);
        let r = sleep.park(0, false, Some(Duration::from_millis(5)), |_| false);
        assert_eq!(r, Wake::TimedOut);
        assert_eq!(sleep.counts(), (1, 0));
        assert!(sleep.stop_searching());
    }

    #[test]
    fn park_rechecks_work_before_sleeping() {
        let sleep = Sleep::new(1);
        let r = sleep.park(0, false, None, |scan| scan);
        assert!(matches!(r, Wake::Notified { .. }));
        assert_eq!(sleep.counts(), (1, 0));
    }

    #[test]
    fn searching_is_capped_at_half_the_workers() {
        let sleep = Sleep::new(4);
        assert!(sleep.try_start_searching(4));
        assert!(sleep.try_start_searching(4));
        assert!(!sleep.try_start_searching(4));
        assert!(!sleep.stop_searching());
        assert!(sleep.stop_searching());
    }

    #[test]
    fn spinning_is_capped_at_half_the_workers_and_at_least_one() {
        let sleep = Sleep::new(4);
        assert!(sleep.try_start_spinning(1), "a lone worker may spin");
        assert!(!sleep.try_start_spinning(1));
        assert!(sleep.stop_spinning(), "was the last spinner");
        assert!(sleep.try_start_spinning(4));
        assert!(sleep.try_start_spinning(4));
        assert!(!sleep.try_start_spinning(4), "half of 4 already spin");
        assert_eq!(sleep.spinners(), 2);
        assert!(!sleep.stop_spinning());
        assert!(sleep.stop_spinning());
        assert_eq!(sleep.spinners(), 0);
    }

    #[test]
    fn a_global_push_wakes_nobody_while_a_worker_spins() {
        let sleep = Arc::new(Sleep::new(2));
        let s2 = sleep.clone();
        let t = std::thread::spawn(move || s2.park(1, false, None, |_| false));
        while sleep.counts().1 == 0 {
            std::thread::yield_now();
        }
        assert!(sleep.try_start_spinning(2));
        assert!(!sleep.notify_global(), "the spinner takes global work");
        assert!(sleep.stop_spinning());
        assert!(sleep.notify_global(), "nobody spins: the sleeper is woken");
        assert!(matches!(t.join().unwrap(), Wake::Notified { .. }));
    }

    #[test]
    fn notify_all_wakes_every_sleeper() {
        let sleep = Arc::new(Sleep::new(3));
        let done = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let s = sleep.clone();
                let d = done.clone();
                std::thread::spawn(move || {
                    let w = s.park(i, false, None, |_| false);
                    d.store(true, Ordering::SeqCst);
                    w
                })
            })
            .collect();
        while sleep.counts().1 < 3 {
            std::thread::yield_now();
        }
        sleep.notify_all();
        for t in threads {
            assert!(matches!(t.join().unwrap(), Wake::Notified { .. }));
        }
        assert_eq!(sleep.counts(), (3, 0));
    }
}
