//! The conversation of one agent session, kept in the thread's workspace
//! (`.pedelec-runtime/agent/<id>.json`) so a reactivated thread, or a new
//! process after a restart, resumes it with `--session-id`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::error::AgentError;

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    /// Ollama chat messages (user, assistant with tool_calls, tool), no system message:
    /// that one is rebuilt each turn from the current tools.
    messages: Vec<Json>,
}

pub struct Conversation {
    pub id: String,
    pub messages: Vec<Json>,
    path: PathBuf,
}

/// A session id names a file, so it is held to a plain alphabet.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Conversation {
    /// A new conversation, or the saved one of `resume`. A resumed id whose
    /// file is gone (the workspace was cleaned) starts empty under the same id
    /// rather than failing every later turn of the thread. Returns whether
    /// history was found.
    pub fn open(
        workspace: &Path,
        resume: Option<&str>,
    ) -> Result<(Conversation, bool), AgentError> {
        let id = match resume {
            Some(id) if valid_id(id) => id.to_string(),
            Some(id) => {
                return Err(AgentError::Usage(format!(
                    "--session-id {id:?}: expected letters, digits, '-' or '_' (at most 64)"
                )));
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let path = pedelec_common::beneath::agent_folder(workspace).join(format!("{id}.json"));
        let mut conv = Conversation {
            id,
            messages: Vec::new(),
            path,
        };
        if resume.is_none() {
            return Ok((conv, false));
        }
        match std::fs::read(&conv.path) {
            Ok(bytes) => {
                let file: File = serde_json::from_slice(&bytes).map_err(|e| {
                    AgentError::Conversation(format!(
                        "the saved conversation {} is damaged: {e}",
                        conv.path.display()
                    ))
                })?;
                conv.messages = file.messages;
                Ok((conv, true))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((conv, false)),
            Err(e) => Err(AgentError::Conversation(format!(
                "cannot read {}: {e}",
                conv.path.display()
            ))),
        }
    }

    /// Replaces the file atomically (temp file, rename), 0600: it holds what the user wrote.
    pub fn save(&self) -> Result<(), AgentError> {
        let file = File {
            version: 1,
            messages: self.messages.clone(),
        };
        let bytes = serde_json::to_vec(&file).map_err(|e| {
            AgentError::Conversation(format!("cannot encode the conversation: {e}"))
        })?;
        let fail = |e: std::io::Error| {
            AgentError::Conversation(format!("cannot save {}: {e}", self.path.display()))
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        // No fsync: the file is saved after every round and survives this
        // process crashing (the page cache keeps it); an fsync per round would
        // cost the first delta milliseconds on a slow disk.
        pedelec_common::paths::replace_file(&self.path, &bytes, 0o600, false).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_plain() {
        assert!(valid_id("0b6f-4c_A1"));
        for bad in ["", "../x", "a/b", "a.json", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn saved_history_comes_back_and_a_lost_file_starts_fresh() {
        let ws = tempfile::tempdir().unwrap();
        let (mut conv, resumed) = Conversation::open(ws.path(), None).unwrap();
        assert!(!resumed);
        conv.messages.push(json!({"role": "user", "content": "hi"}));
        conv.save().unwrap();
        let (again, resumed) = Conversation::open(ws.path(), Some(&conv.id)).unwrap();
        assert!(resumed);
        assert_eq!(again.messages, conv.messages);
        let (fresh, resumed) = Conversation::open(ws.path(), Some("gone")).unwrap();
        assert!(!resumed && fresh.messages.is_empty());
        assert_eq!(fresh.id, "gone");
        assert!(Conversation::open(ws.path(), Some("../etc")).is_err());
    }
}
