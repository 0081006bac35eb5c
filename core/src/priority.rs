//! `Builder::thread_nice`: the pool's threads below the priority of the
//! thread that built the pool.
//!
//! An event loop that shares its cores with the pool's CPU-bound work
//! waits for a CPU on every wake-up while the workers hold both; with
//! the workers a few steps nicer the scheduler lets the loop preempt them.
//! On Linux the nice value is a per-thread attribute (`setpriority` on a
//! thread id) and raising it needs no privilege. Elsewhere it applies to a
//! whole process, so the setting does nothing there.

/// The nice value the pool's threads take: the building thread's plus
/// `steps`, at most 19. `None` with 0 steps, or where nice is not per
/// thread.
pub(crate) fn target(steps: u32) -> Option<i32> {
    if steps == 0 {
        return None;
    }
    this_thread().map(|nice| (nice + steps as i32).min(19))
}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
pub(crate) fn this_thread() -> Option<i32> {
    // getpriority returns -1 both as a value and as an error: tell them
    // apart by errno.
    // SAFETY: plain system calls on the calling thread's own id.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS as _, crate::growth::current_tid() as libc::id_t);
        (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn this_thread() -> Option<i32> {
    None
}

/// Sets the calling thread's nice value (`spawn_at`'s helper, before it
/// starts the pool thread that inherits the value). Best effort: the value is at least the
/// thread's own, which needs no privilege.
#[cfg(target_os = "linux")]
pub(crate) fn set_this_thread(nice: Option<i32>) {
    if let Some(nice) = nice {
        // SAFETY: a plain system call on the calling thread's own id.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS as _, crate::growth::current_tid() as libc::id_t, nice);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_this_thread(_nice: Option<i32>) {}

/// Starts `builder`'s thread already at nice value `nice` (when one is
/// set): a thread inherits its creator's nice value, and the standard
/// library names the new thread before `f` runs, so a thread started from
/// a thread at another value (the pool's builder, a foreign submitter)
/// would be visible under the pool's name, at the wrong priority, until
/// `f` lowered it. Such a start goes through an unnamed helper thread that
/// lowers itself first; a pool thread, already at `nice`, starts its
/// threads directly.
pub(crate) fn spawn_at<F>(
    nice: Option<i32>,
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    match nice {
        Some(n) if this_thread() != Some(n) => {
            let helper = std::thread::Builder::new().spawn(move || {
                set_this_thread(Some(n));
                builder.spawn(f)
            })?;
            helper.join().unwrap_or_else(|_| Err(std::io::Error::other("the thread-start helper panicked")))
        }
        _ => builder.spawn(f),
    }
}

// ------------------------------------------------------ task priorities ----

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

use crate::job::{JobRef, JobVTable, Payload};
use crate::registry::Registry;
use crate::sync::lock;

/// A submission's priority ([`crate::SpawnOptions::priority`]): three
/// levels, folly's `PriorityThreadPoolExecutor` HI/MID/LO or GCD's
/// user-interactive / default / utility classes.
///
/// `High` work is taken before any other queued work, by every worker at
/// its next look for work, with a bounded bypass: after
/// [`HIGH_BURST`] high tasks in a row a worker takes one task of the
/// ordinary queues, so a flood of high work slows normal work down but
/// cannot stop it. `Low` work waits its turn in the global queue like
/// normal work and then steps back behind the normal work queued by then,
/// at most [`LOW_DEFERS`] times (aging), so it cannot starve either.
/// Priority applies where a task waits in the pool's shared queues: to
/// submissions from outside the pool (an event loop's, a completion
/// queue's) and to a lane's turns ([`crate::Pool::lane_with_priority`]). A
/// task submitted from a pool thread keeps the ordinary order (its deque is
/// its parent's fork-join order, and a waiter of its region must be able to
/// find it), and a task on a lane takes the lane's priority.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Behind normal work, aged so it is never starved.
    Low,
    /// The default: the pool's ordinary queues.
    #[default]
    Normal,
    /// Before everything queued, with a bounded bypass.
    High,
}

/// High tasks a worker takes in a row before it takes one ordinary task.
pub const HIGH_BURST: u32 = 16;
/// Times a low task steps back behind queued normal work before it runs
/// whatever is queued.
pub const LOW_DEFERS: u8 = 2;

/// Where prioritized jobs wait. Each one pushed also pushes a *token* job
/// to the global queue, so every protocol that reads the global queue
/// (parking, drain, cancel, the in-flight closing point, admission's count)
/// sees prioritized work as it sees any other; the token, when a worker
/// reaches it, runs the most urgent prioritized job left (or nothing, if a
/// worker's bypass took it first). Tokens never number fewer than the jobs
/// here: each job brings one, and a token takes at most one job.
#[derive(Default)]
pub(crate) struct PrioQueues {
    /// Jobs in `high`: read by every worker's look for work (one load,
    /// zero while priorities are unused), written only with the lock held.
    high_len: CachePadded<AtomicUsize>,
    queues: Mutex<Levels>,
}

#[derive(Default)]
struct Levels {
    high: VecDeque<JobRef>,
    /// With the times each stepped back (`LOW_DEFERS`).
    low: VecDeque<(JobRef, u8)>,
    /// Jobs taken from each level so far: the snapshots' progress marks
    /// (`dump.rs`: a queue whose count does not move while it holds work).
    high_taken: u64,
    low_taken: u64,
}

/// One level's state for a snapshot.
pub(crate) struct LevelProbe {
    pub(crate) len: usize,
    pub(crate) taken: u64,
}

/// What a token found.
enum Next {
    Run(JobRef),
    /// A low job steps back: the token goes to the queue's tail again.
    Defer,
    Nothing,
}

impl PrioQueues {
    /// Is there high work to bypass the ordinary queues for? A hint: a
    /// push racing this read is found through its token instead.
    #[inline(always)]
    pub(crate) fn has_high(&self) -> bool {
        self.high_len.load(Relaxed) != 0
    }

    pub(crate) fn pop_high(&self) -> Option<JobRef> {
        let mut q = lock(&self.queues);
        let job = q.high.pop_front();
        q.high_taken += u64::from(job.is_some());
        self.high_len.store(q.high.len(), Relaxed);
        job
    }

    /// (high, low) for a snapshot; `None` while priorities were never used.
    pub(crate) fn probe(&self) -> Option<(LevelProbe, LevelProbe)> {
        let q = lock(&self.queues);
        if q.high_taken + q.low_taken == 0 && q.high.is_empty() && q.low.is_empty() {
            return None;
        }
        Some((
            LevelProbe { len: q.high.len(), taken: q.high_taken },
            LevelProbe { len: q.low.len(), taken: q.low_taken },
        ))
    }

    fn push(&self, job: JobRef, priority: Priority) {
        let mut q = lock(&self.queues);
        match priority {
            Priority::High => {
                q.high.push_back(job);
                self.high_len.store(q.high.len(), Relaxed);
            }
            _ => q.low.push_back((job, 0)),
        }
    }

    /// The token's pick: high first, then low unless it should step back
    /// behind `normal_waiting` work once more.
    fn next(&self, normal_waiting: bool) -> Next {
        let mut q = lock(&self.queues);
        if let Some(job) = q.high.pop_front() {
            q.high_taken += 1;
            self.high_len.store(q.high.len(), Relaxed);
            return Next::Run(job);
        }
        match q.low.front_mut() {
            None => Next::Nothing,
            Some((_, defers)) if normal_waiting && *defers < LOW_DEFERS => {
                *defers += 1;
                Next::Defer
            }
            Some(_) => {
                q.low_taken += 1;
                Next::Run(q.low.pop_front().expect("checked above").0)
            }
        }
    }

    /// The token's pick when it is cancelled: any job, most urgent first.
    fn any(&self) -> Option<JobRef> {
        let mut q = lock(&self.queues);
        let job = if let Some(job) = q.high.pop_front() {
            q.high_taken += 1;
            Some(job)
        } else {
            let job = q.low.pop_front().map(|(job, _)| job);
            q.low_taken += u64::from(job.is_some());
            job
        };
        self.high_len.store(q.high.len(), Relaxed);
        job
    }
}

impl Registry {
    /// Queues `job` at `priority` (not `Normal`), with its token. The caller
    /// holds an open submission (a foreign one: its ticket is released only
    /// after the token is visible, the closing point's rule) and has
    /// counted the job in `queued` if the pool tracks it; the token itself
    /// is not counted (see `Token::run`).
    pub(crate) fn push_prio(self: &Arc<Self>, job: JobRef, priority: Priority) {
        debug_assert_ne!(priority, Priority::Normal);
        self.prio.push(job, priority);
        self.push_token();
    }

    fn push_token(self: &Arc<Self>) {
        let data = std::ptr::NonNull::new(Arc::into_raw(self.clone()) as *mut ()).expect("Arc pointer is non-null");
        // SAFETY: an Arc<Registry> reference handed to the token, read back
        // once by TOKEN. A token is plumbing no helping waiter may run: it
        // runs whatever prioritized job is next, of any region.
        let token = unsafe { JobRef::from_pointer(data, &TOKEN) }.never_help();
        self.injector.push(token);
        self.wake_for_new_work();
    }
}

/// The token job: see [`PrioQueues`]. Not a task itself (never evicted,
/// never counted); the job it runs or cancels is.
const TOKEN: JobVTable = JobVTable { run: token_run, cancel: token_cancel, evictable: false };

unsafe fn registry_of(payload: *mut Payload) -> Arc<Registry> {
    // SAFETY: built by `push_token`, consumed once.
    unsafe { Arc::from_raw(JobRef::pointer(payload).as_ptr() as *const Registry) }
}

unsafe fn token_run(payload: *mut Payload) -> bool {
    // SAFETY: forwarded.
    let registry = unsafe { registry_of(payload) };
    // Normal work is waiting if any is visible (the global queue, an inbox
    // that took a batch of it, a deque): a scan of the slots, paid only by
    // tokens.
    match registry.prio.next(registry.has_visible_work()) {
        // The worker's `on_dequeue` for this token was the job's.
        Next::Run(job) => job.run(),
        Next::Defer => {
            // The job is still queued: give its count back, and queue the
            // token again behind the normal work.
            registry.count_queued_uncounted();
            registry.push_token();
            false
        }
        Next::Nothing => {
            // A bypass ran the job (and dequeued it): this dequeue was one
            // too many.
            registry.count_queued_uncounted();
            false
        }
    }
}

unsafe fn token_cancel(payload: *mut Payload) -> bool {
    // SAFETY: forwarded.
    let registry = unsafe { registry_of(payload) };
    match registry.prio.any() {
        // `cancel_job` counts the job as `JobRef::cancel` says.
        Some(job) => job.cancel(),
        None => {
            registry.count_queued_uncounted();
            false
        }
    }
}
