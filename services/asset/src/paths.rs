//! Asset paths: `/`-rooted, checked segment by segment, and walked on disk without
//! ever following a symlink, so no path can leave the assets root.

use std::fs::{DirBuilder, Metadata};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::error::AssetError;

/// Names starting with this are Pedelec's own (upload temp files); a user path
/// may not use it, so `List` can skip such names without hiding anything real.
pub const RESERVED_PREFIX: &str = ".pedelec-";

/// Longest accepted path, in bytes (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted segment, in bytes (the usual NAME_MAX).
pub const MAX_SEGMENT_BYTES: usize = 255;

/// A syntactically valid asset path, e.g. `/reports/q3.pdf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssetPath {
    segments: Vec<String>,
}

fn invalid(path: &str, why: &str) -> AssetError {
    AssetError::PathInvalid(format!("invalid asset path {path:?}: {why}"))
}

/// Checks one segment; `Err` says why it is refused.
pub fn check_segment(segment: &str) -> Result<(), &'static str> {
    if segment.is_empty() {
        return Err("empty segment");
    }
    if segment == "." || segment == ".." {
        return Err("`.` and `..` segments are not allowed");
    }
    if segment.contains('\\') {
        return Err("backslash is not allowed");
    }
    if segment.contains('\0') {
        return Err("NUL is not allowed");
    }
    // Control characters are legal on Linux but break listings and headers.
    if segment.chars().any(char::is_control) {
        return Err("control characters are not allowed");
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err("a segment is longer than 255 bytes");
    }
    if segment.starts_with(RESERVED_PREFIX) {
        return Err("names starting with `.pedelec-` are reserved");
    }
    Ok(())
}

impl AssetPath {
    pub fn parse(path: &str) -> Result<AssetPath, AssetError> {
        let Some(rest) = path.strip_prefix('/') else {
            return Err(invalid(path, "must start with `/`"));
        };
        if path.len() > MAX_PATH_BYTES {
            return Err(invalid(path, "longer than 4096 bytes"));
        }
        if rest.is_empty() {
            return Err(invalid(path, "names no file"));
        }
        let mut segments = Vec::new();
        for segment in rest.split('/') {
            check_segment(segment).map_err(|why| invalid(path, why))?;
            segments.push(segment.to_string());
        }
        Ok(AssetPath { segments })
    }

    /// `/<name>`, for an upload without a target path; `name` must be one segment.
    pub fn from_name(name: &str) -> Result<AssetPath, AssetError> {
        if name.contains('/') {
            return Err(invalid(name, "a name must be a single segment"));
        }
        check_segment(name).map_err(|why| invalid(name, why))?;
        Ok(AssetPath {
            segments: vec![name.to_string()],
        })
    }

    pub fn name(&self) -> &str {
        self.segments.last().map(String::as_str).unwrap_or_default()
    }

    /// The file's location under `root`.
    pub fn under(&self, root: &Path) -> PathBuf {
        let mut p = root.to_path_buf();
        p.extend(&self.segments);
        p
    }
}

impl std::fmt::Display for AssetPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for s in &self.segments {
            write!(f, "/{s}")?;
        }
        Ok(())
    }
}

/// What is on disk at an asset path.
#[derive(Debug)]
pub enum Leaf {
    Missing,
    File(Metadata),
    Dir,
}

/// Walks `path` under `root` with `symlink_metadata`: every existing component
/// must be a real directory (the last may be a regular file), never a symlink.
pub fn inspect(root: &Path, path: &AssetPath) -> Result<Leaf, AssetError> {
    let mut current = root.to_path_buf();
    let last = path.segments.len() - 1;
    for (i, segment) in path.segments.iter().enumerate() {
        current.push(segment);
        let md = match std::fs::symlink_metadata(&current) {
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Leaf::Missing),
            Err(e) => return Err(AssetError::io(format!("inspect {path}"), e)),
        };
        let ft = md.file_type();
        if ft.is_symlink() {
            return Err(invalid(&path.to_string(), "goes through a symlink"));
        }
        if i < last {
            if !ft.is_dir() {
                return Err(invalid(&path.to_string(), "a parent is not a folder"));
            }
        } else if ft.is_file() {
            return Ok(Leaf::File(md));
        } else if ft.is_dir() {
            return Ok(Leaf::Dir);
        } else {
            return Err(invalid(&path.to_string(), "not a regular file"));
        }
    }
    Ok(Leaf::Missing)
}

/// Creates the missing parent folders of `path` (0700), refusing symlinks;
/// returns the folder the file goes into.
pub fn create_parents(root: &Path, path: &AssetPath) -> Result<PathBuf, AssetError> {
    let mut current = root.to_path_buf();
    for segment in &path.segments[..path.segments.len() - 1] {
        current.push(segment);
        make_dir(&current).map_err(|e| match e {
            DirError::NotADir => invalid(&path.to_string(), "a parent is not a folder"),
            DirError::Io(e) => AssetError::io(format!("create folders for {path}"), e),
        })?;
    }
    Ok(current)
}

enum DirError {
    NotADir,
    Io(std::io::Error),
}

/// `mkdir 0700`, or accept an existing real folder (not a symlink to one).
fn make_dir(dir: &Path) -> Result<(), DirError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::symlink_metadata(dir) {
                Ok(md) if md.file_type().is_dir() => Ok(()),
                Ok(_) => Err(DirError::NotADir),
                Err(e) => Err(DirError::Io(e)),
            }
        }
        Err(e) => Err(DirError::Io(e)),
    }
}

/// `<workspace>/.pedelec-runtime/assets`, created (0700) when `create`;
/// `None` when it does not exist and `create` is false. Neither folder may be a symlink.
pub fn assets_root(workspace: &Path, create: bool) -> Result<Option<PathBuf>, AssetError> {
    let runtime = workspace.join(".pedelec-runtime");
    let root = runtime.join("assets");
    for dir in [&runtime, &root] {
        match std::fs::symlink_metadata(dir) {
            Ok(md) if md.file_type().is_dir() => {}
            Ok(_) => {
                return Err(AssetError::PathInvalid(format!(
                    "{} is not a real folder",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Ok(None);
                }
                make_dir(dir).map_err(|e| match e {
                    DirError::NotADir => {
                        AssetError::PathInvalid(format!("{} is not a real folder", dir.display()))
                    }
                    DirError::Io(e) => AssetError::io(format!("create {}", dir.display()), e),
                })?;
            }
            Err(e) => return Err(AssetError::io(format!("inspect {}", dir.display()), e)),
        }
    }
    Ok(Some(root))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AssetError;

    fn refused(path: &str) -> bool {
        matches!(AssetPath::parse(path), Err(AssetError::PathInvalid(_)))
    }

    #[test]
    fn good_paths_parse_and_display_back() {
        for p in [
            "/a",
            "/a/b/c.txt",
            "/.hidden",
            "/spaces in name.pdf",
            "/ünï/cødé",
        ] {
            let parsed = AssetPath::parse(p).unwrap();
            assert_eq!(parsed.to_string(), p);
        }
        let p = AssetPath::parse("/x/y.bin").unwrap();
        assert_eq!(p.name(), "y.bin");
        assert_eq!(p.under(Path::new("/r")), PathBuf::from("/r/x/y.bin"));
    }

    #[test]
    fn every_bad_form_is_refused() {
        let long_segment = format!("/{}", "a".repeat(256));
        let long_path = "/a".repeat(2049);
        for p in [
            "",
            "a",
            "a/b",
            "/",
            "//",
            "//a",
            "/a//b",
            "/a/",
            "/.",
            "/..",
            "/a/./b",
            "/a/../b",
            "/../etc/passwd",
            "/a/..",
            "/a\\b",
            "/..\\x",
            "/a\0b",
            "/a\nb",
            "/.pedelec-upload-x.part",
            "/dir/.pedelec-anything",
            long_segment.as_str(),
            long_path.as_str(),
        ] {
            assert!(refused(p), "{p:?} should be refused");
        }
    }

    #[test]
    fn names_are_single_segments() {
        assert_eq!(AssetPath::from_name("a.txt").unwrap().to_string(), "/a.txt");
        for n in ["", ".", "..", "a/b", "/a", "a\\b", "a\0", ".pedelec-x"] {
            assert!(AssetPath::from_name(n).is_err(), "{n:?}");
        }
    }

    #[test]
    fn inspect_refuses_symlinks_anywhere_and_files_as_parents() {
        let dir = tempfile::tempdir().unwrap();
        let root = assets_root(dir.path(), true).unwrap().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("file-link")).unwrap();
        std::fs::write(root.join("plain"), b"p").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();

        let p = |s: &str| AssetPath::parse(s).unwrap();
        for bad in ["/link/secret", "/link/new", "/file-link", "/plain/x"] {
            assert!(
                matches!(inspect(&root, &p(bad)), Err(AssetError::PathInvalid(_))),
                "{bad}"
            );
            assert!(create_parents(&root, &p(bad)).is_err() || bad == "/file-link");
        }
        assert!(matches!(inspect(&root, &p("/plain")), Ok(Leaf::File(_))));
        assert!(matches!(inspect(&root, &p("/sub")), Ok(Leaf::Dir)));
        assert!(matches!(inspect(&root, &p("/nope/x")), Ok(Leaf::Missing)));
        let parent = create_parents(&root, &p("/new/deeper/f")).unwrap();
        assert_eq!(parent, root.join("new/deeper"));
        assert!(parent.is_dir());
    }

    #[test]
    fn a_symlinked_assets_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".pedelec-runtime")).unwrap();
        assert!(matches!(
            assets_root(dir.path(), true),
            Err(AssetError::PathInvalid(_))
        ));
        let fresh = tempfile::tempdir().unwrap();
        assert!(assets_root(fresh.path(), false).unwrap().is_none());
        let root = assets_root(fresh.path(), true).unwrap().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
