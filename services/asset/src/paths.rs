//! Asset paths: `/`-rooted and checked segment by segment. They are used on
//! disk only through `pedelec_common::beneath::Dir`, which never follows a
//! symlink, so no path can leave the assets root.

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

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The folders the file is in, from the top (all segments but the last).
    pub fn folders(&self) -> &[String] {
        &self.segments[..self.segments.len() - 1]
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
}
