//! The index of explicit workspaces: which threads (of which origin) work in
//! which folder, for every thread the journal holds, ended ones included. A
//! create that names a folder asks it whether the folder may be joined
//! (another origin's workspace, or a folder inside a thread's workspace)
//! instead of reading every record of the journal.
//!
//! It is kept in step with the journal: filled from it at start-up, a thread
//! is added when its create is written (`claim`, which checks and adds under
//! one lock, so two creates cannot both pass) and removed when its record is
//! pruned or a create fails to write. Managed workspaces are not indexed: they
//! lie in the data dir, which no explicit workspace may be, lie inside or
//! contain (`sites::folders`), so they never conflict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// A thread working in an indexed folder.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    thread: String,
    origin: String,
}

/// Why a folder may not be joined by a thread of some origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The folder is, lies inside or contains the workspace of `thread`, of
    /// another origin.
    OtherOrigin { thread: String },
    /// The folder lies strictly inside the workspace of `thread` (of the
    /// same origin): that thread's agent writes there.
    Inside { thread: String },
}

#[derive(Default)]
pub struct WorkspaceIndex {
    /// Folder (canonical) -> the threads working in it. Ordered by path
    /// components, so a folder's descendants follow it in one run.
    by_path: Mutex<BTreeMap<PathBuf, Vec<Owner>>>,
}

impl WorkspaceIndex {
    fn map(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Vec<Owner>>> {
        self.by_path.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `thread` of `origin` working in `path` (start-up, from the journal).
    pub fn insert(&self, path: &Path, thread: &str, origin: &str) {
        insert(&mut self.map(), path, thread, origin);
    }

    /// Removes `thread` from `path`'s entry.
    pub fn remove(&self, path: &Path, thread: &str) {
        let mut map = self.map();
        if let Some(owners) = map.get_mut(path) {
            owners.retain(|o| o.thread != thread);
            if owners.is_empty() {
                map.remove(path);
            }
        }
    }

    /// Whether a thread of `origin` may work in `path`: a conflict with
    /// another origin first, then a folder inside a thread's workspace.
    pub fn conflict(&self, path: &Path, origin: &str) -> Option<Conflict> {
        conflict(&self.map(), path, origin)
    }

    /// [`WorkspaceIndex::conflict`], and when there is none, adds `thread`
    /// of `origin` in `path`, under one lock.
    pub fn claim(&self, path: &Path, thread: &str, origin: &str) -> Result<(), Conflict> {
        let mut map = self.map();
        if let Some(c) = conflict(&map, path, origin) {
            return Err(c);
        }
        insert(&mut map, path, thread, origin);
        Ok(())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().values().map(Vec::len).sum()
    }
}

fn insert(map: &mut BTreeMap<PathBuf, Vec<Owner>>, path: &Path, thread: &str, origin: &str) {
    let owners = map.entry(path.to_path_buf()).or_default();
    if !owners.iter().any(|o| o.thread == thread) {
        owners.push(Owner {
            thread: thread.to_string(),
            origin: origin.to_string(),
        });
    }
}

fn conflict(map: &BTreeMap<PathBuf, Vec<Owner>>, path: &Path, origin: &str) -> Option<Conflict> {
    let other = |owners: &Vec<Owner>| {
        owners
            .iter()
            .find(|o| o.origin != origin)
            .map(|o| Conflict::OtherOrigin {
                thread: o.thread.clone(),
            })
    };
    // The folder itself and every folder containing it: one lookup each.
    for ancestor in path.ancestors() {
        if let Some(c) = map.get(ancestor).and_then(other) {
            return Some(c);
        }
    }
    // The folders inside it, which follow it in the map's order.
    for (_, owners) in map
        .range::<Path, _>((std::ops::Bound::Excluded(path), std::ops::Bound::Unbounded))
        .take_while(|(p, _)| p.starts_with(path))
    {
        if let Some(c) = other(owners) {
            return Some(c);
        }
    }
    path.ancestors()
        .skip(1)
        .find_map(|a| map.get(a)?.first())
        .map(|o| Conflict::Inside {
            thread: o.thread.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "https://a.example";
    const B: &str = "https://b.example";

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn other(thread: &str) -> Option<Conflict> {
        Some(Conflict::OtherOrigin {
            thread: thread.into(),
        })
    }

    #[test]
    fn another_origins_folder_the_folders_inside_and_around_it_conflict() {
        let index = WorkspaceIndex::default();
        index.insert(&p("/w/app"), "thr_a", A);
        // The same folder, inside it, containing it: B may not join.
        assert_eq!(index.conflict(&p("/w/app"), B), other("thr_a"));
        assert_eq!(index.conflict(&p("/w/app/sub/deeper"), B), other("thr_a"));
        assert_eq!(index.conflict(&p("/w"), B), other("thr_a"));
        assert_eq!(index.conflict(&p("/"), B), other("thr_a"));
        // Neighbours whose names only start alike do not.
        for free in ["/w/ap", "/w/app2", "/w/app-x", "/w/b", "/x"] {
            assert_eq!(index.conflict(&p(free), B), None, "{free}");
        }
        // A shares its own workspace, but not a folder inside it.
        assert_eq!(index.conflict(&p("/w/app"), A), None);
        assert_eq!(
            index.conflict(&p("/w/app/sub"), A),
            Some(Conflict::Inside {
                thread: "thr_a".into()
            })
        );
        // A folder containing A's workspace is A's to use.
        assert_eq!(index.conflict(&p("/w"), A), None);
    }

    #[test]
    fn claim_checks_and_adds_at_once_and_remove_frees_the_folder() {
        let index = WorkspaceIndex::default();
        index.claim(&p("/w/app"), "thr_a", A).unwrap();
        index.claim(&p("/w/app"), "thr_a2", A).unwrap();
        assert_eq!(
            index.claim(&p("/w/app"), "thr_b", B),
            Err(Conflict::OtherOrigin {
                thread: "thr_a".into()
            })
        );
        assert_eq!(index.len(), 2, "a refused claim adds nothing");
        index.remove(&p("/w/app"), "thr_a");
        assert_eq!(index.conflict(&p("/w/app"), B), other("thr_a2"));
        index.remove(&p("/w/app"), "thr_a2");
        assert_eq!(index.len(), 0);
        index.claim(&p("/w/app"), "thr_b", B).unwrap();
        // Inserting a thread twice (start-up after a create) keeps one entry.
        index.insert(&p("/w/app"), "thr_b", B);
        assert_eq!(index.len(), 1);
    }

    /// The many-folders case the index exists for: a deep tree of another
    /// origin's workspaces answers the same as a scan of every record.
    #[test]
    fn answers_as_a_scan_of_every_record_would() {
        let index = WorkspaceIndex::default();
        let mut records = Vec::new();
        for i in 0..40 {
            let folder = p(&format!("/r/{}/{}", i % 5, i));
            let origin = if i % 3 == 0 { A } else { B };
            index.insert(&folder, &format!("thr_{i}"), origin);
            records.push((folder, origin));
        }
        let scan = |path: &Path, origin: &str| {
            records
                .iter()
                .any(|(ws, o)| *o != origin && (path.starts_with(ws) || ws.starts_with(path)))
        };
        for probe in [
            "/", "/r", "/r/1", "/r/1/6", "/r/1/6/x", "/r/0/3", "/r/0/30", "/q",
        ] {
            for origin in [A, B] {
                let found = matches!(
                    index.conflict(&p(probe), origin),
                    Some(Conflict::OtherOrigin { .. })
                );
                assert_eq!(found, scan(&p(probe), origin), "{probe} for {origin}");
            }
        }
    }
}
