//! The workspace tools: list and read text files, write into the thread's
//! assets folder. Paths are relative to the workspace; `..`, absolute paths
//! and symbolic links (anywhere on the way) are refused, so the model cannot
//! reach outside the workspace. Every path is resolved beneath the workspace
//! by the kernel, folder by folder from a held descriptor, never followed
//! through a link ([`pedelec_common::beneath`], as AssetService does), so a
//! link swapped in after a check leads nowhere. `.pedelec-runtime/` — in any
//! case: it may be the same folder ([`beneath::is_runtime_folder`]) — is out
//! of reach except this thread's assets folder: the agent's conversations and
//! other threads' assets (threads may share a workspace) stay private.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use pedelec_common::Code;
use pedelec_common::beneath::{self, Dir, Entry, Refusal};
use serde_json::{Value as Json, json};

use crate::error::AgentError;

/// Bytes of a file `read_file` returns at most; the rest is cut (and said so).
pub const MAX_READ: usize = 256 << 10;
/// Entries `list_files` returns at most.
pub const MAX_LIST: usize = 1000;
/// Bytes `write_asset` accepts at most.
pub const MAX_WRITE: usize = 1 << 20;
/// Names starting with this are Pedelec's own (temp files), which
/// AssetService does not list: `write_asset` does not make them.
const RESERVED_PREFIX: &str = ".pedelec-";

pub struct Files {
    root: PathBuf,
    /// This thread's assets folder as workspace-relative components
    /// (`.pedelec-runtime`, `assets`, `<thread id>`); `None` when the agent
    /// runs for no thread (by hand), so no assets folder is reachable.
    assets: Option<Vec<String>>,
}

fn refuse(message: impl Into<String>) -> AgentError {
    AgentError::tool(Code::ASSET_PATH_INVALID, message)
}

/// What a model is told of an I/O error at `path` (its own path, never the
/// workspace's location).
fn io_error(path: &str, e: &std::io::Error) -> AgentError {
    match beneath::refusal(e) {
        Some(Refusal::Symlink) => {
            return refuse(format!(
                "{path}: symbolic links are not followed; paths stay inside the workspace"
            ));
        }
        Some(Refusal::NotAFolder) => {
            return AgentError::tool(
                Code::INVALID_INPUT,
                format!("{path}: a file is in the way where a folder would be"),
            );
        }
        Some(Refusal::NotAFile) => {
            return AgentError::tool(
                Code::INVALID_INPUT,
                format!("{path}: not a file (use list_files for folders)"),
            );
        }
        None => {}
    }
    match e.kind() {
        std::io::ErrorKind::NotFound => AgentError::tool(
            Code::ASSET_NOT_FOUND,
            format!("{path}: no such file or folder"),
        ),
        _ => AgentError::tool(Code::INVALID_INPUT, format!("{path}: {e}")),
    }
}

/// The path's normal components, or why it is refused: it must be relative
/// and without `..`.
fn normal_components(path: &str) -> Result<Vec<String>, AgentError> {
    if path.contains('\0') {
        return Err(refuse("the path contains a NUL byte"));
    }
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(refuse(format!(
                    "{path}: '..' is not allowed; paths stay inside the workspace"
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse(format!(
                    "{path}: absolute paths are not allowed; use a path relative to the workspace"
                )));
            }
        }
    }
    Ok(parts)
}

impl Files {
    /// The tools over the workspace `root` (canonical) for the thread
    /// `thread` (a valid id, [`crate::conversation::valid_id`]), or for no
    /// thread.
    pub fn new(root: PathBuf, thread: Option<&str>) -> Self {
        let assets = thread.map(|id| {
            [beneath::RUNTIME_FOLDER, beneath::ASSETS_FOLDER, id]
                .map(str::to_string)
                .to_vec()
        });
        Files { root, assets }
    }

    /// This thread's assets folder relative to the workspace, e.g.
    /// `.pedelec-runtime/assets/thr_1f…`; `None` without a thread.
    pub fn assets_dir(&self) -> Option<String> {
        self.assets.as_ref().map(|parts| parts.join("/"))
    }

    /// The path's components, or why it is refused: relative, without
    /// `..`, and outside `.pedelec-runtime/` (in any case) unless inside
    /// this thread's assets folder, spelt exactly.
    pub fn components(&self, path: &str) -> Result<Vec<String>, AgentError> {
        let parts = normal_components(path)?;
        if !parts.first().is_some_and(|p| beneath::is_runtime_folder(p)) {
            return Ok(parts);
        }
        match &self.assets {
            Some(assets) if parts.starts_with(assets) => Ok(parts),
            Some(assets) => Err(refuse(format!(
                "{path}: Pedelec's runtime folder is private (only this thread's assets folder, {}/, is readable)",
                assets.join("/")
            ))),
            None => Err(refuse(format!(
                "{path}: Pedelec's runtime folder is private (this run belongs to no thread, so it has no assets folder)"
            ))),
        }
    }

    /// The folder at `parts` beneath the workspace (made when `create`),
    /// each step from the one before, no link followed.
    fn folder(&self, shown: &str, parts: &[String], create: bool) -> Result<Dir, AgentError> {
        let workspace = Dir::open(&self.root).map_err(|e| {
            AgentError::tool(
                Code::INVALID_INPUT,
                format!("the workspace cannot be opened: {e}"),
            )
        })?;
        workspace
            .walk(parts, create)
            .map_err(|e| io_error(shown, &e))?
            .ok_or_else(|| io_error(shown, &std::io::ErrorKind::NotFound.into()))
    }

    pub fn list(&self, path: &str) -> Result<Json, AgentError> {
        let parts = self.components(path)?;
        let dir = self.folder(path, &parts, false)?;
        let mut entries = Vec::new();
        let mut total = 0usize;
        for name in dir.names().map_err(|e| io_error(path, &e))? {
            total += 1;
            let item = match dir.entry(&name) {
                Ok(Entry::File { len }) => json!({"type": "file", "size": len}),
                Ok(Entry::Dir) => json!({"type": "dir"}),
                Ok(Entry::Symlink) => json!({"type": "symlink"}),
                Ok(Entry::Other) => json!({"type": "other"}),
                // Gone while listed.
                Ok(Entry::Missing) | Err(_) => continue,
            };
            let mut item = item;
            item["name"] = json!(name.to_string_lossy());
            entries.push(item);
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let truncated = entries.len() > MAX_LIST;
        entries.truncate(MAX_LIST);
        Ok(
            json!({"path": display(&parts), "entries": entries, "truncated": truncated, "total": total}),
        )
    }

    pub fn read(&self, path: &str) -> Result<Json, AgentError> {
        let parts = self.components(path)?;
        let Some((name, folders)) = parts.split_last() else {
            return Err(refuse("read_file needs a file path"));
        };
        let mut file = self
            .folder(path, folders, false)?
            .open_file(name)
            .map_err(|e| io_error(path, &e))?;
        let size = file.metadata().map_err(|e| io_error(path, &e))?.len();
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_READ as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, &e))?;
        let truncated = bytes.len() > MAX_READ;
        bytes.truncate(MAX_READ);
        let text = text_prefix(bytes, truncated).ok_or_else(|| {
            AgentError::tool(
                Code::ASSET_TEXT_DECODE_FAILED,
                format!("{path}: not a UTF-8 text file"),
            )
        })?;
        Ok(json!({"path": display(&parts), "size": size, "truncated": truncated, "content": text}))
    }

    /// Writes `<workspace>/.pedelec-runtime/assets/<thread id>/<name>` (temp
    /// file, then rename), where AssetService lists the thread's files.
    pub fn write_asset(&self, name: &str, content: &str) -> Result<Json, AgentError> {
        let Some(assets) = &self.assets else {
            return Err(AgentError::tool(
                Code::TOOL_NOT_FOUND,
                format!(
                    "write_asset is not available: this run belongs to no Pedelec thread ({} is not set), so there is no assets folder to write to",
                    pedelec_common::env::THREAD_ID
                ),
            ));
        };
        if content.len() > MAX_WRITE {
            return Err(AgentError::tool(
                Code::ASSET_TOO_LARGE,
                format!("{} bytes is over the limit of {MAX_WRITE}", content.len()),
            ));
        }
        let name_parts = normal_components(name)?;
        if name_parts.is_empty() {
            return Err(refuse("write_asset needs a file name"));
        }
        if name_parts.iter().any(|p| p.starts_with(RESERVED_PREFIX)) {
            return Err(refuse(format!(
                "{name}: names starting with {RESERVED_PREFIX} are Pedelec's own"
            )));
        }
        let mut parts = assets.clone();
        parts.extend(name_parts);
        let (file, folders) = parts.split_last().expect("a name");
        self.folder(name, folders, true)?
            .replace(file, content.as_bytes(), 0o644)
            .map_err(|e| match beneath::refusal(&e) {
                Some(Refusal::NotAFile) => {
                    AgentError::tool(Code::INVALID_INPUT, format!("{name}: is a folder"))
                }
                _ => io_error(name, &e),
            })?;
        Ok(json!({"path": display(&parts), "bytes": content.len()}))
    }
}

fn display(parts: &[String]) -> String {
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// The bytes as text; a cut file may end inside a character, which is dropped.
fn text_prefix(mut bytes: Vec<u8>, cut: bool) -> Option<String> {
    match std::str::from_utf8(&bytes) {
        Ok(_) => {}
        Err(e) if cut && e.error_len().is_none() => bytes.truncate(e.valid_up_to()),
        Err(_) => return None,
    }
    if bytes.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREAD: &str = "thr_0123456789abcdef";

    fn ws() -> (tempfile::TempDir, Files) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "hello").unwrap();
        (dir, Files::new(root, Some(THREAD)))
    }

    fn code(r: Result<Json, AgentError>) -> &'static str {
        r.unwrap_err().code().as_str()
    }

    #[test]
    fn path_rules() {
        let (_d, files) = ws();
        for ok in [
            "a",
            "./a/b",
            "src/",
            ".pedelec-runtime/assets/thr_0123456789abcdef",
            "./.pedelec-runtime/assets/thr_0123456789abcdef/x",
        ] {
            assert!(files.components(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/..",
            "a\0b",
            ".pedelec-runtime",
            ".pedelec-runtime/assets",
            ".pedelec-runtime/agent/s.json",
            ".pedelec-runtime/assets/thr_other/x",
            ".pedelec-runtime/assets/thr_0123456789abcdefg/x",
            // In any case: on a case-insensitive folder it is the same one.
            ".PEDELEC-RUNTIME/agent/s.json",
            "./.Pedelec-Runtime",
            ".pedelec-RUNTIME/assets/thr_other/x",
            // The own folder only as spelt.
            ".PEDELEC-RUNTIME/assets/thr_0123456789abcdef/x",
        ] {
            assert!(files.components(bad).is_err(), "{bad}");
        }
        assert_eq!(files.components("./a//b/").unwrap(), ["a", "b"]);
        assert_eq!(
            files.assets_dir().unwrap(),
            ".pedelec-runtime/assets/thr_0123456789abcdef"
        );
    }

    #[test]
    fn reads_and_lists_inside_the_workspace() {
        let (_d, files) = ws();
        let read = files.read("src/a.txt").unwrap();
        assert_eq!(read["content"], "hello");
        let list = files.list("").unwrap();
        assert_eq!(list["entries"], json!([{"name": "src", "type": "dir"}]));
        assert_eq!(code(files.read("nope.txt")), "ASSET_NOT_FOUND");
        assert_eq!(code(files.read("src")), "INVALID_INPUT");
        assert_eq!(code(files.read("../etc/passwd")), "ASSET_PATH_INVALID");
    }

    #[test]
    fn symlinks_are_refused_anywhere_on_the_path() {
        let (d, files) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("src/s")).unwrap();
        assert_eq!(code(files.read("out/secret")), "ASSET_PATH_INVALID");
        assert_eq!(code(files.read("src/s")), "ASSET_PATH_INVALID");
        assert_eq!(code(files.list("out")), "ASSET_PATH_INVALID");
        let own = d.path().join(".pedelec-runtime/assets").join(THREAD);
        assert_eq!(
            code(files.write_asset("x", "y").and_then(|_| {
                std::fs::remove_dir_all(&own).unwrap();
                std::os::unix::fs::symlink(outside.path(), &own).unwrap();
                files.write_asset("x", "y")
            })),
            "ASSET_PATH_INVALID"
        );
        assert!(!outside.path().join("x").exists());
    }

    /// The file flips between a regular file and a symlink out of the
    /// workspace while the tool reads it (renames are atomic, so the name
    /// always exists): whatever the timing, nothing outside is ever read.
    #[test]
    fn a_file_swapped_for_a_symlink_mid_read_never_leads_outside() {
        let (d, files) = ws();
        let root = d.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.txt"), "outside").unwrap();
        std::fs::write(root.join("inside.txt"), "inside").unwrap();
        std::fs::write(root.join("src/f.txt"), "inside").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (root, outside, stop) = (root.clone(), outside.path().to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let target = root.join("src/f.txt");
                let flip = || -> std::io::Result<()> {
                    std::fs::hard_link(root.join("inside.txt"), root.join("src/t1"))?;
                    std::fs::rename(root.join("src/t1"), &target)?;
                    std::os::unix::fs::symlink(outside.join("f.txt"), root.join("src/t2"))?;
                    std::fs::rename(root.join("src/t2"), &target)
                };
                // Ends with the test, or when its folder is gone (a failed test).
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && flip().is_ok() {}
            })
        };
        let (mut inside, mut refused) = (0, 0);
        for _ in 0..20_000 {
            match files.read("src/f.txt") {
                Ok(read) => {
                    assert_eq!(read["content"], "inside", "read through the symlink");
                    inside += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipper.join().unwrap();
        assert!(
            inside > 0 && refused > 0,
            "both states were met: {inside} reads, {refused} refusals"
        );
    }

    #[test]
    fn only_regular_files_are_read_and_a_fifo_does_not_block() {
        let (d, files) = ws();
        let status = std::process::Command::new("mkfifo")
            .arg(d.path().join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(code(files.read("pipe")), "INVALID_INPUT");
        assert_eq!(code(files.read("src/a.txt/x")), "INVALID_INPUT");
        let list = files.list(".").unwrap();
        assert!(
            list["entries"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "pipe", "type": "other"})),
            "{list}"
        );
        // Pedelec's own temp names are not made by the model.
        assert_eq!(
            code(files.write_asset("d/.pedelec-upload-x.part", "y")),
            "ASSET_PATH_INVALID"
        );
        // A folder is not replaced by a file, nor a file used as a folder.
        files.write_asset("sub/inner", "y").unwrap();
        let refused = files.write_asset("sub", "y").unwrap_err();
        assert!(refused.to_string().contains("is a folder"), "{refused}");
        assert_eq!(code(files.write_asset("sub/inner/x", "y")), "INVALID_INPUT");
    }

    #[test]
    fn big_and_binary_files() {
        let (d, files) = ws();
        let mut big = "é".repeat(MAX_READ / 2);
        big.push_str("tail");
        std::fs::write(d.path().join("big.txt"), &big).unwrap();
        let read = files.read("big.txt").unwrap();
        assert_eq!(read["truncated"], true);
        assert!(read["content"].as_str().unwrap().len() <= MAX_READ);
        std::fs::write(d.path().join("bin"), [0u8, 159, 146, 150]).unwrap();
        assert_eq!(code(files.read("bin")), "ASSET_TEXT_DECODE_FAILED");
    }

    #[test]
    fn writes_land_in_the_threads_assets_folder_only() {
        let (d, files) = ws();
        let w = files.write_asset("out/report.md", "# hi").unwrap();
        let path = format!(".pedelec-runtime/assets/{THREAD}/out/report.md");
        assert_eq!(w["path"], path);
        assert_eq!(
            std::fs::read_to_string(d.path().join(&path)).unwrap(),
            "# hi"
        );
        // What it wrote, it reads back.
        assert_eq!(files.read(&path).unwrap()["content"], "# hi");
        assert_eq!(code(files.write_asset("../x", "y")), "ASSET_PATH_INVALID");
        assert_eq!(code(files.write_asset("/tmp/x", "y")), "ASSET_PATH_INVALID");
        let huge = "x".repeat(MAX_WRITE + 1);
        assert_eq!(code(files.write_asset("h", &huge)), "ASSET_TOO_LARGE");
    }

    #[test]
    fn another_threads_assets_are_out_of_reach() {
        let (d, files) = ws();
        let other = d.path().join(".pedelec-runtime/assets/thr_other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("private.txt"), "theirs").unwrap();
        for path in [
            ".pedelec-runtime/assets/thr_other/private.txt",
            "./.pedelec-runtime/assets/thr_other/private.txt",
        ] {
            assert_eq!(code(files.read(path)), "ASSET_PATH_INVALID", "{path}");
        }
        for folder in [
            ".pedelec-runtime/assets/thr_other",
            ".pedelec-runtime/assets",
            ".pedelec-runtime",
        ] {
            assert_eq!(code(files.list(folder)), "ASSET_PATH_INVALID", "{folder}");
        }
        // A name cannot climb out of the own folder into the other one.
        assert_eq!(
            code(files.write_asset("../thr_other/private.txt", "mine")),
            "ASSET_PATH_INVALID"
        );
        assert_eq!(
            std::fs::read_to_string(other.join("private.txt")).unwrap(),
            "theirs"
        );
    }

    #[test]
    fn without_a_thread_no_assets_folder_is_reachable() {
        let (d, with) = ws();
        with.write_asset("mine.txt", "x").unwrap();
        let files = Files::new(d.path().canonicalize().unwrap(), None);
        assert_eq!(files.assets_dir(), None);
        let refused = files.write_asset("a.txt", "x").unwrap_err();
        assert_eq!(refused.code().as_str(), "TOOL_NOT_FOUND");
        assert!(
            refused.to_string().contains("PEDELEC_THREAD_ID is not set"),
            "{refused}"
        );
        assert_eq!(
            code(files.read(&format!(".pedelec-runtime/assets/{THREAD}/mine.txt"))),
            "ASSET_PATH_INVALID"
        );
        assert_eq!(files.read("src/a.txt").unwrap()["content"], "hello");
    }
}
