//! `Builder::thread_nice`: the pool's threads below the priority of the
//! thread that built the pool.
//!
//! An event loop that shares its cores with the pool's CPU-bound work
//! waits for a CPU on every wake-up while the workers hold both; with
//! the workers a few steps nicer the scheduler lets the loop preempt them.
//! On Linux the nice value is a per-thread attribute (`setpriority` on a
//! thread id) and raising it needs no privilege. Elsewhere it applies to a
//! whole process, so the setting does nothing there; nor under Miri, which
//! has neither `getpriority` nor `setpriority` (and no scheduler to obey
//! them).

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
#[cfg(all(target_os = "linux", not(miri)))]
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

#[cfg(not(all(target_os = "linux", not(miri))))]
pub(crate) fn this_thread() -> Option<i32> {
    None
}

/// Sets the calling thread's nice value (`spawn_at`'s helper, before it
/// starts the pool thread that inherits the value). Best effort: the value is at least the
/// thread's own, which needs no privilege.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) fn set_this_thread(nice: Option<i32>) {
    if let Some(nice) = nice {
        // SAFETY: a plain system call on the calling thread's own id.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS as _, crate::growth::current_tid() as libc::id_t, nice);
        }
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
pub(crate) fn set_this_thread(_nice: Option<i32>) {}

/// Starts `builder`'s thread already at nice value `nice` (when one is
/// set): a thread inherits its creator's nice value, and the standard
/// library names the new thread before `f` runs, so a thread started from
/// a thread at another value (the pool's builder, a foreign submitter)
/// would be visible under the pool's name, at the wrong priority, until
/// `f` lowered it. Such a start goes through an unnamed helper thread that
/// lowers itself first; a pool thread, already at `nice`, starts its
/// threads directly.
pub(crate) fn spawn_at<F>(
    nice: Option<i32>,
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    match nice {
        Some(n) if this_thread() != Some(n) => {
            let helper = std::thread::Builder::new().spawn(move || {
                set_this_thread(Some(n));
                builder.spawn(f)
            })?;
            helper.join().unwrap_or_else(|_| Err(std::io::Error::other("the thread-start helper panicked")))
        }
        _ => builder.spawn(f),
    }
}
