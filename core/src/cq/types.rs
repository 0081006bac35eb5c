//! The completion queue's public vocabulary: statuses, signals, events,
//! refusals and options.

use std::time::Duration;

use super::codel::{DEFAULT_OVERLOAD_INTERVAL, DEFAULT_OVERLOAD_TARGET};

/// How a submission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqStatus {
    /// The work ran to the end.
    Ran,
    /// The work never ran: the pool dropped it unrun (`Shutdown::Cancel`,
    /// `DiscardOldest`) or the queue was closed with [`CloseMode::Cancel`]
    /// before it started.
    Cancelled,
    /// The work panicked (the panic is contained; the payload comes back).
    Panicked,
    /// The work never ran: it had not started by its deadline
    /// ([`CompletionQueue::submit_with`](super::CompletionQueue::submit_with)).
    Expired,
}

/// A change of back-pressure state, delivered by `drain` in order with the
/// completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqSignal {
    /// Pending submissions reached `high_water`: stop taking new requests.
    HighWater,
    /// Pending submissions fell back to `low_water`: take requests again.
    LowWater,
    /// Queue delay stayed above the target for the interval: shed load.
    Overloaded,
    /// Queue delay is below the target again (or the queue ran empty).
    Recovered,
}

/// One item out of [`CompletionQueue::drain`](super::CompletionQueue::drain).
#[derive(Debug)]
pub enum CqEvent<T> {
    /// A submission's payload and how it ended.
    Done(T, CqStatus),
    /// A back-pressure transition.
    Signal(CqSignal),
}

/// What [`CompletionQueue::close`](super::CompletionQueue::close) does with submissions not yet started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMode {
    /// Let them run; their completions come back as usual.
    Drain,
    /// They come back `Cancelled` without running when the pool reaches them.
    Cancel,
}

/// Why [`CompletionQueue::submit`](super::CompletionQueue::submit) refused; the payload comes back.
#[derive(Debug)]
pub struct CqSubmitError<T> {
    /// The reason.
    pub kind: CqRefusal,
    /// The payload, untouched: no completion will come for it.
    pub item: T,
}

/// Reasons for a refused submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqRefusal {
    /// `cap` submissions are already pending.
    Full,
    /// The queue is closed (or closing).
    Closed,
    /// The pool's bounded queue refused it (its reject policy).
    Rejected,
    /// The pool is shut down.
    Shutdown,
    /// [`CompletionQueue::submit_with`](super::CompletionQueue::submit_with)
    /// named a group or serial queue of another pool.
    WrongPool,
}

impl std::fmt::Display for CqRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CqRefusal::Full => "completion queue refused the submission: its cap is reached",
            CqRefusal::Closed => "completion queue refused the submission: it is closed",
            CqRefusal::Rejected => "completion queue refused the submission: the pool's queue is full",
            CqRefusal::Shutdown => "completion queue refused the submission: the pool is shut down",
            CqRefusal::WrongPool => {
                "completion queue refused the submission: its group or serial queue belongs to another pool"
            }
        })
    }
}

impl std::error::Error for CqRefusal {}

/// Options of a completion queue; `Default` is an unbounded queue with an
/// fd wake-up and the overload signal on at its default parameters.
pub struct CqOptions {
    /// Most pending submissions (queued, running, or done but not drained);
    /// 0 = unbounded. Past it `submit` refuses with [`CqRefusal::Full`].
    pub cap: usize,
    /// `HighWater` is signalled when pending reaches this (0 = `cap`, or
    /// never when unbounded).
    pub high_water: usize,
    /// `LowWater` is signalled when pending falls back to this after a
    /// `HighWater` (0 = half of `high_water`).
    pub low_water: usize,
    /// CoDel target: queue delay (submit to start) considered standing
    /// when above this. `None` turns the overload signal off.
    pub overload_target: Option<Duration>,
    /// CoDel interval: how long the delay must stay above target.
    pub overload_interval: Duration,
    /// Wake the loop by calling this instead of through an fd.
    pub wake: Option<Box<dyn Fn() + Send + Sync>>,
    /// Submit through the pool's global queue even from a pool thread.
    pub global: bool,
}

impl Default for CqOptions {
    fn default() -> Self {
        CqOptions {
            cap: 0,
            high_water: 0,
            low_water: 0,
            overload_target: Some(DEFAULT_OVERLOAD_TARGET),
            overload_interval: DEFAULT_OVERLOAD_INTERVAL,
            wake: None,
            global: false,
        }
    }
}

impl std::fmt::Debug for CqOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqOptions")
            .field("cap", &self.cap)
            .field("high_water", &self.high_water)
            .field("low_water", &self.low_water)
            .field("overload_target", &self.overload_target)
            .field("overload_interval", &self.overload_interval)
            .field("wake", &self.wake.as_ref().map(|_| "callback"))
            .field("global", &self.global)
            .finish()
    }
}
