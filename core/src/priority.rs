//! `Builder::thread_nice`: the pool's threads below the priority of the
//! thread that built the pool.
//!
//! An event loop that shares its cores with the pool's CPU-bound work
//! waits for a CPU on every wake-up while the workers hold both; with
//! the workers a few steps nicer the scheduler lets the loop preempt them.
//! On Linux the nice value is a per-thread attribute (`setpriority` on a
//! thread id) and raising it needs no privilege. Elsewhere it applies to a
//! whole process, so the setting does nothing there.

/// The nice value the pool's threads take: the building thread's plus
/// `steps`, at most 19. `None` with 0 steps, or where nice is not per
/// thread.
pub(crate) fn target(steps: u32) -> Option<i32> {
    if steps == 0 {
        return None;
    }
    this_thread().map(|nice| (nice + steps as i32).min(19))
}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
pub(crate) fn this_thread() -> Option<i32> {
    // getpriority returns -1 both as a value and as an error: tell them
    // apart by errno.
    // SAFETY: plain system calls on the calling thread's own id.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS as _, crate::growth::current_tid() as libc::id_t);
        (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn this_thread() -> Option<i32> {
    None
}

/// Sets the calling thread's nice value (a pool thread at its start, before
/// anything else runs on it). Best effort: the value is at least the
/// thread's own, which needs no privilege.
#[cfg(target_os = "linux")]
pub(crate) fn set_this_thread(nice: Option<i32>) {
    if let Some(nice) = nice {
        // SAFETY: a plain system call on the calling thread's own id.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS as _, crate::growth::current_tid() as libc::id_t, nice);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_this_thread(_nice: Option<i32>) {}
