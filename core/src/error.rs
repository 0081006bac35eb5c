//! Error types. Every error a caller can get back says what went wrong and,
//! where a task was refused, hands the task back so nothing is lost.

use std::any::Any;
use std::fmt;

/// Why a submission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitErrorKind {
    /// The bounded queue was full and the reject policy refused the task.
    Rejected,
    /// The pool is shutting down or shut down.
    Shutdown,
    /// The group or serial queue named in the options belongs to another
    /// pool: the task would run on (and be counted by) the wrong pool.
    WrongPool,
}

/// A refused submission. The task comes back untouched ([`SpawnError::into_task`]),
/// so the caller keeps ownership of everything it captured.
pub struct SpawnError<F> {
    kind: SubmitErrorKind,
    task: F,
}

impl<F> SpawnError<F> {
    pub(crate) fn new(kind: SubmitErrorKind, task: F) -> Self {
        SpawnError { kind, task }
    }

    /// Why the task was refused.
    pub fn kind(&self) -> SubmitErrorKind {
        self.kind
    }

    /// The refused task, never run.
    pub fn into_task(self) -> F {
        self.task
    }

    /// Drops the task and keeps the reason.
    pub fn without_task(self) -> SpawnError<()> {
        SpawnError { kind: self.kind, task: () }
    }
}

impl<F> fmt::Debug for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnError").field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl<F> fmt::Display for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SubmitErrorKind::Rejected => f.write_str("task rejected: the pool's queue is full"),
            SubmitErrorKind::Shutdown => f.write_str("task refused: the pool is shut down"),
            SubmitErrorKind::WrongPool => {
                f.write_str("task refused: its group or serial queue belongs to another pool")
            }
        }
    }
}

impl<F> std::error::Error for SpawnError<F> {}

/// A batch submission that stopped at a refused task
/// ([`Pool::spawn_batch`](crate::Pool::spawn_batch),
/// [`Pool::submit_batch`](crate::Pool::submit_batch)). A batch is accepted
/// in order up to its first refusal: the first [`accepted`](Self::accepted)
/// tasks were accepted (they run, or are cancelled like any accepted task;
/// `submit_batch` hands back their handles, `H`), and the refused task and
/// every task after it come back untouched, in order
/// ([`into_rest`](Self::into_rest)). The pool never drops a task of a batch
/// it did not accept.
pub struct BatchError<F, H = ()> {
    kind: SubmitErrorKind,
    accepted: Vec<H>,
    rest: Vec<F>,
}

impl<F, H> BatchError<F, H> {
    pub(crate) fn new(kind: SubmitErrorKind, accepted: Vec<H>, rest: Vec<F>) -> Self {
        BatchError { kind, accepted, rest }
    }

    /// Why the first refused task was refused.
    pub fn kind(&self) -> SubmitErrorKind {
        self.kind
    }

    /// How many tasks, from the start of the batch, were accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.len()
    }

    /// The refused task and every task after it, in batch order, never run.
    pub fn into_rest(self) -> Vec<F> {
        self.rest
    }

    /// The accepted tasks' handles (for `submit_batch`; `()` each for
    /// `spawn_batch`) and the refused tasks, both in batch order.
    pub fn into_parts(self) -> (Vec<H>, Vec<F>) {
        (self.accepted, self.rest)
    }
}

impl<F, H> fmt::Debug for BatchError<F, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchError")
            .field("kind", &self.kind)
            .field("accepted", &self.accepted.len())
            .field("refused", &self.rest.len())
            .finish()
    }
}

impl<F, H> fmt::Display for BatchError<F, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch stopped after {} accepted tasks, {} refused: ", self.accepted.len(), self.rest.len())?;
        fmt::Display::fmt(&SpawnError::new(self.kind, ()), f)
    }
}

impl<F, H> std::error::Error for BatchError<F, H> {}

/// Why a task produced no value.
pub enum TaskError {
    /// The task panicked; the payload is the panic's.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The task was cancelled before it started (by `cancel` or by a
    /// `Shutdown::Cancel`).
    Cancelled,
    /// The task had not started by its deadline
    /// ([`crate::SpawnOptions::deadline`]) and was never run.
    Expired,
    /// The wait could never succeed, so it did not start: a task waiting
    /// (untimed) on its own handle, on a group it is a member of, or on a
    /// task queued behind it on its own serial queue (a lane of 1). The
    /// awaited work is untouched; the caller's own task goes on. C's
    /// `WSPOOL_EDEADLK`, Python's `RuntimeError`.
    WouldDeadlock,
}

impl TaskError {
    /// The panic message, when the payload is a string.
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            TaskError::Panicked(p) => {
                p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(|s| s.as_str()))
            }
            TaskError::Cancelled | TaskError::Expired | TaskError::WouldDeadlock => None,
        }
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Panicked(_) => {
                write!(f, "Panicked({:?})", self.panic_message().unwrap_or("<non-string payload>"))
            }
            TaskError::Cancelled => f.write_str("Cancelled"),
            TaskError::Expired => f.write_str("Expired"),
            TaskError::WouldDeadlock => f.write_str("WouldDeadlock"),
        }
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Panicked(_) => match self.panic_message() {
                Some(m) => write!(f, "task panicked: {m}"),
                None => f.write_str("task panicked"),
            },
            TaskError::Cancelled => f.write_str("task cancelled before it started"),
            TaskError::Expired => f.write_str("task expired: not started by its deadline"),
            TaskError::WouldDeadlock => {
                f.write_str("wait would deadlock: the waiting task itself holds what it waits for")
            }
        }
    }
}

impl std::error::Error for TaskError {}

/// Why [`crate::Builder::build`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// A configuration value is out of range or inconsistent.
    Invalid,
    /// The operating system refused to start a thread the pool needs
    /// (`RLIMIT_NPROC`, address space, `pthread_create` failing).
    ThreadSpawn,
}

/// A pool that could not be built: a refused configuration value, or a
/// thread the operating system would not start ([`ConfigError::kind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    kind: ConfigErrorKind,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ConfigError { kind: ConfigErrorKind::Invalid, message: message.into() }
    }

    pub(crate) fn spawn(message: impl Into<String>) -> Self {
        ConfigError { kind: ConfigErrorKind::ThreadSpawn, message: message.into() }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ConfigErrorKind::Invalid => write!(f, "invalid pool configuration: {}", self.message),
            ConfigErrorKind::ThreadSpawn => write!(f, "could not start the pool: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A shutdown that did not finish in time. The pool keeps finishing (Drain)
/// or cancelling (Cancel) in the background; a later shutdown or the drop of
/// the last handle completes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownTimedOut;

impl fmt::Display for ShutdownTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("shutdown timed out with tasks still running")
    }
}

impl std::error::Error for ShutdownTimedOut {}

/// Why [`Pool::shutdown`](crate::Pool::shutdown) returned before the pool
/// was closed. Either way the shutdown carries on in the background: no new
/// work is accepted, and what was accepted is run (Drain) or dropped unrun
/// (Cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownError {
    /// The timeout passed first; a later shutdown or the drop of the last
    /// handle completes it.
    TimedOut,
    /// Called on one of the pool's own threads (inside a task): the call's
    /// own task is accepted work still running, so the pool cannot be closed
    /// before the call returns, and waiting for the other threads could wait
    /// for work that waits for this task. Nothing was waited for; the
    /// threads finish the queued work and exit on their own. Not `Ok`,
    /// because `Ok` means every accepted task has run or been cancelled.
    OnPoolThread,
}

impl From<ShutdownTimedOut> for ShutdownError {
    fn from(_: ShutdownTimedOut) -> Self {
        ShutdownError::TimedOut
    }
}

impl fmt::Display for ShutdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShutdownError::TimedOut => fmt::Display::fmt(&ShutdownTimedOut, f),
            ShutdownError::OnPoolThread => f.write_str(
                "shutdown called from one of the pool's own tasks cannot wait for itself; \
                 the pool finishes its work and stops in the background",
            ),
        }
    }
}

impl std::error::Error for ShutdownError {}
