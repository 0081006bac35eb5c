//! How a completion-queue submission reaches the pool: detached (the
//! default, allocation-free) or with a task handle the loop can cancel it
//! through. One trait instead of a closure argument, because the job handed
//! to the pool is a closure whose type only the submit path can name.

use crate::error::SpawnError;
use crate::pool::{Pool, SpawnOptions};
use crate::task::TaskHandle;

pub(super) trait Spawner {
    /// What an accepted submission gives back to its caller.
    type Accepted;
    fn spawn<J: FnOnce() + Send + 'static>(
        self,
        pool: &Pool,
        opts: SpawnOptions<'_>,
        job: J,
    ) -> Result<Self::Accepted, SpawnError<J>>;
}

/// `Pool::spawn_with`: nothing to hold, nothing allocated beyond the job.
pub(super) struct Detached;

impl Spawner for Detached {
    type Accepted = ();
    fn spawn<J: FnOnce() + Send + 'static>(
        self,
        pool: &Pool,
        opts: SpawnOptions<'_>,
        job: J,
    ) -> Result<(), SpawnError<J>> {
        pool.spawn_with(opts, job)
    }
}

/// `Pool::submit_with`: a task handle whose `cancel` drops the job unrun,
/// which completes the submission as cancelled (the job's drop path).
pub(super) struct Handled;

impl Spawner for Handled {
    type Accepted = TaskHandle<()>;
    fn spawn<J: FnOnce() + Send + 'static>(
        self,
        pool: &Pool,
        opts: SpawnOptions<'_>,
        job: J,
    ) -> Result<TaskHandle<()>, SpawnError<J>> {
        pool.submit_with(opts, job)
    }
}
