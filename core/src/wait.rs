//! Help-while-waiting: how a pool thread waits for a task, a group, a
//! scope or a join, and what it may run meanwhile.
//!
//! A waiting pool thread runs jobs of its own isolation region (see
//! `isolation.rs`), in this order: its own deque (the children it just
//! forked), then work of its region that other workers hold in their deques
//! (a stolen subtree, rayon's order), and last, before it parks and only
//! while no other thread is free to take global work, jobs of its region
//! in the global queue (`SpawnOptions::global` keeps the region; see
//! `look_in_global_queue`). Jobs of another region found on its own deque
//! are moved to the global queue, where anyone may take them.
//!
//! It runs nothing at all, and just parks until the latch is set, when:
//! - the wait is timed: a timed wait must not start work it cannot bound;
//! - it is inside a blocking region (`wspool::blocking`): the documented way
//!   to wait without helping;
//! - too little stack is left to run another task on top of this one (the
//!   bound is the stack actually left, measured against the thread's real
//!   stack; a frame count is only a secondary cap).
//!
//! A waiter with nothing to run parks in the sleep system's *waiters* list.
//! Work from outside the pool never wakes it (it could not run it); every
//! push of its own region's work by another worker does, onto a deque or
//! the global queue, as does another waiter's look through the global
//! queue that passes over such a job (`sleep/README.md`, rules 2 and 7).
//! While parked it counts as waiting: if every thread of the pool is
//! blocked or waiting and work is queued, the pool lends a thread unless
//! its growth policy is `Fixed`; on a `Fixed` pool, work of a waiter's own
//! region still runs (the looks above), other work waits for a thread.

use std::time::Instant;

use crate::deque::Steal;
use crate::job::{JobRef, TAG_NEVER_HELP, Tag};
use crate::latch::Awaitable;
use crate::sleep::NO_REGION;
use crate::worker::WorkerThread;

/// Help-while-waiting frames allowed on one stack before a wait just parks,
/// whatever stack is left (a secondary bound).
pub(crate) const MAX_HELP_DEPTH: u32 = 256;
/// How long a waiter with nothing to run spins before it parks: a pool
/// thread here, a foreign thread in `latch::Signal::wait_until`.
pub(crate) const WAIT_SPIN: std::time::Duration = std::time::Duration::from_micros(20);
/// Stack size assumed where the real bounds cannot be read: std's default
/// for spawned threads.
const ASSUMED_STACK: usize = 2 << 20;

impl WorkerThread {
    /// Waits until `latch` is set or `deadline` passes, helping as the
    /// module comment says. Returns whether the latch was set.
    pub(crate) fn wait_until(&self, latch: &dyn Awaitable, deadline: Option<Instant>) -> bool {
        if latch.probe() {
            return true;
        }
        let region = self.help_region(deadline);
        let depth = self.help_depth.get();
        self.help_depth.set(depth + 1);
        let _restore_depth = RestoreDepth(&self.help_depth, depth);
        // A waiting worker is not running its task (the monitor must not
        // judge it by its thread state); the outer mark comes back on return.
        let busy = &self.counters().in_task;
        let outer_busy = busy.swap(0, std::sync::atomic::Ordering::Relaxed);
        let _restore_busy = RestoreBusy(busy, outer_busy);
        // What this wait waits on, for snapshots (`dump.rs`); nested waits
        // put the outer one back.
        let _note = crate::dump::WaitMark::set(self.counters(), latch.wait_note());
        let registry = &self.registry;
        // Set when the waiter first finds nothing to run (not per job run:
        // a clock read costs as much as running a tiny task).
        let mut spin_until = None;
        loop {
            if latch.probe() {
                return true;
            }
            if region != NO_REGION
                && let Some(job) = self.find_region_task(region)
            {
                self.execute(job);
                spin_until = None;
                continue;
            }
            // What a waiter waits for is often a last job finishing on
            // another thread within microseconds: spin that long before
            // paying for a park and a futex wake-up.
            let now = Instant::now();
            let spin_end = *spin_until.get_or_insert(now + WAIT_SPIN);
            if now < deadline.map_or(spin_end, |d| d.min(spin_end)) {
                // Between clock reads (a clock read costs about as much as
                // a look at the queues), pause a little.
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return latch.probe(),
                },
            };
            latch.register_sleeper(&self.registry, self.index);
            let outer_stalled = self.counters().stalled.swap(true, std::sync::atomic::Ordering::Relaxed);
            // A job of the region found in the global queue by the re-check.
            let found = std::cell::Cell::new(None);
            {
                // Inside a blocking region the thread is counted already.
                let _waiting = (self.blocking_depth.get() == 0).then(|| registry.enter_waiting());
                registry.sleep.park_waiter(self.index, region, timeout, || {
                    latch.probe()
                        || (region != NO_REGION && self.region_work_visible(region))
                        || self.look_in_global_queue(region, &found)
                });
            }
            self.set_stalled(outer_stalled);
            latch.unregister_sleeper(self.index);
            if let Some(job) = found.take() {
                self.count_global_pop();
                self.execute(job);
                spin_until = None;
            }
        }
    }

    /// The region whose work this wait may run, or `NO_REGION`.
    fn help_region(&self, deadline: Option<Instant>) -> Tag {
        if deadline.is_none() && self.may_run_nested() { self.region.get() } else { NO_REGION }
    }

    /// May an untimed wait run a job on top of the waiting task's stack
    /// (not in a blocking region, enough stack left)?
    #[inline]
    pub(crate) fn may_run_nested(&self) -> bool {
        self.blocking_depth.get() == 0
            && self.help_depth.get() < MAX_HELP_DEPTH
            && approximate_stack_pointer() >= self.nested_floor
    }

    /// A job of `region` for a waiter: own deque first, then the deques of
    /// workers whose current task is of that region.
    fn find_region_task(&self, region: Tag) -> Option<JobRef> {
        while let Some(job) = self.deque.pop() {
            if job.tag() == region {
                self.count_local_pop();
                return Some(job);
            }
            self.hand_over(job);
        }
        loop {
            let job = self.steal(Some(region))?;
            if job.tag() == region {
                return Some(job);
            }
            self.hand_over(job);
        }
    }

    /// The waiter's last look before it parks (issue 30.6): a job of
    /// `region` in the global queue, put in `found`. A pool task's
    /// `SpawnOptions::global` jobs keep its region, so on a `Fixed` pool
    /// whose workers all wait on such jobs, nobody else can ever run them.
    ///
    /// Isolation holds: only a job of the waiter's own region is taken
    /// (any other job the look passes over goes back to the end of the
    /// queue, and a parked waiter of that job's region is woken, since it
    /// may be the one that needs it). It is cheap where it does not matter:
    /// while any thread is idle, searching, spinning or starting, that
    /// thread takes global work in order and the waiter does not look; and
    /// it looks at most `GLOBAL_LOOK` jobs deep unless every thread of the
    /// pool is waiting or blocked (then nobody else takes from the queue,
    /// and the whole queue is looked through once). A job deeper than that
    /// is found by the next thread to get stuck: its look passes over it and
    /// wakes this waiter. That thread may be one that runs nothing while it
    /// waits (`NO_REGION`: a timed wait, a wait in a blocking region): it
    /// looks only when the pool is stuck, and only to wake. Jobs passed over
    /// lose their place only relative to jobs pushed during the look.
    ///
    /// Runs as the park's re-check, after the waiter registered and fenced:
    /// a global push of the region (a SeqCst CAS, then `notify_for_push`'s
    /// SeqCst read of the waiter bits) either sees this waiter and wakes
    /// it, or comes before this look, which then sees the job; a job
    /// another waiter holds during its look is pushed back and that waiter
    /// then checks the bits the same way.
    fn look_in_global_queue(&self, region: Tag, found: &std::cell::Cell<Option<JobRef>>) -> bool {
        /// How deep a look goes while some thread still runs tasks.
        const GLOBAL_LOOK: usize = 64;
        let registry = &*self.registry;
        if registry.injector.is_empty() || registry.idle_or_starting() > 0 {
            return false;
        }
        let stuck = registry.compensation.waiting() + registry.compensation.blocked() >= registry.live_threads();
        let limit = match (stuck, region) {
            (true, _) => registry.injector.len(),
            (false, NO_REGION) => return false,
            (false, _) => GLOBAL_LOOK,
        };
        let (mut passed, mut hit) = (0, false);
        while passed < limit {
            match registry.injector.steal() {
                // NO_REGION is also the tag of a foreign job not started yet:
                // such a waiter takes nothing.
                Steal::Success(job) if region != NO_REGION && job.tag() == region => {
                    found.set(Some(job));
                    hit = true;
                    break;
                }
                Steal::Success(job) => {
                    let tag = job.tag();
                    registry.injector.push(job);
                    if tag != TAG_NEVER_HELP {
                        registry.sleep.wake_waiter_of(tag);
                    }
                    passed += 1;
                }
                Steal::Empty => break,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
        if passed > 0 {
            // A worker that looked while this one held a job may have
            // found the queue empty and parked: announce the jobs again.
            self.registry.wake_for_new_work();
        }
        hit
    }

    /// Work of another region met while waiting: not ours to run nested, so
    /// it goes where any thread can take it.
    fn hand_over(&self, job: JobRef) {
        self.registry.injector.push(job);
        self.registry.wake_for_new_work();
    }

    /// Is work of `region` visible (the waiter's re-check before parking)?
    fn region_work_visible(&self, region: Tag) -> bool {
        if !self.deque.is_empty() {
            return true;
        }
        let registry = &*self.registry;
        let n = registry.high_water.load(std::sync::atomic::Ordering::Acquire);
        registry.slots[..n].iter().enumerate().any(|(i, slot)| {
            i != self.index
                && slot.counters.region.load(std::sync::atomic::Ordering::Relaxed) == region
                && !slot.stealer.is_empty()
        })
    }

    /// Runs `job`, found on the own deque by a joiner, if it belongs to the
    /// joiner's region; hands it over otherwise.
    #[inline]
    pub(crate) fn run_or_hand_over(&self, job: JobRef) {
        if job.tag() == self.region.get() {
            self.execute(job);
        } else {
            self.hand_over(job);
        }
    }
}

/// Stack a wait keeps free before it runs another task on top of its own:
/// a quarter of the stack, at least 64 KiB and at most 512 KiB.
fn help_reserve(stack_size: usize) -> usize {
    (stack_size / 4).clamp(64 << 10, 512 << 10)
}

/// The stack pointer, read from the register where the target has one:
/// the address of a local is not on the thread's stack under
/// AddressSanitizer's use-after-return detection (on by default in recent
/// LLVM: an address-taken local lives on a heap "fake stack"), so every
/// wait in an ASan build looked out of stack, helped nobody, and a
/// `Fixed` pool whose workers all waited deadlocked
/// (`nested_group_scopes_on_pool_threads_compute_fib` under
/// `-Zsanitizer=address`).
#[inline(always)]
fn approximate_stack_pointer() -> usize {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let sp: usize;
        // SAFETY: reads a register; no memory, stack or flags are touched.
        unsafe { std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
        sp
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    {
        let sp: usize;
        // SAFETY: as above.
        unsafe { std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
        sp
    }
    #[cfg(any(not(any(target_arch = "x86_64", target_arch = "aarch64")), miri))]
    {
        address_of_a_local()
    }
}

/// Miri cannot run `asm!`; its locals are separate allocations at
/// unrelated addresses anyway (see `nested_floor`).
#[cfg(any(not(any(target_arch = "x86_64", target_arch = "aarch64")), miri))]
#[inline(never)]
fn address_of_a_local() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker as *const u8).addr()
}

/// The lowest stack address at which a wait on the calling thread may still
/// run a job nested: the lowest safe address plus the reserve.
///
/// Under Miri: 0, so only `MAX_HELP_DEPTH` bounds the nesting. Miri keeps
/// the interpreted program's frames in its own memory, not on a thread
/// stack it could overflow, and gives every local a separate allocation,
/// so a stack address there measures nothing (nor can it ask pthread for
/// the bounds).
pub(crate) fn nested_floor(configured: Option<usize>) -> usize {
    if cfg!(miri) {
        return 0;
    }
    stack_low_bound(configured) + help_reserve(configured.unwrap_or(ASSUMED_STACK))
}

/// The lowest address the calling thread's stack may safely reach: the
/// real bound where the platform tells it (Linux), else an estimate from
/// the configured (or std's default) stack size. A 32 KiB margin covers
/// guard pages and what runs below the estimate's reference point.
pub(crate) fn stack_low_bound(configured: Option<usize>) -> usize {
    const MARGIN: usize = 32 << 10;
    #[cfg(target_os = "linux")]
    if let Some(low) = linux_stack_low() {
        return low + MARGIN;
    }
    approximate_stack_pointer().saturating_sub(configured.unwrap_or(ASSUMED_STACK)) + MARGIN
}

#[cfg(target_os = "linux")]
fn linux_stack_low() -> Option<usize> {
    linux_stack_bounds().map(|(low, _)| low)
}

/// The calling thread's stack: its lowest address and its size.
#[cfg(target_os = "linux")]
fn linux_stack_bounds() -> Option<(usize, usize)> {
    // SAFETY: a zeroed attr is filled by pthread_getattr_np and destroyed
    // after use; out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && !addr.is_null()).then_some((addr as usize, size))
    }
}

struct RestoreBusy<'a>(&'a std::sync::atomic::AtomicU64, u64);

impl Drop for RestoreBusy<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, std::sync::atomic::Ordering::Relaxed);
    }
}

struct RestoreDepth<'a>(&'a std::cell::Cell<u32>, u32);

impl Drop for RestoreDepth<'_> {
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}

/// Waits for `latch` on any thread: as above on a worker of `registry`,
/// blocking elsewhere.
pub(crate) fn wait_on(registry: &crate::registry::Registry, latch: &dyn Awaitable, deadline: Option<Instant>) -> bool {
    match registry.current_worker() {
        Some(worker) => worker.wait_until(latch, deadline),
        None => latch.block_until(deadline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_a_clamped_quarter() {
        assert_eq!(help_reserve(2 << 20), 512 << 10);
        assert_eq!(help_reserve(256 << 10), 64 << 10);
        assert_eq!(help_reserve(64 << 10), 64 << 10);
    }

    #[test]
    fn the_stack_bound_is_below_us_and_leaves_room() {
        let low = stack_low_bound(None);
        let here = approximate_stack_pointer();
        assert!(low < here, "bound {low:#x} above sp {here:#x}");
        assert!(here - low > 64 << 10, "a fresh test thread has more than 64 KiB left");
    }

    /// The probe is the thread's real stack pointer, on every build: under
    /// AddressSanitizer the address of a local is on a heap "fake stack",
    /// which made every wait look out of stack and help nobody.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_lies_within_the_threads_stack() {
        fn probe() {
            let sp = approximate_stack_pointer();
            let (low, size) = linux_stack_bounds().expect("pthread knows the stack");
            assert!((low..low + size).contains(&sp), "sp {sp:#x} outside the stack {low:#x}+{size:#x}");
        }
        probe();
        std::thread::spawn(probe).join().unwrap();
    }
}
