//! One launcher per runtime dir: an exclusive flock on `launcher.lock`, held for
//! the launcher's life and released by the kernel however it ends. Checking the
//! socket alone would let two launchers started at once both pass.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::LauncherError;

pub struct LauncherLock {
    _file: File,
}

pub enum Acquired {
    Locked(LauncherLock),
    /// Another launcher holds it; its pid as written in the file, if readable.
    Busy(Option<u32>),
}

pub fn acquire(path: &Path) -> Result<Acquired, LauncherError> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| LauncherError::io(path, e))?;
    // std's try_lock is flock(LOCK_EX | LOCK_NB) on Unix.
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Ok(Acquired::Busy(text.trim().parse().ok()));
        }
        Err(TryLockError::Error(err)) => return Err(LauncherError::io(path, err)),
    }
    let write = (|| {
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())
    })();
    write.map_err(|e| LauncherError::io(path, e))?;
    Ok(Acquired::Locked(LauncherLock { _file: file }))
}
