//! One place that decides where synchronisation primitives come from, so the
//! same protocol code runs on real threads and under the `loom` model checker
//! (`RUSTFLAGS="--cfg loom" cargo test --release --test loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

/// A cell whose accesses loom checks for causality (a read that no
/// acquire ordered after the write is reported), where std's cell would
/// let a model read the value as if it had been ordered.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: every critical section in this crate
/// leaves its data consistent before it can panic, and a task's panic is
/// caught long before it reaches a pool lock.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// [`lock`] for the primitives that switch to loom under `cfg(loom)`.
pub(crate) fn lock_model<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `std::cell::UnsafeCell` with loom's closure-based access API.
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Whether a mutant of the real code is on: the fence, check or
/// compare-exchange that `make test-loom` (and `make test-miri`) prove the
/// models need is taken out where this is true. In a real build it is
/// `cfg!($mutant)`, a constant: false unless built with `--cfg $mutant`,
/// so the code is exactly the unmutated one. Under `cfg(loom)` the mutant
/// can also be chosen when the models run, through the environment
/// (`WSPOOL_LOOM_MUTANT=$mutant`), so one loom build serves the models and
/// every mutant instead of one build per mutant.
#[cfg(not(loom))]
macro_rules! mutant {
    ($mutant:ident) => {
        cfg!($mutant)
    };
}

#[cfg(loom)]
macro_rules! mutant {
    ($mutant:ident) => {
        cfg!($mutant) || $crate::sync::loom_mutant(stringify!($mutant))
    };
}

pub(crate) use mutant;

/// The mutants that `WSPOOL_LOOM_MUTANT` may name.
#[cfg(loom)]
const LOOM_MUTANTS: &[&str] = &[
    "wspool_mutant_no_push_fence",
    "wspool_mutant_no_pop_fence",
    "wspool_mutant_push_release_store",
    "wspool_mutant_no_stealing_check",
    "wspool_mutant_waker_store_close",
];

/// Whether `WSPOOL_LOOM_MUTANT` names `mutant` (read once; a name that is
/// not a mutant panics, so a misspelt one cannot run the unmutated code).
#[cfg(loom)]
pub(crate) fn loom_mutant(mutant: &str) -> bool {
    static CHOSEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| {
        let chosen = std::env::var("WSPOOL_LOOM_MUTANT").ok().filter(|m| !m.is_empty());
        if let Some(m) = &chosen {
            assert!(LOOM_MUTANTS.contains(&m.as_str()), "WSPOOL_LOOM_MUTANT={m}: not one of {LOOM_MUTANTS:?}");
        }
        chosen
    });
    chosen.as_deref() == Some(mutant)
}
