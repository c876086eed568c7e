//! A thread's workspace folder: an explicit one checked at create, a managed
//! one made on first use.

use std::path::{Path, PathBuf};

use pedelec_proto::v1 as pb;

use super::{Sessions, SharedThread, lock};
use crate::error::SessionError;
use crate::record::{Status, Workspace};
use crate::sites::Grant;
use crate::thread::Thread;

/// The folder Pedelec keeps inside every workspace (assets, agent state).
const RUNTIME_FOLDER: &str = ".pedelec-runtime";

impl Sessions {
    /// An explicit workspace must be an absolute, existing directory that
    /// may be granted (never Pedelec's own folders, home, `/` or credential
    /// folders: FOLDER_NOT_GRANTABLE, for every caller), is no other
    /// origin's workspace (WORKSPACE_IN_USE) and, for a web origin, is one of
    /// its grant's folders (FOLDER_NOT_GRANTED). All on the canonical path.
    pub(super) fn check_explicit_workspace(
        &self,
        path: &str,
        origin: &str,
        grant: Option<&Grant>,
    ) -> Result<PathBuf, SessionError> {
        let canonical = self.inner.sites.grantable_folder(path)?;
        // Pedelec's own folders (a thread's uploaded assets among them) hold
        // what a page put there: as another agent's workspace they would hand
        // it the page's AGENTS.md, .claude/settings.json, opencode.json.
        if canonical
            .components()
            .any(|c| c.as_os_str() == RUNTIME_FOLDER)
        {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} lies inside a {RUNTIME_FOLDER} folder (Pedelec's own files)"
            )));
        }
        if let Some(grant) = grant
            && !grant.folders.iter().any(|f| f.path == canonical)
        {
            return Err(SessionError::FolderNotGranted {
                origin: origin.to_string(),
                path: canonical.display().to_string(),
            });
        }
        let (other_origin, container) = self.workspace_conflicts(&canonical, origin);
        if let Some(thread) = other_origin {
            return Err(SessionError::WorkspaceInUse {
                path: canonical.display().to_string(),
                thread,
            });
        }
        // Sharing another thread's workspace is allowed; a folder
        // inside one is not: that thread's agent writes there.
        if let Some(owner) = container {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} lies inside the workspace of thread {owner}"
            )));
        }
        Ok(canonical)
    }

    /// The threads whose workspaces `path` may not join, looked up in
    /// memory and then, unless memory already answered, in the journal read
    /// once: the first of another origin whose workspace is `path`, lies
    /// inside it or contains it; and the first of any origin whose workspace
    /// strictly contains it.
    fn workspace_conflicts(&self, path: &Path, origin: &str) -> (Option<String>, Option<String>) {
        let (mut other_origin, mut container) = (None, None);
        let mut see = |ws: &Path, owner: &str, id: &str, other_origin: &mut Option<String>| {
            if other_origin.is_none()
                && owner != origin
                && (path.starts_with(ws) || ws.starts_with(path))
            {
                *other_origin = Some(id.to_string());
            }
            if container.is_none() && path != ws && path.starts_with(ws) {
                container = Some(id.to_string());
            }
        };
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        for t in &threads {
            let t = lock(t);
            see(
                &t.record.workspace_path,
                &t.record.origin,
                t.id(),
                &mut other_origin,
            );
        }
        // A conflict with another origin decides alone; only without one is
        // the journal (ended threads too) read.
        if other_origin.is_none() {
            let (records, _) = self.inner.journal.load_all();
            for r in &records {
                see(
                    &r.workspace_path,
                    &r.origin,
                    &r.session_id,
                    &mut other_origin,
                );
            }
        }
        (other_origin, container)
    }

    /// The snapshot of a thread whose workspace folder exists: made now if it
    /// is a managed workspace not made yet (`OpenWorkspace`). An ended
    /// thread's snapshot is returned as it is.
    pub fn open_workspace(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        let thread = self.thread(id, origin)?;
        let mut t = lock(&thread);
        if t.record.status != Status::Ended {
            self.make_workspace(&mut t)?;
        }
        Ok(t.snapshot())
    }

    /// Makes a managed workspace's folder (private, like the data dir) the
    /// first time the thread needs it, and records that it was made: from then
    /// on a missing folder is WORKSPACE_OPEN_FAILED, as for an explicit one.
    /// Blocking, but one `mkdir`, once per thread.
    pub(crate) fn make_workspace(&self, t: &mut Thread) -> Result<(), SessionError> {
        let path = &t.record.workspace_path;
        let workspace_error = |reason: String| SessionError::Workspace {
            path: path.display().to_string(),
            reason,
        };
        if t.record.workspace.must_exist() {
            return if path.is_dir() {
                Ok(())
            } else {
                Err(workspace_error(
                    "the recorded workspace no longer exists".into(),
                ))
            };
        }
        pedelec_common::paths::ensure_private_dir(path)
            .map_err(|e| workspace_error(e.to_string()))?;
        t.record.workspace = Workspace::ManagedMade;
        // A failed write only leaves the record saying "not made": the folder
        // is there, and making it again finds it.
        if let Err(e) = t.save(&self.inner.journal) {
            tracing::warn!(session = %t.id(), error = %e, "could not record the new workspace");
        }
        Ok(())
    }
}
