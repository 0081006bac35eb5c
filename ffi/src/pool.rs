//! A pool's lifecycle: `wspool_create`, `wspool_shutdown`, `wspool_destroy`.

use std::ffi::c_int;

use wspool_core::{ConfigErrorKind, Pool, Shutdown, ShutdownError};

use crate::args::{Handle, held_pool, reclaim};
use crate::config::{builder_from, read_config};
use crate::support::{self, einval, fail, guard, guard_void, tsan};
use crate::{WSPOOL_EDEADLK, WSPOOL_EINVAL, WSPOOL_ESPAWN, WSPOOL_OK, out_ptr, timed_out, timeout, wspool_config};

/// Shutdown: refuse new tasks, run every accepted one, stop the threads.
pub const WSPOOL_SHUTDOWN_DRAIN: c_int = 0;
/// Shutdown: refuse new tasks, cancel the queued ones (their `on_cancel` is called), let running ones finish.
pub const WSPOOL_SHUTDOWN_CANCEL: c_int = 1;

/// A thread pool (opaque).
pub struct wspool {
    pub(crate) pool: Pool,
    pub(crate) fork_gen: u32,
    /// Its completion queues, for `wspool_overloaded`.
    pub(crate) queues: std::sync::Arc<crate::cq::PoolQueues>,
}

impl Handle for wspool {
    fn fork_gen(&self) -> u32 {
        self.fork_gen
    }
}

/// Creates a pool (`cfg` NULL = defaults) and stores it in `*out` (NULL on failure).
/// Bad values are `WSPOOL_EINVAL` with a message. When the operating system refuses to start one
/// of its `min_threads` threads (`RLIMIT_NPROC`, address space, a `stack_size` it cannot map),
/// the call fails with `WSPOOL_ESPAWN` and the OS's reason in `wspool_last_error()`, never with
/// `WSPOOL_EINVAL`; the threads already started are stopped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_create(cfg: *const wspool_config, out: *mut *mut wspool) -> c_int {
    guard("wspool_create", || {
        out_ptr(out, "out")?;
        support::init_once();
        let c = read_config(cfg)?;
        let pool = builder_from(&c)?.build().or_else(|e| {
            let code = match e.kind() {
                ConfigErrorKind::ThreadSpawn => WSPOOL_ESPAWN,
                ConfigErrorKind::Invalid => WSPOOL_EINVAL,
            };
            fail(code, e.to_string())
        })?;
        let w = wspool { pool, fork_gen: support::fork_gen(), queues: Default::default() };
        // SAFETY: checked non-null by out_ptr.
        unsafe { *out = Box::into_raw(Box::new(w)) };
        Ok(WSPOOL_OK)
    })
}

/// Stops accepting tasks and then, with `WSPOOL_SHUTDOWN_DRAIN`, runs every accepted task, or with
/// `WSPOOL_SHUTDOWN_CANCEL`, cancels the queued ones (calling their `on_cancel`). Waits up to
/// `timeout_ms` (-1 = forever, 0 = do not wait) for the threads to finish and for submissions racing
/// it from other threads to land: `WSPOOL_ETIMEDOUT` if they have not (the shutdown carries on; call
/// again, or `wspool_destroy`, which waits without limit, to finish it). Idempotent.
///
/// A closing point: when it returns `WSPOOL_OK`, every task the pool accepted (through any submit
/// function, racing submissions included) has run, or has been cancelled with its `on_cancel`
/// called and returned, and every waiter has returned or will return without further help. A
/// submission that loses the race gets `WSPOOL_ESHUTDOWN` and the caller keeps its `arg`.
///
/// Called from one of the pool's own threads (inside a task, an `on_cancel` or a thread hook run
/// there) it cannot wait for itself: the task calling it is accepted work that has not finished,
/// and the other threads' work may wait for it. It begins the shutdown (as above: nothing new is
/// accepted, the queued work is run or cancelled by the other threads, which then exit on their
/// own) and returns `WSPOOL_EDEADLK` at once, whatever `mode` and `timeout_ms`; never `WSPOOL_OK`.
/// To free the pool from a task, call `wspool_destroy` there.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_shutdown(pool: *mut wspool, mode: c_int, timeout_ms: i64) -> c_int {
    guard("wspool_shutdown", || {
        // Held: a CANCEL runs `on_cancel` callbacks here, and one may destroy the pool.
        let p = held_pool(pool)?;
        let mode = match mode {
            WSPOOL_SHUTDOWN_DRAIN => Shutdown::Drain,
            WSPOOL_SHUTDOWN_CANCEL => Shutdown::Cancel,
            m => return einval(format!("mode {m} is not a WSPOOL_SHUTDOWN_* value")),
        };
        let t = timeout(timeout_ms)?;
        match p.shutdown(mode, t) {
            Ok(()) => {
                tsan::acquire_done();
                Ok(WSPOOL_OK)
            }
            Err(ShutdownError::OnPoolThread) => on_pool_thread(),
            Err(_) => timed_out(),
        }
    })
}

#[cold]
fn on_pool_thread() -> support::Res {
    fail(
        WSPOOL_EDEADLK,
        "called from one of the pool's own tasks, it cannot wait for itself: not every accepted task has run \
         (this one is still running); the shutdown goes on in the background and the threads exit on their own",
    )
}

/// Drains (runs every accepted task), joins the threads and frees the pool. NULL is a no-op.
/// Groups, serial queues and task handles stay valid (their submissions fail with
/// `WSPOOL_ESHUTDOWN`) until released. In a forked child, an inherited pool is freed without
/// touching the parent's threads (its internals are leaked on purpose).
///
/// It may be called from one of the pool's own tasks: the pool stops accepting work and frees the
/// handle at once, without joining (a thread cannot join itself); its threads run the queued work
/// and exit on their own. Which calls may overlap it: only the calls that had already published a
/// task when it began — a `wspool_submit`, `wspool_submit_ex`, `wspool_submit_batch`,
/// `wspool_join` or `wspool_shutdown` still returning on another thread (or under the destroying
/// task, on the same one) — which read nothing of the pool after publishing. Every other call that
/// names the pool must return before `wspool_destroy` begins, and none may begin after it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wspool_destroy(pool: *mut wspool) {
    guard_void("wspool_destroy", || {
        // SAFETY: NULL or a pointer from wspool_create, destroyed once.
        if let Some(w) = unsafe { reclaim(pool) } {
            // On one of the pool's own threads this does not wait for itself (the core returns at
            // once and the threads exit on their own after the current task).
            let _ = w.pool.shutdown(Shutdown::Drain, None);
            tsan::acquire_done();
        }
        Ok(())
    })
}
