//! Completion queues: hand work to the pool from an event loop and get each
//! result back *on the loop's thread*.
//!
//! A [`CompletionQueue<T>`] carries one payload `T` per submission. The work
//! runs on a pool thread with `&mut T`; the payload then comes back, with a
//! [`CqStatus`], through [`CompletionQueue::drain`], which the loop calls
//! when the queue's wake-up fires. Every accepted submission comes back
//! exactly once: ran, panicked, or cancelled (the core's "closure dropped
//! unrun" path, taken by `Shutdown::Cancel` and `DiscardOldest`, and this
//! queue's own `close(Cancel)`). A refused submission never comes back: the
//! caller gets its payload in the error.
//!
//! Wake-up: the queue's file descriptor ([`CompletionQueue::fd`], an eventfd
//! on Linux, a pipe elsewhere) is readable while something is ready to
//! drain. It is set on the empty -> non-empty transition (one wake per
//! batch, not per task) and cleared by `drain` itself when it leaves the
//! queue empty, so the loop never reads it. Neither system call is made
//! under the queue's lock: a pool thread preempted inside its `write` would
//! otherwise stall the loop on that lock, and on a loaded machine the loop
//! waking up is what preempts it. The price is a brief stale readiness: a
//! completion drained before its thread got to `write` leaves the fd
//! readable on an empty queue until that thread, right after its `write`,
//! sees the queue empty with no wake-up owed and clears it (a loop woken
//! meanwhile drains nothing). No wake-up is ever lost: `drain` clears the
//! fd only after finding the queue empty, and checks it is still empty
//! after clearing. With a wake
//! callback instead ([`CqOptions::wake`], for `uv_async_send` and the like)
//! the callback runs on the same transition, on the thread that made it, and
//! again after a bounded drain that left work behind.
//!
//! Back-pressure: an optional cap on pending submissions (refused past it,
//! [`CqSignal::HighWater`] at `high_water`, [`CqSignal::LowWater`] back at
//! `low_water`) and a CoDel-style overload signal from queue delay (see
//! [`codel`]; [`CompletionQueue::overloaded`] is its admission test). Signals
//! are delivered by `drain`, ahead of the completions drained with them.
//!
//! Hot path: payloads travel in recycled boxed nodes (a free list), and the
//! job handed to the pool is two words plus the work closure, inline in the
//! pool's job slot when that closure captures at most two words: after
//! warm-up the queue allocates nothing per submission (the pool's global
//! queue still allocates a block now and then; `tests/cq_alloc.rs`).

mod codel;
mod spawner;
mod take_back;
mod types;
mod wake;

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Relaxed, SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{ShutdownTimedOut, SubmitErrorKind};
use crate::pool::Pool;
use crate::sync::lock;

use codel::Codel;
pub use codel::{DEFAULT_OVERLOAD_INTERVAL, DEFAULT_OVERLOAD_TARGET};
use spawner::{Detached, Handled, Spawner};
use take_back::{TAKE_BACK_ARMED, TAKE_BACK_NODE, take_back};
pub use types::{CloseMode, CqEvent, CqOptions, CqRefusal, CqSignal, CqStatus, CqSubmitError};
use wake::Wake;

/// A recycled carrier of one payload.
struct Node<T> {
    item: Option<T>,
    status: CqStatus,
    /// Submission time, ns since the queue's epoch (queue delay).
    submitted_ns: u64,
}

/// Free nodes kept for reuse; more are freed.
const FREE_MAX: usize = 1024;

struct Ready<T> {
    done: VecDeque<Box<Node<T>>>,
    signals: VecDeque<CqSignal>,
    /// The wake-up is set (fd readable / callback owed a drain).
    signaled: bool,
    /// `close` is waiting for completions.
    closer_waiting: bool,
}

impl<T> Ready<T> {
    fn is_empty(&self) -> bool {
        self.done.is_empty() && self.signals.is_empty()
    }
}

/// State shared by the handle and the jobs in flight.
struct Inner<T> {
    ready: Mutex<Ready<T>>,
    closed_cv: Condvar,
    free: Mutex<Vec<Box<Node<T>>>>,
    /// Accepted submissions whose completion has not been drained.
    pending: AtomicUsize,
    /// Bumped (under the lock) each time a drain takes back an owed wake-up.
    drains: std::sync::atomic::AtomicU64,
    /// Accepted submissions not yet started (CoDel's queue length).
    queued: AtomicUsize,
    wake: Wake,
    codel: Option<Codel>,
    /// 0 open, 1 closed (drain), 2 closed (cancel).
    closed: std::sync::atomic::AtomicU8,
    above_high: std::sync::atomic::AtomicBool,
    epoch: Instant,
}

impl<T> Inner<T> {
    /// An open queue's shared state, empty.
    fn new(wake: Wake, codel: Option<Codel>) -> Self {
        Inner {
            ready: Mutex::new(Ready {
                done: VecDeque::new(),
                signals: VecDeque::new(),
                signaled: false,
                closer_waiting: false,
            }),
            closed_cv: Condvar::new(),
            free: Mutex::new(Vec::new()),
            pending: AtomicUsize::new(0),
            drains: std::sync::atomic::AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            wake,
            codel,
            closed: std::sync::atomic::AtomicU8::new(OPEN),
            above_high: std::sync::atomic::AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }
}

const OPEN: u8 = 0;
const CLOSED_DRAIN: u8 = 1;
const CLOSED_CANCEL: u8 = 2;

impl<T> Inner<T> {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64
    }

    /// Makes the queue ready (under its lock). `Some` when the caller owes
    /// the loop a wake-up, which it pays with `wake_loop` after dropping the
    /// lock: the drain epoch it saw.
    fn mark_ready(&self, r: &mut Ready<T>) -> Option<u64> {
        if r.closer_waiting {
            self.closed_cv.notify_all();
        }
        (!std::mem::replace(&mut r.signaled, true)).then(|| self.drains.load(SeqCst))
    }

    /// Hands a finished node to the loop.
    fn complete(&self, node: Box<Node<T>>) {
        let wake = {
            let mut r = lock(&self.ready);
            r.done.push_back(node);
            self.mark_ready(&mut r)
        };
        if let Some(seen) = wake {
            self.wake_loop(Some(seen));
        }
    }

    /// Wakes the loop, after the lock is dropped. A drain may have taken
    /// what this wake-up announces before the write landed (the drain epoch
    /// moved since `seen`; `None`: assume it did), leaving the fd readable
    /// on an empty queue: the waker then clears it itself, under the lock,
    /// where "empty and no wake-up owed" is exact.
    fn wake_loop(&self, seen: Option<u64>) {
        self.wake.wake();
        if self.wake.is_callback() {
            return;
        }
        // Pairs with the drain's SeqCst bump before its own clear: either
        // this sees the bump, or that clear comes after this write.
        std::sync::atomic::fence(SeqCst);
        if seen == Some(self.drains.load(SeqCst)) {
            return;
        }
        let r = lock(&self.ready);
        if r.is_empty() && !r.signaled {
            self.wake.clear();
        }
    }

    fn signal(&self, r: &mut MutexGuard<'_, Ready<T>>, s: CqSignal) -> Option<u64> {
        r.signals.push_back(s);
        self.mark_ready(r)
    }

    /// Called on the pool thread when a submission starts.
    fn on_start(&self, submitted_ns: u64) {
        let left = self.queued.fetch_sub(1, AcqRel) - 1;
        if let Some(codel) = &self.codel {
            self.flip(codel, codel.on_start(submitted_ns, self.now_ns(), left));
        }
    }

    /// Called on the submitting thread, `was_queued` not started ahead.
    fn on_submit(&self, now: u64, was_queued: usize) {
        if let Some(codel) = &self.codel {
            self.flip(codel, codel.on_submit(now, was_queued));
        }
    }

    fn flip(&self, codel: &Codel, to: Option<bool>) {
        let Some(overloaded) = to else { return };
        // The state flip and its signal happen under the lock, so the
        // signals alternate in the order the flips happened.
        let wake = {
            let mut r = lock(&self.ready);
            if codel.commit(overloaded) {
                let s = if overloaded { CqSignal::Overloaded } else { CqSignal::Recovered };
                self.signal(&mut r, s)
            } else {
                None
            }
        };
        if let Some(seen) = wake {
            self.wake_loop(Some(seen));
        }
    }

    fn recycle(&self, node: Box<Node<T>>) {
        let mut free = lock(&self.free);
        if free.len() < FREE_MAX {
            free.push(node);
        }
    }
}

/// The job handed to the pool. Dropped unrun, it completes as `Cancelled`.
struct Job<T: Send + 'static> {
    inner: Arc<Inner<T>>,
    node: Option<Box<Node<T>>>,
}

impl<T: Send + 'static> Job<T> {
    fn run(mut self, work: impl FnOnce(&mut T)) {
        let mut node = self.node.take().expect("a job runs once");
        if TAKE_BACK_ARMED.with(Cell::get) {
            // Armed: this is the refused job `take_back` just called, on
            // this thread (nothing runs between its arming and this
            // check), so the guard waiting for the node is a
            // `TakeBack<T>` of this very `T`. Disarmed first: the closure
            // dropped on the way out may submit, and its jobs must run.
            TAKE_BACK_ARMED.with(|a| a.set(false));
            TAKE_BACK_NODE.with(|n| n.set(Box::into_raw(node).cast()));
            return;
        }
        let inner = &self.inner;
        inner.on_start(node.submitted_ns);
        node.status = if inner.closed.load(Relaxed) == CLOSED_CANCEL {
            CqStatus::Cancelled
        } else {
            let item = node.item.as_mut().expect("a submitted node holds its payload");
            match catch_unwind(AssertUnwindSafe(|| work(item))) {
                Ok(()) => CqStatus::Ran,
                Err(p) => {
                    // The panic is reported as a status; its payload may itself panic on drop.
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
                    CqStatus::Panicked
                }
            }
        };
        // Counted before the loop can see the completion.
        crate::stats::count_completion_now();
        inner.complete(node);
    }
}

impl<T: Send + 'static> Drop for Job<T> {
    fn drop(&mut self) {
        // Still holding its node: the pool dropped the job unrun.
        if let Some(mut node) = self.node.take() {
            self.inner.queued.fetch_sub(1, AcqRel);
            // Dropped by its deadline's expiry (`deadline.rs`), or cancelled.
            node.status = if crate::deadline::expiring() { CqStatus::Expired } else { CqStatus::Cancelled };
            self.inner.complete(node);
        }
    }
}

/// Completions taken out of the queue by a `drain` and not yet handed to
/// its callback. Should the callback unwind, they go back to the queue's
/// head, still owed.
struct Unhanded<'a, T> {
    inner: &'a Inner<T>,
    batch: VecDeque<Box<Node<T>>>,
}

impl<T> Drop for Unhanded<'_, T> {
    fn drop(&mut self) {
        if !self.batch.is_empty() {
            let mut r = lock(&self.inner.ready);
            while let Some(node) = self.batch.pop_back() {
                r.done.push_front(node);
            }
            r.signaled = true;
            drop(r);
            self.inner.wake_loop(None);
        }
    }
}

/// A completion queue bound to a pool. See the module documentation.
pub struct CompletionQueue<T: Send + 'static> {
    pool: Pool,
    inner: Arc<Inner<T>>,
    /// `drain`'s batch buffer, kept for its capacity.
    batch: Mutex<VecDeque<Box<Node<T>>>>,
    cap: usize,
    high_water: usize,
    low_water: usize,
    global: bool,
}

impl<T: Send + 'static> std::fmt::Debug for CompletionQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("pending", &self.pending())
            .field("cap", &self.cap)
            .field("overloaded", &self.overloaded())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> CompletionQueue<T> {
    /// A queue on `pool`. Fails only when the wake-up fd cannot be created.
    pub fn new(pool: &Pool, opts: CqOptions) -> std::io::Result<Self> {
        let high_water = if opts.high_water != 0 { opts.high_water } else { opts.cap };
        let low_water = if opts.low_water != 0 { opts.low_water.min(high_water) } else { high_water / 2 };
        let wake = match opts.wake {
            Some(f) => Wake::callback(f),
            None => Wake::fd()?,
        };
        Ok(CompletionQueue {
            pool: pool.clone(),
            inner: Arc::new(Inner::new(wake, opts.overload_target.map(|t| Codel::new(t, opts.overload_interval)))),
            batch: Mutex::new(VecDeque::new()),
            cap: opts.cap,
            high_water,
            low_water,
            global: opts.global,
        })
    }

    /// The pollable file descriptor (readable while there is something to
    /// drain); `None` when the queue wakes its loop through a callback.
    /// Poll it for readability only: `drain` reads and clears it.
    #[cfg(unix)]
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.wake.raw_fd()
    }

    /// Runs `work(&mut item)` on the pool; `item` comes back through
    /// `drain`. Refused (with the item) when closed, full, or when the pool
    /// refuses; a refused submission produces no completion. Should `work`'s
    /// destructor panic while a refused submission is taken back, the panic
    /// leaves this call, `item` is dropped, and the queue is as if the call
    /// had not been made.
    pub fn submit<F>(&self, item: T, work: F) -> Result<(), CqSubmitError<T>>
    where
        F: FnOnce(&mut T) + Send + 'static,
    {
        self.submit_with(crate::pool::SpawnOptions::default(), item, work)
    }

    /// `submit` with the pool's submission options: a deadline (a
    /// submission not started by then completes as [`CqStatus::Expired`]
    /// without running), a group the work counts toward, a serial queue it
    /// runs on; `global` adds to the queue's own. A group or serial queue of
    /// another pool is refused as [`CqRefusal::WrongPool`].
    pub fn submit_with<F>(&self, opts: crate::pool::SpawnOptions<'_>, item: T, work: F) -> Result<(), CqSubmitError<T>>
    where
        F: FnOnce(&mut T) + Send + 'static,
    {
        self.submit_through(Detached, opts, item, work)
    }

    /// `submit_with`, returning a handle to the submission: its
    /// [`cancel`](crate::TaskHandle::cancel), before the work starts, skips
    /// the work and completes the submission as [`CqStatus::Cancelled`] (on
    /// the cancelling thread: the completion reaches the next `drain`, not
    /// a pool thread); once it started, `cancel` returns false and the work
    /// completes as usual. A server cancels the queued request of a client
    /// that hung up this way. The handle costs one allocation per
    /// submission, which `submit_with` does not. Its `state` follows the
    /// work, but the completion is queued from inside the task, so `drain`
    /// may hand the payload back a moment before the state reads `Done`
    /// (`Running` until then; `cancel` is false either way). Dropping it
    /// changes nothing. Waiting on it from the loop thread may run the work
    /// there (help-while-waiting), so a loop polls rather than waits.
    pub fn submit_cancellable<F>(
        &self,
        opts: crate::pool::SpawnOptions<'_>,
        item: T,
        work: F,
    ) -> Result<crate::TaskHandle<()>, CqSubmitError<T>>
    where
        F: FnOnce(&mut T) + Send + 'static,
    {
        self.submit_through(Handled, opts, item, work)
    }

    fn submit_through<F, S: Spawner>(
        &self,
        spawner: S,
        opts: crate::pool::SpawnOptions<'_>,
        item: T,
        work: F,
    ) -> Result<S::Accepted, CqSubmitError<T>>
    where
        F: FnOnce(&mut T) + Send + 'static,
    {
        let inner = &self.inner;
        if inner.closed.load(Relaxed) != OPEN {
            return Err(CqSubmitError { kind: CqRefusal::Closed, item });
        }
        let before = inner.pending.fetch_add(1, AcqRel);
        if self.cap != 0 && before >= self.cap {
            inner.pending.fetch_sub(1, AcqRel);
            return Err(CqSubmitError { kind: CqRefusal::Full, item });
        }
        let mut node = lock(&inner.free)
            .pop()
            .unwrap_or_else(|| Box::new(Node { item: None, status: CqStatus::Ran, submitted_ns: 0 }));
        node.item = Some(item);
        let now = inner.now_ns();
        node.submitted_ns = now;
        let was_queued = inner.queued.fetch_add(1, AcqRel);
        inner.on_submit(now, was_queued);
        let job = Job { inner: inner.clone(), node: Some(node) };
        let opts = crate::pool::SpawnOptions { global: self.global || opts.global, ..opts };
        match spawner.spawn(&self.pool, opts, move || job.run(work)) {
            Ok(accepted) => {
                if self.high_water != 0 && before + 1 >= self.high_water && !inner.above_high.swap(true, SeqCst) {
                    let wake = self.inner.signal(&mut lock(&inner.ready), CqSignal::HighWater);
                    if let Some(seen) = wake {
                        inner.wake_loop(Some(seen));
                    }
                }
                Ok(accepted)
            }
            Err(e) => {
                let kind = match e.kind() {
                    SubmitErrorKind::Rejected => CqRefusal::Rejected,
                    SubmitErrorKind::Shutdown => CqRefusal::Shutdown,
                    SubmitErrorKind::WrongPool => CqRefusal::WrongPool,
                };
                // Calling the refused job in take-back mode hands its node
                // back without running anything or completing.
                let mut node = take_back(inner, e.into_task());
                let item = node.item.take().expect("the node still holds the payload");
                inner.recycle(node);
                Err(CqSubmitError { kind, item })
            }
        }
    }

    /// Hands up to `max` completions (signals do not count) to `f`, oldest
    /// first, on the calling thread, and clears the wake-up when it leaves
    /// the queue empty. Returns how many completions it handed over. Meant
    /// for one thread (the loop's); `f` may submit again.
    pub fn drain(&self, max: usize, mut f: impl FnMut(CqEvent<T>)) -> usize {
        let inner = &*self.inner;
        // Completions move in batches, one lock each, into a buffer the
        // loop owns; the callbacks run without the queue's lock.
        let mut held = Unhanded { inner, batch: std::mem::take(&mut *lock(&self.batch)) };
        let mut n = 0;
        let mut cleared = false;
        loop {
            let signals = {
                let mut r = lock(&inner.ready);
                let signals = std::mem::take(&mut r.signals);
                let room = max - n;
                if r.done.len() <= room {
                    std::mem::swap(&mut r.done, &mut held.batch);
                } else {
                    held.batch.extend(r.done.drain(..room));
                }
                if signals.is_empty() && held.batch.is_empty() {
                    if !r.done.is_empty() {
                        drop(r);
                        // A bounded drain left work: the loop must hear of it
                        // again, and the fd may have been cleared by this call.
                        if cleared || inner.wake.is_callback() {
                            inner.wake_loop(None);
                        }
                        break;
                    }
                    // Empty. Clear the fd outside the lock (when a wake-up was
                    // owed, or on this call's first look: a stale readiness),
                    // then look again: a completion that came meanwhile set
                    // `signaled` again and is drained in the next round.
                    let owed = std::mem::replace(&mut r.signaled, false);
                    if owed {
                        // A waker that saw the previous epoch re-checks.
                        inner.drains.fetch_add(1, SeqCst);
                    }
                    drop(r);
                    if owed || !cleared {
                        inner.wake.clear();
                        cleared = true;
                    }
                    if lock(&inner.ready).is_empty() {
                        break;
                    }
                    continue;
                }
                signals
            };
            for s in signals {
                f(CqEvent::Signal(s));
            }
            while let Some(mut node) = held.batch.pop_front() {
                n += 1;
                let item = node.item.take().expect("a completed node holds its payload");
                let status = node.status;
                inner.recycle(node);
                let now = inner.pending.fetch_sub(1, AcqRel) - 1;
                let low = now <= self.low_water && inner.above_high.swap(false, SeqCst);
                f(CqEvent::Done(item, status));
                if low {
                    f(CqEvent::Signal(CqSignal::LowWater));
                }
            }
        }
        *lock(&self.batch) = std::mem::take(&mut held.batch);
        n
    }

    /// Accepted submissions whose completion has not been drained yet.
    pub fn pending(&self) -> usize {
        self.inner.pending.load(Relaxed)
    }

    /// The overload signal's admission test: true while the queue is
    /// overloaded (between the `Overloaded` and `Recovered` signals) *and* a
    /// submission made now would wait at least the target by the queue's
    /// estimate. A server that refuses work exactly while this is true keeps
    /// the standing queue, and so its served requests' wait, near the
    /// target. A true answer counts as a refusal: the state recovers only
    /// after an interval without one (the module `codel`), and may recover in
    /// this call. A few atomic loads and a clock read.
    pub fn overloaded(&self) -> bool {
        let inner = &*self.inner;
        let Some(codel) = &inner.codel else { return false };
        let (refuse, flip) = codel.admit(inner.now_ns(), inner.queued.load(Relaxed));
        inner.flip(codel, flip);
        refuse
    }

    /// The overload state alone: true from the `Overloaded` signal to the
    /// `Recovered` one (one atomic load). A reactor that pauses reading
    /// while overloaded follows this (or the signals).
    pub fn overload_state(&self) -> bool {
        self.inner.codel.as_ref().is_some_and(Codel::is_overloaded)
    }

    /// Stops accepting submissions and hands every pending completion to
    /// `f` on this thread, waiting for the pool to finish (or, with
    /// `Cancel`, to skip) the ones in flight; at most `timeout` (`None`:
    /// forever). After `Ok` nothing is pending and nothing more will come.
    /// On a timeout the queue stays closed; call again to wait more.
    /// Waiting on a pool thread for work queued behind it could deadlock,
    /// so call it from the loop.
    pub fn close(
        &self,
        mode: CloseMode,
        timeout: Option<Duration>,
        mut f: impl FnMut(CqEvent<T>),
    ) -> Result<(), ShutdownTimedOut> {
        let target = if mode == CloseMode::Cancel { CLOSED_CANCEL } else { CLOSED_DRAIN };
        self.inner.closed.fetch_max(target, SeqCst);
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            self.drain(usize::MAX, &mut f);
            let mut r = lock(&self.inner.ready);
            loop {
                if !r.is_empty() {
                    break;
                }
                if self.inner.pending.load(SeqCst) == 0 {
                    r.closer_waiting = false;
                    return Ok(());
                }
                r.closer_waiting = true;
                r = match deadline {
                    None => self.inner.closed_cv.wait(r).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            r.closer_waiting = false;
                            return Err(ShutdownTimedOut);
                        }
                        self.inner.closed_cv.wait_timeout(r, d - now).unwrap_or_else(|e| e.into_inner()).0
                    }
                };
            }
        }
    }

    /// The pool this queue submits to.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl<T: Send + 'static> Drop for CompletionQueue<T> {
    /// Dropped without `close`: nothing more is accepted, work not started
    /// is skipped, and payloads still to come back are dropped when they do.
    fn drop(&mut self) {
        self.inner.closed.fetch_max(CLOSED_CANCEL, SeqCst);
    }
}

// The tests wait on the wake-up file descriptor, which exists on Unix only.
#[cfg(all(test, unix))]
mod tests;
