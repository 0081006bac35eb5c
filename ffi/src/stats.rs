//! Observability: `wspool_stats` and `wspool_stats_get`.

use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::ptr;

use crate::support::{self, einval, guard};
use crate::{WSPOOL_OK, pool_of, wspool};

/// A snapshot of a pool's counters. Fill it with `wspool_stats_init()` (or set `struct_size`)
/// before `wspool_stats_get`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct wspool_stats {
    /// Set by the caller: `sizeof(wspool_stats)`; the library writes no byte past it.
    pub struct_size: usize,
    /// Worker threads alive now.
    pub threads: u32,
    /// Of those, parked or spinning with nothing to do.
    pub idle_threads: u32,
    /// Of those, inside a blocking region.
    pub blocked_threads: u32,
    /// Most threads alive at once.
    pub peak_threads: u32,
    /// Tasks accepted.
    pub submitted: u64,
    /// Tasks that ran to the end.
    pub completed: u64,
    /// Submissions refused by the reject policy.
    pub rejected: u64,
    /// Accepted tasks dropped unrun.
    pub cancelled: u64,
    /// Tasks that panicked (Rust tasks; C tasks cannot).
    pub panicked: u64,
    /// Tasks a worker took from its own deque.
    pub local_pops: u64,
    /// Tasks taken from the global queue.
    pub global_pops: u64,
    /// Tasks stolen from another worker's deque.
    pub steals: u64,
    /// Debounce spins that found work.
    pub spin_hits: u64,
    /// Debounce spins that found none.
    pub spin_misses: u64,
    /// Current debounce threshold in ns (seed 004's adaptive threshold); 0 when every worker
    /// has switched spinning off (only probes spin).
    pub spin_threshold_ns: u32,
    /// Threads started since creation.
    pub threads_started: u64,
    /// Threads retired since creation.
    pub threads_retired: u64,
    /// Threads added by the starvation monitor.
    pub starvation_injections: u64,
    /// Tasks waiting now.
    pub queued: u64,
    /// Median time from submit to start over a recent window, ns.
    pub queue_delay_p50_ns: u64,
    /// 99th percentile of the same, ns.
    pub queue_delay_p99_ns: u64,
    /// Maximum of the same, ns.
    pub queue_delay_max_ns: u64,
    /// Added in 0.1 after the first layout: times the OS refused to start a thread.
    pub spawn_failures: u64,
    /// Added with deadlines: accepted tasks not started by their deadline, dropped
    /// unrun (counted neither in `cancelled` nor in `completed`).
    pub expired: u64,
    /// Added with diagnosis: stall episodes, in which queued work stood still for the
    /// stall threshold while every thread was occupied (`wspool_set_stall_handler`).
    pub stalls: u64,
}

/// Size of the first published `wspool_stats` layout (up to `queue_delay_max_ns`): the smallest accepted.
pub const WSPOOL_STATS_MIN_SIZE: usize = 168;
const _: () = assert!(offset_of!(wspool_stats, queue_delay_max_ns) + 8 == WSPOOL_STATS_MIN_SIZE);

/// The end of each published `wspool_stats` layout, oldest first.
const STATS_LAYOUTS: [usize; 4] = [WSPOOL_STATS_MIN_SIZE, 176, 184, size_of::<wspool_stats>()];
const _: () = assert!(offset_of!(wspool_stats, spawn_failures) + 8 == STATS_LAYOUTS[1]);
const _: () = assert!(offset_of!(wspool_stats, expired) + 8 == STATS_LAYOUTS[2]);
const _: () = assert!(offset_of!(wspool_stats, stalls) + 8 == STATS_LAYOUTS[3]);

/// Zeroes `*st` and sets `struct_size`, ready for `wspool_stats_get`. NULL is ignored (and sets
/// the last error). The header maps `wspool_stats_init(st)` to
/// `wspool_stats_init_sized(st, sizeof *(st))`, so a program built against an older, shorter
/// struct is never written past.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_stats_init(st: *mut wspool_stats) {
    // SAFETY: forwarded contract.
    unsafe { wspool_stats_init_sized(st, size_of::<wspool_stats>()) };
}

/// Zeroes the first `size` bytes of `*st` and sets `st->struct_size = size`.
/// Returns `WSPOOL_EINVAL` for NULL or a `size` below `WSPOOL_STATS_MIN_SIZE` or above
/// `WSPOOL_STRUCT_SIZE_MAX`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_stats_init_sized(st: *mut wspool_stats, size: usize) -> c_int {
    guard("wspool_stats_init", || {
        if st.is_null() {
            return einval("st is NULL");
        }
        if size > crate::WSPOOL_STRUCT_SIZE_MAX {
            return crate::support::check_struct_size(size, WSPOOL_STATS_MIN_SIZE, &"size", "wspool_stats_init")
                .map(|()| 0);
        }
        if size < WSPOOL_STATS_MIN_SIZE {
            return einval(format!("size {size} is below the smallest layout ({WSPOOL_STATS_MIN_SIZE} bytes)"));
        }
        let zero = wspool_stats { struct_size: size, ..wspool_stats::default() };
        let n = size.min(size_of::<wspool_stats>());
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&zero as *const wspool_stats).cast::<u8>(), st.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}

/// Fills `*out` with a snapshot of the pool's counters. `out->struct_size` must be set first,
/// by `wspool_stats_init(out)` or by hand (`WSPOOL_EINVAL` if 0 or below
/// `WSPOOL_STATS_MIN_SIZE`); no byte past it is written. Read after a wait returned (a task
/// handle, a group, a serial queue's task, a completion queue's `done`, a shutdown), `completed`
/// includes every task that wait waited for: a task is counted before its waiters are released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_stats_get(pool: *const wspool, out: *mut wspool_stats) -> c_int {
    guard("wspool_stats_get", || {
        let p = pool_of(pool)?;
        if out.is_null() {
            return einval("out is NULL");
        }
        // SAFETY: non-null, starts with struct_size.
        let size = unsafe { support::struct_size_of(out.cast(), WSPOOL_STATS_MIN_SIZE, "stats", "wspool_stats_init")? };
        let s = p.pool.stats();
        let full = wspool_stats {
            struct_size: size,
            threads: s.threads,
            idle_threads: s.idle_threads,
            blocked_threads: s.blocked_threads,
            peak_threads: s.peak_threads,
            submitted: s.submitted,
            completed: s.completed,
            rejected: s.rejected,
            cancelled: s.cancelled,
            panicked: s.panicked,
            local_pops: s.local_pops,
            global_pops: s.global_pops,
            steals: s.steals,
            spin_hits: s.spin_hits,
            spin_misses: s.spin_misses,
            spin_threshold_ns: s.spin_threshold_ns,
            threads_started: s.threads_started,
            threads_retired: s.threads_retired,
            starvation_injections: s.starvation_injections,
            queued: s.queued,
            queue_delay_p50_ns: s.queue_delay_p50_ns,
            queue_delay_p99_ns: s.queue_delay_p99_ns,
            queue_delay_max_ns: s.queue_delay_max_ns,
            spawn_failures: s.spawn_failures,
            expired: s.expired,
            stalls: s.stalls,
        };
        let n = support::whole_fields(size, &STATS_LAYOUTS);
        // SAFETY: the caller's struct has `size >= n` bytes.
        unsafe { ptr::copy_nonoverlapping((&full as *const wspool_stats).cast::<u8>(), out.cast::<u8>(), n) };
        Ok(WSPOOL_OK)
    })
}
