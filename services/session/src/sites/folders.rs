//! The folders no site may ever be granted (FOLDER_NOT_GRANTABLE): the one
//! list of them, used by GrantSite and by CreateSession, always on canonical
//! paths (symlinks resolved), so a link to one of them is refused too.

use std::path::{Path, PathBuf};

use pedelec_common::{DataDir, RuntimeDir};

/// Folders under the home folder that hold the user's or an agent CLI's
/// credentials: a workspace there would hand a page's agent the keys.
const CREDENTIAL_FOLDERS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config/gh",
    ".config/gcloud",
    ".codex",
    ".claude",
    ".config/opencode",
    ".local/share/opencode",
    ".cursor",
    ".gemini",
    ".netrc",
    ".password-store",
];

/// The never-grantable folders of this process: Pedelec's data and runtime
/// dirs, the home folder, `/`, and the credential folders under home.
#[derive(Clone, Debug)]
pub struct NeverGrantable {
    /// Refused when the path is one of these, inside one, or contains one.
    protected: Vec<(PathBuf, &'static str)>,
    /// Refused when the path is exactly one of these.
    exact: Vec<(PathBuf, &'static str)>,
}

/// A path as it is on disk now: canonical when it exists, else as given.
fn resolved(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

impl NeverGrantable {
    pub fn new(data_dir: &DataDir, runtime_dir: &RuntimeDir, home: Option<&Path>) -> Self {
        let mut protected = vec![
            (resolved(data_dir.path()), "Pedelec's data folder"),
            (resolved(runtime_dir.path()), "Pedelec's runtime folder"),
        ];
        let mut exact = vec![(PathBuf::from("/"), "the root folder")];
        if let Some(home) = home {
            let home = resolved(home);
            for folder in CREDENTIAL_FOLDERS {
                // Both the link and what it points to: either names the keys.
                let lexical = home.join(folder);
                let real = resolved(&lexical);
                if real != lexical {
                    protected.push((real, "a credentials folder"));
                }
                protected.push((lexical, "a credentials folder"));
            }
            exact.push((home, "the home folder"));
        }
        NeverGrantable { protected, exact }
    }

    /// The process's own: `$HOME` is the user's home folder.
    pub fn of_process(data_dir: &DataDir, runtime_dir: &RuntimeDir) -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        NeverGrantable::new(data_dir, runtime_dir, home.as_deref())
    }

    /// Why the canonical path `path` may never be granted, if it may not:
    /// what it is, is inside or contains, in words that name no folder (the
    /// answer can reach a page: the data dir's path holds the user's name).
    pub fn refusal(&self, path: &Path) -> Option<String> {
        if let Some((_, what)) = self.exact.iter().find(|(p, _)| p == path) {
            return Some(format!("it is {what}"));
        }
        for (p, what) in &self.protected {
            if path == p || path.starts_with(p) {
                return Some(format!("it is or lies inside {what}"));
            }
            if p.starts_with(path) {
                return Some(format!("it contains {what}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_pedelec_dirs_home_root_and_credentials() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("src/app")).unwrap();
        let data = DataDir::at(home.join(".local/share/pedelec"));
        let runtime = RuntimeDir::at(root.join("rt"));
        let never = NeverGrantable::new(&data, &runtime, Some(&home));
        for refused in [
            PathBuf::from("/"),
            home.clone(),
            home.join(".ssh"),
            home.join(".ssh/keys"),
            home.join(".local"),
            home.join(".local/share/pedelec/workspaces/x"),
            home.join(".config"),
            root.join("rt"),
            root.clone(),
        ] {
            let why = never.refusal(&refused);
            assert!(why.is_some(), "{}", refused.display());
            // The reason can reach a page: it names no folder.
            assert!(!why.unwrap().contains('/'), "{}", refused.display());
        }
        assert_eq!(never.refusal(&home.join("src/app")), None);
        assert_eq!(never.refusal(&home.join("src")), None);
    }
}
