//! Diagnosis: `wspool_dump`, the stall report's callback.

use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr;
use std::time::Duration;

use crate::support::{einval, guard};
use crate::{WSPOOL_OK, pool_of, wspool};

/// Writes the pool's snapshot report into `buf`: what every pool thread is doing (running a task,
/// in a declared blocking region, waiting on a task or group and who runs it, idle), every queue
/// (global, lanes and serial queues: length, and for how long at least its oldest task waited),
/// and the starvation monitor's recent decisions with their reasons (`docs/diagnosis.md`). The
/// pool keeps running while it is taken: it is a sample, not a transaction.
///
/// Truncation rule: the report is `needed - 1` bytes of text; when `len` is at least `needed` it is
/// written whole, NUL-terminated. Otherwise only the whole lines that fit in `len - 1` bytes are
/// written, NUL-terminated (nothing but the NUL when not even one line fits; nothing at all when
/// `len` is 0, and `buf` may then be NULL). Either way the call returns `WSPOOL_OK` and stores
/// `needed` (the full report's size, its NUL included) in `*needed` when `needed` is not NULL, so
/// `needed > len` says it was cut: call again with a buffer of `needed` bytes (the next report may
/// be a little longer; leave some room). `WSPOOL_EINVAL`: `pool` NULL, or `buf` NULL with `len > 0`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_dump(pool: *const wspool, buf: *mut c_char, len: usize, needed: *mut usize) -> c_int {
    guard("wspool_dump", || {
        let p = pool_of(pool)?;
        if buf.is_null() && len > 0 {
            return einval("buf is NULL but len is not 0");
        }
        let text = p.pool.dump().to_string();
        let bytes = text.as_bytes();
        if !needed.is_null() {
            // SAFETY: a caller's non-null out-pointer.
            unsafe { needed.write(bytes.len() + 1) };
        }
        if len == 0 {
            return Ok(WSPOOL_OK);
        }
        let n = if bytes.len() < len {
            bytes.len()
        } else {
            // The whole lines that fit before the NUL.
            bytes[..len - 1].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
        };
        // SAFETY: `buf` holds `len > n` bytes; the report is a Rust string, no overlap.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
            buf.add(n).write(0);
        }
        Ok(WSPOOL_OK)
    })
}

/// A stall report callback: `report` is the snapshot's text (as `wspool_dump` writes it), valid
/// during the call only.
pub type wspool_stall_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, report: *const c_char)>;

struct Ctx(*mut c_void);
// SAFETY: the caller hands `ctx` to the pool's monitor thread (documented on
// `wspool_set_stall_handler`); the library never dereferences it.
unsafe impl Send for Ctx {}
unsafe impl Sync for Ctx {}

/// Reports stalls to `func(ctx, report)`: when queued work has not moved for `after_ms` (0: the
/// default, 1000) while every pool thread is occupied, the pool calls it once per stall episode
/// (an episode ends when work moves again or the queues empty), on its monitor thread, with the
/// snapshot report. Every episode is counted in `wspool_stats.stalls` and in OpenMetrics
/// (`wspool_stall_episodes_total`), reported or not. `func` NULL removes the callback: reports then
/// go to standard error if the environment variable `WSPOOL_STALL_REPORT` was set (not `0`) when
/// the pool was created, else nowhere. Every pool has a monitor thread (on a pool that does not
/// grow it only watches): `ctx` is used from that thread; `func` must not unwind into the library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_set_stall_handler(
    pool: *mut wspool,
    after_ms: u32,
    func: wspool_stall_fn,
    ctx: *mut c_void,
) -> c_int {
    guard("wspool_set_stall_handler", || {
        let p = pool_of(pool)?;
        let after = Duration::from_millis(if after_ms == 0 { 1000 } else { u64::from(after_ms) });
        let handler = func.map(|f| {
            let ctx = Ctx(ctx);
            Box::new(move |d: &wspool_core::PoolDump| {
                let ctx = &ctx;
                // A report holds no NUL; one that did would be cut there.
                let text = CString::new(d.to_string()).unwrap_or_default();
                // SAFETY: the caller's callback and context, as documented.
                unsafe { f(ctx.0, text.as_ptr()) };
            }) as Box<dyn Fn(&wspool_core::PoolDump) + Send + Sync>
        });
        p.pool.set_stall_handler(after, handler);
        Ok(WSPOOL_OK)
    })
}
