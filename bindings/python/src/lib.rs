//! `wspool._wspool`: the Rust half of the Python package `wspool`.
//!
//! The Python half (`python/wspool/__init__.py`) wraps these objects in a
//! `concurrent.futures.ThreadPoolExecutor` subclass. The modules, by concept:
//!
//! * [`pool`]: `Core` (one `wspool::Pool` and the Python-facing state its
//!   tasks share), `Group`, `Serial`, `Stats`, `blocking`.
//! * [`call`]: `submit`: a Python call that fills a real
//!   `concurrent.futures.Future`, and the `Handle` that waits on it.
//! * [`map`]: `Executor.map` without a `Future` per item.
//! * [`permit`]: places, the bound on calls executing at once
//!   (`max_workers`) under the default growth, "compensate", and the order
//!   in which waited-for calls go ahead of calls from outside.
//! * [`wait`]: how a Python thread waits on the pool with the GIL released
//!   (signal slices, the short spin before parking, the GIL hand-off debounce).
//! * [`fork`]: process and thread lifecycle: fork generations, each
//!   worker's persistent Python thread state, interpreter exit.
//!
//! GIL discipline: every wait runs inside `Python::detach`; workers attach
//! only to run Python code. Waits never run Python calls on the waiting
//! thread: a waiting call must not see another call's effects on its
//! thread-locals, and must not run work that may need a lock it holds.

mod call;
mod cq;
mod fork;
mod label;
mod map;
mod permit;
mod pool;
mod wait;

use std::sync::{Mutex, MutexGuard};

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

create_exception!(
    wspool,
    RejectedError,
    PyRuntimeError,
    "A task was refused because the pool's bounded queue is full (reject=\"abort\")."
);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The worker index of the calling thread on a wspool pool, else None.
#[pyfunction]
fn current_index() -> Option<usize> {
    wspool::current_index()
}

/// Rust half of the `wspool` package.
#[pymodule(gil_used = true)]
fn _wspool(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RejectedError", m.py().get_type::<RejectedError>())?;
    m.add_class::<pool::Core>()?;
    m.add_class::<call::Handle>()?;
    m.add_class::<pool::Group>()?;
    m.add_class::<pool::Serial>()?;
    m.add_class::<map::MapIter>()?;
    m.add_class::<pool::Stats>()?;
    m.add_class::<pool::PoolDump>()?;
    m.add_class::<pool::Blocking>()?;
    m.add_class::<pool::WaitRegion>()?;
    m.add_class::<cq::Completions>()?;
    m.add_function(wrap_pyfunction!(current_index, m)?)?;
    m.add_function(wrap_pyfunction!(pool::monotonic_ns, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_after_fork_child, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_atexit, m)?)?;
    m.add_function(wrap_pyfunction!(pool::_interpreter_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(fork::default_stack_size, m)?)?;
    m.add("SIGNAL_SLICE_SECONDS", wait::SIGNAL_SLICE.as_secs_f64())?;
    Ok(())
}
