//! The global queue: an unbounded multi-producer, multi-consumer FIFO of
//! fixed blocks, the segmented design of crossbeam-deque's `Injector`,
//! with one change: a block that has been read to the end is kept for the
//! next push to reuse instead of going back to the allocator.
//!
//! Why not crossbeam's `Injector` itself: it allocates a zeroed block
//! (1.5 KiB here) every 63 pushes and frees it on whichever thread read its
//! last slot. In a flood the submitter allocates and the workers free, so
//! glibc takes its arena lock on both sides of the same arena at the same
//! moment (a block boundary), and a growing backlog faults in and zeroes
//! fresh heap pages. Measured on the 2-core VM (`bench/ab`, W1, 10 M tasks): 112 k
//! `futex` calls, most of them that arena lock taken in the workers' `free`,
//! 8.6 % of all samples zeroing fresh pages under the submitter's `calloc`,
//! and a third of the CPU time in the kernel; with jemalloc preloaded the
//! same binary flooded at 19–20 M/s against 11–13. A recycled block needs
//! neither: its slot states are reset by the thread that retires it, off
//! the submitter's path.
//!
//! # Protocol
//!
//! `tail` and `head` are indices that only grow, in steps of `1 << SHIFT`;
//! `index >> SHIFT` modulo `LAP` is the offset in the current block. Offset
//! `BLOCK_CAP` is never a slot: it marks "the block is full, the next one is
//! being installed", and threads that see it wait. A pusher wins a slot with
//! a SeqCst CAS on `tail.index` (a submission relies on that CAS ordering
//! its push before its wake-up check, as a fence would), then writes the
//! value and stores the slot's `WRITE` flag. A taker wins a slot, or a run
//! of slots, with a CAS on `head.index`, waits for each `WRITE`, reads, and
//! then adds the number of slots it read to the block's `read` count. The
//! winner of a block's last slot installs the next block (push) or moves
//! `head` to it (take), before its own slot is written or read. The taker
//! whose addition completes the count (`BLOCK_CAP`) retires the block.
//!
//! crossbeam marks each slot read with its own RMW and walks the block
//! with `DESTROY` flags instead; one count per block costs a taker one RMW
//! per batch instead of one per value, and, since only its writer stores a
//! slot's flag, a pusher a plain store instead of an RMW.
//!
//! Only a thread that won a slot of a block dereferences it (and the taker
//! that moves `head` on reads the next block's `next`, before anybody can
//! take from that block), and a block is retired only after every slot's
//! reader is done with it (each reader's accesses come before its release
//! addition, and the completing addition acquires them all), so reusing
//! the memory cannot be observed: a thread holding a stale pointer from an
//! earlier load fails its CAS (the indices never repeat) before touching
//! it. A retired block goes to one of `SPARES` spare slots (an atomic swap
//! hands it over whole; no list, so no ABA) or, when they are full, back to
//! the allocator, so what the queue keeps beyond its contents is bounded.
//!
//! `tests/loom.rs` runs this code (with 3-slot blocks) under loom; the unit
//! tests below run it on real threads (3 producers, one of them pushing
//! runs, 3 consumers, singles and batches), and every pool test goes
//! through it.

use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

use crate::deque::{Steal, Worker};
use crossbeam_utils::{Backoff, CachePadded};

use crate::sync::{AtomicPtr, AtomicUsize, UnsafeCell, fence};

/// A slot's value has been written (its only other state is 0, empty).
const WRITE: usize = 1;

/// Indices per block: `BLOCK_CAP` slots and the "next block" marker.
///
/// 255 slots (6 KiB) a block: a backlog that outgrows the spares is
/// allocated, and freed by the workers that read it, in a quarter as many
/// calls as with 63 (1.5 KiB). Four foreign threads flooding two workers
/// (W7) spend those calls in glibc's per-thread arenas, whose heaps grow
/// and shrink under the process's memory-map lock; measured interleaved
/// on the 2-core VM, W7 through C ran at 4.4-9.8 M tasks/s with 63-slot
/// blocks against 6.7-11.3 with 255 and 6.5-12.1 with 1,023 (five
/// rounds; with `GLIBC_TUNABLES=glibc.malloc.arena_max=1` 63-slot blocks
/// ran at 9.3-10.2). Under Miri the blocks stay small, so its runs cross
/// many block ends.
#[cfg(not(any(loom, miri)))]
const LAP: usize = 256;
#[cfg(all(miri, not(loom)))]
const LAP: usize = 64;
#[cfg(loom)]
const LAP: usize = 4;
const BLOCK_CAP: usize = LAP - 1;
/// The low bit of `head.index` says the head block has a successor, so a
/// taker need not read `tail` to know the queue is not empty.
const SHIFT: usize = 1;
const HAS_NEXT: usize = 1;
/// Retired blocks kept for reuse (4 × 6 KiB).
const SPARES: usize = 4;

struct Slot<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    state: AtomicUsize,
}

struct Block<T> {
    next: AtomicPtr<Block<T>>,
    /// Slots read so far; the taker that brings it to `BLOCK_CAP` retires
    /// the block.
    read: AtomicUsize,
    slots: [Slot<T>; BLOCK_CAP],
}

impl<T> Block<T> {
    /// A new block, every slot empty, initialised in place: built by
    /// value, the 6 KiB block was assembled on the stack and copied into
    /// the heap. Only what says "empty" is written (`next`, `read`, each
    /// slot's state); the values stay uninitialised until a push.
    #[cfg(not(loom))]
    fn allocate() -> *mut Self {
        let layout = std::alloc::Layout::new::<Self>();
        // SAFETY: the layout is `Block`'s, which is not zero-sized.
        let block = unsafe { std::alloc::alloc(layout) }.cast::<Self>();
        if block.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: freshly allocated with `Block`'s layout and not shared;
        // every field but the `MaybeUninit` values is written before the
        // block is used, through raw pointers (no reference to the
        // uninitialised memory is made). `Box::from_raw` frees it later
        // (`retire`, `Drop`): same layout, same global allocator.
        unsafe {
            (&raw mut (*block).next).write(AtomicPtr::new(ptr::null_mut()));
            (&raw mut (*block).read).write(AtomicUsize::new(0));
            let slots = (&raw mut (*block).slots).cast::<Slot<T>>();
            for i in 0..BLOCK_CAP {
                (&raw mut (*slots.add(i)).state).write(AtomicUsize::new(0));
            }
        }
        block
    }

    /// Under loom the cells and atomics carry loom's tracking state, which
    /// zeroed memory is not: built by value.
    #[cfg(loom)]
    fn allocate() -> *mut Self {
        Box::into_raw(Box::new(Block {
            next: AtomicPtr::new(ptr::null_mut()),
            read: AtomicUsize::new(0),
            slots: std::array::from_fn(|_| Slot {
                value: UnsafeCell::new(MaybeUninit::uninit()),
                state: AtomicUsize::new(0),
            }),
        }))
    }

    fn wait_next(&self) -> *mut Self {
        let backoff = Backoff::new();
        loop {
            let next = self.next.load(Acquire);
            if !next.is_null() {
                return next;
            }
            snooze(&backoff);
        }
    }
}

impl<T> Slot<T> {
    fn wait_write(&self) {
        let backoff = Backoff::new();
        while self.state.load(Acquire) & WRITE == 0 {
            snooze(&backoff);
        }
    }
}

/// Waiting for another thread's step that is already under way (it won
/// its CAS and has a store or two left): spin, then yield.
#[inline]
fn snooze(backoff: &Backoff) {
    #[cfg(loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    backoff.snooze();
}

struct Position<T> {
    index: AtomicUsize,
    block: AtomicPtr<Block<T>>,
}

/// The global FIFO queue (see the module comment).
pub struct Injector<T> {
    head: CachePadded<Position<T>>,
    tail: CachePadded<Position<T>>,
    spares: CachePadded<[AtomicPtr<Block<T>>; SPARES]>,
}

// SAFETY: values move between threads through the queue, hence `T: Send`;
// every shared access to a slot's value is ordered by its state word.
unsafe impl<T: Send> Send for Injector<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Injector<T> {}

impl<T> Default for Injector<T> {
    fn default() -> Self {
        let block = Block::allocate();
        Injector {
            head: CachePadded::new(Position { index: AtomicUsize::new(0), block: AtomicPtr::new(block) }),
            tail: CachePadded::new(Position { index: AtomicUsize::new(0), block: AtomicPtr::new(block) }),
            spares: CachePadded::new(std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut()))),
        }
    }
}

impl<T> Injector<T> {
    /// An empty queue with one block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `value`. The slot is reserved by a SeqCst CAS.
    ///
    /// Inlined into every submission: the common case (a slot that is not
    /// its block's last, won at the first try) is two loads, one CAS, the
    /// write and a store of its flag; block ends and lost races take
    /// `push_contended`.
    #[inline(always)]
    pub fn push(&self, value: T) {
        let tail = self.tail.index.load(Acquire);
        let offset = (tail >> SHIFT) % LAP;
        if offset + 1 < BLOCK_CAP {
            let block = self.tail.block.load(Acquire);
            if self.tail.index.compare_exchange_weak(tail, tail + (1 << SHIFT), SeqCst, Acquire).is_ok() {
                // SAFETY: as in `push_contended`: the CAS gave this thread
                // the slot, and the block lives until the slot is read.
                unsafe { Self::write(block, offset, value) };
                return;
            }
        }
        self.push_contended(value);
    }

    /// Appends up to `max` values, made by `make` one after the other, and
    /// returns how many (at least one). A run of them inside the tail
    /// block, short of its last slot, is reserved with one CAS (a batch
    /// submission otherwise pays one per task, the submitter's dearest
    /// instruction in a flood); at a block's last slot it pushes one value
    /// the ordinary way, which installs the next block.
    ///
    /// `make` runs after its slot is reserved: if it unwound, takers would
    /// wait forever for the slot, so that aborts the process instead.
    #[inline]
    pub fn push_run(&self, max: usize, mut make: impl FnMut() -> T) -> usize {
        debug_assert!(max > 0);
        let tail = self.tail.index.load(Acquire);
        let offset = (tail >> SHIFT) % LAP;
        // Offset `BLOCK_CAP` (a block being installed) leaves no room either.
        let run = (BLOCK_CAP - 1).saturating_sub(offset).min(max);
        if run > 0 {
            let block = self.tail.block.load(Acquire);
            if self.tail.index.compare_exchange_weak(tail, tail + (run << SHIFT), SeqCst, Acquire).is_ok() {
                let abort = crate::worker::AbortOnUnwind("a batch push with reserved slots");
                for i in 0..run {
                    // SAFETY: the CAS gave this thread the `run` slots from
                    // `offset`, all inside `block` (which lives until they
                    // are read), each written once here.
                    unsafe { Self::write(block, offset + i, make()) };
                }
                std::mem::forget(abort);
                return run;
            }
        }
        self.push(make());
        1
    }

    #[cold]
    #[inline(never)]
    fn push_contended(&self, value: T) {
        let backoff = Backoff::new();
        let mut tail = self.tail.index.load(Acquire);
        let mut block = self.tail.block.load(Acquire);
        let mut next_block: *mut Block<T> = ptr::null_mut();
        loop {
            let offset = (tail >> SHIFT) % LAP;
            if offset == BLOCK_CAP {
                snooze(&backoff);
                tail = self.tail.index.load(Acquire);
                block = self.tail.block.load(Acquire);
                continue;
            }
            // The last slot's winner installs the next block: have it ready
            // before the CAS, so the others wait as briefly as possible.
            if offset + 1 == BLOCK_CAP && next_block.is_null() {
                next_block = self.take_spare();
            }
            let new_tail = tail + (1 << SHIFT);
            match self.tail.index.compare_exchange_weak(tail, new_tail, SeqCst, Acquire) {
                Ok(_) => {
                    // SAFETY: winning the CAS gave this thread the slot at
                    // `offset` of `block`, which is not retired before that
                    // slot is read, so after the write below.
                    unsafe {
                        if offset + 1 == BLOCK_CAP {
                            let next_index = new_tail.wrapping_add(1 << SHIFT);
                            self.tail.block.store(next_block, Release);
                            self.tail.index.store(next_index, Release);
                            (*block).next.store(next_block, Release);
                            next_block = ptr::null_mut();
                        }
                        Self::write(block, offset, value);
                    }
                    break;
                }
                Err(current) => {
                    tail = current;
                    block = self.tail.block.load(Acquire);
                    backoff.spin();
                }
            }
        }
        if !next_block.is_null() {
            // Prepared for a block end another pusher won.
            // SAFETY: never published, so this thread owns it.
            unsafe { self.retire(next_block) };
        }
    }

    /// # Safety
    /// The caller won the slot at `offset` of `block` and writes it once.
    #[inline(always)]
    unsafe fn write(block: *mut Block<T>, offset: usize, value: T) {
        // SAFETY: the caller's slot; see above.
        unsafe {
            let slot = (*block).slots.get_unchecked(offset);
            slot.value.with_mut(|value_slot| value_slot.write(MaybeUninit::new(value)));
            slot.state.store(WRITE, Release);
        }
    }

    /// Takes the oldest value.
    pub fn steal(&self) -> Steal<T> {
        self.take_run(1, None)
    }

    /// Takes the oldest value and moves up to `limit - 1` of those after it
    /// (about half of what is queued, within the head block) into `dest`.
    pub fn steal_batch_with_limit_and_pop(&self, dest: &Worker<T>, limit: usize) -> Steal<T> {
        debug_assert!(limit > 0);
        self.take_run(limit, Some(dest))
    }

    /// Wins a run of up to `limit` slots at the head with one CAS, returns
    /// the first value and moves the others into `dest` (`None` only with
    /// `limit` 1, so there are no others).
    #[inline]
    fn take_run(&self, limit: usize, dest: Option<&Worker<T>>) -> Steal<T> {
        let Some((head, block, offset)) = self.head_position() else { return Steal::Empty };
        let Some(new_head) = self.claim(head, offset, limit) else { return Steal::Empty };
        if self.head.index.compare_exchange_weak(head, new_head, SeqCst, Acquire).is_err() {
            return Steal::Retry;
        }
        let end = offset + ((new_head >> SHIFT).wrapping_sub(head >> SHIFT));
        // SAFETY: the CAS gave this thread slots `offset..end` of `block`.
        unsafe {
            self.advance_head_past(block, end, new_head);
            let first = Self::read(block, offset);
            if let Some(dest) = dest {
                dest.push_batch(end - offset - 1, |i| Self::read(block, offset + 1 + i));
            }
            self.release(block, offset, end);
            Steal::Success(first)
        }
    }

    /// True if nothing is queued (SeqCst loads: a taker's emptiness check
    /// that must not miss a push ordered before it).
    pub fn is_empty(&self) -> bool {
        let head = self.head.index.load(SeqCst);
        let tail = self.tail.index.load(SeqCst);
        head >> SHIFT == tail >> SHIFT
    }

    /// Values queued (a snapshot: consistent indices, possibly stale).
    pub fn len(&self) -> usize {
        loop {
            let tail = self.tail.index.load(SeqCst);
            let head = self.head.index.load(SeqCst);
            if self.tail.index.load(SeqCst) == tail {
                return Self::slots_between(head >> SHIFT, tail >> SHIFT);
            }
        }
    }

    /// Slots from index `head` to index `tail` (both shifted), not counting
    /// the block-end markers between them.
    fn slots_between(mut head: usize, mut tail: usize) -> usize {
        // An index on a block end means the start of the next block.
        if tail % LAP == BLOCK_CAP {
            tail = tail.wrapping_add(1);
        }
        if head % LAP == BLOCK_CAP {
            head = head.wrapping_add(1);
        }
        let base = head / LAP * LAP;
        let (head, tail) = (head - base, tail - base);
        tail - head - tail / LAP
    }

    /// The head index, its block and offset, once no block end is being
    /// crossed.
    fn head_position(&self) -> Option<(usize, *mut Block<T>, usize)> {
        let backoff = Backoff::new();
        loop {
            let head = self.head.index.load(Acquire);
            let block = self.head.block.load(Acquire);
            let offset = (head >> SHIFT) % LAP;
            if offset != BLOCK_CAP {
                return Some((head, block, offset));
            }
            snooze(&backoff);
        }
    }

    /// The head index after taking up to `limit` slots from `head` (at
    /// offset `offset`), or None if the queue is empty.
    fn claim(&self, head: usize, offset: usize, limit: usize) -> Option<usize> {
        let mut new_head = head;
        let to_block_end = BLOCK_CAP - offset;
        let take = if head & HAS_NEXT == 0 {
            fence(SeqCst);
            let tail = self.tail.index.load(Relaxed);
            if head >> SHIFT == tail >> SHIFT {
                return None;
            }
            if (head >> SHIFT) / LAP != (tail >> SHIFT) / LAP {
                new_head |= HAS_NEXT;
                to_block_end.min(limit)
            } else {
                // Within one block: take half of what is there.
                (((tail - head) >> SHIFT).div_ceil(2)).min(limit)
            }
        } else {
            to_block_end.min(limit)
        };
        Some(new_head + (take << SHIFT))
    }

    /// After winning slots up to `end` (exclusive): if that is the block's
    /// end, move `head` to the next block.
    ///
    /// # Safety
    /// The caller won slots of `block` ending at `end`.
    unsafe fn advance_head_past(&self, block: *mut Block<T>, end: usize, new_head: usize) {
        if end != BLOCK_CAP {
            return;
        }
        // SAFETY: `block` is alive: the caller's slots are unread.
        let next = unsafe { (*block).wait_next() };
        let mut next_index = (new_head & !HAS_NEXT).wrapping_add(1 << SHIFT);
        // SAFETY: `next` is installed and cannot be retired before its
        // first slot is taken, which needs `head` to point at it first.
        if unsafe { !(*next).next.load(Relaxed).is_null() } {
            next_index |= HAS_NEXT;
        }
        self.head.block.store(next, Release);
        self.head.index.store(next_index, Release);
    }

    /// # Safety
    /// The caller won the slot and reads it once.
    unsafe fn read(block: *mut Block<T>, offset: usize) -> T {
        // SAFETY: the caller's slot; the block lives until the caller
        // counts it read (`release`).
        unsafe {
            let slot = (*block).slots.get_unchecked(offset);
            slot.wait_write();
            slot.value.with(|value| value.read().assume_init())
        }
    }

    /// Counts the caller's slots `start..end` as read; the taker that
    /// completes the block retires it.
    ///
    /// # Safety
    /// The caller won and read slots `start..end` of `block`, and touches
    /// the block no more.
    unsafe fn release(&self, block: *mut Block<T>, start: usize, end: usize) {
        let n = end - start;
        // SAFETY: the caller's unread-until-now slots kept the block alive
        // up to this addition.
        if unsafe { (*block).read.fetch_add(n, AcqRel) } + n == BLOCK_CAP {
            // SAFETY: every slot has been read and every reader is past its
            // addition: nothing refers to the block any more.
            unsafe { self.retire(block) };
        }
    }

    /// A spare block, reset by whoever retired it, or a new one.
    fn take_spare(&self) -> *mut Block<T> {
        for spare in self.spares.iter() {
            if !spare.load(Relaxed).is_null() {
                let block = spare.swap(ptr::null_mut(), Acquire);
                if !block.is_null() {
                    return block;
                }
            }
        }
        Block::allocate()
    }

    /// Resets a block no other thread can reach and keeps it as a spare, or
    /// frees it if every spare slot is taken.
    ///
    /// # Safety
    /// `block` came from `Block::allocate` and nothing else refers to it.
    unsafe fn retire(&self, block: *mut Block<T>) {
        // No spare slot free: no reset for a block that is freed anyway.
        if self.spares.iter().all(|spare| !spare.load(Relaxed).is_null()) {
            // SAFETY: as below.
            drop(unsafe { Box::from_raw(block) });
            return;
        }
        // SAFETY: exclusively owned (the caller's contract).
        unsafe {
            (*block).next.store(ptr::null_mut(), Relaxed);
            (*block).read.store(0, Relaxed);
            for slot in &(*block).slots {
                slot.state.store(0, Relaxed);
            }
        }
        for spare in self.spares.iter() {
            if spare.load(Relaxed).is_null() && spare.compare_exchange(ptr::null_mut(), block, Release, Relaxed).is_ok()
            {
                return;
            }
        }
        // SAFETY: as above; `Block::allocate` allocated it with `Block`'s layout.
        drop(unsafe { Box::from_raw(block) });
    }
}

impl<T> Drop for Injector<T> {
    fn drop(&mut self) {
        let mut head = self.head.index.load(Relaxed) >> SHIFT;
        let tail = self.tail.index.load(Relaxed) >> SHIFT;
        let mut block = self.head.block.load(Relaxed);
        // SAFETY: `&mut self`: no other thread is in the queue. Slots from
        // head to tail hold values nobody read; blocks are boxed.
        unsafe {
            while head != tail {
                let offset = head % LAP;
                if offset < BLOCK_CAP {
                    (*block).slots.get_unchecked(offset).value.with_mut(|value| (*value).assume_init_drop());
                } else {
                    let next = (*block).next.load(Relaxed);
                    drop(Box::from_raw(block));
                    block = next;
                }
                head = head.wrapping_add(1);
            }
            drop(Box::from_raw(block));
            for spare in self.spares.iter() {
                let spare = spare.load(Relaxed);
                if !spare.is_null() {
                    drop(Box::from_raw(spare));
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    fn take_all(q: &Injector<usize>) -> Vec<usize> {
        crate::deque::drain(|| q.steal())
    }

    #[test]
    fn fifo_across_blocks_with_len_and_reuse() {
        let q = Injector::new();
        for round in 0..3 {
            for i in 0..500 {
                q.push(i);
                assert_eq!(q.len(), i + 1);
            }
            assert!(!q.is_empty());
            assert_eq!(take_all(&q), (0..500).collect::<Vec<_>>(), "round {round}");
            assert!(q.is_empty());
            assert_eq!(q.len(), 0);
        }
        // Blocks were retired into the spares and taken back out.
        assert!(q.spares.iter().any(|s| !s.load(Relaxed).is_null()));
    }

    #[test]
    fn batches_keep_order_and_stop_at_the_limit() {
        let q = Injector::new();
        for i in 0..300 {
            q.push(i);
        }
        let dest = Worker::new_fifo();
        let mut seen = Vec::new();
        loop {
            match q.steal_batch_with_limit_and_pop(&dest, 32) {
                Steal::Success(first) => {
                    seen.push(first);
                    let mut moved = 0;
                    while let Some(v) = dest.pop() {
                        seen.push(v);
                        moved += 1;
                    }
                    assert!(moved < 32);
                }
                Steal::Empty => break,
                Steal::Retry => {}
            }
        }
        assert_eq!(seen, (0..300).collect::<Vec<_>>());
    }

    /// Values left in the queue, and spare blocks, are dropped with it.
    #[test]
    fn drop_releases_what_is_left() {
        struct Counted(Arc<StdAtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Relaxed);
            }
        }
        let dropped = Arc::new(StdAtomicUsize::new(0));
        let q = Injector::new();
        for _ in 0..200 {
            q.push(Counted(dropped.clone()));
        }
        // A steal may report Retry with no rival (its CAS is a weak one,
        // which may fail spuriously: under Miri, and on LL/SC machines).
        let mut taken = 0;
        while taken < 70 {
            match q.steal() {
                Steal::Success(v) => {
                    drop(v);
                    taken += 1;
                }
                Steal::Retry => {}
                Steal::Empty => panic!("the queue ran dry after {taken} of 200"),
            }
        }
        assert_eq!(dropped.load(Relaxed), 70);
        drop(q);
        assert_eq!(dropped.load(Relaxed), 200);
    }

    /// Several producers (one pushing runs) and consumers, single takes
    /// and batches mixed: every value comes out exactly once and each
    /// producer's values in its order.
    #[test]
    fn concurrent_producers_and_consumers_take_each_value_once_in_order() {
        const PRODUCERS: usize = 3;
        // Under Miri: enough to cross several 63-slot blocks and reuse them.
        const PER: usize = if cfg!(miri) { 150 } else { 200_000 };
        let q = Arc::new(Injector::new());
        let taken = Arc::new(StdAtomicUsize::new(0));
        let seen: Vec<std::sync::atomic::AtomicBool> = (0..PRODUCERS * PER).map(|_| Default::default()).collect();
        std::thread::scope(|s| {
            for p in 0..PRODUCERS {
                let q = &q;
                s.spawn(move || {
                    if p == PRODUCERS - 1 {
                        // Runs of 1 to 40 values (`push_run`) across block ends.
                        let mut next = 0;
                        while next < PER {
                            let max = (1 + next % 40).min(PER - next);
                            let before = next;
                            let pushed = q.push_run(max, || {
                                next += 1;
                                p * PER + next - 1
                            });
                            assert_eq!(pushed, next - before);
                            assert!((1..=max).contains(&pushed));
                        }
                    } else {
                        for i in 0..PER {
                            q.push(p * PER + i);
                        }
                    }
                });
            }
            let mut consumers = Vec::new();
            for c in 0..3 {
                let (q, taken, seen) = (&q, &taken, &seen);
                consumers.push(s.spawn(move || {
                    let dest = Worker::new_fifo();
                    let mut last = [None::<usize>; PRODUCERS];
                    let mut got = Vec::new();
                    while taken.load(Relaxed) < PRODUCERS * PER {
                        let step = if c == 0 { q.steal() } else { q.steal_batch_with_limit_and_pop(&dest, 16) };
                        if let Steal::Success(v) = step {
                            got.push(v);
                            while let Some(v) = dest.pop() {
                                got.push(v);
                            }
                        }
                        for &v in &got {
                            assert!(!seen[v].swap(true, Relaxed), "{v} taken twice");
                            let p = v / PER;
                            assert!(last[p].is_none_or(|l| l < v), "producer {p}'s values out of order");
                            last[p] = Some(v);
                        }
                        taken.fetch_add(got.len(), Relaxed);
                        got.clear();
                    }
                    last
                }));
            }
            for c in consumers {
                c.join().unwrap();
            }
        });
        assert_eq!(taken.load(Relaxed), PRODUCERS * PER);
        assert!(q.is_empty());
    }
}
