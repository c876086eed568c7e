//! A thread's conversation history (docs/history.md): what was said and done
//! in it — the user's texts, the agent's complete messages, tool requests
//! with their outcomes, operations' starts and finishes, errors — each entry
//! with its operation and the seq of the event it came from.
//!
//! Kept in `<data dir>/sessions/<id>.history`, next to the thread's record:
//! append-only frames (`len: u32 LE`, `FNV-1a 64 of the payload: u64 LE`, a
//! protobuf-encoded `HistoryEntry`), each written with one `write` before the
//! event it comes from is published, so a crash of the process (kill -9)
//! loses no entry a page could have seen. A frame cut short or not matching
//! its checksum ends the history on load (a power loss can leave one at the
//! tail); the file is cut back to the last whole frame.
//!
//! Bounded: past [`MAX_ENTRIES`] entries or [`MAX_BYTES`] bytes, the oldest
//! are dropped down to three quarters of both, and one `dropped` marker takes
//! the last dropped entry's id (every id up to it is gone, so its count is its
//! id); the file is rewritten to a temp file and renamed over the old one.
//!
//! In memory a thread keeps only where each frame starts (loaded on first
//! use), so a page of entries is one read of contiguous bytes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pb::session_event::Event;
use pedelec_common::json;
use pedelec_proto::v1 as pb;
use prost::Message;

/// Entries a thread's history holds at most (the `dropped` marker included).
pub const MAX_ENTRIES: usize = 2_000;
/// Bytes a thread's history file holds at most (one entry larger than this
/// is kept alone).
pub const MAX_BYTES: u64 = 4 << 20;
/// A tool result (or error) whose JSON is larger than this is kept as a
/// preview of [`RESULT_PREVIEW`] bytes, with `truncated`.
pub const MAX_TOOL_RESULT: usize = 16 << 10;
/// The beginning of a truncated tool result's JSON text that is kept.
pub const RESULT_PREVIEW: usize = 2 << 10;
/// A user text longer than this is kept cut to it, with `truncated`.
pub const MAX_USER_TEXT: usize = 256 << 10;
/// Entries a GetHistory page holds when the request names no limit.
pub const DEFAULT_PAGE: u32 = 100;
pub use pedelec_common::MAX_HISTORY_PAGE as MAX_PAGE;

/// `len` (u32) and the checksum (u64) before each entry.
const HEADER: usize = 12;

/// The file of thread `id`'s history in the journal folder `dir`.
pub fn file_in(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.history"))
}

/// Removes a thread's history (with its record, past the retention).
pub fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(file = %path.display(), error = %e, "could not remove a history"),
    }
}

/// A thread's history: where it lives, the frames' offsets once loaded, and
/// what the next entries need that their event does not carry.
#[derive(Default)]
pub struct History {
    /// None for a thread without one (a summary built from a record).
    path: Option<PathBuf>,
    log: Option<Log>,
    /// The text of the operation about to start (its entry follows the
    /// operation_started entry).
    user_text: Option<pb::UserText>,
    /// The page's answer to a pending tool request, until the request is
    /// cleared as resolved.
    answer: Option<(String, Answer)>,
    /// The newest tool request and its operation (a clearing names no operation).
    tool_operation: Option<(String, String)>,
    /// Entries whose write failed since the last one written; the next
    /// write puts an error entry saying so first, so the gap shows.
    unrecorded: Option<Unrecorded>,
    /// Test hook: the next this many writes fail as on a full disk.
    #[cfg(test)]
    fail_writes: usize,
}

/// Entries that could not be written (a full or unwritable disk).
#[derive(Clone, Debug)]
struct Unrecorded {
    count: u64,
    first_seq: u64,
    last_seq: u64,
    /// The first failure's reason.
    reason: String,
}

impl Unrecorded {
    /// The error entry that stands for them in the history.
    fn entry(&self, id: u64) -> pb::HistoryEntry {
        let events = if self.first_seq == self.last_seq {
            format!("event {}", self.first_seq)
        } else {
            format!("events {} to {}", self.first_seq, self.last_seq)
        };
        pb::HistoryEntry {
            id,
            operation_id: String::new(),
            seq: self.last_seq,
            at: Some(pedelec_common::now_timestamp()),
            entry: Some(pb::history_entry::Entry::Error(pb::PedelecError {
                code: pedelec_common::Code::JOURNAL_WRITE_FAILED
                    .as_str()
                    .to_string(),
                message: format!(
                    "{} history {} of {events} could not be written: {}",
                    self.count,
                    if self.count == 1 { "entry" } else { "entries" },
                    self.reason
                ),
                details: None,
                source: pb::ErrorSource::Core as i32,
                operation_id: String::new(),
            })),
        }
    }
}

/// The part of a tool outcome the page's answer gives.
#[derive(Clone, Debug)]
struct Answer {
    outcome: Option<pb::tool_outcome::Outcome>,
    truncated: bool,
    preview: String,
}

struct Log {
    /// Shared with readers: a compaction opens a new file, a page being read
    /// keeps reading the old one.
    file: Arc<File>,
    /// The id of the first frame.
    first_id: u64,
    /// Where each frame starts; the last one ends at `end`.
    offsets: Vec<u64>,
    end: u64,
}

/// A page of entries to read outside the thread's lock.
pub struct Page {
    file: Option<Arc<File>>,
    from: u64,
    to: u64,
    pub has_more: bool,
}

impl Page {
    /// The page's entries, oldest first.
    pub fn read(&self) -> std::io::Result<Vec<pb::HistoryEntry>> {
        let Some(file) = &self.file else {
            return Ok(Vec::new());
        };
        let mut bytes = vec![0; (self.to - self.from) as usize];
        file.read_exact_at(&mut bytes, self.from)?;
        let (entries, valid) = frames(&bytes);
        if valid != bytes.len() {
            return Err(std::io::Error::other("a history frame does not read"));
        }
        entries
            .into_iter()
            .map(|(_, range)| {
                pb::HistoryEntry::decode(&bytes[range]).map_err(std::io::Error::other)
            })
            .collect()
    }
}

impl History {
    /// The history in file `path`, read when first used.
    pub fn at(path: PathBuf) -> History {
        History {
            path: Some(path),
            ..History::default()
        }
    }

    /// The next operation to start is the user's `text`.
    pub fn user_text_next(&mut self, text: &str) {
        let truncated = text.len() > MAX_USER_TEXT;
        let text = if truncated {
            cut(text, MAX_USER_TEXT)
        } else {
            text
        };
        self.user_text = Some(pb::UserText {
            text: text.to_string(),
            truncated,
        });
    }

    /// The page answered tool request `id` with `outcome` (`size` bytes as
    /// `MAX_TOOL_RESULT_BYTES` counts them); kept for the entry of its clearing.
    pub fn answered(
        &mut self,
        id: &str,
        outcome: &pb::submit_tool_result_request::Outcome,
        size: usize,
    ) {
        use pb::submit_tool_result_request::Outcome as In;
        use pb::tool_outcome::Outcome as Out;
        let answer = if size <= MAX_TOOL_RESULT {
            Answer {
                outcome: Some(match outcome {
                    In::Result(v) => Out::Result(v.clone()),
                    In::Error(e) => Out::Error(e.clone()),
                }),
                truncated: false,
                preview: String::new(),
            }
        } else {
            match outcome {
                In::Result(v) => {
                    let text = json::from_value(v).to_string();
                    Answer {
                        outcome: None,
                        truncated: true,
                        preview: cut(&text, RESULT_PREVIEW).to_string(),
                    }
                }
                In::Error(e) => Answer {
                    outcome: Some(Out::Error(pb::ToolError {
                        code: e.code.clone(),
                        message: cut(&e.message, RESULT_PREVIEW).to_string(),
                        details: None,
                    })),
                    truncated: true,
                    preview: String::new(),
                },
            }
        };
        self.answer = Some((id.to_string(), answer));
    }

    /// The answer to `id` did not reach the agent: the request is pending again.
    pub fn unanswered(&mut self, id: &str) {
        if self.answer.as_ref().is_some_and(|(a, _)| a == id) {
            self.answer = None;
        }
    }

    /// Records what event `event` (seq `seq`) adds to the history, before it
    /// is published. `usage` gives the thread's usage for a finished
    /// operation. A failed write is logged: the thread runs on.
    pub fn record(
        &mut self,
        seq: u64,
        at: &prost_types::Timestamp,
        event: &Event,
        usage: impl FnOnce() -> Option<pb::Usage>,
    ) {
        use pb::history_entry::Entry;
        let (operation_id, entry) = match event {
            Event::OperationStarted(o) => {
                let text = self.user_text.take();
                self.append(seq, at, &o.operation_id, Entry::OperationStarted(o.clone()));
                if let Some(text) = text {
                    self.append(seq, at, &o.operation_id, Entry::UserText(text));
                }
                return;
            }
            Event::Chat(c) => (c.operation_id.clone(), Entry::AgentMessage(c.clone())),
            Event::ToolRequest(t) => {
                self.tool_operation = Some((t.tool_request_id.clone(), t.operation_id.clone()));
                (t.operation_id.clone(), Entry::ToolRequest(t.clone()))
            }
            Event::ToolRequestCleared(c) => {
                let operation_id = self
                    .tool_operation
                    .as_ref()
                    .filter(|(id, _)| *id == c.tool_request_id)
                    .map(|(_, op)| op.clone())
                    .unwrap_or_default();
                let answer = match self.answer.take() {
                    Some((id, answer)) if id == c.tool_request_id => Some(answer),
                    other => {
                        self.answer = other;
                        None
                    }
                }
                .filter(|_| c.reason == pb::ToolSettleReason::Resolved as i32);
                let (outcome, truncated, result_preview) = match answer {
                    Some(a) => (a.outcome, a.truncated, a.preview),
                    None => (None, false, String::new()),
                };
                let outcome = pb::ToolOutcome {
                    tool_request_id: c.tool_request_id.clone(),
                    reason: c.reason,
                    outcome,
                    truncated,
                    result_preview,
                };
                (operation_id, Entry::ToolOutcome(outcome))
            }
            Event::OperationFinished(o) => (
                o.operation_id.clone(),
                Entry::OperationFinished(pb::HistoryOperationFinished {
                    finished: Some(o.clone()),
                    usage: usage(),
                }),
            ),
            Event::Error(e) => (e.operation_id.clone(), Entry::Error(e.clone())),
            _ => return,
        };
        self.append(seq, at, &operation_id, entry);
    }

    fn append(
        &mut self,
        seq: u64,
        at: &prost_types::Timestamp,
        operation_id: &str,
        entry: pb::history_entry::Entry,
    ) {
        let Some(path) = self.path.clone() else {
            return;
        };
        #[cfg(test)]
        let fail = self.fail_writes > 0;
        #[cfg(test)]
        {
            self.fail_writes = self.fail_writes.saturating_sub(1);
        }
        #[cfg(not(test))]
        let fail = false;
        let unrecorded = self.unrecorded.clone();
        // Set once the gap's entry is written, so a failure after it does not
        // count those entries a second time.
        let mut gap_written = false;
        let written = self.log_mut().and_then(|log| {
            if fail {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            if let Some(gap) = &unrecorded {
                log.append(&gap.entry(log.next_id()))?;
                gap_written = true;
            }
            let entry = pb::HistoryEntry {
                id: log.next_id(),
                operation_id: operation_id.to_string(),
                seq,
                at: Some(*at),
                entry: Some(entry),
            };
            log.append(&entry)?;
            if log.over_bound() {
                log.compact(&path)?;
            }
            Ok(())
        });
        if gap_written {
            self.unrecorded = None;
        }
        match written {
            Ok(()) => {}
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "history write failed");
                let gap = self.unrecorded.get_or_insert_with(|| Unrecorded {
                    count: 0,
                    first_seq: seq,
                    last_seq: seq,
                    reason: e.to_string(),
                });
                gap.count += 1;
                gap.last_seq = seq;
                // Read again from the file at the next use (a torn frame is cut then).
                self.log = None;
            }
        }
    }

    fn log_mut(&mut self) -> std::io::Result<&mut Log> {
        if self.log.is_none() {
            let path = self
                .path
                .as_ref()
                .ok_or_else(|| std::io::Error::other("this thread keeps no history"))?;
            self.log = Some(Log::open(path)?);
        }
        Ok(self.log.as_mut().expect("loaded above"))
    }

    /// The page of at most `limit` entries with ids below `before` (0: the
    /// newest), to read with [`Page::read`] outside the thread's lock.
    pub fn page(&mut self, before: u64, limit: u32) -> std::io::Result<Page> {
        if self.path.as_ref().is_some_and(|p| !p.exists()) && self.log.is_none() {
            return Ok(Page {
                file: None,
                from: 0,
                to: 0,
                has_more: false,
            });
        }
        let log = self.log_mut()?;
        let count = log.offsets.len() as u64;
        let upper = if before == 0 {
            count
        } else {
            before.saturating_sub(log.first_id).min(count)
        };
        let lower = upper.saturating_sub(u64::from(limit));
        let at = |i: u64| log.offsets.get(i as usize).copied().unwrap_or(log.end);
        Ok(Page {
            file: Some(log.file.clone()),
            from: at(lower),
            to: at(upper),
            has_more: lower > 0,
        })
    }
}

impl Log {
    /// Reads the frames of `path` (made if missing), cutting a torn tail.
    fn open(path: &Path) -> std::io::Result<Log> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        let bytes = std::fs::read(path)?;
        let (found, mut valid) = frames(&bytes);
        let mut offsets = Vec::with_capacity(found.len());
        let mut first_id = 1;
        for (i, (start, range)) in found.into_iter().enumerate() {
            let id = pb::HistoryEntry::decode(&bytes[range])
                .map(|e| e.id)
                .unwrap_or(0);
            if i == 0 {
                first_id = id.max(1);
            }
            if id != first_id + i as u64 {
                valid = start;
                break;
            }
            offsets.push(start as u64);
        }
        if valid < bytes.len() {
            tracing::warn!(file = %path.display(), kept = valid, of = bytes.len(), "history: a torn or unreadable tail was cut");
            file.set_len(valid as u64)?;
        }
        Ok(Log {
            file: Arc::new(file),
            first_id,
            offsets,
            end: valid as u64,
        })
    }

    fn next_id(&self) -> u64 {
        self.first_id + self.offsets.len() as u64
    }

    fn append(&mut self, entry: &pb::HistoryEntry) -> std::io::Result<()> {
        let frame = frame(entry);
        // One write: O_APPEND puts it whole at the end.
        (&*self.file).write_all(&frame)?;
        self.offsets.push(self.end);
        self.end += frame.len() as u64;
        Ok(())
    }

    fn over_bound(&self) -> bool {
        self.offsets.len() > MAX_ENTRIES || (self.end > MAX_BYTES && self.offsets.len() > 1)
    }

    /// Drops the oldest entries down to three quarters of both bounds, with
    /// one `dropped` marker in the last dropped entry's place.
    fn compact(&mut self, path: &Path) -> std::io::Result<()> {
        let count = self.offsets.len();
        let max_entries = MAX_ENTRIES * 3 / 4;
        let max_bytes = MAX_BYTES * 3 / 4;
        // The first kept frame: the newest entries that fit (at least one).
        let mut keep = count - 1;
        while keep > 0
            && count - keep < max_entries
            && self.end - self.offsets[keep - 1] <= max_bytes
        {
            keep -= 1;
        }
        let keep = keep.max(1);
        let last_dropped = self.read_entry(keep - 1)?;
        let marker_id = self.first_id + keep as u64 - 1;
        let marker = pb::HistoryEntry {
            id: marker_id,
            operation_id: String::new(),
            seq: last_dropped.seq,
            at: Some(pedelec_common::now_timestamp()),
            entry: Some(pb::history_entry::Entry::Dropped(pb::HistoryDropped {
                count: marker_id,
            })),
        };
        let mut kept = vec![0; (self.end - self.offsets[keep]) as usize];
        self.file.read_exact_at(&mut kept, self.offsets[keep])?;
        let head = frame(&marker);
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("history")
        ));
        {
            let mut out = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            out.write_all(&head)?;
            out.write_all(&kept)?;
        }
        std::fs::rename(&tmp, path)?;
        let file = OpenOptions::new().read(true).append(true).open(path)?;
        let shift = self.offsets[keep] - head.len() as u64;
        let mut offsets = Vec::with_capacity(count - keep + 1);
        offsets.push(0);
        offsets.extend(self.offsets[keep..].iter().map(|o| o - shift));
        *self = Log {
            file: Arc::new(file),
            first_id: marker_id,
            offsets,
            end: self.end - shift,
        };
        Ok(())
    }

    fn read_entry(&self, i: usize) -> std::io::Result<pb::HistoryEntry> {
        let to = self.offsets.get(i + 1).copied().unwrap_or(self.end);
        let mut bytes = vec![0; (to - self.offsets[i]) as usize];
        self.file.read_exact_at(&mut bytes, self.offsets[i])?;
        pb::HistoryEntry::decode(&bytes[HEADER..]).map_err(std::io::Error::other)
    }
}

fn frame(entry: &pb::HistoryEntry) -> Vec<u8> {
    let payload = entry.encode_to_vec();
    let mut frame = Vec::with_capacity(HEADER + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&fnv1a(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// The whole frames at the start of `bytes` (their start and payload range),
/// and where the first one that is not whole starts.
fn frames(bytes: &[u8]) -> (Vec<(usize, std::ops::Range<usize>)>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let sum = u64::from_le_bytes(bytes[at + 4..at + 12].try_into().expect("8 bytes"));
        let payload = at + HEADER..at + HEADER + len;
        if payload.end > bytes.len() || fnv1a(&bytes[payload.clone()]) != sum {
            break;
        }
        out.push((at, payload.clone()));
        at = payload.end;
    }
    (out, at)
}

/// FNV-1a, 64 bits: enough to tell a whole frame from a torn or zeroed one.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(op: &str, text: &str) -> Event {
        Event::Chat(pb::Chat {
            operation_id: op.into(),
            text: text.into(),
            message_id: "m".into(),
        })
    }

    fn at() -> prost_types::Timestamp {
        pedelec_common::now_timestamp()
    }

    fn all(h: &mut History) -> Vec<pb::HistoryEntry> {
        let mut out = Vec::new();
        let mut before = 0;
        loop {
            let page = h.page(before, MAX_PAGE).unwrap();
            let mut entries = page.read().unwrap();
            before = entries.first().map_or(0, |e| e.id);
            entries.extend(out);
            out = entries;
            if !page.has_more {
                return out;
            }
        }
    }

    #[test]
    fn entries_that_could_not_be_written_leave_an_error_entry_in_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::at(file_in(dir.path(), "thr_a"));
        h.record(1, &at(), &chat("op_1", "kept"), || None);
        // A full disk for three entries.
        h.fail_writes = 3;
        for seq in 2..=4 {
            h.record(seq, &at(), &chat("op_1", "lost"), || None);
        }
        h.record(5, &at(), &chat("op_2", "after"), || None);
        h.record(6, &at(), &chat("op_2", "again"), || None);

        let entries = all(&mut h);
        let kinds: Vec<_> = entries
            .iter()
            .map(|e| match &e.entry {
                Some(pb::history_entry::Entry::AgentMessage(c)) => c.text.clone(),
                Some(pb::history_entry::Entry::Error(e)) => format!("{}: {}", e.code, e.message),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "kept".to_string(),
                "JOURNAL_WRITE_FAILED: 3 history entries of events 2 to 4 could not be written: \
                 No space left on device (os error 28)"
                    .to_string(),
                "after".to_string(),
                "again".to_string(),
            ]
        );
        let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2, 3, 4], "ids stay dense");
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 4, 5, 6], "the marker takes the last missed seq");
    }

    #[test]
    fn entries_come_back_in_order_and_ids_continue_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_in(dir.path(), "thr_a");
        let mut h = History::at(path.clone());
        h.user_text_next("hello");
        h.record(
            1,
            &at(),
            &Event::OperationStarted(pb::OperationStarted {
                operation_id: "op_1".into(),
                kind: 1,
            }),
            || None,
        );
        h.record(2, &at(), &chat("op_1", "hi"), || None);
        h.record(
            3,
            &at(),
            &Event::Status(pb::StatusChanged { status: 1 }),
            || None,
        );
        let mut h = History::at(path);
        h.record(4, &at(), &chat("op_1", "again"), || None);
        let got = all(&mut h);
        let ids: Vec<u64> = got.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 1, 2, 4], "the user text has its operation's seq");
        assert!(matches!(
            &got[1].entry,
            Some(pb::history_entry::Entry::UserText(t)) if t.text == "hello"
        ));
    }

    #[test]
    fn a_torn_tail_is_skipped_and_the_next_entry_takes_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_in(dir.path(), "thr_t");
        let mut h = History::at(path.clone());
        for seq in 1..=3 {
            h.record(seq, &at(), &chat("op_1", "x"), || None);
        }
        drop(h);
        let whole = std::fs::metadata(&path).unwrap().len();
        // A power loss: the last frame half written, then zeros.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(whole - 3).unwrap();
        f.set_len(whole + 64).unwrap();
        let mut h = History::at(path.clone());
        h.record(9, &at(), &chat("op_1", "after"), || None);
        let got = all(&mut h);
        let ids: Vec<u64> = got.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2, 3], "the torn third is gone, the new one is 3");
        assert_eq!(got[2].seq, 9);
    }

    #[test]
    fn past_the_bound_the_oldest_go_with_one_marker_and_paging_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_in(dir.path(), "thr_b");
        let mut h = History::at(path.clone());
        let total = MAX_ENTRIES as u64 * 2 + 7;
        for seq in 1..=total {
            h.record(seq, &at(), &chat("op_1", &format!("m{seq}")), || None);
        }
        let got = all(&mut h);
        assert!(got.len() <= MAX_ENTRIES, "{}", got.len());
        let marker = &got[0];
        let Some(pb::history_entry::Entry::Dropped(d)) = &marker.entry else {
            panic!("first entry is not the marker: {marker:?}");
        };
        assert_eq!(d.count, marker.id, "every id up to the marker's is gone");
        // Ids run on without a gap and end at the newest.
        for (a, b) in got.iter().zip(&got[1..]) {
            assert_eq!(a.id + 1, b.id);
        }
        assert_eq!(got.last().unwrap().id, total);
        assert_eq!(got.last().unwrap().seq, total);
        // The same after a reopen, and the next id continues.
        let mut again = History::at(path);
        assert_eq!(all(&mut again), got);
        again.record(total + 1, &at(), &chat("op_1", "next"), || None);
        assert_eq!(all(&mut again).last().unwrap().id, total + 1);
        // Paging: before/limit, has_more.
        let page = again.page(total, 10).unwrap();
        let entries = page.read().unwrap();
        assert_eq!(entries.len(), 10);
        assert_eq!(entries.last().unwrap().id, total - 1);
        assert!(page.has_more);
        let oldest = again.page(marker.id + 1, 10).unwrap();
        assert_eq!(oldest.read().unwrap(), vec![marker.clone()]);
        assert!(!oldest.has_more);
        assert!(again.page(1, 10).unwrap().read().unwrap().is_empty());
    }

    #[test]
    fn a_long_user_text_is_cut_at_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::at(file_in(dir.path(), "thr_u"));
        // Three-byte characters: the bound falls inside one.
        h.user_text_next(&"€".repeat(MAX_USER_TEXT / 3 + 10));
        h.record(
            1,
            &at(),
            &Event::OperationStarted(pb::OperationStarted::default()),
            || None,
        );
        let got = all(&mut h);
        let Some(pb::history_entry::Entry::UserText(t)) = &got[1].entry else {
            panic!("{got:?}");
        };
        assert!(t.truncated);
        assert_eq!(t.text.len(), MAX_USER_TEXT / 3 * 3);
    }

    #[test]
    fn a_large_tool_result_is_kept_as_a_preview() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::at(file_in(dir.path(), "thr_r"));
        h.record(
            1,
            &at(),
            &Event::ToolRequest(pb::ToolRequest {
                tool_request_id: "tr_1".into(),
                operation_id: "op_1".into(),
                ..Default::default()
            }),
            || None,
        );
        let big = "y".repeat(MAX_TOOL_RESULT * 2);
        let value = json::to_value(&serde_json::json!({ "text": big }));
        let outcome = pb::submit_tool_result_request::Outcome::Result(value);
        h.answered("tr_1", &outcome, MAX_TOOL_RESULT * 2 + 12);
        h.record(
            2,
            &at(),
            &Event::ToolRequestCleared(pb::ToolRequestCleared {
                tool_request_id: "tr_1".into(),
                reason: pb::ToolSettleReason::Resolved as i32,
            }),
            || None,
        );
        let got = all(&mut h);
        let Some(pb::history_entry::Entry::ToolOutcome(o)) = &got[1].entry else {
            panic!("{got:?}");
        };
        assert!(o.truncated && o.outcome.is_none());
        assert_eq!(o.result_preview.len(), RESULT_PREVIEW);
        assert!(o.result_preview.starts_with("{\"text\":\"yyy"));
        assert_eq!(got[1].operation_id, "op_1");
    }
}
