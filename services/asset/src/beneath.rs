//! Files below a thread's assets root, reached through directory descriptors.
//!
//! Checking a path and then using it by name leaves a window in which a folder
//! can be swapped for a symlink and the use escapes the root. Here every step
//! is relative to a folder already held open, and every open refuses a
//! symlink (`O_NOFOLLOW`), so what was checked is what is used: the kernel
//! resolves each name beneath the folder it came from. Only regular files are
//! opened (a FIFO or device is refused after the open, which never blocks).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::AssetError;
use crate::paths::AssetPath;

/// An open folder.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// For messages only.
    label: String,
}

/// What is at a name inside a folder.
#[derive(Debug)]
pub enum Entry {
    Missing,
    File,
    Dir,
    /// A symlink, FIFO, socket or device: never used.
    Other,
}

fn cstr(name: &str) -> Result<CString, AssetError> {
    CString::new(name).map_err(|_| AssetError::PathInvalid(format!("{name:?} contains NUL")))
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Dir {
    /// Opens `path` itself (an absolute folder Pedelec recorded, e.g. a
    /// workspace); it may not be a symlink.
    pub fn open(path: &Path) -> Result<Dir, AssetError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| AssetError::io(format!("open {}", path.display()), e))?;
        Ok(Dir {
            fd: file.into(),
            label: path.display().to_string(),
        })
    }

    fn openat(&self, name: &str, flags: i32, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
        let c = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory fd, a NUL-terminated name; the returned fd
        // is owned by exactly one OwnedFd.
        let fd =
            unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: fd was just returned by openat and is not owned elsewhere.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn refused(&self, name: &str, why: &str) -> AssetError {
        AssetError::PathInvalid(format!("{}/{name}: {why}", self.label))
    }

    /// The folder `name` inside this one, created (0700) when missing and
    /// `create`; `None` when missing and not `create`. A symlink or a file
    /// there is refused.
    pub fn child(&self, name: &str, create: bool) -> Result<Option<Dir>, AssetError> {
        if create {
            let c = cstr(name)?;
            // SAFETY: a valid directory fd and a NUL-terminated name.
            if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
                let e = last_error();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(AssetError::io(format!("create {}/{name}", self.label), e));
                }
            }
        }
        match self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => Ok(Some(Dir {
                fd,
                label: format!("{}/{name}", self.label),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                Err(self.refused(name, "not a real folder (a symlink or a file)"))
            }
            Err(e) => Err(AssetError::io(format!("open {}/{name}", self.label), e)),
        }
    }

    /// What is at `name`, without following a symlink.
    pub fn entry(&self, name: &str) -> Result<Entry, AssetError> {
        let c = cstr(name)?;
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
            let e = last_error();
            return if e.kind() == std::io::ErrorKind::NotFound {
                Ok(Entry::Missing)
            } else {
                Err(AssetError::io(format!("inspect {}/{name}", self.label), e))
            };
        }
        // SAFETY: fstatat succeeded, so the buffer is filled.
        let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
        Ok(match mode {
            libc::S_IFDIR => Entry::Dir,
            libc::S_IFREG => Entry::File,
            _ => Entry::Other,
        })
    }

    /// Opens the regular file `name` for reading.
    pub fn open_file(&self, name: &str) -> Result<File, AssetError> {
        // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
        let fd = self
            .openat(name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => AssetError::NotFound(format!("{}/{name}", self.label)),
                Some(libc::ELOOP) => self.refused(name, "a symlink"),
                _ => AssetError::io(format!("open {}/{name}", self.label), e),
            })?;
        let file = File::from(fd);
        let md = file
            .metadata()
            .map_err(|e| AssetError::io(format!("stat {}/{name}", self.label), e))?;
        if !md.is_file() {
            return Err(self.refused(name, "not a regular file"));
        }
        // Back to blocking reads (the flag only mattered for the open).
        // SAFETY: a valid fd; F_SETFL with plain flags.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) };
        Ok(file)
    }

    /// Creates `name` (0600); fails if anything is there already.
    pub fn create_new(&self, name: &str) -> Result<File, AssetError> {
        self.openat(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            .map(File::from)
            .map_err(|e| AssetError::io(format!("create {}/{name}", self.label), e))
    }

    /// Moves `from` to `to`, both in this folder.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), AssetError> {
        let (f, t) = (cstr(from)?, cstr(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid fds and NUL-terminated names.
        if unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) } != 0 {
            return Err(AssetError::io(
                format!("move {}/{from} to {to}", self.label),
                last_error(),
            ));
        }
        Ok(())
    }

    /// Removes the file `name`; a missing one is fine.
    pub fn remove(&self, name: &str) {
        if let Ok(c) = CString::new(name) {
            // SAFETY: valid fd and NUL-terminated name.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// The folder holding `path`'s last segment, walked (and with `create`,
    /// made) folder by folder beneath this one; `None` when a folder is
    /// missing and not `create`.
    pub fn parent_of(&self, path: &AssetPath, create: bool) -> Result<Option<Dir>, AssetError> {
        let segments = path.segments();
        let mut dir: Option<Dir> = None;
        for segment in &segments[..segments.len() - 1] {
            let here = dir.as_ref().unwrap_or(self);
            match here.child(segment, create)? {
                Some(next) => dir = Some(next),
                None => return Ok(None),
            }
        }
        match dir {
            Some(d) => Ok(Some(d)),
            None => self.reopen().map(Some),
        }
    }

    /// The names in this folder (`.` and `..` left out).
    pub fn names(&self) -> Result<Vec<String>, AssetError> {
        // Linux: the fd's own entry in /proc is this very folder, whatever its
        // path has become since it was opened.
        let here = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let entries = std::fs::read_dir(&here)
            .map_err(|e| AssetError::io(format!("list {}", self.label), e))?;
        Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    pub fn try_clone(&self) -> Result<Dir, AssetError> {
        self.reopen()
    }

    fn reopen(&self) -> Result<Dir, AssetError> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| AssetError::io(format!("reopen {}", self.label), e))?;
        Ok(Dir {
            fd,
            label: self.label.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> AssetPath {
        AssetPath::parse(s).unwrap()
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

        for bad in ["/link/secret", "/link/new", "/plain/x"] {
            assert!(
                matches!(
                    root.parent_of(&p(bad), true),
                    Err(AssetError::PathInvalid(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            root.open_file("file-link"),
            Err(AssetError::PathInvalid(_))
        ));
        assert!(matches!(root.entry("file-link"), Ok(Entry::Other)));
        assert!(matches!(root.entry("plain"), Ok(Entry::File)));
        assert!(matches!(root.entry("nope"), Ok(Entry::Missing)));
        let parent = root.parent_of(&p("/new/deeper/f"), true).unwrap().unwrap();
        assert!(root_path.join("new/deeper").is_dir());
        parent.create_new("f").unwrap();
        assert!(root_path.join("new/deeper/f").is_file());
        assert!(root.parent_of(&p("/missing/f"), false).unwrap().is_none());
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_after_the_walk_does_not_escape() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("root");
        std::fs::create_dir_all(root_path.join("a")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let root = Dir::open(&root_path).unwrap();
        let held = root.parent_of(&p("/a/f.txt"), false).unwrap().unwrap();
        // The folder the walk checked is moved away and a symlink put in its place.
        std::fs::rename(root_path.join("a"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root_path.join("a")).unwrap();
        let mut f = held.create_new("f.txt").unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        held.rename("f.txt", "g.txt").unwrap();
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
        assert!(matches!(
            root.parent_of(&p("/a/f.txt"), false),
            Err(AssetError::PathInvalid(_))
        ));
    }

    #[test]
    fn only_regular_files_are_opened_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = CString::new(dir.path().join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let root = Dir::open(dir.path()).unwrap();
        assert!(matches!(
            root.open_file("pipe"),
            Err(AssetError::PathInvalid(_))
        ));
        assert!(matches!(root.entry("pipe"), Ok(Entry::Other)));
        assert!(matches!(
            root.open_file("sub"),
            Err(AssetError::PathInvalid(_))
        ));
        assert!(matches!(
            root.open_file("none"),
            Err(AssetError::NotFound(_))
        ));
    }
}
