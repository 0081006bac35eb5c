//! Task labels for Python calls (issue 26): a call is labelled with its
//! callable's `__qualname__` (a `functools.partial`'s function's; an object
//! without one, its type's), or with `Pool.options(label=...)`, and
//! `pool.dump()` shows the label on the thread running it.
//!
//! The default must cost a submission next to nothing: reading
//! `__qualname__` is one attribute lookup, but turning the string into a
//! core `Label` would encode it to UTF-8 (an allocation under the limited
//! API before 3.10) and hash it. So the label is cached by the identity of
//! the `__qualname__` string object, which a function shares with every
//! function made from the same code (a lambda created per call included):
//! a small direct-mapped table, under the GIL, holding a reference to each
//! key so that its address cannot be reused by another object while it is
//! cached.

use std::sync::Mutex;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use wspool::Label;

use crate::lock;

/// Slots of the cache (a power of two); a collision only costs a miss.
const SLOTS: usize = 256;

struct Slot {
    /// The `__qualname__` string (held: see the module docs).
    key: Py<PyAny>,
    label: Label,
}

/// Taken only with the GIL held (every submission holds it), so never
/// contended; a `Mutex` because statics need `Sync`.
static CACHE: Mutex<[Option<Slot>; SLOTS]> = Mutex::new([const { None }; SLOTS]);

/// The label of a call of `func`, `None` if it has no name at all.
pub(crate) fn label_of(py: Python<'_>, func: &Bound<'_, PyAny>) -> Option<Label> {
    let name = qualname(py, func)?;
    let index = (name.as_ptr() as usize >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - SLOTS.ilog2());
    {
        let cache = lock(&CACHE);
        if let Some(slot) = &cache[index]
            && slot.key.as_ptr() == name.as_ptr()
        {
            return Some(slot.label);
        }
    }
    let label = Label::intern(&name.cast::<PyString>().ok()?.to_cow().ok()?);
    let evicted = lock(&CACHE)[index].replace(Slot { key: name.unbind(), label });
    // Released after the lock: with the GIL held, as every submission is.
    drop(evicted);
    Some(label)
}

/// The label `Pool.options(label=...)` gives.
pub(crate) fn explicit(name: &str) -> Label {
    Label::intern(name)
}

/// `__qualname__` of `func`, looking through `functools.partial`, else of
/// its type; `None` if neither is a string.
fn qualname<'py>(py: Python<'py>, func: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    let mut func = func.clone();
    // A plain function (the common case) is no partial: one pointer
    // comparison instead of an `isinstance` walking the type's bases.
    let plain = function_type(py).is_ok_and(|t| func.get_type().is(t));
    // Nested partials (a few levels; a cycle is not followed forever).
    for _ in 0..if plain { 0 } else { 8 } {
        let Ok(partial) = partial_type(py) else { break };
        if !func.is_instance(partial).unwrap_or(false) {
            break;
        }
        match func.getattr(intern!(py, "func")) {
            Ok(inner) => func = inner,
            Err(_) => break,
        }
    }
    match func.getattr_opt(intern!(py, "__qualname__")) {
        Ok(Some(name)) if name.is_instance_of::<PyString>() => Some(name),
        _ => func.get_type().getattr(intern!(py, "__qualname__")).ok().filter(|n| n.is_instance_of::<PyString>()),
    }
}

fn function_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FUNCTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    FUNCTION
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("types")?.getattr("FunctionType")?.unbind()))
        .map(|t| t.bind(py))
}

fn partial_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static PARTIAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    PARTIAL
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("functools")?.getattr("partial")?.unbind()))
        .map(|p| p.bind(py))
}
