//! Latches: "has X happened yet", with a cheap probe for helpers and a
//! blocking wait for everyone else.
//!
//! Waking protocol (Dekker style, all SeqCst): a waiter bumps `waiters`, then
//! checks the condition under `mutex` and sleeps on `cv`; a setter changes the
//! condition, then reads `waiters` and, if non-zero, takes `mutex` and
//! notifies. Either the waiter sees the new condition or the setter sees the
//! waiter, and because the waiter checks under the mutex that the setter
//! takes before notifying, the notification cannot fall between the check
//! and the sleep. Setters pay one atomic load when nobody waits.

use std::task::Waker;
use std::time::Instant;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex};

use crate::registry::Registry;
use crate::sync::lock;
use std::sync::atomic::Ordering::SeqCst;

use crate::wait::WAIT_SPIN;

/// Something a thread can wait for. Pool threads wait by helping
/// ([`crate::worker::WorkerThread::wait_until`]); when there is nothing to
/// help with they park in the pool's sleep system, registered here so the
/// completion wakes them; foreign threads block in [`Awaitable::block_until`].
pub(crate) trait Awaitable {
    /// Has it happened? (SeqCst: a true result publishes the result data.)
    fn probe(&self) -> bool;
    /// Blocks the calling thread until it happens or `deadline` passes.
    fn block_until(&self, deadline: Option<Instant>) -> bool;
    /// Asks to have pool worker `index` of `registry` woken from pool sleep
    /// when this happens. Must be followed by a probe before sleeping.
    fn register_sleeper(&self, registry: &Arc<Registry>, index: usize);
    /// Undoes `register_sleeper`.
    fn unregister_sleeper(&self, index: usize);
    /// What a snapshot says a pool thread waiting on this waits on
    /// (`dump::wait_note`), and its identity.
    fn wait_note(&self) -> (u64, usize) {
        (crate::dump::WAIT_OTHER, self as *const Self as *const () as usize)
    }
}

/// Waiters' side of a heap-allocated latch: a condvar for foreign threads, a
/// list of pool workers parked in their pool's sleep system, and the wakers
/// of futures awaiting it (a group's, `group/future.rs`). Touched only when
/// somebody actually sleeps. `waiters` counts the blocked threads, the
/// parked workers and the stored wakers.
#[derive(Default)]
pub(crate) struct Signal {
    waiters: AtomicUsize,
    sleepers: Mutex<Sleepers>,
    cv: Condvar,
}

#[derive(Default)]
struct Sleepers {
    workers: Vec<(Arc<Registry>, usize)>,
    /// Each awaiting future's waker, under the key the future keeps.
    wakers: Vec<(u64, Waker)>,
}

impl Signal {
    /// Call after changing the condition.
    pub(crate) fn notify(&self) {
        if self.waiters.load(SeqCst) != 0 {
            let mut sleepers = lock(&self.sleepers);
            self.cv.notify_all();
            for (registry, index) in sleepers.workers.iter() {
                registry.sleep.wake_worker(*index);
            }
            // Each stored waker is taken out and woken once; a future that
            // finds the condition false again on its next poll registers
            // anew. Woken after the lock is released: a waker runs the
            // executor's code, which must not find this lock held.
            let wakers = std::mem::take(&mut sleepers.wakers);
            if !wakers.is_empty() {
                self.waiters.fetch_sub(wakers.len(), SeqCst);
            }
            drop(sleepers);
            for (_, waker) in wakers {
                waker.wake();
            }
        }
    }

    /// Stores `waker` for the next [`Signal::notify`], under `key` (a
    /// future's own, `new_waker_key`), replacing the one stored under it
    /// unless that `will_wake` the same task. As with `register_sleeper`,
    /// the caller looks at its condition afterwards (before returning
    /// `Pending`): the count is raised, in the same SeqCst order, before
    /// that look.
    pub(crate) fn register_waker(&self, key: u64, waker: &Waker) {
        let stale = {
            let mut sleepers = lock(&self.sleepers);
            match sleepers.wakers.iter_mut().find(|(k, _)| *k == key) {
                Some((_, stored)) if stored.will_wake(waker) => None,
                Some((_, stored)) => Some(std::mem::replace(stored, waker.clone())),
                None => {
                    self.waiters.fetch_add(1, SeqCst);
                    sleepers.wakers.push((key, waker.clone()));
                    None
                }
            }
        };
        // A replaced waker is dropped outside the lock, as in `notify`.
        drop(stale);
    }

    /// Takes the waker stored under `key` back, if `notify` has not.
    pub(crate) fn unregister_waker(&self, key: u64) {
        let taken = {
            let mut sleepers = lock(&self.sleepers);
            let pos = sleepers.wakers.iter().position(|(k, _)| *k == key);
            pos.map(|pos| sleepers.wakers.swap_remove(pos))
        };
        if taken.is_some() {
            self.waiters.fetch_sub(1, SeqCst);
        }
        // The waker, if any, is dropped here, outside the lock.
        drop(taken);
    }

    /// Sleeps until `done()` holds or `deadline` passes; returns `done()`.
    /// Spins briefly first: a short task finishes well within the time a
    /// futex wake-up takes, and a round trip (submit, wait) then costs no
    /// system call on either side.
    pub(crate) fn wait_until(&self, done: impl Fn() -> bool, deadline: Option<Instant>) -> bool {
        let start = Instant::now();
        let spin_until = deadline.map_or(start + WAIT_SPIN, |d| d.min(start + WAIT_SPIN));
        loop {
            if done() {
                return true;
            }
            if Instant::now() >= spin_until {
                break;
            }
            for _ in 0..4 {
                std::hint::spin_loop();
            }
        }
        self.waiters.fetch_add(1, SeqCst);
        let mut guard = lock(&self.sleepers);
        let result = loop {
            if done() {
                break true;
            }
            match deadline {
                None => {
                    guard = match self.cv.wait(guard) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    }
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break false;
                    }
                    guard = match self.cv.wait_timeout(guard, deadline - now) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    }
                }
            }
        };
        drop(guard);
        self.waiters.fetch_sub(1, SeqCst);
        result
    }

    pub(crate) fn register_sleeper(&self, registry: &Arc<Registry>, index: usize) {
        self.waiters.fetch_add(1, SeqCst);
        lock(&self.sleepers).workers.push((registry.clone(), index));
    }

    pub(crate) fn unregister_sleeper(&self, index: usize) {
        {
            let mut sleepers = lock(&self.sleepers);
            if let Some(pos) = sleepers.workers.iter().position(|(_, i)| *i == index) {
                sleepers.workers.swap_remove(pos);
            }
        }
        self.waiters.fetch_sub(1, SeqCst);
    }
}

/// A key for [`Signal::register_waker`], unique in the process (only its
/// uniqueness matters: Relaxed).
pub(crate) fn new_waker_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Set once, never reset. Lives in an `Arc` (task handles), so the setter
/// may touch it after setting.
#[derive(Default)]
pub(crate) struct OnceLatch {
    set: AtomicBool,
    signal: Signal,
}

impl OnceLatch {
    pub(crate) fn set(&self) {
        self.set.store(true, SeqCst);
        self.signal.notify();
    }
}

impl Awaitable for OnceLatch {
    fn probe(&self) -> bool {
        self.set.load(SeqCst)
    }
    fn block_until(&self, deadline: Option<Instant>) -> bool {
        self.signal.wait_until(|| self.probe(), deadline)
    }
    fn register_sleeper(&self, registry: &Arc<Registry>, index: usize) {
        self.signal.register_sleeper(registry, index)
    }
    fn unregister_sleeper(&self, index: usize) {
        self.signal.unregister_sleeper(index)
    }
}

const UNSET: usize = 0;
const SLEEPING: usize = 1;
const SET: usize = 2;

/// Who waits on an [`OwnerLatch`].
enum Owner {
    /// A pool worker: woken from the pool's sleep system. The registry is
    /// kept alive by the setter, which is a worker of the same pool or a
    /// thread holding a pool handle.
    Worker { registry: *const Registry, index: usize },
    /// Any other thread: woken with `Thread::unpark`.
    Thread(std::thread::Thread),
}

/// A latch with exactly one waiter, its owner, that may live on the
/// owner's stack (a `join`'s second half, a scope). The setter copies what
/// it needs to wake the owner *before* the one swap that publishes
/// completion, and never touches the latch afterwards: the owner may return
/// (freeing the frame) the moment it sees `SET`.
pub(crate) struct OwnerLatch {
    state: AtomicUsize,
    owner: Owner,
}

// SAFETY: see `Owner::Worker`; `Thread` is Send + Sync.
unsafe impl Send for OwnerLatch {}
unsafe impl Sync for OwnerLatch {}

impl OwnerLatch {
    pub(crate) fn for_worker(registry: &Registry, index: usize) -> OwnerLatch {
        OwnerLatch { state: AtomicUsize::new(UNSET), owner: Owner::Worker { registry, index } }
    }

    /// For the calling thread, worker of `registry` or not.
    pub(crate) fn for_current(registry: &Registry) -> OwnerLatch {
        match registry.current_worker() {
            Some(worker) => Self::for_worker(registry, worker.index),
            None => OwnerLatch { state: AtomicUsize::new(UNSET), owner: Owner::Thread(std::thread::current()) },
        }
    }

    /// # Safety
    /// `this` must point to a live latch; after this call it may be freed.
    pub(crate) unsafe fn set(this: *const OwnerLatch) {
        enum Waker {
            Worker(*const Registry, usize),
            Thread(std::thread::Thread),
        }
        // SAFETY: live until the swap below; everything needed is copied first.
        let (waker, state) = unsafe {
            let waker = match &(*this).owner {
                Owner::Worker { registry, index } => Waker::Worker(*registry, *index),
                Owner::Thread(t) => Waker::Thread(t.clone()),
            };
            (waker, &(*this).state)
        };
        if state.swap(SET, SeqCst) == SLEEPING {
            match waker {
                // SAFETY: see `Owner::Worker`.
                Waker::Worker(registry, index) => unsafe { (*registry).sleep.wake_worker(index) },
                Waker::Thread(t) => {
                    t.unpark();
                    true
                }
            };
        }
    }
}

impl Awaitable for OwnerLatch {
    #[inline]
    fn probe(&self) -> bool {
        self.state.load(SeqCst) == SET
    }
    fn block_until(&self, deadline: Option<Instant>) -> bool {
        if let Owner::Thread(_) = self.owner {
            if self.state.compare_exchange(UNSET, SLEEPING, SeqCst, SeqCst) == Err(SET) {
                return true;
            }
            while !self.probe() {
                match deadline {
                    None => std::thread::park(),
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(left) => std::thread::park_timeout(left),
                        None => return false,
                    },
                }
            }
            return true;
        }
        // A latch owned by a pool worker is waited for by that worker, in
        // `WorkerThread::wait_until` (which parks in the pool's sleep system
        // and never calls this). Only a misuse could get here: poll with
        // backoff rather than block forever.
        debug_assert!(false, "a worker-owned latch is waited for by its worker");
        let mut pause = std::time::Duration::from_micros(1);
        while !self.probe() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_micros(200));
        }
        true
    }
    fn register_sleeper(&self, _registry: &Arc<Registry>, _index: usize) {
        let _ = self.state.compare_exchange(UNSET, SLEEPING, SeqCst, SeqCst);
    }
    fn unregister_sleeper(&self, _index: usize) {}
}
