//! Disk quotas: how many bytes one thread's assets folder, and all the
//! assets folders of one origin's threads, may hold.
//!
//! Usage is what is on disk: the regular files of each folder (the agent's
//! too), counted by a walk, plus the uploads in flight (reserved for their
//! announced size when their body starts). A walk costs one `fstatat` per
//! entry, so a folder's count is kept and reused for [`FRESH`]; AssetService's
//! own uploads adjust it exactly as they land, and a recount picks up what the
//! agent or the user changed meanwhile. Which threads an origin has is asked
//! of SessionService (`List`, which reads the journal) at most once per
//! [`FRESH`] per origin; a thread that makes a request is counted at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pedelec_common::beneath::{self, Dir, Entry, TEMP_PREFIX, TEMP_SUFFIX};
use pedelec_common::clients::SessionClient;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;

use crate::assets::ThreadFolder;
use crate::error::AssetError;

/// How long a folder's count, and an origin's list of threads, is used
/// before it is made again.
pub const FRESH: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ThreadKey {
    workspace: PathBuf,
    session_id: String,
}

impl ThreadKey {
    fn of(thread: &ThreadFolder) -> ThreadKey {
        ThreadKey {
            workspace: thread.workspace.clone(),
            session_id: thread.session_id.clone(),
        }
    }
}

#[derive(Default)]
struct ThreadUsage {
    /// Bytes on disk as last counted, plus AssetService's uploads since.
    bytes: Option<u64>,
    counted_at: Option<Instant>,
    /// Uploads that landed: a count that started before one and ended after
    /// it may or may not have seen it, so it is not taken as is.
    landed: u64,
    /// Announced sizes of the uploads in flight.
    reserved: u64,
}

impl ThreadUsage {
    fn stale(&self, now: Instant) -> bool {
        self.bytes.is_none() || self.counted_at.is_none_or(|t| now - t >= FRESH)
    }

    fn used(&self) -> u64 {
        self.bytes.unwrap_or(0) + self.reserved
    }
}

#[derive(Default)]
struct OriginUsage {
    listed_at: Option<Instant>,
    threads: HashMap<ThreadKey, ThreadUsage>,
}

#[derive(Default)]
struct State {
    origins: HashMap<String, OriginUsage>,
}

/// The quotas and what each folder holds.
pub struct Quotas {
    per_thread: u64,
    per_origin: u64,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Room held for an upload in flight; released when dropped, or turned into
/// the bytes that landed by [`Reservation::landed`].
pub struct Reservation {
    state: Arc<Mutex<State>>,
    origin: String,
    key: ThreadKey,
    size: u64,
}

impl Reservation {
    /// The upload landed: the folder now holds `added` more bytes (its size
    /// less the file it replaced).
    pub fn landed(self, added: i64) {
        let mut state = lock(&self.state);
        if let Some(t) = state
            .origins
            .get_mut(&self.origin)
            .and_then(|o| o.threads.get_mut(&self.key))
        {
            t.landed += 1;
            if let Some(bytes) = t.bytes.as_mut() {
                *bytes = bytes.saturating_add_signed(added);
            }
        }
        // The reservation itself is released by Drop.
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(t) = state
            .origins
            .get_mut(&self.origin)
            .and_then(|o| o.threads.get_mut(&self.key))
        {
            t.reserved = t.reserved.saturating_sub(self.size);
        }
    }
}

impl Quotas {
    pub fn new(per_thread: u64, per_origin: u64) -> Quotas {
        Quotas {
            per_thread,
            per_origin,
            state: Default::default(),
        }
    }

    /// Whether `size` more bytes, replacing a file of `replacing` bytes, fit
    /// in `thread`'s quota and its origin's; `LIMIT_EXCEEDED` otherwise.
    pub async fn check(
        &self,
        sessions: &SessionClient,
        thread: &ThreadFolder,
        size: u64,
        replacing: u64,
    ) -> Result<(), AssetError> {
        self.admit(sessions, thread, size, replacing, false)
            .await
            .map(drop)
    }

    /// As [`Quotas::check`], and holds the room until the returned
    /// reservation is dropped (the upload failed) or has
    /// [`Reservation::landed`].
    pub async fn reserve(
        &self,
        sessions: &SessionClient,
        thread: &ThreadFolder,
        size: u64,
        replacing: u64,
    ) -> Result<Reservation, AssetError> {
        let reservation = self.admit(sessions, thread, size, replacing, true).await?;
        Ok(reservation.expect("reserved"))
    }

    async fn admit(
        &self,
        sessions: &SessionClient,
        thread: &ThreadFolder,
        size: u64,
        replacing: u64,
        reserve: bool,
    ) -> Result<Option<Reservation>, AssetError> {
        self.refresh(sessions, thread).await?;
        let key = ThreadKey::of(thread);
        let mut state = lock(&self.state);
        let origin = state.origins.entry(thread.origin.clone()).or_default();
        let origin_used: u64 = origin.threads.values().map(ThreadUsage::used).sum();
        let own = origin.threads.entry(key.clone()).or_default();
        let net = size.saturating_sub(replacing.min(own.bytes.unwrap_or(0)));
        let thread_used = own.used();
        if thread_used.saturating_add(net) > self.per_thread {
            return Err(AssetError::Limit(format!(
                "{size} more bytes would pass the thread's asset quota of {} bytes ({thread_used} \
                 in use): remove assets of this thread, or use another one",
                self.per_thread
            )));
        }
        if origin_used.saturating_add(net) > self.per_origin {
            return Err(AssetError::Limit(format!(
                "{size} more bytes would pass this site's asset quota of {} bytes over all its \
                 threads ({origin_used} in use): remove assets, or end and remove threads",
                self.per_origin
            )));
        }
        if !reserve {
            return Ok(None);
        }
        own.reserved += size;
        Ok(Some(Reservation {
            state: self.state.clone(),
            origin: thread.origin.clone(),
            key,
            size,
        }))
    }

    /// Brings the origin's list of threads and the counts of its folders up
    /// to date where they are older than [`FRESH`].
    async fn refresh(
        &self,
        sessions: &SessionClient,
        thread: &ThreadFolder,
    ) -> Result<(), AssetError> {
        let now = Instant::now();
        let listed = lock(&self.state)
            .origins
            .get(&thread.origin)
            .and_then(|o| o.listed_at)
            .is_some_and(|t| now - t < FRESH);
        let mut keys = None;
        if !listed {
            let request = pb::ListRequest {
                origin: Some(thread.origin.clone()),
            };
            match sessions.clone().list(request).await {
                Ok(listed) => {
                    keys = Some(
                        listed
                            .into_inner()
                            .sessions
                            .into_iter()
                            .filter(|s| !s.workspace_path.is_empty())
                            .map(|s| ThreadKey {
                                workspace: PathBuf::from(s.workspace_path),
                                session_id: s.session_id,
                            })
                            .collect::<Vec<_>>(),
                    );
                }
                // SessionService just answered OpenWorkspace for this origin,
                // so this is rare and passing: the threads known so far
                // count, and the next check asks again.
                Err(status) => {
                    let e = CodedError::from_status(&status, Code::CORE_UNAVAILABLE);
                    tracing::warn!(origin = %thread.origin, code = %e.code.as_str(), error = %e.message, "could not list the origin's threads for its asset quota");
                }
            }
        }
        // What to count, and what each count must not have missed.
        let stale: Vec<(ThreadKey, u64)> = {
            let mut state = lock(&self.state);
            let origin = state.origins.entry(thread.origin.clone()).or_default();
            if let Some(keys) = keys {
                origin.listed_at = Some(now);
                let mut threads: HashMap<ThreadKey, ThreadUsage> = keys
                    .into_iter()
                    .map(|k| {
                        let usage = origin.threads.remove(&k).unwrap_or_default();
                        (k, usage)
                    })
                    .collect();
                // Uploads in flight stay counted, listed or not.
                threads.extend(origin.threads.drain().filter(|(_, t)| t.reserved > 0));
                origin.threads = threads;
            }
            origin.threads.entry(ThreadKey::of(thread)).or_default();
            origin
                .threads
                .iter()
                .filter(|(_, t)| t.stale(now))
                .map(|(k, t)| (k.clone(), t.landed))
                .collect()
        };
        if stale.is_empty() {
            return Ok(());
        }
        let keys: Vec<ThreadKey> = stale.iter().map(|(k, _)| k.clone()).collect();
        let counted = tokio::task::spawn_blocking(move || {
            keys.iter()
                .map(|k| bytes_in(&k.workspace, &k.session_id))
                .collect::<Vec<u64>>()
        })
        .await
        .map_err(|e| AssetError::io("count the assets", std::io::Error::other(e)))?;
        let mut state = lock(&self.state);
        let Some(origin) = state.origins.get_mut(&thread.origin) else {
            return Ok(());
        };
        for ((key, landed), bytes) in stale.into_iter().zip(counted) {
            let Some(t) = origin.threads.get_mut(&key) else {
                continue;
            };
            if t.landed == landed {
                t.bytes = Some(bytes);
                t.counted_at = Some(now);
            } else if t.bytes.is_none() {
                // An upload landed while this first count ran: use the count,
                // and count again next time.
                t.bytes = Some(bytes);
            }
        }
        Ok(())
    }
}

/// The bytes of the regular files in a thread's assets folder, its
/// sub-folders included; temp files of uploads (counted as reservations) and
/// symlinks are not counted. A folder that is not there holds nothing.
fn bytes_in(workspace: &std::path::Path, session_id: &str) -> u64 {
    let Ok(Some(root)) =
        Dir::open(workspace).and_then(|ws| beneath::thread_assets(&ws, session_id, false))
    else {
        return 0;
    };
    let mut total = 0u64;
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for name in dir.names().unwrap_or_default() {
            match dir.entry(&name) {
                Ok(Entry::File { len }) => {
                    let temp = name
                        .to_str()
                        .is_some_and(|n| n.starts_with(TEMP_PREFIX) && n.ends_with(TEMP_SUFFIX));
                    if !temp {
                        total = total.saturating_add(len);
                    }
                }
                Ok(Entry::Dir) => {
                    if let Ok(Some(child)) = dir.child(&name, false) {
                        stack.push(child);
                    }
                }
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_counts_its_files_not_temp_files_or_links() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().join(".pedelec-runtime/assets/thr_q");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("a"), [0; 10]).unwrap();
        std::fs::write(root.join("sub/deeper/b"), [0; 20]).unwrap();
        std::fs::write(root.join(".pedelec-upload-x.part"), [0; 40]).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), [0; 80]).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        assert_eq!(bytes_in(ws.path(), "thr_q"), 30);
        assert_eq!(bytes_in(ws.path(), "thr_none"), 0);
        assert_eq!(bytes_in(&ws.path().join("gone"), "thr_q"), 0);
    }
}
