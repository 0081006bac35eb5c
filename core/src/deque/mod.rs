//! The workers' own queues: a Chase-Lev work-stealing deque (the algorithm
//! and orderings of crossbeam-deque's `Worker`/`Stealer`, LIFO for a
//! worker's deque and FIFO for its inbox) whose buffer grows and never
//! shrinks, with no epoch-based reclamation.
//!
//! Why not crossbeam's deque: it halves its buffer whenever a pop leaves it
//! a quarter full, and frees every replaced buffer through crossbeam-epoch.
//! A root task that pushes 1,000 children grows its deque 64 → 1,024 and
//! shrinks it back as they drain: four allocations, four copies and four
//! epoch-deferred frees per root, about 60 instructions per task in
//! callgrind (`docs/benchmarks.md`). Its `pop` is also too large to be
//! inlined, and every steal pins the epoch. Here a buffer is replaced only
//! when it is full, by one twice as large, and the replaced buffer is kept
//! until the deque is dropped, so a thief holding a stale buffer pointer
//! reads valid (if outdated) memory without any pinning. What that costs is
//! bounded: the retired buffers together are smaller than the current one,
//! which never exceeds twice the deque's high-water mark.
//!
//! # Protocol
//!
//! `front` and `back` only grow (wrapping); `back - front` is the length.
//! Only the owner ([`Worker`]) writes `back` and the buffer's slots. The
//! owner pushes by writing slot `back`, then publishing `back + 1` with a
//! Release store. A thief ([`Stealer`]) loads `front` (Acquire), fences
//! (SeqCst), loads `back` (Acquire), then the buffer (Acquire), reads slot
//! `front` *speculatively* and claims it with a CAS of `front` to
//! `front + 1`; a lost CAS forgets the copy it read. A LIFO owner pops by
//! storing `back - 1`, fencing (SeqCst) and reloading `front`: when more
//! than one value was left, the slot is the owner's without an RMW (a thief
//! needs `front < back` and the fence orders the two); the last value goes
//! to whoever wins the CAS on `front`. A FIFO owner pops like a thief that
//! need not fence, with a `fetch_add` on `front`.
//!
//! The speculative read is a data race by the letter of the Rust memory
//! model whenever the owner overwrites the slot meanwhile, which needs the
//! buffer to wrap around under a stalled thief (its `front` is then stale
//! and its CAS fails, so the bytes it copied are never used as a value).
//! crossbeam-deque makes the same read, as a volatile one, for the same
//! reason. loom reports any such race as an error, so the loom models
//! (`tests/loom.rs`, `deque_*`) exercise growth and the last-value race
//! without wrap-around, and `tests.rs` here races wrap-around on real
//! threads.
//!
//! The orderings are crossbeam's; the differences are growth without
//! shrinking, and buffers retired instead of deferred. crossbeam reloads
//! the buffer after a thief's read and retries if it changed, because a
//! replaced buffer may be freed; here a thief loads the buffer after
//! `back` before every read, and that buffer holds the value at index
//! `front`: the owner takes that index only through the CAS on `front`
//! while `front` is there, so it cannot pop it and push it again into a
//! newer buffer under the thief (see `steal`). A batch steal from a LIFO
//! deque, which claims one index at a time, reloads the buffer for each.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicPtr, AtomicUsize, UnsafeCell, fence};

/// The smallest buffer (crossbeam's minimum too).
#[cfg(not(loom))]
const MIN_CAP: usize = 64;
#[cfg(loom)]
const MIN_CAP: usize = 2;

/// The most values a batch steal moves at once (crossbeam's `MAX_BATCH`).
const MAX_BATCH: usize = 32;

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
}

impl<T> Buffer<T> {
    fn allocate(cap: usize) -> *mut Buffer<T> {
        debug_assert!(cap.is_power_of_two());
        let slots = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
        Box::into_raw(Box::new(Buffer { slots }))
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
        #[cfg(not(loom))]
        // SAFETY: the slot is in bounds; volatile, as crossbeam reads it, since
        // a stalled thief's copy may race with the owner (then discarded).
        return self.slot(index).with(|p| unsafe { ptr::read_volatile(p) });
        #[cfg(loom)]
        // SAFETY: as above; loom checks that no write races it.
        return self.slot(index).with(|p| unsafe { ptr::read(p) });
    }
}

/// What the owner and the thieves share.
struct Inner<T> {
    front: CachePadded<AtomicUsize>,
    back: CachePadded<AtomicUsize>,
    buffer: CachePadded<AtomicPtr<Buffer<T>>>,
    /// Buffers replaced by growth, freed with the deque: a thief may still
    /// read from one. Only the owner (in `grow`) and `Drop` touch it.
    retired: std::cell::UnsafeCell<Vec<*mut Buffer<T>>>,
}

// SAFETY: values are moved between threads (T: Send); `retired` is touched
// only by the single owner and by Drop, which has exclusive access.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Inner<T> {}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        let front = self.front.load(Relaxed);
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
            front: CachePadded::new(AtomicUsize::new(0)),
            back: CachePadded::new(AtomicUsize::new(0)),
            buffer: CachePadded::new(AtomicPtr::new(buffer)),
            retired: std::cell::UnsafeCell::new(Vec::new()),
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
        let front = self.inner.front.load(SeqCst);
        back.wrapping_sub(front) as isize <= 0
    }

    /// Makes room for `extra` more values beyond the current length.
    fn reserve(&self, extra: usize) {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.front.load(Acquire);
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
        // Publishes the slot to thieves (their Acquire load of `back`).
        self.inner.back.store(back.wrapping_add(1), Release);
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
        self.inner.back.store(back.wrapping_add(1), Release);
    }

    /// The buffer, grown first if it has no free slot at `back`.
    #[inline(always)]
    fn room_for_one(&self, back: usize) -> *mut Buffer<T> {
        let front = self.inner.front.load(Acquire);
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
        self.inner.back.store(back.wrapping_add(n), Release);
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
        self.inner.buffer.store(new, Release);
        // SAFETY: only the owner and Drop touch `retired`.
        unsafe { (*self.inner.retired.get()).push(old) };
    }

    /// Pops a value: the newest (LIFO) or the oldest (FIFO).
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let back = self.inner.back.load(Relaxed);
        let front = self.inner.front.load(Relaxed);
        if back.wrapping_sub(front) as isize <= 0 {
            return None;
        }
        let buffer = self.buffer.get();
        match self.flavor {
            Flavor::Fifo => {
                let front = self.inner.front.fetch_add(1, SeqCst);
                if back.wrapping_sub(front.wrapping_add(1)) as isize >= 0 {
                    // SAFETY: the fetch_add claimed slot `front`.
                    Some(unsafe { (*buffer).read(front).assume_init() })
                } else {
                    // Thieves took the rest meanwhile: undo the claim, which
                    // no thief can observe as a value (front passed back).
                    self.inner.front.store(front, Relaxed);
                    None
                }
            }
            Flavor::Lifo => {
                let back = back.wrapping_sub(1);
                self.inner.back.store(back, Relaxed);
                // Orders the store of `back` before the load of `front`
                // (against a thief's fence between its loads of the two).
                // `make test-loom` builds a mutant without it
                // (--cfg wspool_mutant_no_pop_fence) and requires
                // `deque_pop_races_steal` to fail.
                #[cfg(not(wspool_mutant_no_pop_fence))]
                fence(SeqCst);
                let front = self.inner.front.load(Relaxed);
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
                    let won = self.inner.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_ok();
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
        let front = self.inner.front.load(Acquire);
        // Orders the load of `front` before that of `back`, against the
        // LIFO owner's fence between its store of `back` and load of `front`.
        fence(SeqCst);
        let back = self.inner.back.load(Acquire);
        (front, back.wrapping_sub(front) as isize)
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
        // Loaded after `back`, so it is the buffer the push of slot `front`
        // wrote, or a newer one holding a copy (the Acquire orders it).
        let buffer = self.inner.buffer.load(Acquire);
        // SAFETY: the buffer is live until the deque is dropped (retired,
        // never freed early); the copy is ours only if the CAS wins.
        let value = unsafe { (*buffer).read(front) };
        if self.inner.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
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
        let buffer = self.inner.buffer.load(Acquire);
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
                if self.inner.front.compare_exchange(front, claimed, SeqCst, Relaxed).is_err() {
                    return Steal::Retry;
                }
                dest_back = dest_back.wrapping_add(batch);
            }
            Flavor::Lifo => {
                // A LIFO owner pops without an RMW while more than one value
                // is left, so values are claimed one CAS at a time.
                if self.inner.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
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
                    let next = unsafe { (*buffer).read(front) };
                    if self.inner.front.compare_exchange(front, front.wrapping_add(1), SeqCst, Relaxed).is_err() {
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
        dest.inner.back.store(dest_back, Release);
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
/// does not merge the words back into 16-byte moves.
#[inline(always)]
unsafe fn copy_by_words<T>(src: *const T, dst: *mut T) {
    if size_of::<T>().is_multiple_of(size_of::<u64>()) && align_of::<T>() >= align_of::<u64>() {
        let (src, dst) = (src.cast::<u64>(), dst.cast::<u64>());
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
