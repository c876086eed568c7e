//! The asset logic, free of gRPC and HTTP: thread checks through SessionService,
//! tickets, listing, and the streaming upload/read primitives both front ends use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pedelec_common::beneath::{self, Dir, Entry, Refusal, TEMP_PREFIX, TEMP_SUFFIX};
use pedelec_common::clients::SessionClient;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;
use tokio::io::{AsyncWriteExt, BufWriter};

use crate::error::AssetError;
use crate::paths::{self, AssetPath, RESERVED_PREFIX};
use crate::quota::{Quotas, Reservation};
use crate::tickets::{Grant, Kind, Tickets};

/// The chunk size of reads, over gRPC and HTTP.
pub const CHUNK: usize = 64 * 1024;
/// Uploads are written through a buffer this big: fewer, larger blocking writes.
const WRITE_BUFFER: usize = 1024 * 1024;
/// Longest accepted content type; it is only ever echoed back as a header.
const MAX_CONTENT_TYPE: usize = 255;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_asset_bytes: u64,
    pub ticket_ttl: Duration,
    /// How long one HTTP upload's body may take in all: a body that trickles
    /// (a byte now and then, never idle long enough for the idle timeout)
    /// would otherwise hold its connection slot and temp file forever. 15
    /// minutes by default: 100 MiB at about 115 KiB/s.
    pub upload_deadline: Duration,
    /// The most one thread's assets folder may hold (its files on disk,
    /// the agent's included, and the uploads in flight).
    pub thread_quota_bytes: u64,
    /// The most the assets folders of all of one origin's threads may hold.
    pub origin_quota_bytes: u64,
}

/// 1 GiB per thread, 4 GiB per origin: ten of the largest assets in one
/// thread, forty over a site's threads.
pub const THREAD_QUOTA_BYTES: u64 = 1 << 30;
pub const ORIGIN_QUOTA_BYTES: u64 = 4 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_asset_bytes: 100 * 1024 * 1024,
            ticket_ttl: Duration::from_secs(5 * 60),
            upload_deadline: Duration::from_secs(15 * 60),
            thread_quota_bytes: THREAD_QUOTA_BYTES,
            origin_quota_bytes: ORIGIN_QUOTA_BYTES,
        }
    }
}

/// Where one thread's assets live: `<workspace>/.pedelec-runtime/assets/<session id>/`,
/// so threads sharing a workspace never see each other's files.
#[derive(Clone, Debug)]
pub struct ThreadFolder {
    pub workspace: PathBuf,
    pub session_id: String,
    /// The origin that asked, which SessionService confirmed owns the thread.
    pub origin: String,
}

impl ThreadFolder {
    /// The thread's assets folder, made (0700, with the folders above it)
    /// when `create`; `None` when it does not exist and not `create`.
    fn open(&self, create: bool) -> Result<Option<Dir>, AssetError> {
        Dir::open(&self.workspace)
            .and_then(|ws| beneath::thread_assets(&ws, &self.session_id, create))
            .map_err(|e| self.folder_error(e))
    }

    /// The thread's assets folder, made when missing.
    fn root(&self) -> Result<Dir, AssetError> {
        self.open(true)?
            .ok_or_else(|| self.folder_error(std::io::Error::from(std::io::ErrorKind::NotFound)))
    }

    /// An error met on the way to the thread's assets folder, told to a page
    /// without the workspace's path (the log has it).
    fn folder_error(&self, e: std::io::Error) -> AssetError {
        tracing::warn!(workspace = %self.workspace.display(), thread = %self.session_id, error = %e, "the thread's assets folder cannot be used");
        if beneath::refusal(&e).is_some() {
            AssetError::PathInvalid(
                "the thread's assets folder in its workspace is not a real folder (a symlink or \
                 a file is in its place)"
                    .into(),
            )
        } else {
            AssetError::io("could not open the thread's assets folder", e)
        }
    }

    /// An error met at the page's `path` inside the thread's folder, told in
    /// the page's own terms: the path it gave, never where it is on disk.
    fn path_error(&self, path: &AssetPath, doing: &str, e: std::io::Error) -> AssetError {
        match beneath::refusal(&e) {
            Some(Refusal::Symlink) => AssetError::PathInvalid(format!(
                "{path}: a symbolic link is in the way (links are never followed)"
            )),
            Some(Refusal::NotAFolder) => AssetError::PathInvalid(format!(
                "{path}: a file is in the way where a folder would be"
            )),
            Some(Refusal::NotAFile) => {
                AssetError::PathInvalid(format!("{path} is not a regular file"))
            }
            None => {
                tracing::warn!(workspace = %self.workspace.display(), thread = %self.session_id, %path, error = %e, "could not {doing} an asset");
                AssetError::io(format!("could not {doing} {path}"), e)
            }
        }
    }

    /// The folder holding `path`'s file, walked (and with `create`, made)
    /// beneath the thread's folder; `None` when a folder is missing.
    fn parent_of(&self, path: &AssetPath, create: bool) -> Result<Option<Dir>, AssetError> {
        let Some(root) = self.open(create)? else {
            return Ok(None);
        };
        root.walk(path.folders(), create)
            .map_err(|e| self.path_error(path, "open the folder of", e))
    }
}

/// The asset service's logic, independent of gRPC.
pub struct Assets {
    sessions: SessionClient,
    tickets: Tickets,
    limits: Limits,
    quotas: Quotas,
    /// `http://127.0.0.1:<port>` of the transfer server.
    base_url: String,
    /// Workspaces already swept of upload temp files left by an earlier run.
    swept: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
    started: std::time::SystemTime,
}

impl Assets {
    pub fn new(sessions: SessionClient, limits: Limits, base_url: String) -> Assets {
        Assets {
            sessions,
            tickets: Tickets::with_extension_origins(
                limits.ticket_ttl,
                pedelec_common::extension::allowed_ids()
                    .iter()
                    .map(|id| pedelec_common::extension::origin(id))
                    .collect(),
            ),
            limits,
            quotas: Quotas::new(limits.thread_quota_bytes, limits.origin_quota_bytes),
            base_url,
            swept: Default::default(),
            started: std::time::SystemTime::now(),
        }
    }

    /// Removes, once per workspace and process, the upload temp files an
    /// earlier AssetService left behind (killed mid-upload). Only files older
    /// than this process: a temp file of an upload running now is never one.
    fn sweep_once(&self, workspace: &Path) {
        let first = self
            .swept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(workspace.to_path_buf());
        if !first {
            return;
        }
        let (workspace, started) = (workspace.to_path_buf(), self.started);
        tokio::task::spawn_blocking(move || {
            if let Ok(Some(root)) =
                Dir::open(&workspace).and_then(|ws| beneath::assets_root(&ws, false))
            {
                let removed = sweep_temp_files(&root, started);
                if removed > 0 {
                    tracing::info!(workspace = %workspace.display(), removed, "removed leftover upload temp files");
                }
            }
        });
    }

    pub fn tickets(&self) -> &Tickets {
        &self.tickets
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The thread's assets folder, after SessionService confirmed that
    /// `origin` owns the thread, has a live grant (a web origin) and that the
    /// thread has not ended, and made its workspace if it was a managed
    /// workspace not used before. Asked on every request and every ticket's
    /// use: a revoke or an end stops both at once.
    pub async fn workspace(
        &self,
        session_id: &str,
        origin: &str,
    ) -> Result<ThreadFolder, AssetError> {
        let snapshot = self
            .sessions
            .clone()
            .open_workspace(pb::ThreadRequest {
                session_id: session_id.to_string(),
                origin: origin.to_string(),
            })
            .await
            .map_err(|s| {
                page_safe(
                    CodedError::from_status(&s, Code::CORE_UNAVAILABLE),
                    session_id,
                )
            })?
            .into_inner();
        if snapshot.status == pb::SessionStatus::Ended as i32 {
            return Err(AssetError::SessionEnded(session_id.to_string()));
        }
        if snapshot.workspace_path.is_empty() {
            return Err(AssetError::io(
                format!("thread {session_id}"),
                std::io::Error::other("SessionService reported no workspace"),
            ));
        }
        // A folder deleted or replaced behind Pedelec's back is
        // WORKSPACE_OPEN_FAILED from OpenWorkspace itself.
        let workspace = PathBuf::from(snapshot.workspace_path);
        self.sweep_once(&workspace);
        // The id names a folder: SessionService's ids are one path segment.
        paths::check_segment(&snapshot.session_id)
            .map_err(|_| AssetError::InvalidInput("the thread id is not a folder name".into()))?;
        Ok(ThreadFolder {
            workspace,
            session_id: snapshot.session_id,
            origin: origin.to_string(),
        })
    }

    fn check_size(&self, size: u64) -> Result<(), AssetError> {
        if size > self.limits.max_asset_bytes {
            return Err(AssetError::TooLarge {
                size,
                limit: self.limits.max_asset_bytes,
            });
        }
        Ok(())
    }

    fn ticket(&self, grant: Grant) -> Result<pb::Ticket, AssetError> {
        let kind = grant.kind;
        let path = grant.path.to_string();
        let issued = self.tickets.issue(grant)?;
        Ok(pb::Ticket {
            url: format!("{}/assets/{}/{}", self.base_url, kind.as_str(), issued.id),
            token: issued.token,
            expires_at: Some(pedelec_common::to_timestamp(issued.expires_at)),
            path,
        })
    }

    pub async fn create_upload_ticket(
        &self,
        req: pb::CreateUploadTicketRequest,
    ) -> Result<pb::Ticket, AssetError> {
        let workspace = self.workspace(&req.session_id, &req.origin).await?;
        check_origin(&req.origin)?;
        if !req.name.is_empty() || req.target_path.is_none() {
            AssetPath::from_name(&req.name)?;
        }
        let path = match &req.target_path {
            Some(p) => AssetPath::parse(p)?,
            None => AssetPath::from_name(&req.name)?,
        };
        self.check_size(req.size_bytes)?;
        if req.content_type.len() > MAX_CONTENT_TYPE
            || hyper::header::HeaderValue::from_str(&req.content_type).is_err()
        {
            return Err(AssetError::InvalidInput(
                "content_type is not a valid header value".into(),
            ));
        }
        // Refuse a bad target, or one past the quota, now rather than after
        // the page sent the body.
        workspace.root()?;
        let replacing = match workspace.parent_of(&path, false)? {
            Some(parent) => check_upload_target(&workspace, &parent, &path)?,
            None => 0,
        };
        self.quotas
            .check(&self.sessions, &workspace, req.size_bytes, replacing)
            .await?;
        self.ticket(Grant {
            kind: Kind::Upload,
            session_id: req.session_id,
            origin: req.origin,
            path,
            size: req.size_bytes,
        })
    }

    pub async fn create_download_ticket(
        &self,
        req: pb::CreateDownloadTicketRequest,
    ) -> Result<pb::Ticket, AssetError> {
        let workspace = self.workspace(&req.session_id, &req.origin).await?;
        check_origin(&req.origin)?;
        let path = AssetPath::parse(&req.path)?;
        open_existing(&workspace, &path)?;
        self.ticket(Grant {
            kind: Kind::Download,
            session_id: req.session_id,
            origin: req.origin,
            path,
            size: 0,
        })
    }

    pub async fn list(&self, session_id: &str, origin: &str) -> Result<Vec<pb::Asset>, AssetError> {
        let workspace = self.workspace(session_id, origin).await?;
        let Some(root) = workspace.open(false)? else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || list_files(&workspace, &root))
            .await
            .map_err(|e| AssetError::io("list assets", std::io::Error::other(e)))?
    }

    /// Starts writing `path` of `size` bytes into a temp file beside its
    /// target, with room for `size` held in the quotas until it lands or fails.
    pub async fn begin_upload(
        &self,
        workspace: &ThreadFolder,
        path: &AssetPath,
        size: u64,
    ) -> Result<UploadSink, AssetError> {
        self.check_size(size)?;
        let folder = workspace
            .parent_of(path, true)?
            .expect("the folders are made");
        let replacing = check_upload_target(workspace, &folder, path)?;
        let reservation = self
            .quotas
            .reserve(&self.sessions, workspace, size, replacing)
            .await?;
        let temp = beneath::temp_name();
        let file = folder
            .create_new(&temp, 0o600)
            .map_err(|e| workspace.path_error(path, "write", e))?;
        Ok(UploadSink {
            file: Some(BufWriter::with_capacity(
                WRITE_BUFFER,
                tokio::fs::File::from_std(file),
            )),
            temp,
            folder,
            thread: workspace.clone(),
            path: path.clone(),
            expected: size,
            written: 0,
            limit: self.limits.max_asset_bytes,
            reservation: Some(reservation),
            committed: false,
        })
    }

    /// Opens an existing asset for reading; returns the file and its length.
    pub fn open_read(
        &self,
        workspace: &ThreadFolder,
        path: &AssetPath,
    ) -> Result<(tokio::fs::File, u64), AssetError> {
        let file = open_existing(workspace, path)?;
        let len = file
            .metadata()
            .map_err(|e| workspace.path_error(path, "read", e))?
            .len();
        Ok((tokio::fs::File::from_std(file), len))
    }
}

/// An error SessionService answered, as a page may read it: its own
/// messages name no local path, but for a workspace that cannot be opened,
/// which is said in general words here (the log has SessionService's).
fn page_safe(e: CodedError, session_id: &str) -> AssetError {
    let general = match e.code {
        Code::WORKSPACE_OPEN_FAILED => {
            "the thread's workspace folder is gone or is no longer a folder"
        }
        Code::CORE_UNAVAILABLE => "SessionService is not reachable; try again once Pedelec runs",
        Code::INTERNAL => "SessionService failed to open the thread's workspace",
        _ => return AssetError::Thread(e),
    };
    tracing::warn!(thread = %session_id, code = %e.code.as_str(), error = %e.message, "SessionService refused the workspace");
    AssetError::Thread(CodedError::new(e.code, general))
}

/// The regular file at `path`, open for reading, or ASSET_NOT_FOUND: for a
/// missing file, a folder, and a file that cannot be read (which `List` does
/// not show either).
fn open_existing(workspace: &ThreadFolder, path: &AssetPath) -> Result<std::fs::File, AssetError> {
    let not_found = || AssetError::NotFound(path.to_string());
    let folder = workspace.parent_of(path, false)?.ok_or_else(not_found)?;
    let entry = folder
        .entry(path.name())
        .map_err(|e| workspace.path_error(path, "read", e))?;
    match entry {
        Entry::File { .. } => match folder.open_file(path.name()) {
            Ok(file) => Ok(file),
            Err(e) if beneath::refusal(&e).is_some() => Err(workspace.path_error(path, "read", e)),
            Err(e) => {
                tracing::warn!(workspace = %workspace.workspace.display(), thread = %workspace.session_id, %path, error = %e, "an asset cannot be read");
                Err(not_found())
            }
        },
        Entry::Missing | Entry::Dir => Err(not_found()),
        Entry::Symlink => Err(AssetError::PathInvalid(format!(
            "{path} is a symbolic link (links are never followed)"
        ))),
        Entry::Other => Err(AssetError::PathInvalid(format!(
            "{path} is not a regular file"
        ))),
    }
}

/// Removes upload temp files older than `before` under `root`; returns how many.
fn sweep_temp_files(root: &Dir, before: std::time::SystemTime) -> usize {
    let mut removed = 0;
    let mut stack = match root.try_clone() {
        Ok(dir) => vec![dir],
        Err(_) => return 0,
    };
    while let Some(dir) = stack.pop() {
        for name in dir.names().unwrap_or_default() {
            match dir.entry(&name) {
                Ok(Entry::Dir) => {
                    if let Ok(Some(child)) = dir.child(&name, false) {
                        stack.push(child);
                    }
                }
                Ok(Entry::File { .. })
                    if name.to_str().is_some_and(|n| {
                        n.starts_with(TEMP_PREFIX) && n.ends_with(TEMP_SUFFIX)
                    }) =>
                {
                    let old = dir
                        .open_file(&name)
                        .and_then(|f| f.metadata())
                        .is_ok_and(|md| md.modified().is_ok_and(|m| m < before));
                    if old {
                        dir.remove(&name);
                        removed += 1;
                    }
                }
                _ => {}
            }
        }
    }
    removed
}

/// An upload may replace a regular file, nothing else (not a folder, nor a
/// symlink, FIFO or device); returns the size of the file it would replace.
fn check_upload_target(
    thread: &ThreadFolder,
    folder: &Dir,
    path: &AssetPath,
) -> Result<u64, AssetError> {
    let entry = folder
        .entry(path.name())
        .map_err(|e| thread.path_error(path, "write", e))?;
    match entry {
        Entry::Missing => Ok(0),
        Entry::File { len } => Ok(len),
        Entry::Dir => Err(AssetError::PathInvalid(format!("{path} is a folder"))),
        Entry::Symlink | Entry::Other => Err(AssetError::PathInvalid(format!(
            "{path} is not a regular file (a symlink or special file)"
        ))),
    }
}

/// The origin ends up in an `Access-Control-Allow-Origin` header.
fn check_origin(origin: &str) -> Result<(), AssetError> {
    if origin.is_empty() || hyper::header::HeaderValue::from_str(origin).is_err() {
        return Err(AssetError::InvalidInput(format!(
            "origin {origin:?} is not a valid origin"
        )));
    }
    Ok(())
}

pub fn asset_of(path: &AssetPath, md: &std::fs::Metadata) -> pb::Asset {
    pb::Asset {
        name: path.name().to_string(),
        path: path.to_string(),
        size_bytes: md.len(),
        modified_at: md.modified().ok().map(pedelec_common::to_timestamp),
    }
}

/// Every regular file under `root`, sorted by path; symlinks, Pedelec's temp
/// files and names no asset path could address are skipped. Folders are
/// walked through their descriptors, like every other access.
fn list_files(thread: &ThreadFolder, root: &Dir) -> Result<Vec<pb::Asset>, AssetError> {
    let failed = |e| {
        tracing::warn!(workspace = %thread.workspace.display(), thread = %thread.session_id, error = %e, "could not list the assets");
        AssetError::io("could not list the thread's assets", e)
    };
    let mut out = Vec::new();
    let mut stack = vec![(root.try_clone().map_err(failed)?, Vec::<String>::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for name in dir.names().map_err(failed)? {
            // Names no asset path could address are not listed.
            let Ok(name) = name.into_string() else {
                continue;
            };
            if name.starts_with(RESERVED_PREFIX) || paths::check_segment(&name).is_err() {
                continue;
            }
            let mut segments = prefix.clone();
            segments.push(name.clone());
            match dir.entry(&name).map_err(failed)? {
                // A folder removed, or swapped for a link, while we walk is
                // simply not listed.
                Entry::Dir => {
                    if let Ok(Some(child)) = dir.child(&name, false) {
                        stack.push((child, segments));
                    }
                }
                Entry::File { .. } => {
                    if let (Ok(file), Ok(path)) = (
                        dir.open_file(&name),
                        AssetPath::parse(&format!("/{}", segments.join("/"))),
                    ) && let Ok(md) = file.metadata()
                    {
                        out.push(asset_of(&path, &md));
                    }
                }
                Entry::Missing | Entry::Symlink | Entry::Other => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// An upload in progress: bytes go to a temp file in the target's folder, which
/// is renamed into place only by [`UploadSink::finish`] with exactly the
/// announced size. Dropped unfinished (error, broken connection, cancelled
/// future), it removes the temp file.
pub struct UploadSink {
    file: Option<BufWriter<tokio::fs::File>>,
    /// The temp file's name in `folder`, the target's folder held open.
    temp: String,
    folder: Dir,
    thread: ThreadFolder,
    path: AssetPath,
    expected: u64,
    written: u64,
    limit: u64,
    /// The room held in the quotas; released when the sink goes.
    reservation: Option<Reservation>,
    committed: bool,
}

impl UploadSink {
    pub async fn write(&mut self, data: &[u8]) -> Result<(), AssetError> {
        let total = self.written + data.len() as u64;
        if total > self.expected {
            return Err(if total > self.limit {
                AssetError::TooLarge {
                    size: total,
                    limit: self.limit,
                }
            } else {
                AssetError::SizeMismatch {
                    expected: self.expected,
                    got: total,
                }
            });
        }
        let file = self.file.as_mut().expect("open until finish");
        if let Err(e) = file.write_all(data).await {
            return Err(self.thread.path_error(&self.path, "write", e));
        }
        self.written = total;
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub async fn finish(mut self) -> Result<pb::Asset, AssetError> {
        if self.written != self.expected {
            return Err(AssetError::SizeMismatch {
                expected: self.expected,
                got: self.written,
            });
        }
        let mut file = self.file.take().expect("open until finish");
        if let Err(e) = file.flush().await {
            return Err(self.thread.path_error(&self.path, "write", e));
        }
        // The target may have become a folder while the body streamed: check
        // again right before the rename (in the same, held folder).
        let replaced = check_upload_target(&self.thread, &self.folder, &self.path)?;
        if let Err(e) = self.folder.rename(&self.temp, self.path.name()) {
            return Err(self.thread.path_error(&self.path, "write", e));
        }
        self.committed = true;
        if let Some(reservation) = self.reservation.take() {
            reservation.landed(self.expected as i64 - replaced as i64);
        }
        // The renamed file is the one still open here.
        let md = match file.into_inner().metadata().await {
            Ok(md) => md,
            Err(e) => return Err(self.thread.path_error(&self.path, "read", e)),
        };
        Ok(asset_of(&self.path, &md))
    }
}

impl Drop for UploadSink {
    fn drop(&mut self) {
        if !self.committed {
            self.folder.remove(&self.temp);
        }
    }
}

/// The content type for a download, from the file extension.
pub fn content_type_of(path: &AssetPath) -> &'static str {
    let ext = path
        .name()
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" => "text/plain; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assets(max: u64) -> Assets {
        // Nothing serves there: these tests never reach SessionService.
        let clients = pedelec_common::Clients::new(pedelec_common::RuntimeDir::at("/nonexistent"));
        Assets::new(
            clients.session(),
            Limits {
                max_asset_bytes: max,
                ticket_ttl: Duration::from_secs(60),
                ..Limits::default()
            },
            "http://127.0.0.1:1".into(),
        )
    }

    fn thread(ws: &Path) -> ThreadFolder {
        ThreadFolder {
            workspace: ws.to_path_buf(),
            session_id: "thr_t".into(),
            origin: "https://app.example".into(),
        }
    }

    fn temp_files(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n.starts_with(TEMP_PREFIX))
            .collect()
    }

    #[tokio::test]
    async fn an_upload_lands_whole_or_not_at_all() {
        let ws = tempfile::tempdir().unwrap();
        let a = assets(10);
        let path = AssetPath::parse("/d/f.bin").unwrap();
        let folder = ws.path().join(".pedelec-runtime/assets/thr_t/d");
        let t = thread(ws.path());

        let mut sink = a.begin_upload(&t, &path, 4).await.unwrap();
        sink.write(b"ab").await.unwrap();
        assert_eq!(temp_files(&folder).len(), 1);
        // Short: refused, nothing left.
        assert!(matches!(
            sink.finish().await,
            Err(AssetError::SizeMismatch { .. })
        ));
        assert!(temp_files(&folder).is_empty());
        assert!(!folder.join("f.bin").exists());

        // Long: refused at the first extra byte; past the limit it is TOO_LARGE.
        let mut sink = a.begin_upload(&t, &path, 4).await.unwrap();
        assert!(matches!(
            sink.write(b"abcde").await,
            Err(AssetError::SizeMismatch { .. })
        ));
        assert!(matches!(
            sink.write(b"abcdefghijk").await,
            Err(AssetError::TooLarge { .. })
        ));
        drop(sink);
        assert!(temp_files(&folder).is_empty());
        assert!(matches!(
            a.begin_upload(&t, &path, 11).await,
            Err(AssetError::TooLarge { .. })
        ));

        let mut sink = a.begin_upload(&t, &path, 4).await.unwrap();
        sink.write(b"ab").await.unwrap();
        sink.write(b"cd").await.unwrap();
        let asset = sink.finish().await.unwrap();
        assert_eq!(
            (asset.name.as_str(), asset.path.as_str()),
            ("f.bin", "/d/f.bin")
        );
        assert_eq!(asset.size_bytes, 4);
        assert_eq!(std::fs::read(folder.join("f.bin")).unwrap(), b"abcd");
        assert!(temp_files(&folder).is_empty());

        let (_, len) = a.open_read(&t, &path).unwrap();
        assert_eq!(len, 4);
        std::fs::write(folder.join(".pedelec-upload-x.part"), b"junk").unwrap();
        let listed = list_files(&t, &t.open(false).unwrap().unwrap()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].path, "/d/f.bin");
    }

    #[test]
    fn leftover_temp_files_are_swept_but_not_those_of_running_uploads() {
        let ws = tempfile::tempdir().unwrap();
        let folder = ws.path().join(".pedelec-runtime/assets/thr_t/d");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(".pedelec-upload-old.part"), b"junk").unwrap();
        std::fs::write(folder.join("kept.txt"), b"real").unwrap();
        let cutoff = std::time::SystemTime::now() + Duration::from_secs(1);
        // The sweep covers every thread's folder of the workspace.
        let root = beneath::assets_root(&Dir::open(ws.path()).unwrap(), false)
            .unwrap()
            .unwrap();
        assert_eq!(sweep_temp_files(&root, cutoff), 1);
        assert_eq!(temp_files(&folder), Vec::<String>::new());
        assert!(folder.join("kept.txt").is_file());
        // A temp file newer than the cutoff (an upload of this process) stays.
        std::fs::write(folder.join(".pedelec-upload-new.part"), b"x").unwrap();
        assert_eq!(sweep_temp_files(&root, std::time::UNIX_EPOCH), 0);
        assert_eq!(temp_files(&folder).len(), 1);
    }

    #[test]
    fn content_types_come_from_the_extension() {
        let p = |s: &str| AssetPath::parse(s).unwrap();
        assert_eq!(content_type_of(&p("/a.PNG")), "image/png");
        assert_eq!(content_type_of(&p("/a")), "application/octet-stream");
        assert_eq!(content_type_of(&p("/x.json")), "application/json");
    }
}
