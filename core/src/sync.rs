//! One place that decides where synchronisation primitives come from, so the
//! same protocol code runs on real threads and under the `loom` model checker
//! (`RUSTFLAGS="--cfg loom" cargo test --release --test loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, fence};
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
