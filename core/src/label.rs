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
//! table) and two stores on the worker around its run ([`with_label`]).
//!
//! The table takes no lock, not even to add a name: it is an open-addressed
//! array of write-once slots, claimed with one compare-and-swap, and a
//! label's id is its slot. A lock here was taken by every snapshot (the
//! monitor's stall reports included), so a `fork()` while another thread
//! held it left the child with a lock nobody would release, and the
//! child's first new label hung; with no lock there is nothing a child can
//! inherit held (DESIGN.md, "After fork()").

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::panic::Location;
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicUsize};

use crate::worker::WorkerThread;

/// Most distinct labels a process keeps; later new names all get the
/// `"(too many labels)"` label.
pub const MAX_LABELS: usize = 65_536;

/// The name every label past [`MAX_LABELS`] gets.
const OVERFLOW_NAME: &str = "(too many labels)";

/// The overflow label's id; it has no slot, so a full table still has it.
const OVERFLOW_ID: u32 = 1;

/// Slots of the process-wide table: twice the names it may hold, so a
/// probe for a missing name always meets an empty slot soon (load at most
/// one half).
const TABLE_SLOTS: usize = 2 * MAX_LABELS;

/// Entries a thread's cache keeps before it starts over (the global table
/// still has them: a miss costs a probe of the table).
const CACHE_ENTRIES: usize = 1024;

/// What a task "is", as snapshots name it: a small id for a name kept for
/// the life of the process (see the module docs: a small set of names,
/// like metric labels). Give it at submit with
/// [`SpawnOptions::label`](crate::SpawnOptions::label).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label(NonZeroU32);

/// A name in the table. Published once by a compare-and-swap and never
/// freed in the process-wide table, so readers hold `&'static` references.
struct Entry {
    name: Cow<'static, str>,
}

/// An append-only set of names, `N` slots (a power of two), holding at most
/// `max` names. Slot `i` is label id `i + 2` (id 1 is the overflow label).
struct Table<const N: usize> {
    slots: [AtomicPtr<Entry>; N],
    /// Names claimed: a claim counts itself before its compare-and-swap and
    /// gives the count back if it loses, so at most `max` slots are ever
    /// filled, whatever the races.
    claimed: AtomicUsize,
    max: usize,
}

impl<const N: usize> Table<N> {
    const fn new(max: usize) -> Self {
        assert!(N.is_power_of_two() && max <= N / 2);
        Table { slots: [const { AtomicPtr::new(ptr::null_mut()) }; N], claimed: AtomicUsize::new(0), max }
    }

    /// The id of `name`, added if new; `keep` makes the table's copy, called
    /// only when the name was not found. Equal names racing to be added get
    /// one slot: the loser frees its copy and takes the winner's id.
    fn intern(&self, name: &str, keep: impl FnOnce() -> Cow<'static, str>) -> Label {
        let mut keep = Some(keep);
        let mut mine: *mut Entry = ptr::null_mut();
        let mut i = fnv1a(name) as usize & (N - 1);
        let found = loop {
            let seen = self.slots[i].load(Acquire);
            if seen.is_null() {
                if mine.is_null() {
                    if self.claimed.fetch_add(1, Relaxed) >= self.max {
                        self.claimed.fetch_sub(1, Relaxed);
                        break None;
                    }
                    let keep = keep.take().expect("a claim is made once");
                    mine = Box::into_raw(Box::new(Entry { name: keep() }));
                }
                match self.slots[i].compare_exchange(ptr::null_mut(), mine, AcqRel, Acquire) {
                    Ok(_) => return label_at(i),
                    // Another name (or this one) took the slot first: look
                    // at what it holds, as if it had been there all along.
                    Err(other) => {
                        // SAFETY: a published entry is never freed while the table lives.
                        if unsafe { &*other }.name == name {
                            break Some(i);
                        }
                    }
                }
            // SAFETY: as above.
            } else if unsafe { &*seen }.name == name {
                break Some(i);
            }
            i = (i + 1) & (N - 1);
        };
        if !mine.is_null() {
            // SAFETY: ours, never published (its compare-and-swap lost).
            drop(unsafe { Box::from_raw(mine) });
            self.claimed.fetch_sub(1, Relaxed);
        }
        found.map_or(Label(NonZeroU32::MIN), label_at)
    }

    /// The name of `label`. A label is made only after its slot is
    /// published, and reaches other threads through something that
    /// synchronises (a submission; a worker's slot, stored with Release and
    /// read with Acquire), so the slot is seen filled; an id that is not
    /// (none is made so) reads as the overflow name rather than panic.
    fn name(&self, label: Label) -> &str {
        let Some(slot) = (label.0.get() as usize).checked_sub(2).and_then(|i| self.slots.get(i)) else {
            return OVERFLOW_NAME;
        };
        let entry = slot.load(Acquire);
        if entry.is_null() {
            return OVERFLOW_NAME;
        }
        // SAFETY: a published entry is never freed while the table lives.
        &unsafe { &*entry }.name
    }
}

impl<const N: usize> Drop for Table<N> {
    /// Only a test's own table is ever dropped (the process-wide one is a
    /// static): it frees its entries.
    fn drop(&mut self) {
        for slot in &mut self.slots {
            let entry = *slot.get_mut();
            if !entry.is_null() {
                // SAFETY: published by `intern` from `Box::into_raw`, dropped once here.
                drop(unsafe { Box::from_raw(entry) });
            }
        }
    }
}

fn label_at(slot: usize) -> Label {
    Label(NonZeroU32::new(slot as u32 + 2).expect("slot ids start at 2"))
}

/// FNV-1a: names are short and few; any hash spreading them over the slots
/// will do, and this one needs no state and no keys.
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Static and zero-initialised: no lazy initialisation, which would be a
/// lock of its own (a `Once` a fork could catch half-done).
static TABLE: Table<TABLE_SLOTS> = Table::new(MAX_LABELS);

thread_local! {
    /// `&'static str` labels and caller locations by address: (pointer,
    /// length), or (location, `usize::MAX`), which no `str` has.
    static BY_ADDRESS: RefCell<HashMap<(usize, usize), Label>> = RefCell::new(HashMap::new());
    /// Interned (borrowed) names by content.
    static BY_NAME: RefCell<HashMap<Box<str>, Label>> = RefCell::new(HashMap::new());
}

/// The process-wide table's id for `name`, added if new; `keep` makes the
/// table's copy, called only when the name is new.
#[cold]
fn intern_global(name: &str, keep: impl FnOnce() -> Cow<'static, str>) -> Label {
    TABLE.intern(name, keep)
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
        cached(&BY_ADDRESS, &key, || key, || intern_global(name, || Cow::Borrowed(name)))
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
                intern_global(&name, || Cow::Owned(name.clone()))
            },
        )
    }

    /// The label named like `name`, copied into the table the first time
    /// the process sees that name (for names from C or Python, which need
    /// not outlive the call).
    pub fn intern(name: &str) -> Label {
        cached(&BY_NAME, name, || name.into(), || intern_global(name, || Cow::Owned(name.to_owned())))
    }

    /// The label's name.
    pub fn as_str(self) -> &'static str {
        if self.0.get() == OVERFLOW_ID {
            return OVERFLOW_NAME;
        }
        TABLE.name(self)
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
            self.0.store(self.1, Release);
        }
    }
    // Only the thread occupying the slot writes it (this one), so a load
    // and a store need no locked instruction. Release pairs with the
    // snapshot's Acquire (`shown`), so a snapshot that reads the id sees
    // the table's slot for it filled; on x86 both are plain moves.
    let slot = &worker.counters().label;
    let _restore = Restore(slot, slot.load(Relaxed));
    slot.store(label.id(), Release);
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
        Running | Blocking | Waiting { .. } => Label::from_id(c.label.load(Acquire)).map(Label::as_str),
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
        let table = Table::<8>::new(3);
        let a = table.intern("a", || Cow::Borrowed("a"));
        let b = table.intern("b", || Cow::Borrowed("b"));
        let c = table.intern("c", || Cow::Borrowed("c"));
        let d = table.intern("d", || unreachable!("a full table copies nothing"));
        assert_eq!(d.id(), OVERFLOW_ID);
        assert!([a, b, c].iter().all(|l| l.id() != OVERFLOW_ID));
        assert_eq!((table.name(a), table.name(b), table.name(c)), ("a", "b", "c"));
        assert_eq!(
            table.intern("a", || unreachable!("a known name copies nothing")),
            a,
            "known names keep their label"
        );
    }

    #[test]
    fn names_that_collide_in_the_table_keep_their_own_labels() {
        // Two slots for one name: every probe collides, and a full table
        // (max 1 of 2 slots) still answers for the name it has.
        let table = Table::<2>::new(1);
        let x = table.intern("x", || Cow::Owned("x".to_owned()));
        assert_eq!(table.intern("y", || unreachable!("full")).id(), OVERFLOW_ID);
        assert_eq!(table.intern("x", || unreachable!("known")), x);
        assert_eq!(table.name(x), "x");
    }

    #[test]
    fn threads_adding_the_same_names_at_once_agree_on_their_labels() {
        // Each thread adds the same 64 names in its own order; all see one
        // label per name, and the table holds 64 names (a racing loser gives
        // its claim and its copy back).
        let table = Table::<256>::new(128);
        let names: Vec<String> = (0..64).map(|i| format!("race-{i}")).collect();
        let seen: Vec<Vec<Label>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|t| {
                    let (table, names) = (&table, &names);
                    s.spawn(move || {
                        let mut got = vec![Label(NonZeroU32::MIN); names.len()];
                        for k in 0..names.len() {
                            let i = (k * (2 * t + 1)) % names.len();
                            got[i] = table.intern(&names[i], || Cow::Owned(names[i].clone()));
                        }
                        got
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for labels in &seen[1..] {
            assert_eq!(labels, &seen[0]);
        }
        for (label, name) in seen[0].iter().zip(&names) {
            assert_eq!(table.name(*label), name);
        }
        assert_eq!(table.claimed.load(Relaxed), names.len());
    }

    #[test]
    fn off_the_pool_with_label_just_runs() {
        assert_eq!(with_label(Label::new("label-test-off"), || 7), 7);
    }
}
