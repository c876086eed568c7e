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
    let meta = own_dir(path)?;
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| CommonError::io(path, e))?;
    }
    Ok(())
}

/// `path`'s metadata when it is a directory (not a symlink) owned by this
/// user that other users may not write to: what both the services (who then
/// tighten it) and the clients (who change nothing) require of a folder.
fn own_dir(path: &Path) -> Result<std::fs::Metadata, CommonError> {
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
    Ok(meta)
}

/// What a client checks of the folder a socket lies in before it connects
/// ([`crate::uds`]), without changing anything: a directory (not a symlink),
/// owned by this user, that no other user may write to. Read and search bits
/// for others are accepted: nobody but the owner can put anything in such a
/// folder, and the runtime dir an agent sees in its bubblewrap view is a fresh
/// tmpfs of mode 0755 (docs/security.md, "Filesystem view"). A missing folder
/// is the `Io` error NotFound, as connecting would be.
pub fn check_private_dir(path: &Path) -> Result<(), CommonError> {
    let meta = own_dir(path)?;
    if meta.mode() & 0o020 != 0 {
        return Err(CommonError::WritableByGroup {
            path: path.into(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Reads one environment variable: the process's, or a test's.
type Vars<'a> = &'a dyn Fn(&str) -> Option<std::ffi::OsString>;

/// The process's environment.
fn process_env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name)
}

/// A non-empty variable, if set.
fn var(vars: Vars, name: &str) -> Option<PathBuf> {
    vars(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// An `XDG_*` base directory: only an absolute path counts (the XDG Base
/// Directory specification says to ignore a relative one).
fn xdg(vars: Vars, name: &str) -> Option<PathBuf> {
    var(vars, name).filter(|p| p.is_absolute())
}

/// Where sockets live: `$PEDELEC_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/pedelec`,
/// else `pedelec/run` in the user's state dir (`$XDG_STATE_HOME`, else
/// `~/.local/state`): never a name in a shared temporary folder, where another
/// user could make the folder first. `pedelecd paths` prints it.
#[derive(Clone, Debug)]
pub struct RuntimeDir(PathBuf);

impl RuntimeDir {
    /// The runtime dir the environment names; an error saying what to set
    /// when it names none (no `XDG_RUNTIME_DIR`, `XDG_STATE_HOME` or `HOME`).
    pub fn from_env() -> Result<Self, CommonError> {
        Self::from_vars(&process_env)
    }

    fn from_vars(vars: Vars) -> Result<Self, CommonError> {
        if let Some(p) = var(vars, crate::env::RUNTIME_DIR) {
            return Ok(RuntimeDir(p));
        }
        if let Some(p) = xdg(vars, "XDG_RUNTIME_DIR") {
            return Ok(RuntimeDir(p.join("pedelec")));
        }
        let state = xdg(vars, "XDG_STATE_HOME")
            .or_else(|| var(vars, "HOME").map(|h| h.join(".local/state")));
        match state {
            Some(state) => Ok(RuntimeDir(state.join("pedelec/run"))),
            None => Err(CommonError::NoDir {
                what: "runtime dir (sockets, logs)",
                set: "PEDELEC_RUNTIME_DIR, XDG_RUNTIME_DIR, XDG_STATE_HOME or HOME",
                flag: "--runtime-dir",
            }),
        }
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
/// `~/Library/Application Support/Pedelec` on macOS); never a temporary folder.
#[derive(Clone, Debug)]
pub struct DataDir(PathBuf);

impl DataDir {
    /// The data dir the environment names; an error saying what to set when
    /// it names none (no `XDG_DATA_HOME` or `HOME`).
    pub fn from_env() -> Result<Self, CommonError> {
        Self::from_vars(&process_env)
    }

    fn from_vars(vars: Vars) -> Result<Self, CommonError> {
        if let Some(p) = var(vars, crate::env::HOME) {
            return Ok(DataDir(p));
        }
        let home = var(vars, "HOME");
        let base = if cfg!(target_os = "macos") {
            home.map(|h| h.join("Library/Application Support/Pedelec"))
        } else {
            xdg(vars, "XDG_DATA_HOME")
                .or_else(|| home.map(|h| h.join(".local/share")))
                .map(|b| b.join("pedelec"))
        };
        base.map(DataDir).ok_or(CommonError::NoDir {
            what: "data dir (settings, sessions, workspaces)",
            set: "PEDELEC_HOME, XDG_DATA_HOME or HOME",
            flag: "--data-dir",
        })
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

    /// The environment of a test: `pairs` set, nothing else.
    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.into())
    }

    #[test]
    fn the_runtime_dir_is_never_a_shared_temporary_folder() {
        let runtime = |pairs: &[(&str, &str)]| {
            RuntimeDir::from_vars(&vars(pairs)).map(|r| r.path().to_path_buf())
        };
        let tmp = [("TMPDIR", "/tmp")];
        assert_eq!(
            runtime(&[("PEDELEC_RUNTIME_DIR", "/r"), ("XDG_RUNTIME_DIR", "/x")]).unwrap(),
            Path::new("/r")
        );
        assert_eq!(
            runtime(&[("XDG_RUNTIME_DIR", "/run/user/7"), ("HOME", "/h")]).unwrap(),
            Path::new("/run/user/7/pedelec")
        );
        // Without XDG_RUNTIME_DIR (a relative one does not count): the state dir.
        for pairs in [
            &[("HOME", "/h"), tmp[0]][..],
            &[
                ("HOME", "/h"),
                ("XDG_RUNTIME_DIR", "run"),
                ("PEDELEC_RUNTIME_DIR", ""),
            ][..],
        ] {
            assert_eq!(
                runtime(pairs).unwrap(),
                Path::new("/h/.local/state/pedelec/run")
            );
        }
        assert_eq!(
            runtime(&[("HOME", "/h"), ("XDG_STATE_HOME", "/s")]).unwrap(),
            Path::new("/s/pedelec/run")
        );
        // Nothing to go by: refused, saying what to set; no /tmp name.
        let err = runtime(&tmp).unwrap_err();
        assert_eq!(err.code(), crate::Code::CORE_UNAVAILABLE);
        let said = err.to_string();
        assert!(
            said.contains("XDG_RUNTIME_DIR") && said.contains("--runtime-dir"),
            "{said}"
        );
    }

    #[test]
    fn the_data_dir_never_falls_back_to_a_temporary_folder() {
        let data = |pairs: &[(&str, &str)]| {
            DataDir::from_vars(&vars(pairs)).map(|d| d.path().to_path_buf())
        };
        assert_eq!(
            data(&[("PEDELEC_HOME", "/p"), ("HOME", "/h")]).unwrap(),
            Path::new("/p")
        );
        if !cfg!(target_os = "macos") {
            assert_eq!(
                data(&[("HOME", "/h")]).unwrap(),
                Path::new("/h/.local/share/pedelec")
            );
            assert_eq!(
                data(&[("HOME", "/h"), ("XDG_DATA_HOME", "/d")]).unwrap(),
                Path::new("/d/pedelec")
            );
        }
        let err = data(&[("TMPDIR", "/tmp"), ("XDG_DATA_HOME", "relative")]).unwrap_err();
        assert!(err.to_string().contains("--data-dir"), "{err}");
    }

    #[test]
    fn clients_accept_only_a_folder_of_their_own_that_no_one_else_writes() {
        let tmp = tempfile::tempdir().unwrap();
        for (mode, ok) in [
            (0o700, true),
            (0o755, true),
            (0o770, false),
            (0o777, false),
            (0o1777, false),
            (0o703, false),
        ] {
            let dir = tmp.path().join(format!("rt{mode:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let checked = check_private_dir(&dir);
            assert_eq!(checked.is_ok(), ok, "{mode:o}: {checked:?}");
            if let Err(e) = checked {
                assert!(e.to_string().contains(&format!("mode {mode:04o}")), "{e}");
            }
            // Only checked, never changed.
            assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, mode);
        }
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("rt700"), &link).unwrap();
        assert!(matches!(
            check_private_dir(&link),
            Err(CommonError::NotADirectory { .. })
        ));
        assert!(matches!(
            check_private_dir(&tmp.path().join("missing")),
            Err(CommonError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound
        ));
        if crate::process::is_root() {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let err = check_private_dir(&theirs).unwrap_err();
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        }
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
