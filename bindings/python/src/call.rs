//! `submit`: a Python call that fills a real `concurrent.futures.Future`
//! (the subclass the Python side hands us), and the `Handle` stored on that
//! future so `Future.result()` waits on the task itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use wspool::{Pool, SubmitErrorKind, TaskHandle};

use crate::RejectedError;
use crate::fork::{ForkLocal, check_gen, current_gen};
use crate::lock;
use crate::permit::{Kind, Places, Urgent};
use crate::pool::Shared;
use crate::wait::{WAIT_EPOCH, WaitOn, current_cpu, handoff_debounce, wait_released};
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

pub(crate) struct Call {
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
        let attached = crate::fork::gated(|| {
            Python::try_attach(|py| {
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
            })
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

/// The calls of a `pool.group()` not finished yet, counted by the binding:
/// a call of the group may be claimed and run by another thread than its
/// pool task (`Slot`), whose empty shell the core still counts until some
/// thread pops it. `Group.wait` waits for the calls.
#[derive(Default)]
pub(crate) struct GroupCount {
    /// Its calls, for `Group.wait` on a pool thread to mark them awaited.
    slots: Mutex<Vec<std::sync::Weak<Slot>>>,
    n: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

/// One call counted in a group until dropped.
pub(crate) struct GroupTicket(Arc<GroupCount>);

impl Drop for GroupTicket {
    fn drop(&mut self) {
        let g = &self.0;
        if g.n.fetch_sub(1, Ordering::SeqCst) == 1 && g.sleepers.load(Ordering::SeqCst) > 0 {
            let _l = lock(&g.lock);
            g.cv.notify_all();
        }
    }
}

impl GroupCount {
    pub(crate) fn enter(self: &Arc<Self>) -> GroupTicket {
        self.n.fetch_add(1, Ordering::SeqCst);
        GroupTicket(self.clone())
    }

    pub(crate) fn pending(&self) -> usize {
        self.n.load(Ordering::SeqCst)
    }

    fn remember(&self, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots.len() >= 64 && slots.len().is_power_of_two() {
            slots.retain(|w| w.upgrade().is_some_and(|s| s.claimable()));
        }
        slots.push(Arc::downgrade(slot));
    }

    /// A call of the pool waits for the group: its calls not started are
    /// awaited (`Slot::mark_awaited`).
    pub(crate) fn mark_awaited(&self, places: &Places) {
        let mut slots = lock(&self.slots);
        slots.retain(|w| w.upgrade().is_some_and(|s| s.claimable()));
        for slot in slots.iter().filter_map(std::sync::Weak::upgrade) {
            slot.mark_awaited(places);
        }
    }

    /// Waits (detached) until no call is pending or `timeout` passed.
    pub(crate) fn wait_empty(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.lock);
        let empty = loop {
            if self.n.load(Ordering::SeqCst) == 0 {
                break true;
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    g = self.cv.wait_timeout(g, d - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        };
        drop(g);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        empty
    }
}

/// A call between its submission and its end, shared by the pool's task
/// (`Job`), the call's `Handle`, and the urgent list of its pool
/// (`permit.rs`): whoever claims the call first runs it, the rest find it
/// gone. Its waiters wait on `done`, not on the pool's task, which may run
/// later as an empty shell when the call was claimed elsewhere.
pub(crate) struct Slot {
    shared: Arc<Shared>,
    call: Mutex<Option<Call>>,
    /// Submitted from one of the pool's threads: may borrow a lent place.
    inner: bool,
    /// Has a deadline: only its pool task may run it (the core expires it
    /// there, or in the waiter's wait on that task), never a claim.
    deadline: AtomicBool,
    started: AtomicBool,
    /// Already on its pool's urgent list.
    urgent: AtomicBool,
    /// On its pool's queue of outer calls (`Places::push_outer`).
    fifo: AtomicBool,
    /// A waiting call of its pool waits for it (`permit.rs`: it may borrow
    /// a place a waiting borrower passes on).
    awaited: AtomicBool,
    done: AtomicBool,
    sleepers: AtomicUsize,
    wait_lock: Mutex<()>,
    cv: Condvar,
    /// The group the call counts in, released as it ends.
    group: Mutex<Option<GroupTicket>>,
}

impl Slot {
    fn new(call: Call, inner: bool) -> Arc<Slot> {
        Arc::new(Slot {
            group: Mutex::new(None),
            shared: call.shared.clone(),
            call: Mutex::new(Some(call)),
            inner,
            deadline: AtomicBool::new(false),
            started: AtomicBool::new(false),
            urgent: AtomicBool::new(false),
            fifo: AtomicBool::new(false),
            awaited: AtomicBool::new(false),
            done: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            wait_lock: Mutex::new(()),
            cv: Condvar::new(),
        })
    }

    /// The call, if nobody took it yet: the caller runs or drops it, then
    /// calls `finish`.
    pub(crate) fn claim(&self) -> Option<Call> {
        if self.started.load(Ordering::Acquire) {
            return None;
        }
        let call = lock(&self.call).take();
        if call.is_some() {
            self.started.store(true, Ordering::Release);
        }
        call
    }

    pub(crate) fn claimable(&self) -> bool {
        !self.started.load(Ordering::Acquire)
    }

    pub(crate) fn is_awaited(&self) -> bool {
        self.awaited.load(Ordering::Acquire)
    }

    /// A call of its pool waits for this one: it goes ahead of outer calls
    /// and may borrow what waiting borrowers pass on.
    pub(crate) fn mark_awaited(self: &Arc<Self>, places: &Places) {
        if self.deadline.load(Ordering::Relaxed) || !self.claimable() {
            return;
        }
        self.awaited.store(true, Ordering::Release);
        if !self.urgent.swap(true, Ordering::AcqRel) {
            places.push_urgent(Urgent::Call(self.clone()));
        } else {
            places.poke();
        }
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn finish(&self) {
        drop(lock(&self.group).take());
        self.done.store(true, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.wait_lock);
            self.cv.notify_all();
        }
    }

    /// Waits (detached) until the call ended or `timeout` passed.
    fn wait_done(&self, timeout: Option<Duration>) -> bool {
        if self.is_done() {
            return true;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.wait_lock);
        let done = loop {
            if self.done.load(Ordering::SeqCst) {
                break true;
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    g = self.cv.wait_timeout(g, d - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        };
        drop(g);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        done
    }
}

/// Runs a claimed call on this thread, on a place already counted as
/// `kind`, and ends its slot. `fresh_state`: under a thread state of its
/// own (a waiter at the thread cap runs the work it waits for: the call
/// must not see the waiter's thread-locals, contextvars or recursion depth).
pub(crate) fn run_claimed(call: Call, slot: &Slot, places: &Arc<Places>, kind: Kind, fresh_state: bool) {
    let label = call.label;
    let run = || {
        let shared = call.shared.clone();
        let mut cell = Some(call);
        let ran = places.run_holding(kind, || {
            shared.attach(|py| {
                if let Some(c) = cell.take() {
                    if fresh_state {
                        crate::fork::with_fresh_thread_state(py, |py| c.execute(py));
                    } else {
                        c.execute(py);
                    }
                }
            })
        });
        if !ran && let Some(c) = cell.take() {
            std::mem::forget(c);
        }
    };
    match label {
        Some(label) => wspool::with_label(label, run),
        None => run(),
    }
    slot.finish();
}

/// The pool's task for a call: runs it unless someone claimed it first;
/// dropped unrun, it cancels the future. (The flag: it ran, so its call,
/// if still pending, is another task's to start.)
struct Job(Arc<Slot>, bool);

impl Job {
    fn run(mut self) {
        self.1 = true;
        let places = self.0.places();
        if let Some(places) = &places
            && self.0.fifo.load(Ordering::Relaxed)
        {
            // Any outer call's task starts the oldest outer call.
            if !self.0.claimable() && !places.outer_pending() {
                return;
            }
            let kind = places.take(false, &|| false);
            let claimed = places.claim_oldest_outer().or_else(|| self.0.claim().map(|c| (self.0.clone(), c)));
            match claimed {
                None => places.give(kind),
                Some((slot, call)) => {
                    handoff_debounce(call.submitted, call.epoch, call.cpu);
                    run_claimed(call, &slot, places, kind, false);
                }
            }
            return;
        }
        if !self.0.claimable() {
            return;
        }
        match places {
            // The place first, then the call: a thread waiting for a place
            // holds no call another thread (a waiter at the cap) may need.
            Some(places) => {
                let kind = places.take(self.0.inner, &|| self.0.is_awaited());
                match self.0.claim() {
                    None => places.give(kind),
                    Some(call) => {
                        if call.shared.is_worker_here() {
                            handoff_debounce(call.submitted, call.epoch, call.cpu);
                        }
                        run_claimed(call, &self.0, &places, kind, false);
                    }
                }
            }
            None => {
                let Some(call) = self.0.claim() else { return };
                let label = call.label;
                let run = move || {
                    if call.shared.is_worker_here() {
                        handoff_debounce(call.submitted, call.epoch, call.cpu);
                    }
                    let shared = call.shared.clone();
                    let mut slot = Some(call);
                    let ran = shared.run_python(false, &|| false, |py| {
                        if let Some(c) = slot.take() {
                            c.execute(py)
                        }
                    });
                    if !ran && let Some(c) = slot.take() {
                        std::mem::forget(c);
                    }
                };
                // The label is published here, around the call, rather than
                // by the core's labelled submission, which would wrap this
                // job in another closure (and box it).
                match label {
                    Some(label) => wspool::with_label(label, run),
                    None => run(),
                }
                self.0.finish();
            }
        }
    }
}

impl Slot {
    /// The places of the call's pool when the call would take one there:
    /// on one of its threads, under growth="compensate".
    fn places(&self) -> Option<Arc<Places>> {
        if !self.shared.is_worker_here() {
            return None;
        }
        self.shared.places().cloned()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.1 {
            return;
        }
        if let Some(call) = self.0.claim() {
            call.cancel_unrun();
            self.0.finish();
        } else if self.0.fifo.load(Ordering::Relaxed)
            && let Some(places) = self.0.shared.places()
            && let Some((slot, call)) = places.claim_oldest_outer()
        {
            // Outer calls and their unrun tasks stay as many: this task's
            // call was started by another task, so it ends the oldest one
            // not started (what `reject="discard_oldest"` means to drop).
            call.cancel_unrun();
            slot.finish();
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

#[allow(clippy::too_many_arguments)]
pub(crate) fn submit_call<'py>(
    py: Python<'py>,
    shared: &Arc<Shared>,
    target: Target<'_>,
    group: Option<&Arc<GroupCount>>,
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
    let inner = shared.is_worker_here();
    let slot = Slot::new(
        Call {
            shared: shared.clone(),
            submitted: Instant::now(),
            epoch: WAIT_EPOCH.load(Ordering::SeqCst),
            cpu: current_cpu(),
            future: future.clone().unbind(),
            func: func.clone().unbind(),
            args: args.clone().unbind(),
            kwargs: kwargs.map(|k| k.clone().unbind()),
            label,
        },
        inner,
    );
    // An inner call goes ahead of calls from outside (`permit.rs`), unless
    // a serial queue or lane orders it.
    let with_deadline = matches!(&target, Target::With(_, opts) if opts.deadline.is_some());
    slot.deadline.store(with_deadline, Ordering::Relaxed);
    let claimable_out_of_order = inner
        && !with_deadline
        && match &target {
            Target::Serial(_) => false,
            Target::With(_, opts) => opts.serial.is_none(),
            _ => true,
        };
    if let Some(g) = group {
        *lock(&slot.group) = Some(g.enter());
        g.remember(&slot);
    }
    if !inner
        && matches!(target, Target::Pool(_) | Target::Group(_))
        && let Some(places) = shared.places()
    {
        slot.fifo.store(true, Ordering::Relaxed);
        places.push_outer(slot.clone());
    }
    let job = Job(slot.clone(), false);
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
    if claimable_out_of_order && let Some(places) = shared.places() {
        slot.urgent.store(true, Ordering::Relaxed);
        places.push_urgent(Urgent::Call(slot.clone()));
    }
    let handle = Handle { task: ForkLocal::new(handle, shared.gen_), slot };
    attach_handle(py, &future, handle)?;
    Ok(future)
}

/// Stores the call's handle on its future, and on the future's waiter list
/// (`concurrent.futures.wait` installs its waiters there, and must know
/// which pool's work it waits on).
fn attach_handle<'py>(py: Python<'py>, future: &Bound<'py, PyAny>, handle: Handle) -> PyResult<()> {
    let handle = Bound::new(py, handle)?;
    future.setattr(intern!(py, "_ws_handle"), &handle)?;
    if let Ok(waiters) = future.getattr(intern!(py, "_waiters")) {
        let _ = waiters.setattr(intern!(py, "_ws_handle"), &handle);
    }
    Ok(())
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
    let inner = shared.is_worker_here();
    let mut futures = Vec::new();
    let mut jobs = Vec::new();
    let mut slots = Vec::new();
    for args in arg_tuples.try_iter()? {
        let args = args?.cast_into::<PyTuple>().map_err(PyErr::from)?;
        let future = shared.future_cls.bind(py).call0()?;
        let slot = Slot::new(
            Call {
                shared: shared.clone(),
                submitted: Instant::now(),
                epoch,
                cpu,
                future: future.clone().unbind(),
                func: func.clone().unbind(),
                args: args.unbind(),
                kwargs: None,
                label,
            },
            inner,
        );
        if !inner && let Some(places) = shared.places() {
            slot.fifo.store(true, Ordering::Relaxed);
            places.push_outer(slot.clone());
        }
        jobs.push(Job(slot.clone(), false));
        slots.push(slot);
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
    for ((future, handle), slot) in futures.iter().zip(handles).zip(slots) {
        if inner && let Some(places) = shared.places() {
            slot.urgent.store(true, Ordering::Relaxed);
            places.push_urgent(Urgent::Call(slot.clone()));
        }
        let handle = Handle { task: ForkLocal::new(handle, shared.gen_), slot };
        attach_handle(py, future, handle)?;
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

/// What `submit` raises once the interpreter is shutting down (from the
/// exit hook on), with `ThreadPoolExecutor`'s text.
pub(crate) fn interpreter_shutdown_error() -> PyErr {
    PyRuntimeError::new_err("cannot schedule new futures after interpreter shutdown")
}

/// The task behind a `wspool.Future`, for `Future.result()`.
#[pyclass(module = "wspool._wspool", frozen)]
pub(crate) struct Handle {
    task: ForkLocal<TaskHandle<()>>,
    pub(crate) slot: Arc<Slot>,
}

impl Handle {
    /// On a thread of the call's own pool (growth="compensate"): its places.
    pub(crate) fn own_places(&self) -> Option<&Arc<Places>> {
        if !self.slot.shared.is_worker_here() {
            return None;
        }
        self.slot.shared.places()
    }

    /// The call belongs to the pool of the calling thread.
    pub(crate) fn slot_is_local(&self) -> bool {
        self.slot.shared.is_worker_here()
    }

    /// The call is waited for by a call of its pool: ahead of outer calls.
    pub(crate) fn mark_urgent(&self, places: &Places) {
        self.slot.mark_awaited(places);
    }

    /// At the thread cap, with no thread to lend: runs the call on this
    /// thread if it has not started (the caller lends its place meanwhile).
    pub(crate) fn run_here_at_cap(&self, places: &Arc<Places>) -> bool {
        if self.slot.deadline.load(Ordering::Relaxed)
            || !wspool::at_thread_cap()
            || !crate::fork::stack_left_for_a_call()
        {
            return false;
        }
        let Some(call) = self.slot.claim() else { return false };
        let kind = places.borrow_now();
        run_claimed(call, &self.slot, places, kind, true);
        true
    }
}

#[pymethods]
impl Handle {
    /// Waits until the call finished or was cancelled; False on timeout.
    /// On a thread of the call's own pool, a wait lends the waiting call's
    /// place to the work it waits for, which goes ahead of calls queued
    /// from outside; at the thread cap it runs that call itself. Any other
    /// wait keeps the call's place.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        let slot = &self.slot;
        if slot.is_done() {
            return Ok(true);
        }
        let task: &TaskHandle<()> = &self.task;
        if timeout.is_none() && task.would_deadlock() {
            // The calling call is this task (issue 26): it would wait for itself.
            return Err(PyRuntimeError::new_err("wait would deadlock: a call waits for its own result"));
        }
        let on = if slot.shared.is_worker_here() {
            let places = slot.shared.places();
            if let Some(p) = places {
                self.mark_urgent(p);
            }
            WaitOn::Own { places, core_counts: false }
        } else {
            WaitOn::Foreign
        };
        let places = match on {
            WaitOn::Own { places, .. } => places,
            WaitOn::Foreign => None,
        };
        let help = || places.is_some_and(|p| self.run_here_at_cap(p));
        if slot.deadline.load(Ordering::Relaxed) {
            // The core ends the call at its deadline in this very wait.
            return wait_released(py, timeout, Some(&|| slot.is_done()), |t| task.wait_for(t), on, None);
        }
        wait_released(py, timeout, Some(&|| slot.is_done()), |t| slot.wait_done(t), on, Some(&help))
    }

    /// Drops the task unrun if it has not started (its future is cancelled).
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        check_gen(self.task.gen_)?;
        // Dropping the task's closure needs the GIL (it cancels the future):
        // we hold it, and the core drops it on this thread.
        let _ = py;
        Ok(self.task.cancel())
    }

    /// True on a thread of the call's own pool.
    fn is_local(&self) -> bool {
        self.slot_is_local()
    }

    /// True once the call finished (ran or was cancelled).
    fn done(&self) -> bool {
        self.task.gen_ == current_gen() && self.slot.is_done()
    }
}
