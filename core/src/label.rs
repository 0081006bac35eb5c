//! Task labels: what a task "is", for snapshots (`Pool::dump`).
//!
//! A [`Label`] is a 32-bit id into a process-wide table of names that is
//! never freed, so it is `Copy`, fits beside a closure without growing it
//! much, and a worker can publish the label of the task it runs in one
//! relaxed atomic (`WorkerCounters::label`). Labels are meant as a small
//! set of names, like metric labels (a function's name, a request kind),
//! not as per-task data: the table keeps every distinct name for the life
//! of the process and holds at most [`MAX_LABELS`] of them; past that,
//! every new name maps to one fixed label, `"(too many labels)"`.
//!
//! Cost: a task without a label pays nothing (no store per task: the
//! plain submission paths never see labels). A labelled task pays its
//! label lookup at submit (a thread-local cache in front of the global
//! table, so a known name takes no lock) and two stores on the worker
//! around its run ([`with_label`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::panic::Location;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{LazyLock, Mutex};

use crate::sync::lock;
use crate::worker::WorkerThread;

/// Most distinct labels a process keeps; later new names all get the
/// `"(too many labels)"` label.
pub const MAX_LABELS: usize = 65_536;

/// The name every label past [`MAX_LABELS`] gets.
const OVERFLOW_NAME: &str = "(too many labels)";

/// Entries a thread's cache keeps before it starts over (the global table
/// still has them: a miss costs one lock).
const CACHE_ENTRIES: usize = 1024;

/// What a task "is", as snapshots name it: a small id for a name kept for
/// the life of the process (see the module docs: a small set of names,
/// like metric labels). Give it at submit with
/// [`SpawnOptions::label`](crate::SpawnOptions::label).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label(NonZeroU32);

struct Table {
    /// `names[id - 1]`; the first one is the overflow label.
    names: Vec<&'static str>,
    by_name: HashMap<&'static str, NonZeroU32>,
}

impl Table {
    fn new() -> Table {
        let mut by_name = HashMap::new();
        by_name.insert(OVERFLOW_NAME, NonZeroU32::MIN);
        Table { names: vec![OVERFLOW_NAME], by_name }
    }
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| Mutex::new(Table::new()));

thread_local! {
    /// `&'static str` labels and caller locations by address: (pointer,
    /// length), or (location, `usize::MAX`), which no `str` has.
    static BY_ADDRESS: RefCell<HashMap<(usize, usize), Label>> = RefCell::new(HashMap::new());
    /// Interned (borrowed) names by content.
    static BY_NAME: RefCell<HashMap<Box<str>, Label>> = RefCell::new(HashMap::new());
}

/// The global table's id for `name`, added if new; `keep` makes the
/// `'static` copy, called only when the name is new.
#[cold]
fn intern_global(name: &str, keep: impl FnOnce() -> &'static str) -> Label {
    intern_into(&mut lock(&TABLE), name, keep, MAX_LABELS)
}

/// `intern_global` on `table`, holding at most `max` names.
fn intern_into(table: &mut Table, name: &str, keep: impl FnOnce() -> &'static str, max: usize) -> Label {
    if let Some(&id) = table.by_name.get(name) {
        return Label(id);
    }
    if table.names.len() >= max {
        return Label(NonZeroU32::MIN);
    }
    let name = keep();
    table.names.push(name);
    let id = NonZeroU32::new(table.names.len() as u32).expect("ids start at 1");
    table.by_name.insert(name, id);
    Label(id)
}

/// Looks `key` up in a thread's cache, else computes and caches it. The
/// cache starts over when full, so it stays small whatever the callers do;
/// a thread being torn down (its cache gone) goes to the table directly.
fn cached<K, Q>(
    cache: &'static std::thread::LocalKey<RefCell<HashMap<K, Label>>>,
    key: &Q,
    own: impl FnOnce() -> K,
    make: impl FnOnce() -> Label,
) -> Label
where
    K: std::hash::Hash + Eq + std::borrow::Borrow<Q>,
    Q: std::hash::Hash + Eq + ?Sized,
{
    let hit = cache.try_with(|c| c.borrow().get(key).copied());
    match hit {
        Ok(Some(label)) => label,
        Ok(None) => {
            let label = make();
            let _ = cache.try_with(|c| {
                let mut c = c.borrow_mut();
                if c.len() >= CACHE_ENTRIES {
                    c.clear();
                }
                c.insert(own(), label);
            });
            label
        }
        Err(_) => make(),
    }
}

impl Label {
    /// The label named `name` (no copy is made: the table keeps the
    /// reference). Equal names give equal labels, however they were made.
    pub fn new(name: &'static str) -> Label {
        let key = (name.as_ptr() as usize, name.len());
        cached(&BY_ADDRESS, &key, || key, || intern_global(name, || name))
    }

    /// The label `"file:line"` of the caller (through `#[track_caller]`
    /// functions, of their caller). Formatted once per call site and
    /// thread; later calls from that site are a cache lookup.
    #[track_caller]
    pub fn caller() -> Label {
        let location = Location::caller();
        let key = (location as *const Location<'_> as usize, usize::MAX);
        cached(
            &BY_ADDRESS,
            &key,
            || key,
            || {
                let name = format!("{}:{}", location.file(), location.line());
                intern_global(&name, || Box::leak(name.clone().into_boxed_str()))
            },
        )
    }

    /// The label named like `name`, copied into the table the first time
    /// the process sees that name (for names from C or Python, which need
    /// not outlive the call).
    pub fn intern(name: &str) -> Label {
        cached(&BY_NAME, name, || name.into(), || intern_global(name, || Box::leak(name.into())))
    }

    /// The label's name.
    pub fn as_str(self) -> &'static str {
        lock(&TABLE).names[self.0.get() as usize - 1]
    }

    /// The id published in a worker's slot (never 0: 0 is "no label").
    #[inline]
    pub(crate) fn id(self) -> u32 {
        self.0.get()
    }

    /// The label published as `id`, `None` for 0.
    pub(crate) fn from_id(id: u32) -> Option<Label> {
        NonZeroU32::new(id).map(Label)
    }
}

impl From<&'static str> for Label {
    fn from(name: &'static str) -> Label {
        Label::new(name)
    }
}

impl std::fmt::Debug for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Label").field(&self.as_str()).finish()
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Runs `f` with `label` published as what this pool thread is running
/// (`Pool::dump` shows it), and puts the outer label back when `f` returns
/// or unwinds: tasks nest on one thread (a waiting task helps by running
/// others), and the innermost labelled one is the one shown. Off the pool
/// it just runs `f`. Labelled submissions
/// ([`SpawnOptions::label`](crate::SpawnOptions::label)) go through this;
/// a task may also call it to label a phase of its own work.
pub fn with_label<R>(label: Label, f: impl FnOnce() -> R) -> R {
    let Some(worker) = WorkerThread::current() else {
        return f();
    };
    /// Puts the outer label back, on return and on unwind.
    struct Restore<'a>(&'a std::sync::atomic::AtomicU32, u32);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.store(self.1, Relaxed);
        }
    }
    // Only the thread occupying the slot writes it (this one), so a load
    // and a store need no locked instruction; Relaxed, since a snapshot
    // reading it is a sample, ordered with nothing else.
    let slot = &worker.counters().label;
    let _restore = Restore(slot, slot.load(Relaxed));
    slot.store(label.id(), Relaxed);
    f()
}

/// `f`, labelled when `label` is given: the closure a labelled submission
/// queues instead of `f`. Callers branch on the label themselves (rather
/// than queue this with `None`) so unlabelled tasks keep their own,
/// smaller closure.
#[inline]
pub(crate) fn labelled<T>(label: Label, f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    move || with_label(label, f)
}

/// The label a snapshot shows for a worker in `state`: the published one
/// while it is inside a task (running, blocking or waiting), none between
/// tasks (a label read there would be a sample taken as a labelled task
/// ended).
pub(crate) fn shown(c: &crate::stats::WorkerCounters, state: crate::ThreadState) -> Option<&'static str> {
    use crate::ThreadState::{Blocking, Running, Waiting};
    match state {
        Running | Blocking | Waiting { .. } => Label::from_id(c.label.load(Relaxed)).map(Label::as_str),
        _ => None,
    }
}

/// A thread's state as the dump's report writes it, with its label:
/// `running "name"` rather than `running a task`, and `..., inside "name"`
/// after the other states. The name is quoted and escaped (`{:?}`): it may
/// come from C or Python and hold anything.
pub(crate) struct Labelled(pub(crate) crate::ThreadState, pub(crate) Option<&'static str>);

impl std::fmt::Display for Labelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.0, self.1) {
            (crate::ThreadState::Running, Some(name)) => write!(f, "running {name:?}"),
            (state, Some(name)) => write!(f, "{state}, inside {name:?}"),
            (state, None) => write!(f, "{state}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_are_equal_labels_however_made() {
        let a = Label::new("label-test-a");
        let owned = String::from("label-test-a");
        assert_eq!(Label::intern(&owned), a);
        assert_eq!(Label::from("label-test-a"), a);
        assert_eq!(a.as_str(), "label-test-a");
        assert_ne!(Label::new("label-test-b"), a);
    }

    #[test]
    fn an_interned_name_outlives_the_callers_string() {
        let label = {
            let s = format!("label-test-{}", 42);
            Label::intern(&s)
        };
        assert_eq!(label.as_str(), "label-test-42");
        // A second thread (an empty cache) finds the same label.
        let again = std::thread::spawn(|| Label::intern("label-test-42")).join().unwrap();
        assert_eq!(again, label);
    }

    #[test]
    fn the_caller_label_names_the_call_site_once() {
        let site = || Label::caller();
        let (a, b) = (site(), site());
        assert_eq!(a, b);
        assert!(a.as_str().starts_with(file!()), "{}", a.as_str());
        assert!(a.as_str().ends_with(&format!(":{}", line!() - 4)), "{}", a.as_str());
    }

    #[test]
    fn past_the_bound_every_new_name_gets_the_overflow_label() {
        // A table of its own: the process-wide one must stay usable.
        let mut table = Table::new();
        let a = intern_into(&mut table, "a", || "a", 3);
        let b = intern_into(&mut table, "b", || "b", 3);
        let c = intern_into(&mut table, "c", || unreachable!("a full table copies nothing"), 3);
        assert_eq!((a.id(), b.id(), c.id()), (2, 3, 1));
        assert_eq!(table.names[c.id() as usize - 1], "(too many labels)");
        assert_eq!(intern_into(&mut table, "a", || "a", 3), a, "known names keep their label");
    }

    #[test]
    fn off_the_pool_with_label_just_runs() {
        assert_eq!(with_label(Label::new("label-test-off"), || 7), 7);
    }
}
