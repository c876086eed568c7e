//! A thread's workspace folder: an explicit one checked at create, a managed
//! one made on first use.

use std::path::{Path, PathBuf};

use pedelec_proto::v1 as pb;

use super::{Sessions, lock};
use crate::error::SessionError;
use crate::record::{Status, Workspace};
use crate::sites::Grant;
use crate::thread::Thread;
use crate::workspaces::Conflict;

use pedelec_common::beneath::RUNTIME_FOLDER;

impl Sessions {
    /// The folder an explicit workspace will be, canonical. It must be an
    /// absolute, existing, readable directory that may be granted (never
    /// Pedelec's own folders, home, `/` or credential folders), outside any
    /// `.pedelec-runtime` folder, no other origin's workspace
    /// (WORKSPACE_IN_USE) and not inside a workspace of the same origin.
    ///
    /// A web origin's grant is asked first, before the disk: a folder it
    /// does not list (as given, or once resolved) is FOLDER_NOT_GRANTED
    /// whatever is or is not on the disk there. A listed folder that cannot
    /// be used, for any of the reasons above but another origin's workspace,
    /// is one answer naming only the path the page gave
    /// ([`SessionError::WorkspaceUnusable`]); the reason goes to the log.
    /// Local callers get the reason (their words name no Pedelec folder).
    pub(super) fn check_explicit_workspace(
        &self,
        path: &str,
        origin: &str,
        grant: Option<&Grant>,
    ) -> Result<PathBuf, SessionError> {
        if !Path::new(path).is_absolute() {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} is not absolute"
            )));
        }
        let canonical = match grant {
            None => self.usable_folder(path)?,
            Some(grant) if !granted(grant, path) => {
                return Err(SessionError::FolderNotGranted {
                    origin: origin.to_string(),
                    path: path.to_string(),
                });
            }
            // What the folder is now must be what was granted: a granted
            // path swapped for a link elsewhere is refused too.
            Some(grant) => self
                .usable_folder(path)
                .and_then(|canonical| match listed(grant, &canonical) {
                    true => Ok(canonical),
                    false => Err(SessionError::Workspace(format!(
                        "workspace {path:?} resolves to {} now, which the grant does not list",
                        canonical.display()
                    ))),
                })
                .map_err(|detail| {
                    tracing::info!(%origin, workspace = %path, error = %detail, "a granted folder cannot be used as a workspace");
                    SessionError::WorkspaceUnusable(path.to_string())
                })?,
        };
        match self.inner.workspaces.conflict(&canonical, origin) {
            None => Ok(canonical),
            Some(conflict) => Err(conflict_error(path, conflict, grant.is_none())),
        }
    }

    /// The folder `path` on the disk, canonical, if it may be a workspace:
    /// grantable, outside Pedelec's own folders, readable.
    fn usable_folder(&self, path: &str) -> Result<PathBuf, SessionError> {
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
        // An agent must be able to list its workspace (a folder of mode 000,
        // or under one, is refused here rather than at every turn).
        if let Err(e) = std::fs::read_dir(&canonical) {
            return Err(SessionError::Workspace(format!(
                "workspace {path:?} cannot be read: {e}"
            )));
        }
        Ok(canonical)
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
        if t.record.workspace.must_exist() {
            return if path.is_dir() {
                Ok(())
            } else {
                Err(workspace_gone(t.id(), path))
            };
        }
        pedelec_common::paths::ensure_private_dir(path).map_err(|e| {
            tracing::error!(session = %t.id(), error = %e, "could not make the managed workspace");
            SessionError::Workspace(
                "the session's workspace folder could not be made; the Pedelec log says why".into(),
            )
        })?;
        t.record.workspace = Workspace::ManagedMade;
        // A failed write only leaves the record saying "not made": the folder
        // is there, and making it again finds it.
        if let Err(e) = t.save(&self.inner.journal) {
            tracing::warn!(session = %t.id(), error = %e, "could not record the new workspace");
        }
        Ok(())
    }
}

/// Whether `grant` lists the folder a page named: as given (the grant holds
/// canonical paths), or once resolved. A path that does not resolve is not
/// listed: nothing about the disk is told apart.
fn granted(grant: &Grant, path: &str) -> bool {
    listed(grant, Path::new(path))
        || Path::new(path)
            .canonicalize()
            .is_ok_and(|c| listed(grant, &c))
}

fn listed(grant: &Grant, folder: &Path) -> bool {
    grant.folders.iter().any(|f| f.path == folder)
}

pub(super) fn conflict_error(path: &str, conflict: Conflict, local: bool) -> SessionError {
    match conflict {
        Conflict::OtherOrigin { thread } => SessionError::WorkspaceInUse {
            path: path.to_string(),
            thread: local.then_some(thread),
        },
        // The same origin's thread: nothing a page does not know.
        Conflict::Inside { thread } => SessionError::InvalidInput(format!(
            "workspace_path {path:?} lies inside the workspace of thread {thread}"
        )),
    }
}

/// A thread's recorded workspace that is no longer a folder: general words
/// for every caller (a managed workspace's path names the user); the path
/// goes to the log.
pub(crate) fn workspace_gone(session: &str, path: &Path) -> SessionError {
    tracing::warn!(%session, workspace = %path.display(), "the recorded workspace is gone or no longer a folder");
    SessionError::Workspace(
        "the session's workspace folder is gone or is no longer a folder".into(),
    )
}
