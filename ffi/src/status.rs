//! Version, status codes and the error channel (`wspool_strerror`, `wspool_last_error`).

use std::ffi::{CStr, c_char, c_int};

use crate::support;

// ------------------------------------------------------------- version ----

/// Major version of the library this header belongs to.
pub const WSPOOL_VERSION_MAJOR: u32 = 0;
/// Minor version of the library this header belongs to.
pub const WSPOOL_VERSION_MINOR: u32 = 1;
/// Patch version of the library this header belongs to.
pub const WSPOOL_VERSION_PATCH: u32 = 0;
/// `(major << 16) | (minor << 8) | patch`: compare with `wspool_version()`.
pub const WSPOOL_VERSION_NUMBER: u32 =
    (WSPOOL_VERSION_MAJOR << 16) | (WSPOOL_VERSION_MINOR << 8) | WSPOOL_VERSION_PATCH;

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}
// The header's version macros must agree with Cargo.toml (checked at compile time).
const _: () = assert!(WSPOOL_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")), "bump WSPOOL_VERSION_MAJOR");
const _: () = assert!(WSPOOL_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")), "bump WSPOOL_VERSION_MINOR");
const _: () = assert!(WSPOOL_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")), "bump WSPOOL_VERSION_PATCH");

// ------------------------------------------------------- status codes -----

/// Success.
pub const WSPOOL_OK: c_int = 0;
/// A NULL pointer or a bad value; `wspool_last_error()` says which.
pub const WSPOOL_EINVAL: c_int = -1;
/// The pool's bounded queue is full and its reject policy refused the task; the caller keeps `arg`.
pub const WSPOOL_EREJECTED: c_int = -2;
/// The pool is shut down (or shutting down); the caller keeps `arg`.
pub const WSPOOL_ESHUTDOWN: c_int = -3;
/// The wait ended before the work finished; the work is left untouched.
pub const WSPOOL_ETIMEDOUT: c_int = -4;
/// The task was cancelled before it started. From `wspool_task_wait`: its `on_cancel` has returned.
/// From `wspool_task_cancel`: someone else cancelled it first (another caller, shutdown CANCEL or
/// DISCARD_OLDEST), whose `on_cancel` call may still be running.
pub const WSPOOL_ECANCELLED: c_int = -5;
/// The task has already started (or finished): it can no longer be cancelled.
pub const WSPOOL_EBUSY: c_int = -6;
/// Out of memory (reserved: like Rust programs, the library aborts on a failed allocation).
pub const WSPOOL_ENOMEM: c_int = -7;
/// The operating system refused to start a thread.
pub const WSPOOL_ESPAWN: c_int = -8;
/// The object was created before a `fork()` and this is the child: it cannot be used here.
pub const WSPOOL_EFORKED: c_int = -9;
/// An internal error (a bug in wspool was caught before it could cross the C boundary).
pub const WSPOOL_EINTERNAL: c_int = -10;
/// The task had not started by its deadline (`wspool_submit_opts.deadline_ns`): it never ran,
/// and its `on_cancel` has returned (from `wspool_task_wait`), or it can no longer be cancelled
/// (from `wspool_task_cancel`).
pub const WSPOOL_EEXPIRED: c_int = -11;
/// An untimed wait that could never succeed, refused instead of hanging: a task waiting
/// on its own handle, a group's task waiting on that group, a serial queue's task waiting on a
/// task queued behind it on the same queue. The awaited work is untouched. Also
/// `wspool_shutdown` called from one of the pool's own tasks: it cannot wait for itself (its own
/// task is accepted work still running), so it returns this at once instead of `WSPOOL_OK`; the
/// shutdown goes on in the background.
pub const WSPOOL_EDEADLK: c_int = -12;

// ------------------------------------------------- version and errors -----

/// The library's version: `(major << 16) | (minor << 8) | patch` (compare with `WSPOOL_VERSION_NUMBER`).
#[unsafe(no_mangle)]
pub extern "C" fn wspool_version() -> u32 {
    WSPOOL_VERSION_NUMBER
}

/// A static, human-readable description of a status code ("unknown status" for others). Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_strerror(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        WSPOOL_OK => c"success",
        WSPOOL_EINVAL => c"invalid argument",
        WSPOOL_EREJECTED => c"rejected: the pool's queue is full",
        WSPOOL_ESHUTDOWN => c"the pool is shut down",
        WSPOOL_ETIMEDOUT => c"timed out",
        WSPOOL_ECANCELLED => c"the task was cancelled before it started",
        WSPOOL_EBUSY => c"the task has already started",
        WSPOOL_ENOMEM => c"out of memory",
        WSPOOL_ESPAWN => c"the operating system refused to start a thread",
        WSPOOL_EFORKED => c"the object belongs to the parent of fork()",
        WSPOOL_EINTERNAL => c"internal error in wspool",
        WSPOOL_EEXPIRED => c"the task expired: not started by its deadline",
        WSPOOL_EDEADLK => c"the wait would deadlock: the waiting task holds what it waits for",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// The message of the last failed call on the calling thread ("" if none). It stays valid
/// until the next failing call on this thread. Successful calls do not clear it.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_last_error() -> *const c_char {
    support::last_error_ptr()
}
