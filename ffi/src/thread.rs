//! Calls about the calling thread: blocking regions and the worker index.

use std::ffi::c_int;

use crate::support::{self, guard_void};

/// Declares that the calling pool thread is about to block (I/O, a foreign lock): the pool lends
/// a compensating thread at once. Pair with `wspool_blocking_end`; regions nest. No-op off the pool.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_blocking_begin() {
    guard_void("wspool_blocking_begin", || {
        if !support::is_stale_worker_thread() {
            wspool_core::blocking_begin();
        }
        Ok(())
    })
}

/// Ends the region opened by `wspool_blocking_begin`; an unmatched end is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_blocking_end() {
    guard_void("wspool_blocking_end", || {
        if !support::is_stale_worker_thread() {
            wspool_core::blocking_end();
        }
        Ok(())
    })
}

/// The calling thread's worker index on a pool thread (any pool), else -1.
#[unsafe(no_mangle)]
pub extern "C" fn wspool_current_index() -> c_int {
    if support::is_stale_worker_thread() {
        return -1;
    }
    match std::panic::catch_unwind(wspool_core::current_index) {
        Ok(Some(i)) => i as c_int,
        _ => -1,
    }
}
