//! Ending a turn's processes: SIGTERM to the whole process group, SIGKILL
//! after the grace period, then whatever is left of the group and of the
//! agent's cgroup ([`Group`]). A dropped turn (service shutdown, a panic)
//! SIGKILLs its group, so nothing keeps running unseen.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use pedelec_common::process::failed_status;
use tokio::process::Child;
use tokio::time::Instant;

use crate::launch::AgentProcs;

/// A turn's processes; SIGKILLed on drop unless they were seen gone, so a
/// dropped task (service shutdown, panic) leaves nothing running.
pub(super) struct Group {
    pub(super) procs: AgentProcs,
    armed: bool,
    /// The turn's record under `<runtime dir>/turns/`, removed on drop.
    record: Option<PathBuf>,
}

impl Group {
    /// Watches `procs` from now on; `record` is removed when it is dropped.
    pub(super) fn new(procs: AgentProcs, record: Option<PathBuf>) -> Self {
        Group {
            procs,
            armed: true,
            record,
        }
    }

    /// SIGTERM to the group; SIGKILL to what is left after the grace period.
    pub(super) async fn terminate(&mut self, child: &mut Child, grace: Duration) -> ExitStatus {
        let deadline = Instant::now() + grace;
        self.procs.terminate();
        let status = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) => status,
            _ => {
                self.procs.kill();
                child.wait().await.unwrap_or_else(|_| failed_status())
            }
        };
        self.wait_empty(deadline, grace).await;
        status
    }

    /// After the leader exited: ends members still in the group (SIGTERM,
    /// then SIGKILL after the grace period) and whatever left it.
    pub(super) async fn reap_leftovers(&mut self, grace: Duration) {
        if self.procs.group_alive() {
            tracing::debug!(
                pgid = self.procs.pgid(),
                "provider left processes behind; terminating them"
            );
            self.procs.terminate();
            self.wait_empty(Instant::now() + grace, grace).await;
            return;
        }
        // The usual end: nothing of the group runs, so this one look is
        // the last (`group_alive` lists all of /proc while a zombie stays in
        // the group, as bwrap's inner process does until init reaps it).
        // What left the group is the cgroup's to end (`end_cgroup` warns
        // when it outlives SIGKILL).
        self.procs.end_cgroup(grace).await;
        self.armed = false;
    }

    /// Polls until the group is empty or the deadline passes, then SIGKILLs
    /// what is left of it and of the cgroup, and waits for that.
    async fn wait_empty(&mut self, deadline: Instant, grace: Duration) {
        while self.procs.group_alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !self.procs.end(grace).await {
            tracing::warn!(
                pgid = self.procs.pgid(),
                "an agent's processes outlived SIGKILL"
            );
        }
        self.armed = false;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed {
            self.procs.kill();
        }
        if let Some(record) = self.record.take() {
            let _ = std::fs::remove_file(record);
        }
    }
}
