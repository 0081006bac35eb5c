//! The workers' own queues: a Chase-Lev work-stealing deque (the algorithm
//! and orderings of crossbeam-deque 0.8's `Worker`/`Stealer`, LIFO for a
//! worker's deque and FIFO for its inbox) whose buffer grows when full and
//! is given back only when the deque is drained and no thief is reading,
//! with no epoch-based reclamation.
//!
//! Why not crossbeam's deque: it halves its buffer whenever a pop leaves it
//! a quarter full, and frees every replaced buffer through crossbeam-epoch.
//! A root task that pushes 1,000 children grows its deque 64 → 1,024 and
//! shrinks it back as they drain: four allocations, four copies and four
//! epoch-deferred frees per root, about 60 instructions per task in
//! callgrind (`docs/benchmarks.md`). Its `pop` is also too large to be
//! inlined, and every steal pins the epoch. Here a buffer is replaced by
//! one twice as large only when it is full, and the replaced buffer is
//! retired, not freed, so a thief holding a stale buffer pointer reads
//! valid (if outdated) memory. The memory goes back in
//! [`Worker::release_memory`], which the owner calls at its quiescent
//! points (a worker about to park or retire, or finding its deque empty
//! after a large burst): on a drained deque it swaps in a minimal buffer
//! and frees the old buffers once no thief is between its load of the
//! buffer pointer and its read (the `stealing` count, which the owner
//! reads with a read-modify-write; see `release_memory`).
//!
//! # Protocol
//!
//! `front` and `back` only grow (wrapping); `back - front` is the length.
//! Only the owner ([`Worker`]) writes `back` and the buffer's slots. The
//! owner pushes by writing slot `back`, a Release fence, then a store of
//! `back + 1` (crossbeam's `fence(Release)` + store). A thief
//! ([`Stealer`]) loads `front` (Acquire), fences (SeqCst), loads `back`
//! (Acquire), counts itself in `stealing`, loads the buffer (Acquire),
//! checks that `front` has not moved, reads slot
//! `front` *speculatively* and claims it with a CAS of `front` to
//! `front + 1`; a lost CAS forgets the copy it read. A LIFO owner pops by
//! storing `back - 1` (Relaxed), fencing (SeqCst) and reloading `front`:
//! when more than one value was left, the slot is the owner's without an
//! RMW (a thief needs `front < back` and the fences order the two); the
//! last value goes to whoever wins the CAS on `front`. A FIFO owner pops
//! like a thief that need not fence, with a `fetch_add` on `front`.
//!
//! Why the fence and not a Release store: a thief may read `back` from a
//! pop's Relaxed store, not from the push that published the slot it is
//! about to read. A Release *store* would order the slot's write only
//! for a thief that reads that very store (since C++20, a release
//! sequence continues through read-modify-writes only, not through the
//! same thread's later plain stores), so a thief reading the pop's store
//! would read the slot with no happens-before: a data race, which a
//! two-value loom model and Miri both report. A Release *fence* before
//! the store synchronises with an Acquire load that reads *any* later
//! store of that thread, the pops' included (fence-to-atomic
//! synchronisation). crossbeam keeps the store Release as well, only so
//! that ThreadSanitizer, which does not model fences, sees the edge; so
//! does this file. `make test-loom` runs a mutant with the old Release
//! store and no fence (`wspool_mutant_push_release_store`, see
//! `sync::mutant!`) and requires `deque_push_pop_race_steal` to report the
//! race; `make test-miri` builds it with `--cfg` and requires Miri to.
//!
//! The speculative read is a data race by the letter of the Rust memory
//! model whenever the owner overwrites the slot meanwhile, which needs the
//! buffer to wrap around under a stalled thief (its `front` is then stale
//! and its CAS fails, so the bytes it copied are never used as a value).
//! crossbeam-deque makes the same read, as a volatile one, for the same
//! reason. loom and Miri report any such race as an error, so the loom
//! models (`tests/loom.rs`, `deque_*`) and the Miri runs of `tests.rs`
//! (`make test-miri`) race owner and thieves without wrap-around, and the
//! wrap-around races of `tests.rs` run on real threads only.
//!
//! Differences from crossbeam: growth without shrinking on the hot path,
//! buffers retired instead of deferred, and memory given back at
//! quiescent points. crossbeam reloads the buffer after a thief's read and
//! retries if it changed, because a replaced buffer may be freed; here a
//! thief loads the buffer after `back` before every read, and that buffer
//! holds the value at index `front`: the owner takes that index only
//! through the CAS on `front` while `front` is there, so it cannot pop it
//! and push it again into a newer buffer under the thief (see `steal`).
//! The one buffer that may not hold it is a minimal one swapped in by
//! `release_memory`, which happens only on a drained deque: every index
//! below `back` has then been claimed through `front`, so `front` has
//! moved past the thief's index, and the thief sees that before it reads
//! (`still_at`) and retries. A batch steal from a
//! LIFO deque, which claims one index at a time, reloads the buffer for
//! each.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicPtr, AtomicUsize, UnsafeCell, fence};

/// The smallest buffer (crossbeam's minimum too).
#[cfg(not(loom))]
const MIN_CAP: usize = 64;
#[cfg(loom)]
const MIN_CAP: usize = 2;

/// The most values a batch steal moves at once (crossbeam's `MAX_BATCH`).
const MAX_BATCH: usize = 32;

/// A buffer at least this large (24 MiB of 48-byte jobs) is given back as
/// soon as the owner finds its deque drained ([`Worker::holds_burst`]),
/// not only once it has been idle a while: a busy worker that never parks
/// does not keep a huge burst's memory. Smaller ones stay until the owner
/// has been parked for a moment (the worker's `QUEUE_MEMORY_LINGER`), so
/// a W4 root that forks 1,000 children keeps its 1,024 slots from one root
/// to the next, and back-to-back bursts reuse the ring instead of taking
/// fresh pages from the kernel each time (a W4 with detached children
/// grows one to 256 Ki slots per burst: given back at every park, six
/// bursts cost 13,000 page faults, `perf record -e page-faults`).
#[cfg(not(loom))]
const BURST_CAP: usize = 1 << 19;
#[cfg(loom)]
const BURST_CAP: usize = 4;

/// The outcome of a steal: crossbeam's `Steal`.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum Steal<T> {
    /// Nothing to take.
    Empty,
    /// The value taken.
    Success(T),
    /// Lost a race with another taker: trying again may succeed.
    Retry,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Lifo,
    Fifo,
}

/// A power-of-two ring of slots, indexed by the deque's wrapping indices.
struct Buffer<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// Under loom a freed buffer is not freed but written here, and every
    /// read of a slot reads it: loom then reports a free that is not
    /// ordered after a thief's read (a use after free on real threads) as
    /// a causality violation.
    #[cfg(loom)]
    freed: UnsafeCell<()>,
}

impl<T> Buffer<T> {
    fn allocate(cap: usize) -> *mut Buffer<T> {
        debug_assert!(cap.is_power_of_two());
        let slots = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
        Box::into_raw(Box::new(Buffer {
            slots,
            #[cfg(loom)]
            freed: UnsafeCell::new(()),
        }))
    }

    /// Frees a buffer no thief can reach any more (see
    /// [`Worker::release_memory`] and `Drop`). Under loom it is marked
    /// instead and kept in `graveyard` until the deque is dropped.
    ///
    /// # Safety
    /// `buffer` came from [`Buffer::allocate`], is freed once, and no
    /// read of it can follow or race this call.
    unsafe fn free(buffer: *mut Buffer<T>, #[cfg(loom)] graveyard: &mut Vec<*mut Buffer<T>>) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(buffer) });
        #[cfg(loom)]
        {
            // SAFETY: the caller's contract (the marking write is what loom checks).
            unsafe { (*buffer).freed.with_mut(|_| ()) };
            graveyard.push(buffer);
        }
    }

    #[inline]
    fn cap(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn slot(&self, index: usize) -> &UnsafeCell<MaybeUninit<T>> {
        // SAFETY: the mask keeps the index in bounds (cap is a power of two).
        unsafe { self.slots.get_unchecked(index & (self.slots.len() - 1)) }
    }

    /// Writes a slot. Only the owner writes, and only slots no taker can
    /// claim (at or past `back`).
    #[inline]
    unsafe fn write(&self, index: usize, value: MaybeUninit<T>) {
        // SAFETY: the caller's contract.
        self.slot(index).with_mut(|p| unsafe { ptr::write(p, value) });
    }

    /// Moves `*src` into a slot (the caller forgets its copy), under the
    /// same rule as [`Buffer::write`]. A job is built and tagged with
    /// 8-byte stores; the compiler's own copy reloads it 16 bytes at a time,
    /// which cannot be forwarded from those stores and stalls until they
    /// reach the cache (`perf annotate` put 40 % of a W4 push's cycles
    /// there). Copying word by word keeps every load inside one store.
    #[inline(always)]
    unsafe fn write_from(&self, index: usize, src: *const T) {
        // SAFETY: the caller's contract.
        self.slot(index).with_mut(|dst| unsafe { copy_by_words(src, dst.cast::<T>()) });
    }

    /// Reads a slot's bytes. A thief reads before claiming: it owns the
    /// value only if it then wins the slot (see the module comment). The
    /// owner's reads (pop, growth, drop) race no write, but go through the
    /// same volatile read: callgrind counts 12 more instructions per W4
    /// task with a plain `ptr::read` there.
    #[inline]
    unsafe fn read(&self, index: usize) -> MaybeUninit<T> {
        #[cfg(loom)]
        self.freed.with(|_| ());
        #[cfg(not(loom))]
        // SAFETY: the slot is in bounds; volatile, as crossbeam reads it, since
        // a stalled thief's copy may race with the owner (then discarded).
        return self.slot(index).with(|p| unsafe { ptr::read_volatile(p) });
        #[cfg(loom)]
        // SAFETY: as above; loom checks that no write races it.
        return self.slot(index).with(|p| unsafe { ptr::read(p) });
    }
}

/// The words a thief writes, on one cache line: a thief that counts
/// itself in `stealing` goes on to CAS `front`, so the line moves once.
struct Head {
    front: AtomicUsize,
    /// Thieves between their load of the buffer pointer and the end of
    /// their reads from it. Incremented only after a thief has seen a
    /// non-empty deque, so scans of empty deques never write it.
    stealing: AtomicUsize,
}

/// What the owner and the thieves share.
struct Inner<T> {
    head: CachePadded<Head>,
    back: CachePadded<AtomicUsize>,
    buffer: CachePadded<AtomicPtr<Buffer<T>>>,
    /// Buffers replaced by growth or by `release_memory` that a thief may
    /// still be reading; freed by `release_memory` once none is, or with
    /// the deque. Only the owner (in `grow` and `release_memory`) and
    /// `Drop` touch it.
    retired: std::cell::UnsafeCell<Vec<*mut Buffer<T>>>,
    /// Under loom, the buffers "freed" (see [`Buffer::free`]).
    #[cfg(loom)]
    graveyard: std::cell::UnsafeCell<Vec<*mut Buffer<T>>>,
}

impl<T> Inner<T> {
    /// Counts a thief in `stealing` until the guard drops: between the two,
    /// no buffer it can load is freed (see [`Worker::release_memory`]).
    #[inline]
    fn reading(&self) -> Reading<'_> {
        // Acquire: the owner reads this count with an AcqRel RMW in
        // `release_memory`. If that RMW came first in the count's
        // modification order, this increment reads from it and synchronises
        // with it, so the thief's following load of `buffer` sees the
        // owner's swap (made before its RMW) or a later one, never a buffer
        // that RMW let the owner free. If this increment came first, the
        // owner's RMW sees it and frees nothing.
        self.head.stealing.fetch_add(1, Acquire);
        Reading(&self.head.stealing)
    }
}

/// A thief's presence in `stealing` (see [`Inner::reading`]).
struct Reading<'a>(&'a AtomicUsize);

impl Drop for Reading<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the owner frees only after reading a count that this
        // decrement (or a later RMW in its release sequence) produced, so
        // every read above happens before the free.
        self.0.fetch_sub(1, Release);
    }
}

// SAFETY: values are moved between threads (T: Send); `retired` is touched
// only by the single owner and by Drop, which has exclusive access.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Inner<T> {}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        let front = self.head.front.load(Relaxed);
        let back = self.back.load(Relaxed);
        let buffer = self.buffer.load(Relaxed);
        // SAFETY: exclusive access; `front..back` hold the values still
        // queued, each dropped once; every buffer is freed once.
        unsafe {
            let mut i = front;
            while i != back {
                drop((*buffer).read(i).assume_init());
                i = i.wrapping_add(1);
            }
            drop(Box::from_raw(buffer));
            for old in self.retired.get_mut().drain(..) {
                drop(Box::from_raw(old));
            }
            #[cfg(loom)]
            for old in self.graveyard.get_mut().drain(..) {
                drop(Box::from_raw(old));
            }
        }
    }
}

/// The owner's end of a deque: push, and pop (newest first for LIFO,
/// oldest first for FIFO). `Send` but not `Sync`: one owner thread at a time.
pub struct Worker<T> {
    inner: Arc<Inner<T>>,
    /// The current buffer: only this owner replaces it.
    buffer: std::cell::Cell<*mut Buffer<T>>,
    flavor: Flavor,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the owner's state moves with it; `Cell` keeps it from being shared.
unsafe impl<T: Send> Send for Worker<T> {}

/// A thief's end of a deque: takes the oldest values.
pub struct Stealer<T> {
    inner: Arc<Inner<T>>,
    flavor: Flavor,
}

impl<T> Clone for Stealer<T> {
    fn clone(&self) -> Self {
        Stealer { inner: self.inner.clone(), flavor: self.flavor }
    }
}

impl<T> Worker<T> {
    /// A deque whose owner pops the newest value (a worker's own tasks).
    pub fn new_lifo() -> Self {
        Self::new(Flavor::Lifo)
    }

    /// A deque whose owner pops the oldest value (a worker's inbox).
    pub fn new_fifo() -> Self {
        Self::new(Flavor::Fifo)
    }

    fn new(flavor: Flavor) -> Self {
        let buffer = Buffer::allocate(MIN_CAP);
        let inner = Arc::new(Inner {
            head: CachePadded::new(Head { front: AtomicUsize::new(0), stealing: AtomicUsize::new(0) }),
            back: CachePadded::new(AtomicUsize::new(0)),
            buffer: CachePadded::new(AtomicPtr::new(buffer)),
            retired: std::cell::UnsafeCell::new(Vec::new()),
            #[cfg(loom)]
            graveyard: std::cell::UnsafeCell::new(Vec::new()),
        });
        Worker { inner, buffer: std::cell::Cell::new(buffer), flavor, _not_sync: PhantomData }
    }

    /// A thief's handle on this deque.
    pub fn stealer(&self) -> Stealer<T> {
        Stealer { inner: self.inner.clone(), flavor: self.flavor }
    }

    /// True if the deque holds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.head.front.load(SeqCst);
        back.wrapping_sub(front) as isize <= 0
    }

    /// True if the deque holds at most one value: right after a push, that
    /// the push found it empty as it is now, whatever a thief took since an
    /// earlier look (`WorkerThread::push_and_wake` decides its wake-up with
    /// it). The same loads as [`Worker::is_empty`].
    #[inline]
    pub fn holds_at_most_one(&self) -> bool {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.head.front.load(SeqCst);
        back.wrapping_sub(front) as isize <= 1
    }

    /// Makes room for `extra` more values beyond the current length.
    fn reserve(&self, extra: usize) {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.head.front.load(Acquire);
        let len = back.wrapping_sub(front);
        // SAFETY: the owner's buffer is live.
        let cap = unsafe { (*self.buffer.get()).cap() };
        if len + extra > cap {
            self.grow((len + extra).next_power_of_two(), front, back);
        }
    }

    /// Pushes a value at the back.
    #[inline]
    pub fn push(&self, value: T) {
        let value = ManuallyDrop::new(value);
        let back = self.inner.back.load(Relaxed);
        let buffer = self.room_for_one(back);
        // SAFETY: slot `back` is past every claimable index: no thief reads
        // it as a value until `back` is published below; `value` is
        // forgotten, the slot owns it now.
        unsafe { (*buffer).write_from(back, &*value) };
        self.publish(back.wrapping_add(1));
    }

    /// Pushes the value `make` returns, built in its slot rather than built
    /// and then copied there (a copy of a job costs; see
    /// [`Buffer::write_from`]). If `make` panics the deque is unchanged.
    #[inline(always)]
    pub fn push_with(&self, make: impl FnOnce() -> T) {
        let back = self.inner.back.load(Relaxed);
        let buffer = self.room_for_one(back);
        // SAFETY: as in `push`.
        unsafe { (*buffer).write(back, MaybeUninit::new(make())) };
        self.publish(back.wrapping_add(1));
    }

    /// Publishes the slots written below `back` to thieves: a Release fence,
    /// then the store (crossbeam's `fence(Release)` + store). The fence, not
    /// the store's ordering, is what orders the slots' writes before a
    /// thief's read when the `back` it loads comes from a later pop's
    /// Relaxed store (see the module comment); the store stays Release, as
    /// in crossbeam, for ThreadSanitizer, which does not model fences.
    /// `make test-loom` requires `deque_push_pop_race_steal` to fail with
    /// the fence removed (the mutant `wspool_mutant_push_release_store`,
    /// `sync::mutant!`).
    #[inline(always)]
    fn publish(&self, back: usize) {
        if !crate::sync::mutant!(wspool_mutant_push_release_store) {
            fence(Release);
        }
        self.inner.back.store(back, Release);
    }

    /// The buffer, grown first if it has no free slot at `back`.
    #[inline(always)]
    fn room_for_one(&self, back: usize) -> *mut Buffer<T> {
        let front = self.inner.head.front.load(Acquire);
        let buffer = self.buffer.get();
        // SAFETY: the owner's buffer is live until the deque is dropped.
        let cap = unsafe { (*buffer).cap() };
        if back.wrapping_sub(front) < cap {
            return buffer;
        }
        self.grow(2 * cap, front, back);
        self.buffer.get()
    }

    /// Pushes `n` values, `value(0)` first, publishing them with one store
    /// (a batch taken from the global queue).
    #[inline]
    pub fn push_batch(&self, n: usize, mut value: impl FnMut(usize) -> T) {
        self.reserve(n);
        let back = self.inner.back.load(Relaxed);
        let buffer = self.buffer.get();
        for i in 0..n {
            // SAFETY: as in `push`; `reserve` made room for all `n`.
            unsafe { (*buffer).write(back.wrapping_add(i), MaybeUninit::new(value(i))) };
        }
        self.publish(back.wrapping_add(n));
    }

    /// Replaces the buffer with one of `cap` slots holding `front..back`.
    /// Only the owner calls it; the old buffer is retired, not freed.
    #[cold]
    #[inline(never)]
    fn grow(&self, cap: usize, front: usize, back: usize) {
        let old = self.buffer.get();
        let new = Buffer::allocate(cap);
        // SAFETY: both live; the owner copies the values a thief may still
        // claim (a thief that claims one takes it from either buffer: the
        // old one is never written again).
        unsafe {
            let mut i = front;
            while i != back {
                (*new).write(i, (*old).read(i));
                i = i.wrapping_add(1);
            }
        }
        self.buffer.set(new);
        // Release publishes the copies to a thief's (Acquire) load of the
        // buffer; `release_memory` frees `old` only after an RMW that this
        // store is sequenced before (see there).
        self.inner.buffer.store(new, Release);
        // SAFETY: only the owner and Drop touch `retired`.
        unsafe { (*self.inner.retired.get()).push(old) };
    }

    /// True if the deque keeps more memory than an idle one: a grown
    /// buffer, or replaced ones not freed yet ([`Worker::release_memory`]
    /// would give something back once the deque is drained). Owner only.
    pub fn keeps_grown_memory(&self) -> bool {
        // SAFETY: only the owner and Drop touch `retired`; the owner's
        // buffer is live.
        unsafe { (*self.buffer.get()).cap() > MIN_CAP || !(*self.inner.retired.get()).is_empty() }
    }

    /// True if the buffer is large enough that the owner should give it
    /// back as soon as the deque drains ([`Worker::release_memory`]),
    /// without waiting to park. One load of the owner's own cell.
    #[inline]
    pub fn holds_burst(&self) -> bool {
        // SAFETY: the owner's buffer is live.
        unsafe { (*self.buffer.get()).cap() >= BURST_CAP }
    }

    /// Gives a drained deque's memory back: swaps a minimal buffer in for
    /// a larger one, and frees every replaced buffer once no thief can be
    /// reading it (until then they stay retired, and a later call frees
    /// them). Does nothing unless the deque is empty. Owner only; meant
    /// for quiescent points (about to park or retire, or
    /// [`Worker::holds_burst`] on an empty deque), not for every pop: a
    /// buffer given back is allocated again by the next burst.
    ///
    /// Why a freed buffer cannot be read: the owner stores the new buffer
    /// (Release), then reads `stealing` with an AcqRel read-modify-write
    /// (adding 0), which reads the latest value of the count; a thief
    /// increments `stealing` (Acquire), then loads the buffer (Acquire). If
    /// the owner's RMW reads 0, each thief either increments after it in
    /// the count's modification order, so its increment reads from the
    /// owner's RMW and synchronises with it, and its load of the buffer
    /// sees the new one or a later one; or it had incremented and
    /// decremented before, and its Release decrement synchronises with the
    /// owner's RMW (RMWs continue a release sequence), so its reads happen
    /// before the free. A plain SeqCst load in place of the RMW would need
    /// SeqCst on the thieves' side too, as a Dekker pair (a fence or
    /// SeqCst accesses on every steal), and loom does not model SeqCst
    /// accesses beyond acquire/release; an RMW on this cold path costs
    /// the steal nothing. A thief that loads
    /// the minimal buffer with a stale `front` does not read it: the deque
    /// was drained, so its index was claimed, and `Stealer::still_at` sees
    /// that before the read. `make test-loom` requires
    /// `deque_release_memory_races_steal` to fail without the check
    /// (the mutant `wspool_mutant_no_stealing_check`, `sync::mutant!`).
    #[cold]
    #[inline(never)]
    pub fn release_memory(&self) {
        let buffer = self.buffer.get();
        // SAFETY: only the owner and Drop touch `retired`; the owner's
        // buffer is live.
        let (retired, cap) = unsafe { (&mut *self.inner.retired.get(), (*buffer).cap()) };
        if cap == MIN_CAP && retired.is_empty() {
            return;
        }
        let back = self.inner.back.load(Relaxed);
        // Every index below `back` is claimed once `front` reached it (only
        // the owner lowers `back`, and it is not popping now).
        if self.inner.head.front.load(Acquire) != back {
            return;
        }
        if cap > MIN_CAP {
            let new = Buffer::allocate(MIN_CAP);
            self.buffer.set(new);
            // Release: a thief that loads it also sees the `front` read
            // above (see `Stealer::still_at`).
            self.inner.buffer.store(new, Release);
            retired.push(buffer);
        }
        // The mutant skips the read-modify-write itself, not only its test.
        let unchecked = crate::sync::mutant!(wspool_mutant_no_stealing_check);
        if !unchecked && self.inner.head.stealing.fetch_add(0, AcqRel) != 0 {
            return;
        }
        for old in retired.drain(..) {
            // SAFETY: replaced before the check above, which saw no thief
            // that could still read it (see above); each freed once.
            unsafe {
                Buffer::free(
                    old,
                    #[cfg(loom)]
                    &mut *self.inner.graveyard.get(),
                )
            };
        }
    }

    /// [`Worker::release_memory`] for an owner about to give the deque up
    /// (a retiring worker handing its queues back to its slot): returns
    /// once the deque keeps only a minimal buffer, nothing retired, so the
    /// memory a burst grew does not stay with an unoccupied slot until
    /// some later thread takes it. Waits only for thieves already counted
    /// in `stealing`, each a few loads from leaving: a thief counts itself
    /// only after it saw the deque non-empty, and nobody pushes to a
    /// drained deque whose owner is leaving, so no new thief can keep the
    /// wait going. Does nothing on a deque that still holds values.
    #[cold]
    #[inline(never)]
    pub fn release_memory_waiting(&self) {
        loop {
            self.release_memory();
            // SAFETY: only the owner and Drop touch `retired`; the owner's
            // buffer is live.
            let (retired, cap) = unsafe { ((*self.inner.retired.get()).len(), (*self.buffer.get()).cap()) };
            if (retired == 0 && cap == MIN_CAP) || !self.is_empty() {
                return;
            }
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            std::thread::yield_now();
        }
    }

    /// Slots this deque's buffers hold, the current one and those retired
    /// (what its memory amounts to, for tests of what a slot keeps).
    #[cfg(any(test, loom))]
    pub fn kept_capacity(&self) -> usize {
        // SAFETY: as in `release_memory_waiting`; retired buffers stay
        // allocated until the owner frees them.
        unsafe { (*self.buffer.get()).cap() + (*self.inner.retired.get()).iter().map(|&b| (*b).cap()).sum::<usize>() }
    }

    /// Pops a value: the newest (LIFO) or the oldest (FIFO).
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.head.front.load(Relaxed);
        if back.wrapping_sub(front) as isize <= 0 {
            return None;
        }
        let buffer = self.buffer.get();
        match self.flavor {
            Flavor::Fifo => {
                let front = self.inner.head.front.fetch_add(1, SeqCst);
                if back.wrapping_sub(front.wrapping_add(1)) as isize >= 0 {
                    // SAFETY: the fetch_add claimed slot `front`.
                    Some(unsafe { (*buffer).read(front).assume_init() })
                } else {
                    // Thieves took the rest meanwhile: undo the claim, which
                    // no thief can observe as a value (front passed back).
                    self.inner.head.front.store(front, Relaxed);
                    None
                }
            }
            Flavor::Lifo => {
                let back = back.wrapping_sub(1);
                self.inner.back.store(back, Relaxed);
                // Orders the store of `back` before the load of `front`
                // (against a thief's fence between its loads of the two).
                // `make test-loom` runs a mutant without it
                // (wspool_mutant_no_pop_fence, `sync::mutant!`) and requires
                // `deque_pop_races_steal` to fail.
                if !crate::sync::mutant!(wspool_mutant_no_pop_fence) {
                    fence(SeqCst);
                }
                let front = self.inner.head.front.load(Relaxed);
                let len = back.wrapping_sub(front) as isize;
                if len < 0 {
                    self.inner.back.store(back.wrapping_add(1), Relaxed);
                    return None;
                }
                // SAFETY: slot `back` was pushed by this owner; it is this
                // owner's if more than one value was left, or if it wins the
                // CAS below for the last one.
                let value = unsafe { (*buffer).read(back) };
                if len == 0 {
                    let won =
                        self.inner.head.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_ok();
                    self.inner.back.store(back.wrapping_add(1), Relaxed);
                    if !won {
                        // A thief took it: the copy is not ours.
                        return None;
                    }
                }
                // SAFETY: claimed above.
                Some(unsafe { value.assume_init() })
            }
        }
    }
}

impl<T> Stealer<T> {
    /// A thief's look at the deque: `front` and the length (negative while
    /// an owner's pop is under way).
    #[inline]
    fn look(&self) -> (usize, isize) {
        let front = self.inner.head.front.load(Acquire);
        // Orders the load of `front` before that of `back`, against the
        // LIFO owner's fence between its store of `back` and load of `front`.
        fence(SeqCst);
        let back = self.inner.back.load(Acquire);
        (front, back.wrapping_sub(front) as isize)
    }

    /// True if `front` is still `index`, checked after loading `buffer` and
    /// before reading it. A minimal buffer that `release_memory` swapped in
    /// never holds `index`, but it is swapped in only once the deque is
    /// drained, when `front` has passed every index below `back`: the
    /// owner read such a `front` before storing the buffer, and this
    /// thief's load of the buffer synchronises with that store, so by
    /// read-read coherence this Relaxed load sees that `front` or a later
    /// one. A thief that would read a slot of the new buffer that the
    /// owner may be writing (its `index` is stale by more than the new
    /// buffer's size) returns here instead. What remains is a stale thief
    /// under wrap-around in one buffer, as in crossbeam.
    #[inline(always)]
    fn still_at(&self, index: usize) -> bool {
        self.inner.head.front.load(Relaxed) == index
    }

    /// True if the deque holds nothing (a thief's view, behind a fence).
    pub fn is_empty(&self) -> bool {
        self.look().1 <= 0
    }

    /// How many values the deque holds (a thief's view).
    pub fn len(&self) -> usize {
        self.look().1.max(0) as usize
    }

    /// Takes the oldest value.
    pub fn steal(&self) -> Steal<T> {
        let (front, len) = self.look();
        if len <= 0 {
            return Steal::Empty;
        }
        let reading = self.inner.reading();
        // Loaded after `back`, so it is the buffer the push of slot `front`
        // wrote, or a newer one holding a copy (the Acquire orders the
        // copies), or a minimal one swapped in after the deque
        // drained, which `still_at` sees. See `reading` for why it cannot
        // be a freed one.
        let buffer = self.inner.buffer.load(Acquire);
        if !self.still_at(front) {
            return Steal::Retry;
        }
        // SAFETY: `reading` keeps the buffer from being freed; the copy is
        // ours only if the CAS wins.
        let value = unsafe { (*buffer).read(front) };
        drop(reading);
        if self.inner.head.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
            return Steal::Retry;
        }
        // SAFETY: the CAS claimed slot `front`; its value was written before
        // the `back` this thief loaded, into `buffer` or copied into it.
        Steal::Success(unsafe { value.assume_init() })
    }

    /// Takes the oldest value and moves up to half of the rest (at most
    /// 31) into `dest`, for its owner to pop.
    pub fn steal_batch_and_pop(&self, dest: &Worker<T>) -> Steal<T> {
        self.steal_batch_with_limit_and_pop(dest, MAX_BATCH)
    }

    /// As [`Stealer::steal_batch_and_pop`], moving at most `limit - 1`.
    pub fn steal_batch_with_limit_and_pop(&self, dest: &Worker<T>, limit: usize) -> Steal<T> {
        debug_assert!(limit > 0);
        if Arc::ptr_eq(&self.inner, &dest.inner) {
            return match dest.pop() {
                Some(value) => Steal::Success(value),
                None => Steal::Empty,
            };
        }
        let (mut front, len) = self.look();
        if len <= 0 {
            return Steal::Empty;
        }
        let batch = ((len as usize - 1) / 2).min(limit - 1);
        dest.reserve(batch);
        let dest_buffer = dest.buffer.get();
        let mut dest_back = dest.inner.back.load(Relaxed);
        // Held until every read below is done (see `steal`).
        let _reading = self.inner.reading();
        let buffer = self.inner.buffer.load(Acquire);
        if !self.still_at(front) {
            return Steal::Retry;
        }
        // SAFETY (every read and write below): buffers stay live until
        // their deque is dropped; copies from `self` are ours only once a
        // CAS on `front` claimed them, and are written to `dest` slots past
        // its `back`, which no thief reads before `back` is published.
        let mut first = unsafe { (*buffer).read(front) };
        match self.flavor {
            Flavor::Fifo => {
                // A FIFO owner also claims through `front`, so one CAS
                // claims the whole run.
                for i in 0..batch {
                    unsafe {
                        let value = (*buffer).read(front.wrapping_add(i + 1));
                        (*dest_buffer).write(dest_back.wrapping_add(dest_offset(dest.flavor, i, batch)), value);
                    }
                }
                let claimed = front.wrapping_add(batch + 1);
                if self.inner.head.front.compare_exchange(front, claimed, SeqCst, Relaxed).is_err() {
                    return Steal::Retry;
                }
                dest_back = dest_back.wrapping_add(batch);
            }
            Flavor::Lifo => {
                // A LIFO owner pops without an RMW while more than one value
                // is left, so values are claimed one CAS at a time.
                if self.inner.head.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
                    return Steal::Retry;
                }
                front = front.wrapping_add(1);
                let mut moved = 0;
                while moved < batch {
                    fence(SeqCst);
                    let back = self.inner.back.load(Acquire);
                    if back.wrapping_sub(front) as isize <= 0 {
                        break;
                    }
                    // Reloaded after `back`, as in `steal`: between two
                    // claims the owner may pop this index (while `front` was
                    // below it), grow, and push it again into the new buffer
                    // only; the buffer `back` was published with holds it.
                    let buffer = self.inner.buffer.load(Acquire);
                    if !self.still_at(front) {
                        break;
                    }
                    let next = unsafe { (*buffer).read(front) };
                    if self.inner.head.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
                        break;
                    }
                    // The newest claimed value is returned; the older ones
                    // go to `dest` oldest first (crossbeam's order).
                    unsafe { (*dest_buffer).write(dest_back, std::mem::replace(&mut first, next)) };
                    front = front.wrapping_add(1);
                    dest_back = dest_back.wrapping_add(1);
                    moved += 1;
                }
            }
        }
        // Publishes the moved values to `dest`'s thieves.
        dest.publish(dest_back);
        // SAFETY: claimed above.
        Steal::Success(unsafe { first.assume_init() })
    }
}

/// Where the `i`-th of `batch` values moved from a FIFO source goes in a
/// destination of `flavor`: in order for a FIFO owner, reversed for a LIFO
/// one (so its pops still take the oldest first).
#[inline]
fn dest_offset(flavor: Flavor, i: usize, batch: usize) -> usize {
    match flavor {
        Flavor::Fifo => i,
        Flavor::Lifo => batch - 1 - i,
    }
}

/// Copies one `T` from `src` to `dst`, a word at a time when `T` is made
/// of whole words (see [`Buffer::write_from`]): volatile, so the compiler
/// does not merge the words back into 16-byte moves. The words are
/// `MaybeUninit<u64>`, not `u64`: a typed copy would strip the provenance
/// of the pointers inside `T` (a `Box`, a job's vtable) and assert that a
/// partly initialised payload's padding is initialised, both undefined
/// behaviour (Miri reports them); `MaybeUninit` carries bytes as they are.
#[inline(always)]
unsafe fn copy_by_words<T>(src: *const T, dst: *mut T) {
    if size_of::<T>().is_multiple_of(size_of::<u64>()) && align_of::<T>() >= align_of::<u64>() {
        let (src, dst) = (src.cast::<MaybeUninit<u64>>(), dst.cast::<MaybeUninit<u64>>());
        for i in 0..size_of::<T>() / size_of::<u64>() {
            // SAFETY: both point to a whole, aligned `T`, so word `i` is in bounds.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
    } else {
        // SAFETY: the caller's pointers, one `T` each, not overlapping.
        unsafe { ptr::copy_nonoverlapping(src, dst, 1) };
    }
}

/// Takes with `take` until it reports nothing, retrying lost races.
#[cfg(test)]
pub(crate) fn drain<T>(mut take: impl FnMut() -> Steal<T>) -> Vec<T> {
    let mut out = Vec::new();
    loop {
        match take() {
            Steal::Success(v) => out.push(v),
            Steal::Empty => return out,
            Steal::Retry => {}
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
