//! A thread's durable record and the journal that keeps one file per thread in
//! `<data dir>/sessions/<id>.json`, replaced atomically on every state change.

use std::path::{Path, PathBuf};

use pedelec_common::CodedError;
use pedelec_proto::v1 as pb;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Idle,
    Running,
    WaitingToolResult,
    Ended,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    SendText,
    Prepare,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// Who reported it: the provider (the agent CLI or its model) or Pedelec.
    /// Journaled as the boolean `from_provider`, as records always were.
    #[serde(
        default = "source_core",
        rename = "from_provider",
        with = "source_as_from_provider"
    )]
    pub source: pb::ErrorSource,
}

impl ErrorRecord {
    pub fn new(e: &CodedError, source: pb::ErrorSource) -> Self {
        ErrorRecord {
            code: e.wire_code().to_string(),
            message: e.message.clone(),
            details: e.details.clone(),
            source,
        }
    }
}

fn source_core() -> pb::ErrorSource {
    pb::ErrorSource::Core
}

/// `ErrorRecord::source` in the journal: `from_provider: true | false`.
mod source_as_from_provider {
    use pedelec_proto::v1 as pb;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(source: &pb::ErrorSource, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(*source == pb::ErrorSource::Provider)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<pb::ErrorSource, D::Error> {
        Ok(if bool::deserialize(d)? {
            pb::ErrorSource::Provider
        } else {
            pb::ErrorSource::Core
        })
    }
}

impl From<&ErrorRecord> for CodedError {
    fn from(e: &ErrorRecord) -> Self {
        CodedError::from_wire(
            &e.code,
            pedelec_common::Code::INTERNAL,
            e.message.clone(),
            e.details.clone(),
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub operation_id: String,
    pub kind: OpKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub total: u64,
    pub input: u64,
    pub output: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolRequestRecord {
    pub tool_request_id: String,
    pub tool: String,
    pub args: serde_json::Value,
    pub operation_id: String,
    #[serde(default)]
    pub timeout_ms: u32,
    /// When the agent's call times out, ms since the Unix epoch.
    #[serde(default)]
    pub deadline_at_ms: u64,
    /// The page's answer is on its way to the agent (SubmitToolResult passed
    /// its checks): the request counts as resolved from here on, whichever of
    /// the bridge's reply and the agent's next output comes first.
    #[serde(default, skip_serializing)]
    pub answered: bool,
}

/// Everything about a thread that must survive a restart of SessionService.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadRecord {
    pub session_id: String,
    pub origin: String,
    pub provider: String,
    pub effort_level: String,
    pub model: String,
    /// The CLI effort flag value of the resolved profile.
    pub effort: String,
    pub workspace_path: PathBuf,
    /// Whose folder `workspace_path` is, and whether it was made yet.
    /// Journaled as the two booleans records always had.
    #[serde(flatten)]
    pub workspace: Workspace,
    pub auto_end_on_disconnect: bool,
    pub created_at_ms: u64,
    pub status: Status,
    /// When the thread last ended, ms since the Unix epoch (None while it is
    /// open): ended threads are removed a while after (`crate::prune`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
    #[serde(default)]
    pub provider_session_id: Option<String>,
    /// Whether a route was ever attached: only such a thread is auto-ended
    /// when its routes are gone (also after a restart of this service).
    #[serde(default)]
    pub ever_attached: bool,
    /// Whether the first provider turn (which carries the tool block) has run.
    #[serde(default)]
    pub first_turn_done: bool,
    #[serde(default)]
    pub usage: Option<UsageRecord>,
    /// The last cumulative figures a provider reported for the current provider
    /// session, so cumulative reports are not counted twice.
    #[serde(default)]
    pub cumulative_seen: UsageRecord,
    #[serde(default)]
    pub manifest: Option<serde_json::Value>,
    /// The thread's tool token, in memory only: the journal never holds it
    /// (docs/security.md). After a restart of this service the thread gets a
    /// new one when its tools are registered again; the agents that held the
    /// old one ended with the restart.
    #[serde(skip)]
    pub tool_token: Option<pedelec_common::secret::Secret>,
    #[serde(default)]
    pub active_operation: Option<OperationRecord>,
    /// Finished operations, oldest first, at most `RECENT_OPERATIONS`.
    #[serde(default)]
    pub recent_operations: Vec<OperationRecord>,
    #[serde(default)]
    pub pending_tool_request: Option<ToolRequestRecord>,
    /// The seq of the newest event.
    pub last_seq: u64,
    /// Seqs up to this value may have been handed out without a journal write;
    /// after a restart numbering continues above it so no seq repeats.
    #[serde(default)]
    pub seq_reserved: u64,
}

/// How many finished operations a thread remembers for snapshots.
pub const RECENT_OPERATIONS: usize = 16;

/// How many seqs one journal write reserves for events that do not change the
/// record (chat deltas), so a delta stream is not a stream of file writes.
pub const SEQ_RESERVATION: u64 = 1024;

/// A thread's workspace folder: the application's, or one Pedelec manages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WorkspaceFlags", into = "WorkspaceFlags")]
pub enum Workspace {
    /// An existing folder the application named at create: it must exist
    /// from then on.
    Explicit,
    /// A folder under the data dir that Pedelec makes (and removes at app
    /// exit), not made yet: it is made on first use (the first operation, or
    /// AssetService opening it), so a thread that is never used costs no
    /// folder, and a missing folder is expected.
    ManagedPending,
    /// A managed folder that was made: from then on a missing folder is
    /// `WORKSPACE_OPEN_FAILED`, as for an explicit one; it is never made
    /// again empty.
    ManagedMade,
}

impl Workspace {
    /// The application named the folder (the snapshot's `workspace_explicit`).
    pub fn is_explicit(self) -> bool {
        self == Workspace::Explicit
    }

    /// The folder exists, or its absence is an error (explicit, or managed
    /// and made).
    pub fn must_exist(self) -> bool {
        self != Workspace::ManagedPending
    }
}

/// [`Workspace`] in the journal: `managed_workspace` and `workspace_made`.
/// Records written before `workspace_made` existed had their managed folder
/// made at create, so its absence reads as made.
#[derive(Serialize, Deserialize)]
struct WorkspaceFlags {
    managed_workspace: bool,
    #[serde(default = "made")]
    workspace_made: bool,
}

fn made() -> bool {
    true
}

impl From<WorkspaceFlags> for Workspace {
    fn from(f: WorkspaceFlags) -> Self {
        match (f.managed_workspace, f.workspace_made) {
            (false, _) => Workspace::Explicit,
            (true, false) => Workspace::ManagedPending,
            (true, true) => Workspace::ManagedMade,
        }
    }
}

impl From<Workspace> for WorkspaceFlags {
    fn from(w: Workspace) -> Self {
        WorkspaceFlags {
            managed_workspace: !w.is_explicit(),
            workspace_made: w.must_exist(),
        }
    }
}

pub struct Journal {
    /// Writes the records into the journal's folder (`dir()`).
    writer: pedelec_common::recycle::RecyclingWriter,
}

impl Journal {
    pub fn new(dir: PathBuf) -> Self {
        Journal {
            writer: pedelec_common::recycle::RecyclingWriter::new(dir, 0o600),
        }
    }

    fn file_name(session_id: &str) -> String {
        format!("{session_id}.json")
    }

    fn file(&self, session_id: &str) -> PathBuf {
        self.writer.dir().join(Self::file_name(session_id))
    }

    /// The record of one thread, if its file exists and reads. Ids are checked
    /// first, so a crafted id cannot name a file outside the journal.
    pub fn load(&self, session_id: &str) -> Option<ThreadRecord> {
        let plausible = !session_id.is_empty()
            && session_id.len() <= 100
            && session_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !plausible {
            return None;
        }
        let bytes = std::fs::read(self.file(session_id)).ok()?;
        match serde_json::from_slice::<ThreadRecord>(&bytes) {
            Ok(record) if record.session_id == session_id => Some(record),
            Ok(_) => None,
            Err(e) => {
                tracing::error!(session = session_id, error = %e, "unreadable journal record");
                None
            }
        }
    }

    pub fn save(&self, record: &ThreadRecord) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        // Without fsync: a record survives a crash of this process (the page
        // cache keeps it), and a thread's record is written on every change.
        self.writer
            .replace(&Self::file_name(&record.session_id), &bytes)
    }

    /// Removes a thread's record (an ended thread past the retention).
    pub fn remove(&self, session_id: &str) {
        match std::fs::remove_file(self.file(session_id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "could not remove a journal record")
            }
        }
    }

    /// When a thread's record file was last written, ms since the Unix epoch.
    pub fn modified_ms(&self, session_id: &str) -> Option<u64> {
        let modified = std::fs::metadata(self.file(session_id))
            .ok()?
            .modified()
            .ok()?;
        let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(since.as_millis() as u64)
    }

    /// Makes a spare file for the next new thread's record (blocking).
    pub fn refill(&self) -> std::io::Result<()> {
        self.writer.refill()
    }

    /// Every readable record, and the files that could not be read (reported by
    /// the caller and left in place for inspection).
    pub fn load_all(&self) -> (Vec<ThreadRecord>, Vec<(PathBuf, String)>) {
        let mut records = Vec::new();
        let mut failures = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.writer.dir()) else {
            return (records, failures);
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") || is_hidden(&path) {
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<ThreadRecord>(&b).map_err(|e| e.to_string()))
            {
                Ok(record) if self.file(&record.session_id) == path => records.push(record),
                Ok(record) => failures.push((
                    path,
                    format!(
                        "names thread {} but has another file name",
                        record.session_id
                    ),
                )),
                Err(e) => failures.push((path, e)),
            }
        }
        (records, failures)
    }
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_records_debug_shows_no_tool_token() {
        let mut r = sample("thr_1");
        r.tool_token = Some("tok-secret-value".into());
        assert!(!format!("{r:?}").contains("tok-secret-value"));
    }

    #[test]
    fn error_source_is_journaled_as_from_provider() {
        let e = CodedError::new(pedelec_common::Code::PROVIDER_FAILED, "boom");
        let json = serde_json::to_value(ErrorRecord::new(&e, pb::ErrorSource::Provider)).unwrap();
        assert_eq!(json["from_provider"], true, "{json}");
        let back: ErrorRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.source, pb::ErrorSource::Provider);
        // Records written before the field existed, and core errors.
        let old: ErrorRecord =
            serde_json::from_str(r#"{"code":"INTERNAL","message":"m"}"#).unwrap();
        assert_eq!(old.source, pb::ErrorSource::Core);
        let core = serde_json::to_value(ErrorRecord::new(&e, pb::ErrorSource::Core)).unwrap();
        assert_eq!(core["from_provider"], false);
    }

    use super::*;

    pub fn sample(id: &str) -> ThreadRecord {
        ThreadRecord {
            session_id: id.into(),
            origin: "https://app.example".into(),
            provider: "codex".into(),
            effort_level: "default".into(),
            model: String::new(),
            effort: String::new(),
            workspace_path: "/tmp".into(),
            workspace: Workspace::Explicit,
            auto_end_on_disconnect: false,
            created_at_ms: 1,
            status: Status::Idle,
            ended_at_ms: None,
            provider_session_id: None,
            ever_attached: false,
            first_turn_done: false,
            usage: None,
            cumulative_seen: UsageRecord::default(),
            manifest: None,
            tool_token: None,
            active_operation: None,
            recent_operations: Vec::new(),
            pending_tool_request: None,
            last_seq: 7,
            seq_reserved: 0,
        }
    }

    #[test]
    fn corrupt_and_truncated_files_are_reported_and_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = Journal::new(tmp.path().into());
        journal.save(&sample("thr_a")).unwrap();
        journal.save(&sample("thr_b")).unwrap();
        let b = tmp.path().join("thr_b.json");
        let bytes = std::fs::read(&b).unwrap();
        std::fs::write(&b, &bytes[..bytes.len() / 2]).unwrap();
        std::fs::write(tmp.path().join("thr_c.json"), b"not json").unwrap();
        let (records, failures) = journal.load_all();
        assert_eq!(records, vec![sample("thr_a")]);
        assert_eq!(failures.len(), 2);
    }

    /// The workspace's two journal booleans, in records of every age: a
    /// record from before `workspace_made` existed still loads, as made.
    #[test]
    fn workspace_flags_load_from_old_and_new_records() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = Journal::new(tmp.path().into());
        let mut json = serde_json::to_value(sample("thr_old")).unwrap();
        for (flags, expected) in [
            (
                serde_json::json!({"managed_workspace": false}),
                Workspace::Explicit,
            ),
            (
                serde_json::json!({"managed_workspace": true}),
                Workspace::ManagedMade,
            ),
            (
                serde_json::json!({"managed_workspace": true, "workspace_made": false}),
                Workspace::ManagedPending,
            ),
            (
                serde_json::json!({"managed_workspace": true, "workspace_made": true}),
                Workspace::ManagedMade,
            ),
        ] {
            let record = json.as_object_mut().unwrap();
            record.remove("managed_workspace");
            record.remove("workspace_made");
            record.extend(flags.as_object().unwrap().clone());
            std::fs::write(
                tmp.path().join("thr_old.json"),
                serde_json::to_vec(&json).unwrap(),
            )
            .unwrap();
            let loaded = journal.load("thr_old").expect("the record loads");
            assert_eq!(loaded.workspace, expected, "{flags}");
        }
        // Written as the same two booleans.
        for workspace in [
            Workspace::Explicit,
            Workspace::ManagedPending,
            Workspace::ManagedMade,
        ] {
            let mut record = sample("thr_new");
            record.workspace = workspace;
            let written = serde_json::to_value(&record).unwrap();
            assert_eq!(
                (
                    written["managed_workspace"].as_bool(),
                    written["workspace_made"].as_bool()
                ),
                (Some(!workspace.is_explicit()), Some(workspace.must_exist()))
            );
            journal.save(&record).unwrap();
            assert_eq!(journal.load("thr_new"), Some(record));
        }
    }
}
