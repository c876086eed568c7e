//! Turn records: each running agent's process group written down as
//! `<runtime dir>/turns/<pgid>` (holding its cgroup folder, if it has one),
//! so a service restarted after a crash can end what its predecessor left
//! running ([`super::orphans`]). A record goes when its processes have.

use std::path::{Path, PathBuf};

use crate::launch::AgentProcs;

/// The folder under the runtime dir where each running turn's process group
/// is recorded, so a restarted service can end what a crashed one left.
pub const TURN_RECORDS: &str = "turns";

/// Where turn records live: `<runtime dir>/turns/<pgid>`.
#[derive(Clone, Debug)]
pub(super) struct Records {
    /// Also given to the agent as `PEDELEC_RUNTIME_DIR`.
    pub(super) runtime_dir: PathBuf,
    pub(super) dir: PathBuf,
}

impl Records {
    pub(super) fn new(runtime_dir: &Path) -> Self {
        Records {
            runtime_dir: runtime_dir.to_path_buf(),
            dir: runtime_dir.join(TURN_RECORDS),
        }
    }

    /// Writes `<dir>/<pgid>` holding the agent's cgroup folder, if it has
    /// one; a failure only costs the crash clean-up, so it is logged.
    pub(super) fn write(&self, procs: &AgentProcs) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let path = self.dir.join(procs.pgid().to_string());
        let cgroup = procs.cgroup_dir().unwrap_or_default();
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&path, cgroup.as_os_str().as_bytes()));
        match written {
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!(path = %path.display(), "could not record the turn's process group: {e}");
                None
            }
        }
    }
}
