//! `Executor.map` without a `Future` per item. A few tasks claim chunks in
//! order; a task that holds the GIL runs further chunks of the same map
//! while it has it (bounded), which is what makes `map` fast under the GIL,
//! and keeps a few more tasks queued while chunks remain. Like
//! `ThreadPoolExecutor.map`, every call is scheduled when `map()` returns:
//! all of them run even if the result iterator is never consumed.
//!
//! What grows with the number of calls (the chunks, their arguments and
//! results, and the function) is a [`Table`] that the consumer releases, on
//! its own thread and with the GIL, once it has taken the last chunk or
//! stopped the map. A task holds a clone of it only while it runs chunks,
//! attached to the interpreter, and after the map's last call returns it
//! drops the clone before it lets go of the GIL; the consumer needs the GIL
//! to take the last chunk, so it is the one that frees the table. The last
//! task of a map, which often ends after the consumer has every result,
//! frees a small struct: a map's bookkeeping is never freed on a pool thread
//! after the fact (issue 40: the CPU an idle pool uses after a burst).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use wspool::SubmitErrorKind;

use crate::call::{cancelled_error, submit_error};
use crate::fork::check_gen;
use crate::lock;
use crate::permit::{Kind, Places, Urgent};
use crate::pool::{Owner, Shared};
use crate::wait::{WaitOn, deadline_of, remaining, wait_released};

/// A map task that holds the GIL runs at most this many further chunks...
const MAP_RUN_AHEAD: usize = 256;
/// ...and stops taking more after this long, so long items spread out.
const MAP_RUN_AHEAD_TIME: Duration = Duration::from_micros(500);
/// While chunks remain, a map keeps up to this many tasks queued: enough for
/// lent or injected threads to join in at once, few enough that a long map
/// is not a backlog of thousands of tasks in the pool's queue.
const MAP_QUEUED: usize = 4;

enum Chunk {
    Pending(Vec<Py<PyAny>>),
    Running,
    Done(Vec<PyResult<Py<PyAny>>>),
    Taken,
    /// Never ran: the pool dropped the map's tasks (shutdown with cancel_futures).
    Aborted,
}

/// A map's bookkeeping per call (see the module docs).
struct Table {
    func: Py<PyAny>,
    chunks: Box<[Mutex<Chunk>]>,
    done: Box<[AtomicBool]>,
}

impl Table {
    fn mark_done(&self, st: &MapState, i: usize) {
        self.done[i].store(true, Ordering::SeqCst);
        if st.waiting.load(Ordering::SeqCst) {
            let _g = lock(&st.lock);
            st.cv.notify_all();
        }
    }
}

pub(crate) struct MapState {
    /// Tickets spawn successors on this pool (an `Owner`, so that dropping
    /// the last reference anywhere never joins the pool in place).
    owner: Arc<Owner>,
    /// What `pool.dump()` shows on a thread running the map (`label.rs`).
    label: Option<wspool::Label>,
    /// None once the consumer released it (see the module docs). Tasks take
    /// a clone only while they hold the GIL; the consumer holds its own.
    table: Mutex<Option<Arc<Table>>>,
    /// How many chunks the map has.
    n_chunks: usize,
    /// Next chunk to claim; chunks are claimed in order.
    next: AtomicUsize,
    cancelled: AtomicBool,
    /// The consumer sleeps on `cv` (under `lock`).
    waiting: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
    /// Started from one of the pool's threads: its tickets may borrow a
    /// place lent by a waiting call (`permit.rs`).
    inner: bool,
    /// Its consumer, a call of the pool, waits for it.
    awaited: AtomicBool,
    /// Tickets queued and not started / not finished.
    queued: AtomicUsize,
    /// Tickets started and not running chunks yet: waiting for a place or
    /// the GIL.
    entering: AtomicUsize,
    /// Chunks the last task that let go of the GIL ran in its turn (at
    /// least 1): how many chunks each ticket lined up will take.
    turn: AtomicUsize,
    live: AtomicUsize,
}

impl MapState {
    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    pub(crate) fn is_awaited(&self) -> bool {
        self.awaited.load(Ordering::Acquire)
    }

    pub(crate) fn claimable(&self) -> bool {
        !self.cancelled.load(Ordering::Relaxed) && self.next.load(Ordering::Relaxed) < self.n_chunks
    }

    fn table(&self) -> Option<Arc<Table>> {
        lock(&self.table).clone()
    }

    /// Claims and runs the next chunk; false if none was left.
    fn run_next(&self, py: Python<'_>, table: &Table) -> bool {
        if self.cancelled.load(Ordering::Relaxed) {
            return false;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.n_chunks {
            return false;
        }
        let args = match std::mem::replace(&mut *lock(&table.chunks[i]), Chunk::Running) {
            Chunk::Pending(a) => a,
            other => {
                *lock(&table.chunks[i]) = other;
                return true;
            }
        };
        let mut out = Vec::with_capacity(args.len());
        let func = table.func.bind(py);
        for a in args {
            let r = match self.shared().broken_error(py) {
                Some(e) => Err(e),
                None => match a.bind(py).cast::<PyTuple>() {
                    Ok(t) => func.call1(t).map(Bound::unbind),
                    Err(_) => func.call1((a.bind(py),)).map(Bound::unbind),
                },
            };
            let failed = r.is_err();
            out.push(r);
            if failed {
                break; // like a loop over the chunk: an exception ends it
            }
        }
        *lock(&table.chunks[i]) = Chunk::Done(out);
        table.mark_done(self, i);
        true
    }

    /// The last task of the map was dropped unrun (the pool was shut down
    /// with cancel_futures=True): the calls nobody will run end as cancelled.
    fn abort(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let from = self.next.fetch_add(self.n_chunks, Ordering::SeqCst);
        // Released: the consumer stopped the map or has every result.
        let Some(table) = self.table() else { return };
        for i in from.min(self.n_chunks)..self.n_chunks {
            *lock(&table.chunks[i]) = Chunk::Aborted;
            table.mark_done(self, i);
        }
    }

    /// Stops the map: unclaimed chunks never run and their arguments are released.
    fn cancel(&self, table: &Table) {
        self.cancelled.store(true, Ordering::SeqCst);
        let from = self.next.fetch_add(self.n_chunks, Ordering::SeqCst);
        for c in table.chunks.iter().skip(from) {
            let mut g = lock(c);
            if matches!(*g, Chunk::Pending(_)) {
                *g = Chunk::Taken;
            }
        }
    }
}

fn new_ticket(state: &Arc<MapState>) -> Ticket {
    state.queued.fetch_add(1, Ordering::SeqCst);
    state.live.fetch_add(1, Ordering::SeqCst);
    Ticket { state: state.clone(), started: false }
}

// A refused ticket comes back in the error and is dropped: its Drop undoes
// the counts (and aborts the map only if no other task is left).
fn spawn_ticket(state: &Arc<MapState>) -> Result<(), SubmitErrorKind> {
    let ticket = new_ticket(state);
    state.owner.pool.spawn(move || ticket.run()).map_err(|e| e.kind())
}

/// The first `n` tickets of a map, as one batch (one wake-up).
fn spawn_tickets(state: &Arc<MapState>, n: usize) -> Result<(), SubmitErrorKind> {
    let tickets: Vec<_> = (0..n).map(|_| new_ticket(state)).collect();
    state.owner.pool.spawn_batch(tickets.into_iter().map(|t| move || t.run())).map_err(|e| e.kind())
}

/// One task of a map. It runs the next chunk and, while it holds the GIL
/// anyway, further chunks (at most `MAP_RUN_AHEAD`, for at most
/// `MAP_RUN_AHEAD_TIME`). While chunks remain it keeps a successor lined
/// up, and up to `MAP_QUEUED` tickets queued while there are chunks enough
/// for them (`chunk_loop`), so idle, lent (`blocking()`) or injected threads
/// join in, and the pool's queue never holds more than that per map: a long
/// map does not look like a backlog to the starvation monitor.
struct Ticket {
    state: Arc<MapState>,
    started: bool,
}

impl Ticket {
    fn run(mut self) {
        self.started = true;
        let st = &self.state;
        st.queued.fetch_sub(1, Ordering::SeqCst);
        if !st.claimable() {
            return;
        }
        match st.label {
            Some(label) => wspool::with_label(label, || self.run_chunks()),
            None => self.run_chunks(),
        }
    }

    /// Runs chunks while it holds the GIL (see `Ticket`).
    fn run_chunks(&self) {
        let st = &self.state;
        let entered = std::cell::Cell::new(false);
        st.entering.fetch_add(1, Ordering::SeqCst);
        st.shared().run_python_if(st.inner, &|| st.is_awaited(), &|| st.claimable(), |py| {
            entered.set(true);
            st.entering.fetch_sub(1, Ordering::SeqCst);
            chunk_loop(st, py);
        });
        if !entered.get() {
            st.entering.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A ticket's work: chunks, and successors queued while chunks remain.
/// Holds the table only while it holds the GIL (see the module docs).
fn chunk_loop(st: &Arc<MapState>, py: Python<'_>) {
    let Some(table) = st.table() else { return };
    let start = Instant::now();
    let mut alone = false;
    for ran in 0.. {
        let queued = st.queued.load(Ordering::SeqCst);
        // One ticket is always lined up (queued, or waiting for a place or
        // the GIL) while chunks remain: it takes over as soon as this task
        // lets go of the GIL, which is how calls that release it spread
        // over threads (each ticket that gets in lines up the next). More
        // are lined up only if chunks would be left for them, each taking
        // a turn of about `turn` chunks: near the end of a map of short
        // calls, no ticket waits that would find nothing, each of which
        // would take a worker and the GIL once more after the consumer has
        // every result (issue 40).
        let lined_up = queued + st.entering.load(Ordering::SeqCst);
        let next = st.next.load(Ordering::SeqCst);
        let turn = st.turn.load(Ordering::Relaxed).max(1);
        if !alone
            && queued < MAP_QUEUED
            && next + 1 < st.n_chunks
            && (lined_up == 0 || next + (lined_up + 1) * turn < st.n_chunks)
            && spawn_ticket(st).is_err()
        {
            alone = true; // no successor: this task runs the rest
        }
        if !st.run_next(py, &table) {
            break;
        }
        if !alone && (ran + 1 >= MAP_RUN_AHEAD || start.elapsed() >= MAP_RUN_AHEAD_TIME) {
            st.turn.store(ran + 1, Ordering::Relaxed);
            // Chunks left and no ticket lined up to run them: a successor,
            // or this task runs the rest.
            if st.claimable()
                && st.queued.load(Ordering::SeqCst) + st.entering.load(Ordering::SeqCst) == 0
                && spawn_ticket(st).is_err()
            {
                alone = true;
                continue;
            }
            break;
        }
    }
}

/// A map started from one of the pool's threads, run by a thread that
/// takes urgent work (`permit.rs`) on a place already counted as `kind`.
pub(crate) fn run_chunks_holding(st: &Arc<MapState>, places: &Arc<Places>, kind: Kind) {
    let run = || {
        places.run_holding(kind, || st.shared().attach_if(&|| st.claimable(), |py| chunk_loop(st, py)));
    };
    match st.label {
        Some(label) => wspool::with_label(label, run),
        None => run(),
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let st = &self.state;
        if !self.started {
            st.queued.fetch_sub(1, Ordering::SeqCst);
        }
        if st.live.fetch_sub(1, Ordering::SeqCst) == 1 && st.claimable() {
            st.abort();
        }
    }
}

/// The iterator `Pool.map` returns: results in order; the first exception
/// is raised in its place and the rest of the map is cancelled; a timeout
/// raises TimeoutError. Dropping it early cancels what has not started.
#[pyclass(module = "wspool._wspool")]
pub(crate) struct MapIter {
    state: Arc<MapState>,
    /// The map's table until the consumer releases it (see the module docs).
    table: Option<Arc<Table>>,
    next_chunk: usize,
    buf: VecDeque<PyResult<Py<PyAny>>>,
    deadline: Option<Instant>,
    finished: bool,
    /// `__next__` was called at least once.
    iterated: bool,
    total: usize,
}

impl MapIter {
    /// Stops the map: the calls that have not started never run, and what
    /// the map holds is released here.
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            if let Some(table) = &self.table {
                self.state.cancel(table);
            }
        }
        self.buf.clear();
        self.release();
    }

    /// Releases the map's table on this thread, which holds the GIL: the
    /// arguments of unstarted calls, results not taken and the function go
    /// now, here, not later on a pool thread. A task still running a chunk
    /// (stopped or timed-out maps) keeps its clone until it is done.
    fn release(&mut self) {
        let shared = lock(&self.state.table).take();
        drop(shared);
        self.table = None;
    }

    /// Waits until chunk `i` is done. Never runs chunks on this thread: a
    /// map consumed inside a task must not run its calls under the task's
    /// thread-locals and contextvars.
    fn wait_chunk(&self, py: Python<'_>, table: &Table, i: usize) -> PyResult<bool> {
        let st = &self.state;
        if table.done[i].load(Ordering::SeqCst) {
            return Ok(true);
        }
        let timeout = remaining(self.deadline).map(|d| d.as_secs_f64());
        let done = |slice: Option<Duration>| {
            let deadline = slice.map(|s| Instant::now() + s);
            let mut g = lock(&st.lock);
            st.waiting.store(true, Ordering::SeqCst);
            while !table.done[i].load(Ordering::SeqCst) {
                match deadline {
                    None => g = st.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        g = st.cv.wait_timeout(g, d - now).unwrap_or_else(|e| e.into_inner()).0;
                    }
                }
            }
            st.waiting.store(false, Ordering::SeqCst);
            table.done[i].load(Ordering::SeqCst)
        };
        let shared = st.shared();
        let on = if shared.is_worker_here() {
            if let Some(p) = shared.places()
                && !st.awaited.swap(true, Ordering::AcqRel)
            {
                p.poke();
            }
            WaitOn::Own { places: shared.places(), core_counts: false }
        } else {
            WaitOn::Foreign
        };
        wait_released(py, timeout, Some(&|| table.done[i].load(Ordering::SeqCst)), done, on, None)
    }
}

impl Drop for MapIter {
    fn drop(&mut self) {
        // As with ThreadPoolExecutor's generator: a map whose iterator was
        // never advanced runs every call; one abandoned part way cancels
        // the calls that have not started. (Dropped by Python, so with the
        // GIL: what `finish` releases goes here.)
        if self.iterated && !self.finished {
            self.finish();
        }
    }
}

#[pymethods]
impl MapIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        check_gen(self.state.shared().gen_)?;
        self.iterated = true;
        loop {
            if let Some(r) = self.buf.pop_front() {
                return match r {
                    Ok(v) => Ok(Some(v)),
                    Err(e) => {
                        self.finish();
                        Err(e)
                    }
                };
            }
            let table = match &self.table {
                Some(t) if !self.finished && self.next_chunk < self.state.n_chunks => t.clone(),
                _ => {
                    self.finished = true;
                    return Ok(None);
                }
            };
            let i = self.next_chunk;
            if !self.wait_chunk(py, &table, i)? {
                drop(table);
                self.finish();
                return Err(PyTimeoutError::new_err("map() timed out"));
            }
            let taken = std::mem::replace(&mut *lock(&table.chunks[i]), Chunk::Taken);
            drop(table);
            self.next_chunk += 1;
            match taken {
                Chunk::Done(results) => self.buf.extend(results),
                Chunk::Aborted => {
                    self.finish();
                    return Err(cancelled_error(py, "map() stopped: the pool shut down before these calls ran"));
                }
                _ => {}
            }
            if self.next_chunk == self.state.n_chunks {
                // Every call has run: its results are in `buf`.
                self.release();
            }
        }
    }

    /// Stops the map: calls that have not started never run.
    fn close(&mut self) {
        self.finish();
    }

    /// How many calls the map has (a hint for `list()`; not a length: it
    /// is an iterator, and like a generator it is always true).
    fn __length_hint__(&self) -> usize {
        self.total
    }
}

/// `Pool.map`: splits `arg_tuples` into chunks of `chunksize` calls and
/// queues the first tasks; see the module docs.
pub(crate) fn start_map(
    py: Python<'_>,
    owner: &Arc<Owner>,
    fn_: Py<PyAny>,
    arg_tuples: &Bound<'_, PyAny>,
    chunksize: usize,
    timeout: Option<f64>,
) -> PyResult<MapIter> {
    owner.shared.check_open(py)?;
    if chunksize == 0 {
        return Err(PyValueError::new_err("chunksize must be >= 1."));
    }
    let deadline = deadline_of(timeout)?;
    let mut chunks: Vec<Mutex<Chunk>> = Vec::new();
    let mut cur: Vec<Py<PyAny>> = Vec::with_capacity(chunksize);
    let mut total = 0usize;
    for item in arg_tuples.try_iter()? {
        cur.push(item?.unbind());
        total += 1;
        if cur.len() == chunksize {
            chunks.push(Mutex::new(Chunk::Pending(std::mem::replace(&mut cur, Vec::with_capacity(chunksize)))));
        }
    }
    if !cur.is_empty() {
        chunks.push(Mutex::new(Chunk::Pending(cur)));
    }
    let n = chunks.len();
    let label = crate::label::label_of(py, fn_.bind(py));
    let table = Arc::new(Table {
        func: fn_,
        chunks: chunks.into_boxed_slice(),
        done: (0..n).map(|_| AtomicBool::new(false)).collect(),
    });
    let state = Arc::new(MapState {
        owner: owner.clone(),
        label,
        table: Mutex::new(Some(table.clone())),
        n_chunks: n,
        next: AtomicUsize::new(0),
        cancelled: AtomicBool::new(false),
        waiting: AtomicBool::new(false),
        lock: Mutex::new(()),
        cv: Condvar::new(),
        inner: owner.shared.is_worker_here(),
        awaited: AtomicBool::new(false),
        queued: AtomicUsize::new(0),
        entering: AtomicUsize::new(0),
        turn: AtomicUsize::new(1),
        live: AtomicUsize::new(0),
    });
    // A few tasks to start; each keeps one more queued while chunks
    // remain (see `Ticket`). Queueing never needs the GIL, and with
    // reject="block" it may wait for room.
    let first = n.min(owner.pool.min_threads().max(1));
    if let Err(kind) = py.detach(|| spawn_tickets(&state, first)) {
        state.cancel(&table);
        *lock(&state.table) = None;
        return Err(submit_error(&owner.shared, kind));
    }
    if state.inner
        && let Some(places) = owner.shared.places()
    {
        places.push_urgent(Urgent::Map(state.clone()));
    }
    Ok(MapIter {
        state,
        table: Some(table),
        next_chunk: 0,
        buf: VecDeque::new(),
        deadline,
        finished: n == 0,
        iterated: false,
        total,
    })
}
