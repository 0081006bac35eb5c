//! # wspool
//!
//! A work-stealing thread pool: per-worker lock-free deques (owner LIFO,
//! thieves FIFO in batches), a fair global queue for foreign submitters,
//! debounce spinning that switches itself off, help-while-waiting, blocking
//! regions with compensating threads, and a starvation monitor.
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(2).build().unwrap();
//! let h = pool.submit(|| 6 * 7).unwrap();
//! assert_eq!(h.wait().unwrap(), 42);
//! let (a, b) = pool.join(|| 1 + 1, || 2 + 2);
//! assert_eq!((a, b), (2, 4));
//! let mut data = vec![1, 2, 3];
//! pool.scope(|s| {
//!     for x in data.iter_mut() {
//!         s.spawn(move || *x *= 10);
//!     }
//! });
//! assert_eq!(data, [10, 20, 30]);
//! ```
//!
//! Module map: `registry` (shared state, admission, shutdown), `worker`
//! (main loop, find-task order, help-while-waiting), `sleep` (parking and
//! waking, debounce spinning; protocol in `sleep/README.md`), `growth`
//! (threads, blocking regions, starvation monitor), `job`/`latch` (the
//! units of work and what waiters wait on), `task`/`group`/`scope`/
//! `serial`/`join` (the ways to submit), `stats`, `config`, `error`.

#[cfg(doctest)]
mod compile_fail;
mod config;
mod cq;
mod deadline;
mod deque;
mod dump;
mod error;
mod group;
mod growth;
mod here;
mod injector;
mod isolation;
mod job;
mod join;
mod label;
mod latch;
mod metrics;
mod nice;
mod pool;
mod priority;
mod registry;
mod scope;
mod serial;
mod sleep;
mod stats;
mod sync;
mod task;
#[cfg(all(test, not(loom)))]
mod test_support;
mod wait;
mod wait_region;
mod waker_slot;
mod worker;

pub use config::{
    Builder, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_THREADS, DEFAULT_SPIN_MAX_US, Growth, MAX_THREADS_LIMIT, Reject,
    STACK_SIZE_MIN,
};
pub use cq::{
    CloseMode, CompletionQueue, CqEvent, CqOptions, CqRefusal, CqSignal, CqStatus, CqSubmitError,
    DEFAULT_OVERLOAD_INTERVAL, DEFAULT_OVERLOAD_TARGET,
};
pub use deadline::{expiring, monotonic_now_ns};
pub use dump::{
    DEFAULT_STALL_AFTER, MonitorAction, MonitorDecision, MonitorReason, PoolDump, QueueDump, ThreadDump, ThreadState,
    WaitTarget,
};
pub use error::{
    BatchError, ConfigError, ConfigErrorKind, ShutdownError, ShutdownTimedOut, SpawnError, SubmitErrorKind, TaskError,
};
pub use group::{Group, GroupFuture, GroupPlace, LocalGroup};
pub use growth::{blocking, blocking_begin, blocking_end};
pub use isolation::isolate;
pub use join::join;
pub use label::{Label, MAX_LABELS, with_label};
pub use pool::{Pool, Shutdown, SpawnOptions};
pub use priority::{HIGH_BURST, LOW_DEFERS, LOW_MAX_OVERTAKES, Priority};
pub use scope::Scope;
pub use serial::SerialQueue;
pub use stats::Stats;
pub use task::{TaskFuture, TaskHandle, TaskState};
pub use wait_region::{at_thread_cap, waiting_begin, waiting_end};
pub use worker::current_index;

/// Internals exposed for the loom model checks (`--cfg loom`) only.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::deque::{Steal, Stealer, Worker};
    pub use crate::growth::compensation::Compensation;
    pub use crate::injector::Injector;
    pub use crate::sleep::{NO_REGION, Sleep, Wake};
    pub use crate::waker_slot::WakerSlot;
}
