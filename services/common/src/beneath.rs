//! Files beneath a folder, reached through directory descriptors: the one
//! home of this resolution, used by AssetService (a thread's assets folder)
//! and pedelec-agent's file tools (the workspace).
//!
//! Checking a path and then using it by name leaves a window in which a folder
//! can be swapped for a symlink and the use escapes the folder. Here every step
//! is relative to a folder already held open, and every open refuses a
//! symlink (`O_NOFOLLOW`), so what was checked is what is used: the kernel
//! resolves each name beneath the folder it came from. Only regular files are
//! opened (a FIFO or device is refused after the open, which never blocks).
//!
//! Errors are plain `std::io::Error`s that name no path (a caller knows which
//! name it asked for, and says so in its own words); [`refusal`] tells the
//! refusals (a symlink, something that is not a folder, not a regular file)
//! from other I/O errors.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Pedelec's folder in every workspace: the assets of its threads and
/// pedelec-agent's conversations (docs/architecture.md, "Where state lives").
pub const RUNTIME_FOLDER: &str = ".pedelec-runtime";
/// The folder in [`RUNTIME_FOLDER`] holding one folder per thread.
pub const ASSETS_FOLDER: &str = "assets";
/// The folder in [`RUNTIME_FOLDER`] holding pedelec-agent's conversations
/// (one file per thread; ProviderService keeps it writable in the agent's view).
pub const AGENT_FOLDER: &str = "agent";

/// `<workspace>/.pedelec-runtime/agent`: see [`AGENT_FOLDER`].
pub fn agent_folder(workspace: &Path) -> std::path::PathBuf {
    workspace.join(RUNTIME_FOLDER).join(AGENT_FOLDER)
}
/// Temp files of a write in progress (an upload, an agent's `write_asset`) are
/// named `<TEMP_PREFIX><32 hex><TEMP_SUFFIX>` beside their target; AssetService
/// reserves the prefix, so no asset can be named like one and `List` skips them.
pub const TEMP_PREFIX: &str = ".pedelec-upload-";
pub const TEMP_SUFFIX: &str = ".part";

/// A fresh temp file name ([`TEMP_PREFIX`]).
pub fn temp_name() -> String {
    format!(
        "{TEMP_PREFIX}{}{TEMP_SUFFIX}",
        uuid::Uuid::new_v4().simple()
    )
}

/// Whether `name` is, or may be on the file system it lies on,
/// [`RUNTIME_FOLDER`]. Compared without regard to case, always: macOS's and
/// Windows' usual file systems ignore case, and so does a Linux folder with
/// ext4's or f2fs's `casefold` attribute (rare, but a folder can carry it on
/// an otherwise case-sensitive disk), and which one a workspace lies on is
/// not cheaply known. On a case-sensitive folder the cost is that a folder
/// of the user's named `.PEDELEC-RUNTIME` is treated as Pedelec's too.
pub fn is_runtime_folder(name: &str) -> bool {
    name.chars()
        .flat_map(char::to_lowercase)
        .eq(RUNTIME_FOLDER.chars())
}

/// Why a name was not used as asked, when the reason is what is there rather
/// than an I/O failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A symbolic link, never followed.
    Symlink,
    /// Used as a folder but not one (a file, a symlink to a folder).
    NotAFolder,
    /// Opened as a file but not a regular one (a folder, FIFO, socket, device).
    NotAFile,
}

/// The refusal `e` reports, if it is one (see [`Refusal`]).
pub fn refusal(e: &io::Error) -> Option<Refusal> {
    if e.get_ref().is_some_and(|inner| inner.is::<NotAFile>()) {
        return Some(Refusal::NotAFile);
    }
    match e.raw_os_error() {
        Some(libc::ELOOP) => Some(Refusal::Symlink),
        Some(libc::ENOTDIR) => Some(Refusal::NotAFolder),
        _ => None,
    }
}

#[derive(Debug)]
struct NotAFile;

impl std::fmt::Display for NotAFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a regular file")
    }
}

impl std::error::Error for NotAFile {}

fn not_a_file() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, NotAFile)
}

/// `O_DIRECTORY | O_NOFOLLOW` on a symlink fails with ENOTDIR, as on a
/// file; a symlink is reported as such (ELOOP, as a file open reports it).
fn symlink_is_eloop(e: io::Error, is_link: impl FnOnce() -> bool) -> io::Error {
    if e.raw_os_error() == Some(libc::ENOTDIR) && is_link() {
        io::Error::from_raw_os_error(libc::ELOOP)
    } else {
        e
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// What is at a name inside a folder, seen without following a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Missing,
    File {
        len: u64,
    },
    Dir,
    Symlink,
    /// A FIFO, socket or device: never used.
    Other,
}

/// An open folder.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Opens `path` itself (an absolute folder Pedelec recorded, e.g. a
    /// workspace); its last component may not be a symlink.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                let link = || std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
                symlink_is_eloop(e, link)
            })?;
        Ok(Dir { fd: file.into() })
    }

    fn openat(&self, name: &OsStr, flags: i32, mode: libc::mode_t) -> io::Result<OwnedFd> {
        let c = cstr(name)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory fd, a NUL-terminated name; the returned fd
        // is owned by exactly one OwnedFd.
        let fd =
            unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by openat and is not owned elsewhere.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The folder `name` inside this one, created (0700) when missing and
    /// `create`; `None` when missing and not `create`. A symlink or a file
    /// there is an error that [`refusal`] recognises.
    pub fn child(&self, name: impl AsRef<OsStr>, create: bool) -> io::Result<Option<Dir>> {
        let name = name.as_ref();
        if create {
            let c = cstr(name)?;
            // SAFETY: a valid directory fd and a NUL-terminated name.
            if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
        match self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => Ok(Some(Dir { fd })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(symlink_is_eloop(e, || {
                self.entry(name).is_ok_and(|e| e == Entry::Symlink)
            })),
        }
    }

    /// The folder reached through `names`, folder by folder beneath this one
    /// (each made when missing and `create`); `None` when one is missing and
    /// not `create`. No names: this folder again.
    pub fn walk<S: AsRef<OsStr>>(&self, names: &[S], create: bool) -> io::Result<Option<Dir>> {
        let mut here = self.try_clone()?;
        for name in names {
            match here.child(name, create)? {
                Some(next) => here = next,
                None => return Ok(None),
            }
        }
        Ok(Some(here))
    }

    /// What is at `name`, without following a symlink.
    pub fn entry(&self, name: impl AsRef<OsStr>) -> io::Result<Entry> {
        let c = cstr(name.as_ref())?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid fd, NUL-terminated name, a stat buffer to fill.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound {
                Ok(Entry::Missing)
            } else {
                Err(e)
            };
        }
        // SAFETY: fstatat succeeded, so the buffer is filled.
        let st = unsafe { st.assume_init() };
        Ok(match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Entry::Dir,
            libc::S_IFREG => Entry::File {
                len: st.st_size as u64,
            },
            libc::S_IFLNK => Entry::Symlink,
            _ => Entry::Other,
        })
    }

    /// Opens the regular file `name` for reading. A symlink is refused
    /// ([`Refusal::Symlink`]), so is anything but a regular file
    /// ([`Refusal::NotAFile`]).
    pub fn open_file(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
        let fd = self.openat(name.as_ref(), libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(not_a_file());
        }
        // Back to blocking reads (the flag only mattered for the open).
        // SAFETY: a valid fd; F_SETFL with plain flags.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) };
        Ok(file)
    }

    /// Creates `name` with `mode`; fails if anything is there already.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: libc::mode_t) -> io::Result<File> {
        self.openat(
            name.as_ref(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            mode,
        )
        .map(File::from)
    }

    /// Moves `from` to `to`, both in this folder; replaces a file at `to`
    /// (a symlink there is replaced, never followed).
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> io::Result<()> {
        let (f, t) = (cstr(from.as_ref())?, cstr(to.as_ref())?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid fds and NUL-terminated names.
        if unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes the file `name`; a missing one is fine.
    pub fn remove(&self, name: impl AsRef<OsStr>) {
        if let Ok(c) = cstr(name.as_ref()) {
            // SAFETY: valid fd and NUL-terminated name.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// Writes `bytes` to a temp file beside `name` (made with `mode`, synced),
    /// then renames it over `name`: `name` is never seen half written, and the
    /// temp file is removed when anything fails. `name` may not be a folder.
    pub fn replace(&self, name: impl AsRef<OsStr>, bytes: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let name = name.as_ref();
        if self.entry(name)? == Entry::Dir {
            return Err(not_a_file());
        }
        let temp = temp_name();
        let written = self
            .create_new(&temp, mode as libc::mode_t)
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.sync_all()
            })
            .and_then(|()| self.rename(&temp, name));
        if written.is_err() {
            self.remove(&temp);
        }
        written
    }

    /// The names in this folder (`.` and `..` left out).
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // Linux: the fd's own entry in /proc is this very folder, whatever its
        // path has become since it was opened.
        let here = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        Ok(std::fs::read_dir(here)?
            .flatten()
            .map(|e| e.file_name())
            .collect())
    }

    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
        })
    }
}

/// `<workspace>/.pedelec-runtime/assets`, made (0700) when `create`; `None`
/// when it does not exist and `create` is false. Neither folder may be a
/// symlink; both are held open, so later steps stay beneath them.
pub fn assets_root(workspace: &Dir, create: bool) -> io::Result<Option<Dir>> {
    workspace.walk(&[RUNTIME_FOLDER, ASSETS_FOLDER], create)
}

/// A thread's own assets folder, `<workspace>/.pedelec-runtime/assets/<thread
/// id>/`, made (0700) when `create`: threads sharing a workspace never see
/// each other's files.
pub fn thread_assets(workspace: &Dir, thread: &str, create: bool) -> io::Result<Option<Dir>> {
    workspace.walk(&[RUNTIME_FOLDER, ASSETS_FOLDER, thread], create)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: io::Result<impl std::fmt::Debug>) -> Option<Refusal> {
        refusal(&r.expect_err("refused"))
    }

    #[test]
    fn symlinks_anywhere_and_files_as_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("root");
        std::fs::create_dir(&root_path).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(&outside, root_path.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root_path.join("file-link")).unwrap();
        std::fs::write(root_path.join("plain"), b"p").unwrap();
        let root = Dir::open(&root_path).unwrap();

        for bad in [&["link", "x"][..], &["link"], &["plain", "x"]] {
            assert!(
                matches!(
                    refused(root.walk(bad, true)),
                    Some(Refusal::Symlink | Refusal::NotAFolder)
                ),
                "{bad:?}"
            );
        }
        assert_eq!(refused(root.open_file("file-link")), Some(Refusal::Symlink));
        assert_eq!(root.entry("file-link").unwrap(), Entry::Symlink);
        assert_eq!(root.entry("plain").unwrap(), Entry::File { len: 1 });
        assert_eq!(root.entry("nope").unwrap(), Entry::Missing);
        assert!(refusal(&root.open_file("nope").unwrap_err()).is_none());
        let made = root.walk(&["new", "deeper"], true).unwrap().unwrap();
        assert!(root_path.join("new/deeper").is_dir());
        made.create_new("f", 0o600).unwrap();
        assert!(root_path.join("new/deeper/f").is_file());
        assert!(root.walk(&["missing", "f"], false).unwrap().is_none());
        // Nothing was made through the link.
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        // The root itself may not be a symlink.
        assert_eq!(
            refusal(&Dir::open(&root_path.join("link")).unwrap_err()),
            Some(Refusal::Symlink)
        );
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_after_the_walk_does_not_escape() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("root");
        std::fs::create_dir_all(root_path.join("a")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let root = Dir::open(&root_path).unwrap();
        let held = root.walk(&["a"], false).unwrap().unwrap();
        // The folder the walk checked is moved away and a symlink put in its place.
        std::fs::rename(root_path.join("a"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root_path.join("a")).unwrap();
        held.replace("g.txt", b"x", 0o600).unwrap();
        assert!(
            dir.path().join("moved/g.txt").is_file(),
            "stayed in the checked folder"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing escaped"
        );
        // And a fresh walk refuses the symlink.
        assert_eq!(refused(root.walk(&["a"], false)), Some(Refusal::Symlink));
    }

    #[test]
    fn only_regular_files_are_opened_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = CString::new(dir.path().join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let root = Dir::open(dir.path()).unwrap();
        assert_eq!(refused(root.open_file("pipe")), Some(Refusal::NotAFile));
        assert_eq!(root.entry("pipe").unwrap(), Entry::Other);
        assert_eq!(refused(root.open_file("sub")), Some(Refusal::NotAFile));
        let missing = root.open_file("none").unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        // Replacing a folder is refused; replacing a file leaves no temp file.
        assert_eq!(
            refused(root.replace("sub", b"x", 0o600)),
            Some(Refusal::NotAFile)
        );
        root.replace("f", b"one", 0o600).unwrap();
        root.replace("f", b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"two");
        let mut names: Vec<_> = root.names().unwrap();
        names.sort();
        assert_eq!(names, ["f", "pipe", "sub"]);
    }

    #[test]
    fn the_runtime_folder_is_recognised_in_any_case() {
        for yes in [".pedelec-runtime", ".PEDELEC-RUNTIME", ".Pedelec-Runtime"] {
            assert!(is_runtime_folder(yes), "{yes}");
        }
        for no in [
            ".pedelec-runtim",
            "pedelec-runtime",
            ".pedelec-runtime2",
            "",
        ] {
            assert!(!is_runtime_folder(no), "{no}");
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Dir::open(dir.path()).unwrap();
        assert!(thread_assets(&ws, "thr_1", false).unwrap().is_none());
        thread_assets(&ws, "thr_1", true).unwrap().unwrap();
        assert!(dir.path().join(".pedelec-runtime/assets/thr_1").is_dir());
        assert!(assets_root(&ws, false).unwrap().is_some());
        assert!(temp_name().starts_with(TEMP_PREFIX) && temp_name().ends_with(TEMP_SUFFIX));
    }
}
