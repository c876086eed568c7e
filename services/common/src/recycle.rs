//! Record files written by recycling inodes: SessionService's journal
//! ([`RecyclingWriter`]). A record write goes into the file the previous
//! write replaced and swaps names with the record
//! (`renameat2(RENAME_EXCHANGE)`), so once warm a write makes and deletes no
//! inode and starts no ext4 `auto_da_alloc` writeback on its caller's path;
//! the spare files new records need are made ahead, off the request path
//! ([`RecyclingWriter::refill`]).
//!
//! What it buys, measured on this project's machine: a VM with 2 shared
//! vCPUs (AMD EPYC), Linux 6.18, its disk ext4 *without* a journal, where a
//! new inode costs 0.2-0.9 ms of kernel CPU while recently deleted inodes
//! are near (the allocator skips each one it finds), and every plain
//! replace-by-rename deletes one:
//! - the benchmark harness (docs/benchmarks.md): `breakdown.journal_write`,
//!   a 1.5 KB record, 167-180 us with a new inode each time -> 19 us
//!   recycled -> 12-16 us with the swap; `create_session.grpc` 2.33 ms ->
//!   582 us;
//! - the micro-benchmark `examples/record_write.rs` (a 1.5 KB record
//!   replaced 2,000 times; per write, the median of 5 runs' medians; the
//!   plain path is [`crate::paths::replace_file`] without fsync):
//!
//! | filesystem (same VM)                          | recycled | plain  |
//! |-----------------------------------------------|----------|--------|
//! | the VM's disk, ext4 without a journal         | 13.3 us  | 221 us |
//! | a fresh 1 GiB ext4 *with* a journal (loop)    | 17.5 us  | 55.5 us |
//! | a fresh 1 GiB ext4 without a journal (loop)   | 14.7 us  | 50.1 us |
//!
//!   As SessionService writes (500 threads, each a new record and three
//!   replacements, spares refilled after each thread): journaled ext4 20.5
//!   against 63.0 us a write, plus 16.7 us of refill per thread off the
//!   request path; the VM's disk 16.5 against 190 us (refill 75 us). With
//!   2,000 threads in a row the VM's disk climbs (plain 290-750 us a write,
//!   refill up to 750 us, as deletions pile up) while the journaled one
//!   stays flat (62-67 against 21-26 us).
//!
//! So it still pays on an ordinary journaled ext4 (about 3x, 35-40 us a
//! write), far less than on this VM's long-used journal-less disk, whose
//! cost comes from its recently deleted inodes more than from the missing
//! journal: a fresh journal-less ext4 costs what a journaled one does.
//!
//! How to turn it off: `PEDELEC_RECYCLE_RECORDS=0`
//! ([`crate::env::RECYCLE_RECORDS`]) in SessionService's environment: each
//! write is then the plain replace-by-rename (a new temp file, no fsync),
//! [`RecyclingWriter::refill`] does nothing, and spares left in the folder
//! are removed at start.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Whether this process recycles record files (see the module docs); read once.
static ENABLED: LazyLock<bool> =
    LazyLock::new(|| std::env::var(crate::env::RECYCLE_RECORDS).as_deref() != Ok("0"));

/// Spare files and folders are hidden, so readers of the folder skip them.
const SPARE_PREFIX: &str = ".spare-";

fn spare_name(dir: &Path) -> PathBuf {
    dir.join(format!("{SPARE_PREFIX}{}", uuid::Uuid::new_v4().simple()))
}

fn spares_in(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(SPARE_PREFIX))
        .map(|e| e.path())
}

/// How many spares [`RecyclingWriter::refill`] keeps ready. Two, not one:
/// a new name takes one, and while `refill` makes its replacement (most of a
/// millisecond on this kind of disk) the next write, a replacement that
/// needs a spare only until its swap returns the old file, finds the other
/// instead of making an inode on its caller's path (an End right after its
/// create, in the bench's loop; docs/decisions.md, "Create").
pub const READY_SPARES: usize = 2;

/// Replaces files in one folder by rename, like [`crate::paths::replace_file`]
/// without fsync, but never creates or deletes an inode once warm: the new
/// file and the old swap names, and the old one is the next write's temp
/// file (where names cannot swap, a hard link taken before the rename keeps
/// it). A new name still needs a new inode. Why: the module docs.
pub struct RecyclingWriter {
    dir: PathBuf,
    mode: u32,
    /// False: the plain path (module docs, "How to turn it off").
    recycling: bool,
    spares: std::sync::Mutex<Vec<PathBuf>>,
}

impl RecyclingWriter {
    /// Writes files of `mode` into `dir`, adopting spares a previous run left.
    /// A spare that is still a second name of a record (a crash between the
    /// link and the rename) is unlinked instead, which leaves the record be.
    /// With recycling off, every spare is removed.
    pub fn new(dir: PathBuf, mode: u32) -> Self {
        RecyclingWriter::with_recycling(dir, mode, *ENABLED)
    }

    fn with_recycling(dir: PathBuf, mode: u32, recycling: bool) -> Self {
        let mut spares = Vec::new();
        for spare in spares_in(&dir) {
            match std::fs::symlink_metadata(&spare) {
                Ok(meta) if recycling && meta.is_file() && meta.nlink() == 1 => spares.push(spare),
                _ => {
                    let _ = std::fs::remove_file(spare);
                }
            }
        }
        RecyclingWriter {
            dir,
            mode,
            recycling,
            spares: std::sync::Mutex::new(spares),
        }
    }

    /// The folder written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn spare_name(&self) -> PathBuf {
        spare_name(&self.dir)
    }

    /// A new, empty spare file.
    fn new_spare(&self) -> std::io::Result<(PathBuf, std::fs::File)> {
        use std::os::unix::fs::OpenOptionsExt;
        let spare = self.spare_name();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(self.mode)
            .open(&spare)?;
        Ok((spare, file))
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes spares until [`READY_SPARES`] are ready, so the next write to a
    /// new name creates no inode on its caller's path. Blocking: run it off
    /// the request path.
    pub fn refill(&self) -> std::io::Result<()> {
        if !self.recycling {
            return Ok(());
        }
        while self.spares().len() < READY_SPARES {
            let (spare, _) = self.new_spare()?;
            self.spares().push(spare);
        }
        Ok(())
    }

    /// Replaces `dir/name` with `bytes`; readers see the old file or the new
    /// one, never half of either.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(name);
        if !self.recycling {
            return crate::paths::replace_file(&path, bytes, self.mode, false);
        }
        // Not truncated on open: freeing the old blocks costs more than the
        // write (set_len below only trims the tail, usually within a block).
        let reused = self.spares().pop().and_then(|spare| {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&spare)
                .ok()
                .map(|file| (spare, file))
        });
        let (temp, mut file) = match reused {
            Some(found) => found,
            None => self.new_spare()?,
        };
        let written = file
            .write_all(bytes)
            .and_then(|()| file.set_len(bytes.len() as u64));
        if let Err(e) = written {
            drop(file);
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        drop(file);
        // The two names swap: the old record becomes the next spare, and no
        // file is replaced. A rename that replaces one makes ext4 start the
        // new file's writeback on the caller's path ("auto_da_alloc").
        match exchange(&temp, &path) {
            Ok(()) => {
                self.spares().push(temp);
                return Ok(());
            }
            // The first write of a name has nothing to swap with; a
            // filesystem (EINVAL) or kernel (ENOSYS) without the swap takes
            // the link and rename below.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::EINVAL | libc::ENOSYS)
                ) => {}
            Err(e) => {
                self.spares().push(temp);
                return Err(e);
            }
        }
        // Keep the file about to be replaced; absent the first time a name is written.
        let kept = self.spare_name();
        let kept = std::fs::hard_link(&path, &kept).ok().map(|()| kept);
        match std::fs::rename(&temp, &path) {
            Ok(()) => {
                self.spares().extend(kept);
                Ok(())
            }
            Err(e) => {
                if let Some(kept) = kept {
                    let _ = std::fs::remove_file(kept);
                }
                self.spares().push(temp);
                Err(e)
            }
        }
    }
}

/// Swaps the names `a` and `b` in one step (`renameat2` with
/// `RENAME_EXCHANGE`); EINVAL where the system or filesystem cannot.
#[allow(unsafe_code)]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
        };
        let (a, b) = (c(a)?, c(b)?);
        // SAFETY: both are NUL-terminated paths that outlive the call.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (a, b);
        Err(std::io::Error::from_raw_os_error(libc::EINVAL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recycling_writer_reuses_the_replaced_file_and_keeps_one_spare() {
        let tmp = tempfile::tempdir().unwrap();
        let writer = RecyclingWriter::with_recycling(tmp.path().into(), 0o600, true);
        let ino = |name: &str| std::fs::metadata(tmp.path().join(name)).unwrap().ino();
        writer.replace("a.json", b"one").unwrap();
        let first = ino("a.json");
        writer.replace("a.json", b"two, longer").unwrap();
        assert_ne!(ino("a.json"), first);
        writer.replace("a.json", b"3").unwrap();
        assert_eq!(ino("a.json"), first, "the replaced inode was not reused");
        assert_eq!(std::fs::read(tmp.path().join("a.json")).unwrap(), b"3");
        let mode = std::fs::metadata(tmp.path().join("a.json")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names = |dir: &Path| {
            let mut n: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            n.sort();
            n
        };
        let listed = names(tmp.path());
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed[0].starts_with(SPARE_PREFIX), "{listed:?}");

        // A crash between link and rename leaves a spare naming a record.
        let linked = tmp.path().join(format!("{SPARE_PREFIX}linked"));
        std::fs::hard_link(tmp.path().join("a.json"), &linked).unwrap();
        // A new writer (a restart) adopts the spare; a spare removed behind
        // its back (the app-exit cleanup) costs only a fresh temp file.
        let again = RecyclingWriter::with_recycling(tmp.path().into(), 0o600, true);
        assert!(!linked.exists(), "a linked spare was adopted");
        assert_eq!(std::fs::read(tmp.path().join("a.json")).unwrap(), b"3");
        again.replace("b.json", b"b").unwrap();
        assert_eq!(names(tmp.path()), ["a.json", "b.json"]);
        writer.replace("a.json", b"4").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("a.json")).unwrap(), b"4");
        assert_eq!(names(tmp.path()).len(), 3);
    }

    /// With the spares `refill` keeps, a new name and then a replacement (a
    /// create, then the End before the next refill) make no inode.
    #[test]
    fn refill_keeps_two_spares_for_a_new_name_and_the_next_replacement() {
        let tmp = tempfile::tempdir().unwrap();
        let writer = RecyclingWriter::with_recycling(tmp.path().into(), 0o600, true);
        writer.refill().unwrap();
        let spares = || spares_in(tmp.path()).collect::<Vec<_>>();
        let made: Vec<u64> = spares()
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().ino())
            .collect();
        assert_eq!(made.len(), READY_SPARES);
        writer.replace("thr_a.json", b"created").unwrap();
        writer.replace("thr_a.json", b"ended").unwrap();
        let ino = std::fs::metadata(tmp.path().join("thr_a.json"))
            .unwrap()
            .ino();
        // The record and the spare left are the two inodes refill made.
        let mut now: Vec<u64> = spares()
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().ino())
            .chain([ino])
            .collect();
        now.sort();
        let mut made = made;
        made.sort();
        assert_eq!(now, made, "an inode was made");
        // Refilling tops the pool up again, and only to two.
        writer.refill().unwrap();
        writer.refill().unwrap();
        assert_eq!(spares().len(), READY_SPARES);
    }

    /// Turned off, a write is a plain replacement: a new inode each time,
    /// no spares kept, and spares found at start removed.
    #[test]
    fn the_plain_path_keeps_no_spares() {
        let tmp = tempfile::tempdir().unwrap();
        let on = RecyclingWriter::with_recycling(tmp.path().into(), 0o600, true);
        on.refill().unwrap();
        let off = RecyclingWriter::with_recycling(tmp.path().into(), 0o600, false);
        assert_eq!(spares_in(tmp.path()).count(), 0, "spares left");
        off.refill().unwrap();
        let ino = || std::fs::metadata(tmp.path().join("a.json")).unwrap().ino();
        off.replace("a.json", b"one").unwrap();
        let first = ino();
        // A new file while the old one still exists: a new inode (after
        // that the freed number may come back).
        off.replace("a.json", b"two").unwrap();
        assert_ne!(ino(), first);
        off.replace("a.json", b"3").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("a.json")).unwrap(), b"3");
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
