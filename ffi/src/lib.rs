//! C ABI of wspool: the functions, types and constants of `include/libwspool.h`
//! (generated from these files by cbindgen; see `cbindgen.toml`).
//!
//! No scheduling logic lives here: every function checks its arguments, maps
//! them onto the `wspool` crate, and maps the result to a status code. Every
//! entry point runs inside `catch_unwind`, so no Rust panic crosses the
//! boundary; a failure sets a thread-local message for `wspool_last_error`.
//!
//! One file per concept of the header; this file is only the index. Every
//! public item is re-exported here, so the crate root names the whole API.
#![allow(non_camel_case_types)]
// Every entry point has the same safety contract, the C API's: pointers are NULL or come
// from this library and are used before their release; see the header's preamble.
#![allow(clippy::missing_safety_doc)]

// Declared in the order of the header (cbindgen follows it), one per line so
// rustfmt keeps the order.
mod status;

mod config;

mod pool;

mod submit;

mod task;

mod group;

mod serial;

mod thread;

mod stats;

mod dump;

mod cq;

mod args;
mod support;

pub use config::*;
pub use cq::*;
pub use dump::*;
pub use group::*;
pub use pool::*;
pub use serial::*;
pub use stats::*;
pub use status::*;
pub use submit::*;
pub use task::*;
pub use thread::*;

pub(crate) use args::{check_fork, func, obj, out_ptr, pool_of, timed_out, timeout};
