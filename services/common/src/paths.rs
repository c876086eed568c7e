//! The runtime directory (sockets, tokens, logs) and the data directory
//! (settings, journal, managed workspaces), and writing files whole
//! (docs/architecture.md says what lives where).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::ServiceName;
use crate::error::CommonError;

/// sockaddr_un holds 108 bytes; stay well under it.
pub const MAX_SOCKET_PATH: usize = 100;

/// Creates `path` (and parents) if needed, then insists that it is a directory
/// owned by this user that not every user could write to, and tightens it to 0700.
///
/// A world-writable folder is refused, not tightened: whoever could write may
/// already have left a socket that answers in a service's place, or a symlink
/// where a log or record will be written, and tightening the mode would not
/// remove it. Group bits are only tightened: a umask of 002 (user private
/// groups) makes the user's own folders group-writable.
pub fn ensure_private_dir(path: &Path) -> Result<(), CommonError> {
    if !path.exists() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| CommonError::io(parent, e))?;
        }
        // 0700 from the start whatever the umask, so a fresh folder is never
        // open to others and never trips the check below.
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CommonError::io(path, e)),
        }
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| CommonError::io(path, e))?;
    if !meta.is_dir() {
        return Err(CommonError::NotADirectory { path: path.into() });
    }
    let me = crate::process::uid();
    if meta.uid() != me {
        return Err(CommonError::NotOwned {
            path: path.into(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o002 != 0 {
        return Err(CommonError::WritableByOthers {
            path: path.into(),
            mode: meta.mode() & 0o7777,
        });
    }
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| CommonError::io(path, e))?;
    }
    Ok(())
}

/// Where sockets live: `$PEDELEC_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/pedelec`,
/// else `<tmp>/pedelec-<uid>` (`/tmp` unless `$TMPDIR` says otherwise).
/// `pedelecd paths` prints it.
#[derive(Clone, Debug)]
pub struct RuntimeDir(PathBuf);

impl RuntimeDir {
    pub fn from_env() -> Self {
        let path = match std::env::var_os(crate::env::RUNTIME_DIR) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => match std::env::var_os("XDG_RUNTIME_DIR") {
                Some(p) if !p.is_empty() => PathBuf::from(p).join("pedelec"),
                _ => std::env::temp_dir().join(format!("pedelec-{}", crate::process::uid())),
            },
        };
        RuntimeDir(path)
    }

    pub fn at(path: impl Into<PathBuf>) -> Self {
        RuntimeDir(path.into())
    }

    /// Creates the directory 0700 and checks ownership and socket path lengths.
    pub fn ensure(&self) -> Result<(), CommonError> {
        ensure_private_dir(&self.0)?;
        let longest = self.socket(ServiceName::ToolBridge);
        let len = longest.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(CommonError::SocketPathTooLong {
                path: longest,
                len,
                limit: MAX_SOCKET_PATH,
            });
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn socket(&self, service: ServiceName) -> PathBuf {
        self.0.join(service.socket_file())
    }

    /// The services' and the launcher's log files (`<service>.log`, `pedelecd.log`).
    pub fn logs(&self) -> PathBuf {
        self.0.join("logs")
    }
}

/// Where state lives: `$PEDELEC_HOME`, else the platform data dir
/// (`$XDG_DATA_HOME/pedelec` or `~/.local/share/pedelec`;
/// `~/Library/Application Support/Pedelec` on macOS).
#[derive(Clone, Debug)]
pub struct DataDir(PathBuf);

impl DataDir {
    pub fn from_env() -> Self {
        if let Some(p) = std::env::var_os(crate::env::HOME).filter(|p| !p.is_empty()) {
            return DataDir(PathBuf::from(p));
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        if cfg!(target_os = "macos") {
            return DataDir(home.join("Library/Application Support/Pedelec"));
        }
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".local/share"));
        DataDir(base.join("pedelec"))
    }

    pub fn at(path: impl Into<PathBuf>) -> Self {
        DataDir(path.into())
    }

    /// Creates the data dir and its sub-folders, all 0700 and owned by the user.
    pub fn ensure(&self) -> Result<(), CommonError> {
        for dir in [self.0.clone(), self.sessions(), self.workspaces()] {
            ensure_private_dir(&dir)?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn settings_file(&self) -> PathBuf {
        self.0.join("settings.json")
    }

    /// SessionService's site grants (docs/security.md, "Site grants").
    pub fn sites_file(&self) -> PathBuf {
        self.0.join("sites.json")
    }

    /// The session journal: one `<session id>.json` record per thread.
    pub fn sessions(&self) -> PathBuf {
        self.0.join("sessions")
    }

    /// The managed workspaces root: one folder per thread without an explicit path.
    pub fn workspaces(&self) -> PathBuf {
        self.0.join("workspaces")
    }

    /// Written by an orderly stop before its cleanup and removed once the
    /// cleanup is complete: a start that finds it finishes the cleanup. A
    /// start without it follows a crash, a kill or a power loss, whose
    /// threads and managed workspaces are kept (no app exit happened).
    pub fn app_exit_marker(&self) -> PathBuf {
        self.0.join("app-exit")
    }

    /// The "app exit" cleanup (when Pedelec stops in order): forgets every
    /// thread and removes the managed workspaces. Explicit application workspaces live elsewhere and are
    /// never touched. Returns what could not be removed (e.g. locked files), which
    /// the next start tries again.
    pub fn clear_app_state(&self) -> Vec<(PathBuf, std::io::Error)> {
        let mut failures = Vec::new();
        for dir in [self.sessions(), self.workspaces()] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let result = if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                if let Err(e) = result {
                    failures.push((path, e));
                }
            }
        }
        failures
    }
}

/// Where Pedelec's binaries are: `$PEDELEC_BIN_DIR`, else the folder of the
/// running executable (they are installed side by side). None only when the
/// running executable cannot be found.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(crate::env::BIN_DIR).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().ok()?;
    exe.parent().map(Path::to_path_buf)
}

/// The absolute path of `pedelec-cli` given to agents (the prompt's shell
/// commands, the MCP server their CLI starts): `$PEDELEC_CLI` when set, else
/// the `pedelec-cli` beside this executable. A login shell may reset `PATH`,
/// so a bare name is not enough.
pub fn cli_path() -> PathBuf {
    if let Some(p) = std::env::var_os(crate::env::CLI).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/"));
    let dir = dir.canonicalize().unwrap_or(dir);
    dir.join(crate::Program::Cli.file_name())
}

/// Writes `bytes` to `path` atomically: a temp file in the same folder, fsync,
/// rename. Readers see the old file or the new one, never half of either.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    replace_file(path, bytes, mode, true)
}

/// Like [`write_atomic`], but `sync = false` skips the fsync: the result still
/// survives a crash of this process (the page cache keeps it) and is never half
/// written, which is what the session journal needs on its hot path.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    replace_through_temp(path, |tmp| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(tmp)?;
        file.write_all(bytes)?;
        if sync {
            file.sync_all()?;
        }
        Ok(())
    })
}

/// Replaces `path` with what `fill` makes at a fresh temp name in the same
/// folder, by a rename, so `path` is never seen half made. The temp file is
/// removed when `fill` or the rename fails.
pub fn replace_through_temp(
    path: &Path,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = fill(&tmp).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_replacement_keeps_the_old_file_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"old").unwrap();
        let err = replace_through_temp(&file, |t| {
            std::fs::write(t, b"half")?;
            Err(std::io::Error::other("fill failed"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "fill failed");
        assert_eq!(std::fs::read(&file).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temp file was left: {names:?}");
    }

    #[test]
    fn private_dir_is_created_0700_and_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rt");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_world_writable_dir_is_refused_and_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o1777, 0o703] {
            let dir = tmp.path().join(format!("rt{mode:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = ensure_private_dir(&dir).unwrap_err();
            assert!(
                matches!(err, CommonError::WritableByOthers { mode: m, .. } if m == mode),
                "{mode:o}: {err}"
            );
            assert!(err.to_string().contains("chmod 700"), "{err}");
            let now = std::fs::metadata(&dir).unwrap().mode() & 0o7777;
            assert_eq!(now, mode, "a refused folder is not changed");
        }
        // Group-writable (umask 002) is the user's own: tightened.
        let dir = tmp.path().join("group");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        ensure_private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_file_is_not_a_runtime_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            ensure_private_dir(&file),
            Err(CommonError::NotADirectory { .. })
        ));
    }

    #[test]
    fn too_long_runtime_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let long = tmp.path().join("x".repeat(120));
        let err = RuntimeDir::at(long).ensure().unwrap_err();
        assert!(matches!(err, CommonError::SocketPathTooLong { .. }));
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("s.json");
        write_atomic(&file, b"one", 0o600).unwrap();
        write_atomic(&file, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
