//! The asset logic, free of gRPC and HTTP: thread checks through SessionService,
//! tickets, listing, and the streaming upload/read primitives both front ends use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pedelec_common::clients::SessionClient;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;
use tokio::io::{AsyncWriteExt, BufWriter};

use crate::beneath::{Dir, Entry};
use crate::error::AssetError;
use crate::paths::{self, AssetPath, RESERVED_PREFIX};
use crate::tickets::{Grant, Kind, Tickets};

/// Prefix and suffix of upload temp files (the prefix is reserved, see `paths`).
pub const TEMP_PREFIX: &str = ".pedelec-upload-";
pub const TEMP_SUFFIX: &str = ".part";
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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_asset_bytes: 100 * 1024 * 1024,
            ticket_ttl: Duration::from_secs(5 * 60),
            upload_deadline: Duration::from_secs(15 * 60),
        }
    }
}

/// Where one thread's assets live: `<workspace>/.pedelec-runtime/assets/<session id>/`,
/// so threads sharing a workspace never see each other's files.
#[derive(Clone, Debug)]
pub struct ThreadFolder {
    pub workspace: PathBuf,
    pub session_id: String,
}

/// The asset service's logic, independent of gRPC.
pub struct Assets {
    sessions: SessionClient,
    tickets: Tickets,
    limits: Limits,
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
            if let Ok(Some(root)) = assets_root(&workspace, false) {
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
            .map_err(|s| AssetError::Thread(CodedError::from_status(&s, Code::CORE_UNAVAILABLE)))?
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
        // Refuse a bad target now rather than after the page sent the body.
        let root = root(&workspace, true)?;
        if let Some(parent) = root.parent_of(&path, false)? {
            check_upload_target(&parent, &path)?;
        }
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
        let Some(root) = assets_dir(&workspace, false)? else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || list_files(&root))
            .await
            .map_err(|e| AssetError::io("list assets", std::io::Error::other(e)))?
    }

    /// Starts writing `path` of `size` bytes into a temp file beside its target.
    pub fn begin_upload(
        &self,
        workspace: &ThreadFolder,
        path: &AssetPath,
        size: u64,
    ) -> Result<UploadSink, AssetError> {
        self.check_size(size)?;
        let root = root(workspace, true)?;
        let folder = root.parent_of(path, true)?.expect("parents are created");
        check_upload_target(&folder, path)?;
        let temp = format!(
            "{TEMP_PREFIX}{}{TEMP_SUFFIX}",
            uuid::Uuid::new_v4().simple()
        );
        let file = folder.create_new(&temp)?;
        Ok(UploadSink {
            file: Some(BufWriter::with_capacity(
                WRITE_BUFFER,
                tokio::fs::File::from_std(file),
            )),
            temp,
            folder,
            path: path.clone(),
            expected: size,
            written: 0,
            limit: self.limits.max_asset_bytes,
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
            .map_err(|e| AssetError::io(format!("stat {path}"), e))?
            .len();
        Ok((tokio::fs::File::from_std(file), len))
    }
}

/// `<workspace>/.pedelec-runtime/assets`, created (0700) when `create`;
/// `None` when it does not exist and `create` is false. Neither folder may be
/// a symlink; both are held open, so later steps stay beneath them.
fn assets_root(workspace: &Path, create: bool) -> Result<Option<Dir>, AssetError> {
    let Some(runtime) = Dir::open(workspace)?.child(".pedelec-runtime", create)? else {
        return Ok(None);
    };
    runtime.child("assets", create)
}

/// The thread's own folder in [`assets_root`], created (0700) when `create`.
fn assets_dir(thread: &ThreadFolder, create: bool) -> Result<Option<Dir>, AssetError> {
    let Some(root) = assets_root(&thread.workspace, create)? else {
        return Ok(None);
    };
    root.child(&thread.session_id, create)
}

fn root(workspace: &ThreadFolder, create: bool) -> Result<Dir, AssetError> {
    assets_dir(workspace, create)?
        .ok_or_else(|| AssetError::io("assets root", std::io::ErrorKind::NotFound.into()))
}

/// The regular file at `path`, open for reading, or ASSET_NOT_FOUND.
fn open_existing(workspace: &ThreadFolder, path: &AssetPath) -> Result<std::fs::File, AssetError> {
    let not_found = || AssetError::NotFound(path.to_string());
    let folder = assets_dir(workspace, false)?
        .and_then(|root| root.parent_of(path, false).transpose())
        .transpose()?
        .ok_or_else(not_found)?;
    match folder.entry(path.name())? {
        Entry::File => folder.open_file(path.name()),
        Entry::Missing | Entry::Dir => Err(not_found()),
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
                Ok(Entry::File) if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) => {
                    let old = dir
                        .open_file(&name)
                        .and_then(|f| f.metadata().map_err(|e| AssetError::io("stat", e)))
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
/// symlink, FIFO or device).
fn check_upload_target(folder: &Dir, path: &AssetPath) -> Result<(), AssetError> {
    match folder.entry(path.name())? {
        Entry::Missing | Entry::File => Ok(()),
        Entry::Dir => Err(AssetError::PathInvalid(format!("{path} is a folder"))),
        Entry::Other => Err(AssetError::PathInvalid(format!(
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
fn list_files(root: &Dir) -> Result<Vec<pb::Asset>, AssetError> {
    let mut out = Vec::new();
    let mut stack = vec![(root.try_clone()?, Vec::<String>::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for name in dir.names()? {
            if name.starts_with(RESERVED_PREFIX) || paths::check_segment(&name).is_err() {
                continue;
            }
            let mut segments = prefix.clone();
            segments.push(name.clone());
            match dir.entry(&name)? {
                // A folder removed while we walk is simply not listed.
                Entry::Dir => {
                    if let Some(child) = dir.child(&name, false)? {
                        stack.push((child, segments));
                    }
                }
                Entry::File => {
                    if let (Ok(file), Ok(path)) = (
                        dir.open_file(&name),
                        AssetPath::parse(&format!("/{}", segments.join("/"))),
                    ) && let Ok(md) = file.metadata()
                    {
                        out.push(asset_of(&path, &md));
                    }
                }
                Entry::Missing | Entry::Other => {}
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
    path: AssetPath,
    expected: u64,
    written: u64,
    limit: u64,
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
        file.write_all(data)
            .await
            .map_err(|e| AssetError::io(format!("write {}", self.path), e))?;
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
        file.flush()
            .await
            .map_err(|e| AssetError::io(format!("write {}", self.path), e))?;
        // The target may have become a folder while the body streamed: check
        // again right before the rename (in the same, held folder).
        check_upload_target(&self.folder, &self.path)?;
        self.folder.rename(&self.temp, self.path.name())?;
        self.committed = true;
        // The renamed file is the one still open here.
        let md = file
            .into_inner()
            .metadata()
            .await
            .map_err(|e| AssetError::io(format!("stat {}", self.path), e))?;
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

        let mut sink = a.begin_upload(&t, &path, 4).unwrap();
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
        let mut sink = a.begin_upload(&t, &path, 4).unwrap();
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
            a.begin_upload(&t, &path, 11),
            Err(AssetError::TooLarge { .. })
        ));

        let mut sink = a.begin_upload(&t, &path, 4).unwrap();
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
        let listed = list_files(&root(&t, false).unwrap()).unwrap();
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
        let root = assets_root(ws.path(), false).unwrap().unwrap();
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
