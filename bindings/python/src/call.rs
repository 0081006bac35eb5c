//! `submit`: a Python call that fills a real `concurrent.futures.Future`
//! (the subclass the Python side hands us), and the `Handle` stored on that
//! future so `Future.result()` waits on the task itself.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use wspool::{Pool, SubmitErrorKind, TaskHandle};

use crate::RejectedError;
use crate::fork::{ForkLocal, check_gen, current_gen};
use crate::pool::Shared;
use crate::wait::{WAIT_EPOCH, current_cpu, handoff_debounce, wait_released};
pub(crate) fn submit_error(shared: &Shared, kind: SubmitErrorKind) -> PyErr {
    match kind {
        SubmitErrorKind::Rejected => RejectedError::new_err(format!(
            "task rejected: the pool's queue is full (queue_capacity={})",
            shared.queue_capacity
        )),
        SubmitErrorKind::Shutdown => shutdown_error(),
        SubmitErrorKind::WrongPool => PyValueError::new_err("the group or serial queue belongs to another pool"),
    }
}

struct Call {
    shared: Arc<Shared>,
    /// When, at which `WAIT_EPOCH` and on which CPU it was submitted (`handoff_debounce`).
    submitted: Instant,
    epoch: u64,
    cpu: i32,
    future: Py<PyAny>,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    kwargs: Option<Py<PyDict>>,
    /// What `pool.dump()` shows on the thread running it (`label.rs`).
    label: Option<wspool::Label>,
}

impl Call {
    fn execute(self, py: Python<'_>) {
        let fut = self.future.bind(py);
        match fut.call_method0(intern!(py, "set_running_or_notify_cancel")) {
            Ok(v) if v.is_truthy().unwrap_or(false) => {}
            Ok(_) => return, // cancelled before it started
            Err(e) => return e.write_unraisable(py, Some(fut)),
        }
        let outcome = match self.shared.broken_error(py) {
            Some(err) => Err(err),
            None => self.func.bind(py).call(self.args.bind(py), self.kwargs.as_ref().map(|k| k.bind(py))),
        };
        // Every BaseException (SystemExit and KeyboardInterrupt included)
        // goes into the future; the worker carries on.
        let set = match outcome {
            Ok(v) => fut.call_method1(intern!(py, "set_result"), (v,)),
            Err(e) => fut.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
        };
        if let Err(e) = set {
            e.write_unraisable(py, Some(fut));
        }
    }

    /// The task was dropped without running (cancelled, shut down with
    /// cancel_futures, evicted by discard_oldest, or refused): the future
    /// ends up cancelled, and waiters of `concurrent.futures.wait` are told.
    fn cancel_unrun(self) {
        // Asked before attaching: the flag describes the drop in progress
        // on this thread (the core's `expire_with`), whatever runs later.
        let expired = wspool::expiring();
        let Call { future, func, args, kwargs, .. } = self;
        let attached = Python::try_attach(|py| {
            let fut = future.bind(py);
            // Not started by its deadline: the future ends FINISHED with
            // `wspool.DeadlineExceeded`, unless `Future.cancel()` got to it
            // first (then it is cancelled, and notified below as usual).
            if expired && set_expired(py, fut) {
                return;
            }
            // The base class's cancel: wspool.Future.cancel would cancel this task again.
            if let Ok(cls) = base_future_class(py) {
                let _ = cls.call_method1(intern!(py, "cancel"), (fut,));
            }
            let _ = fut.call_method0(intern!(py, "set_running_or_notify_cancel"));
        });
        if attached.is_none() {
            // The interpreter is gone: nothing can be released safely.
            std::mem::forget((future, func, args, kwargs));
        }
    }
}

/// Ends a still PENDING future with `wspool.DeadlineExceeded`; false if it
/// was no longer pending (cancelled meanwhile) or the class is not there.
fn set_expired(py: Python<'_>, fut: &Bound<'_, PyAny>) -> bool {
    let pending = fut.getattr(intern!(py, "_state")).and_then(|s| s.eq(intern!(py, "PENDING"))).unwrap_or(false);
    if !pending {
        return false;
    }
    match deadline_exceeded(py) {
        // The base class's: a subclass may not override it to cancel anything.
        Ok(exc) => base_future_class(py)
            .and_then(|cls| cls.getattr(intern!(py, "set_exception")))
            .and_then(|set| set.call1((fut, exc)))
            .is_ok(),
        Err(e) => {
            e.write_unraisable(py, Some(fut));
            false
        }
    }
}

/// A new `wspool.DeadlineExceeded` (defined by the package's Python half).
pub(crate) fn deadline_exceeded(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import(intern!(py, "wspool"))?
        .getattr(intern!(py, "DeadlineExceeded"))?
        .call1(("the call was not started by its deadline",))
}

pub(crate) fn cancelled_error(py: Python<'_>, msg: &str) -> PyErr {
    match py.import("concurrent.futures").and_then(|m| m.getattr("CancelledError")) {
        Ok(cls) => match cls.call1((msg,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

fn base_future_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    CLS.get_or_try_init(py, || Ok::<_, PyErr>(py.import("concurrent.futures")?.getattr("Future")?.unbind()))
        .map(|c| c.bind(py))
}

/// Owns a [`Call`] until it runs; dropped unrun, it cancels the future.
struct Job(Option<Call>);

impl Job {
    fn run(self) {
        // The label is published here, around the call, rather than by the
        // core's labelled submission, which would wrap this job in another
        // closure (and box it).
        match self.0.as_ref().and_then(|c| c.label) {
            Some(label) => wspool::with_label(label, || self.run_unlabelled()),
            None => self.run_unlabelled(),
        }
    }

    fn run_unlabelled(mut self) {
        if let Some(call) = self.0.take() {
            if call.shared.is_worker_here() {
                handoff_debounce(call.submitted, call.epoch, call.cpu);
            }
            let shared = call.shared.clone();
            let mut slot = Some(call);
            let ran = shared.run_python(|py| {
                if let Some(c) = slot.take() {
                    c.execute(py)
                }
            });
            if !ran && let Some(c) = slot.take() {
                std::mem::forget(c);
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            call.cancel_unrun();
        }
    }
}

/// Where a submission goes.
pub(crate) enum Target<'a> {
    Pool(&'a Pool),
    Group(&'a wspool::Group),
    Serial(&'a wspool::SerialQueue),
    /// `Pool.options(...)`: a deadline, a priority, maybe a group or a lane.
    With(&'a Pool, wspool::SpawnOptions<'a>),
}

pub(crate) fn submit_call<'py>(
    py: Python<'py>,
    shared: &Arc<Shared>,
    target: Target<'_>,
    func: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    shared.check_open(py)?;
    let future = shared.future_cls.bind(py).call0()?;
    // `Pool.options(label=...)`, else the callable's name.
    let label = match &target {
        Target::With(_, opts) if opts.label.is_some() => opts.label,
        _ => crate::label::label_of(py, func),
    };
    let job = Job(Some(Call {
        shared: shared.clone(),
        submitted: Instant::now(),
        epoch: WAIT_EPOCH.load(Ordering::SeqCst),
        cpu: current_cpu(),
        future: future.clone().unbind(),
        func: func.clone().unbind(),
        args: args.clone().unbind(),
        kwargs: kwargs.map(|k| k.clone().unbind()),
        label,
    }));
    let task = move || job.run();
    let submit = move || match target {
        Target::Pool(p) => p.submit(task).map_err(|e| e.kind()),
        Target::Group(g) => g.submit(task).map_err(|e| e.kind()),
        Target::Serial(s) => s.submit(task).map_err(|e| e.kind()),
        // The call publishes its label itself (`Job::run`).
        Target::With(p, opts) => {
            p.submit_with(wspool::SpawnOptions { label: None, ..opts }, task).map_err(|e| e.kind())
        }
    };
    // A refused task comes back inside the error and is dropped here: its
    // future, never handed out, is cancelled on the way.
    let result = if shared.submit_may_block { py.detach(submit) } else { submit() };
    let handle = result.map_err(|kind| submit_error(shared, kind))?;
    let handle = Handle { task: ForkLocal::new(handle, shared.gen_) };
    future.setattr(intern!(py, "_ws_handle"), Bound::new(py, handle)?)?;
    Ok(future)
}

/// `Pool.submit_batch`: `func(*args)` for each tuple of `arg_tuples`, queued
/// as one batch (one wake-up); returns the futures in order. On a refusal
/// the calls before the refused one stay queued and the exception carries
/// their futures as `futures`; the refused calls' futures are cancelled and
/// never handed out.
pub(crate) fn submit_batch_calls<'py>(
    py: Python<'py>,
    shared: &Arc<Shared>,
    pool: &Pool,
    func: &Bound<'py, PyAny>,
    arg_tuples: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    shared.check_open(py)?;
    let epoch = WAIT_EPOCH.load(Ordering::SeqCst);
    let cpu = current_cpu();
    let label = crate::label::label_of(py, func);
    let mut futures = Vec::new();
    let mut jobs = Vec::new();
    for args in arg_tuples.try_iter()? {
        let args = args?.cast_into::<PyTuple>().map_err(PyErr::from)?;
        let future = shared.future_cls.bind(py).call0()?;
        jobs.push(Job(Some(Call {
            shared: shared.clone(),
            submitted: Instant::now(),
            epoch,
            cpu,
            future: future.clone().unbind(),
            func: func.clone().unbind(),
            args: args.unbind(),
            kwargs: None,
            label,
        })));
        futures.push(future);
    }
    let tasks = jobs.into_iter().map(|job| move || job.run());
    let submit = move || pool.submit_batch(tasks);
    let (handles, refused) = match if shared.submit_may_block { py.detach(submit) } else { submit() } {
        Ok(handles) => (handles, None),
        Err(e) => {
            let kind = e.kind();
            let (handles, rest) = e.into_parts();
            // Dropped with the GIL held: each cancels its future.
            drop(rest);
            (handles, Some(kind))
        }
    };
    let accepted = handles.len();
    for (future, handle) in futures.iter().zip(handles) {
        let handle = Handle { task: ForkLocal::new(handle, shared.gen_) };
        future.setattr(intern!(py, "_ws_handle"), Bound::new(py, handle)?)?;
    }
    futures.truncate(accepted);
    let list = PyList::new(py, futures)?;
    match refused {
        None => Ok(list),
        Some(kind) => {
            let err = submit_error(shared, kind);
            err.value(py).setattr(intern!(py, "futures"), list)?;
            Err(err)
        }
    }
}

/// What `submit` raises once the pool is shut down, from any thread (pool
/// threads included), with `ThreadPoolExecutor`'s text.
pub(crate) fn shutdown_error() -> PyErr {
    PyRuntimeError::new_err("cannot schedule new futures after shutdown")
}

/// The task behind a `wspool.Future`, for `Future.result()`.
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Handle {
    task: ForkLocal<TaskHandle<()>>,
}

#[pymethods]
impl Handle {
    /// Waits until the task finished or was cancelled; False on timeout.
    /// On a pool thread it runs nothing else meanwhile (see `wait_released`).
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        if self.task.is_finished() {
            return Ok(true);
        }
        let task: &TaskHandle<()> = &self.task;
        if timeout.is_none() && task.would_deadlock() {
            // The calling call is this task (issue 26): it would wait for itself.
            return Err(PyRuntimeError::new_err("wait would deadlock: a call waits for its own result"));
        }
        wait_released(py, timeout, Some(&|| task.is_finished()), |t| task.wait_for(t))
    }

    /// Drops the task unrun if it has not started (its future is cancelled).
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        // Dropping the task's closure needs the GIL (it cancels the future):
        // we hold it, and the core drops it on this thread.
        let _ = py;
        Ok(self.task.cancel())
    }

    /// True once the task finished (ran or was cancelled).
    fn done(&self) -> bool {
        self.task.gen_ == current_gen() && self.task.is_finished()
    }
}
