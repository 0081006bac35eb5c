//! How a completion queue wakes its loop: a pollable fd (eventfd on Linux,
//! a non-blocking pipe on other Unixes) or a user callback.
//!
//! The queue decides under its lock *whether* to wake or clear, and makes
//! the system call after dropping it (see the queue's module documentation
//! for why no wake-up is lost).

use std::panic::{AssertUnwindSafe, catch_unwind};

pub(crate) enum Wake {
    #[cfg(unix)]
    Fd {
        read: libc::c_int,
        write: libc::c_int,
    },
    Callback(Box<dyn Fn() + Send + Sync>),
}

impl Wake {
    pub(crate) fn callback(f: Box<dyn Fn() + Send + Sync>) -> Wake {
        Wake::Callback(f)
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn fd() -> std::io::Result<Wake> {
        // SAFETY: plain syscall; the fd is owned by the returned value.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wake::Fd { read: fd, write: fd })
    }

    #[cfg(all(unix, not(target_os = "linux")))]
    pub(crate) fn fd() -> std::io::Result<Wake> {
        let mut p = [0 as libc::c_int; 2];
        // SAFETY: `p` has room for the two fds.
        if unsafe { libc::pipe(p.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in p {
            // SAFETY: fds we own.
            unsafe {
                libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        Ok(Wake::Fd { read: p[0], write: p[1] })
    }

    #[cfg(not(unix))]
    pub(crate) fn fd() -> std::io::Result<Wake> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no fd wake-up here: give a wake callback"))
    }

    #[cfg(unix)]
    pub(crate) fn raw_fd(&self) -> Option<libc::c_int> {
        match self {
            Wake::Fd { read, .. } => Some(*read),
            Wake::Callback(_) => None,
        }
    }

    pub(crate) fn is_callback(&self) -> bool {
        matches!(self, Wake::Callback(_))
    }

    /// Wakes the loop: makes the fd readable, or runs the callback (a panic
    /// in it is caught: it runs on a pool thread that must not unwind).
    /// Called outside the queue's lock.
    pub(crate) fn wake(&self) {
        match self {
            #[cfg(unix)]
            Wake::Fd { write, .. } => {
                let one: u64 = 1;
                // An eventfd takes 8 bytes, a pipe 1 (the first byte of `one`
                // on little-endian, any byte on big-endian: content is unused).
                let n = if cfg!(target_os = "linux") { 8 } else { 1 };
                // SAFETY: writing from a live local. A full pipe or counter
                // (EAGAIN) is already readable, which is all we need.
                unsafe { libc::write(*write, (&one as *const u64).cast(), n) };
            }
            Wake::Callback(f) => {
                let _ = catch_unwind(AssertUnwindSafe(f));
            }
        }
    }

    /// Makes the fd unreadable again.
    pub(crate) fn clear(&self) {
        #[cfg(unix)]
        if let Wake::Fd { read, .. } = self {
            let mut buf = [0u8; 64];
            // One read resets an eventfd. A pipe holds one byte per `wake`:
            // one per batch, plus one after a bounded drain or a stale one, so
            // 64 bytes empties it in practice, and a byte left over only
            // costs a spurious wake-up whose drain reads it.
            loop {
                // SAFETY: reading into a live local buffer from our own fd.
                let r = unsafe { libc::read(*read, buf.as_mut_ptr().cast(), buf.len()) };
                if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Wake::Fd { read, write } = *self {
            // SAFETY: fds we own, closed once.
            unsafe {
                libc::close(read);
                if write != read {
                    libc::close(write);
                }
            }
        }
    }
}
