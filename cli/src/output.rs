//! What pedelec-cli prints: the agent's JSON documents and the human tables.
//! The JSON forms of the service messages are `pedelec_common::wire`'s, the
//! same the native host sends.

use std::io::Write;

use pedelec_common::wire;
use pedelec_proto::v1::{HistoryEntry, ProviderInfo, SessionSummary, Site};
use serde_json::Value as Json;

use crate::error::CliError;

/// `{"ok":true,"result":…}`, written by hand so `ok` comes first whatever
/// serde_json's map order is: an agent reading the start sees the verdict.
pub fn ok_document(result: &Json) -> String {
    format!(r#"{{"ok":true,"result":{result}}}"#)
}

/// `{"ok":false,"error":{"code","message","details"}}`; `details` is always
/// present (null when there are none) so agents can rely on the shape.
pub fn error_document(err: &CliError) -> String {
    let details = err.details().cloned().unwrap_or(Json::Null);
    format!(
        r#"{{"ok":false,"error":{{"code":{},"message":{},"details":{details}}}}}"#,
        Json::from(err.code()),
        Json::from(err.to_string()),
    )
}

/// Writes one JSON document as one line. A closed stdout is not worth a panic:
/// the exit code still tells the caller what happened.
pub fn print_document(doc: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{doc}");
    let _ = out.flush();
}

/// The human form of an error: `CODE: message`, then the details if any.
pub fn human_error(err: &CliError) -> String {
    let mut s = format!("{}: {}", err.code(), err);
    if let Some(d) = err.details().filter(|d| !d.is_null()) {
        s.push_str(&format!("\ndetails: {d}"));
    }
    s
}

pub fn pretty(doc: &Json) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_else(|_| doc.to_string())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn sessions_table(sessions: &[SessionSummary]) -> String {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.session_id.clone(),
                s.origin.clone(),
                wire::status(s.status).to_string(),
                s.provider.clone(),
                s.created_at
                    .as_ref()
                    .map(|t| rfc3339(pedelec_common::timestamp_ms(t)))
                    .unwrap_or_default(),
                s.attached_routes.to_string(),
                s.last_seq.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID", "ORIGIN", "STATUS", "PROVIDER", "CREATED", "ROUTES", "LAST SEQ",
        ],
        &rows,
    )
}

/// A thread's history as a transcript, one line (or an indented block) per
/// entry: `you:` and `agent:` texts, `tool NAME ARGS` with `→` its result,
/// error or why nobody answered, `·` operation lines, `error CODE: message`.
pub fn transcript(entries: &[HistoryEntry]) -> String {
    use pedelec_proto::v1::history_entry::Entry;
    use pedelec_proto::v1::tool_outcome::Outcome;
    let mut tools = std::collections::HashMap::new();
    let mut out = String::new();
    let mut line = |prefix: &str, text: &str| {
        let indent = " ".repeat(prefix.chars().count() + 1);
        for (i, l) in text.lines().enumerate() {
            out.push_str(if i == 0 { prefix } else { &indent });
            if i == 0 && !prefix.is_empty() {
                out.push(' ');
            }
            out.push_str(l);
            out.push('\n');
        }
        if text.is_empty() {
            out.push_str(prefix);
            out.push('\n');
        }
    };
    let json = |v: Option<&pedelec_proto::prost_types::Value>| {
        v.map_or(Json::Null, pedelec_common::json::from_value)
            .to_string()
    };
    for e in entries {
        match &e.entry {
            Some(Entry::UserText(t)) => {
                let cut = if t.truncated { " […]" } else { "" };
                line("you:", &format!("{}{cut}", t.text));
            }
            Some(Entry::AgentMessage(c)) => line("agent:", &c.text),
            Some(Entry::ToolRequest(t)) => {
                tools.insert(t.tool_request_id.clone(), t.tool.clone());
                line("tool", &format!("{} {}", t.tool, json(t.args.as_ref())));
            }
            Some(Entry::ToolOutcome(o)) => {
                let tool = tools.get(&o.tool_request_id).map_or("?", String::as_str);
                let what = match &o.outcome {
                    Some(Outcome::Result(v)) => json(Some(v)),
                    Some(Outcome::Error(err)) => format!("error {}: {}", err.code, err.message),
                    None if o.truncated => format!("{} […]", o.result_preview),
                    None => wire::settle_reason(o.reason).to_string(),
                };
                line(&format!("tool {tool} →"), &what);
            }
            Some(Entry::OperationStarted(o)) => {
                let kind = wire::operation_kind(o.kind);
                if kind != "send_text" {
                    line("·", &format!("{kind} started"));
                }
            }
            Some(Entry::OperationFinished(f)) => {
                let Some(op) = &f.finished else { continue };
                let outcome = wire::outcome(op.outcome);
                let mut text = format!(
                    "{} {}",
                    wire::operation_kind(op.kind),
                    outcome.as_str().unwrap_or("unknown")
                );
                if let Some(err) = &op.error {
                    text.push_str(&format!(" ({}: {})", err.code, err.message));
                }
                if let Some(u) = &f.usage {
                    text.push_str(&format!(", {} tokens so far", u.total_tokens));
                }
                line("·", &text);
            }
            Some(Entry::Error(err)) => line("error", &format!("{}: {}", err.code, err.message)),
            Some(Entry::Dropped(d)) => line("·", &format!("{} older entries dropped", d.count)),
            None => {}
        }
    }
    out
}

pub fn providers_table(providers: &[ProviderInfo]) -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows: Vec<Vec<String>> = providers
        .iter()
        .map(|p| {
            vec![
                p.code.clone(),
                p.name.clone(),
                yes_no(p.available),
                yes_no(p.is_default),
                p.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["CODE", "NAME", "AVAILABLE", "DEFAULT", "ERROR"], &rows)
}

/// A site's level for people: its word, or `blocked`.
fn site_access(site: &Site) -> String {
    if site.blocked {
        return "blocked".into();
    }
    wire::access_level(site.access).unwrap_or("none").into()
}

fn when(ts: Option<&pedelec_proto::prost_types::Timestamp>, none: &str) -> String {
    ts.map_or_else(
        || none.to_string(),
        |t| rfc3339(pedelec_common::timestamp_ms(t)),
    )
}

fn folders_text(site: &Site) -> String {
    site.folders
        .iter()
        .map(|f| {
            if f.once {
                format!("{} (once)", f.path)
            } else {
                f.path.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn sites_table(sites: &[Site]) -> String {
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|s| {
            vec![
                s.origin.clone(),
                site_access(s),
                s.providers.join(","),
                s.folders.len().to_string(),
                when(s.last_used_at.as_ref(), "never"),
                when(s.expires_at.as_ref(), "-"),
            ]
        })
        .collect();
    table(
        &[
            "ORIGIN",
            "ACCESS",
            "PROVIDERS",
            "FOLDERS",
            "LAST USED",
            "EXPIRES",
        ],
        &rows,
    )
}

/// One site, a field a line.
pub fn site_text(site: &Site) -> String {
    let or_none = |s: String| if s.is_empty() { "none".to_string() } else { s };
    let lines = [
        ("origin", site.origin.clone()),
        ("access", site_access(site)),
        ("providers", or_none(site.providers.join(", "))),
        ("folders", or_none(folders_text(site))),
        (
            "any model",
            if site.any_model { "yes" } else { "no" }.into(),
        ),
        ("embedders", or_none(site.embedders.join(", "))),
        ("granted", when(site.granted_at.as_ref(), "-")),
        ("last used", when(site.last_used_at.as_ref(), "never")),
        ("expires", when(site.expires_at.as_ref(), "when revoked")),
    ];
    lines
        .iter()
        .map(|(k, v)| format!("{:<11}{v}\n", format!("{k}:")))
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS[.mmm]Z` for people, from the wire's epoch
/// milliseconds, without pulling in a date crate.
pub fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let millis = ms % 1000;
    if millis > 0 {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{millis:03}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_transcript_reads_as_a_conversation() {
        use pb::history_entry::Entry;
        use pedelec_proto::v1 as pb;
        let entry = |id: u64, entry: Entry| pb::HistoryEntry {
            id,
            entry: Some(entry),
            ..Default::default()
        };
        let entries = [
            entry(1, Entry::Dropped(pb::HistoryDropped { count: 1 })),
            entry(
                2,
                Entry::OperationStarted(pb::OperationStarted {
                    operation_id: "op_1".into(),
                    kind: pb::OperationKind::SendText as i32,
                }),
            ),
            entry(
                3,
                Entry::UserText(pb::UserText {
                    text: "hello\nthere".into(),
                    truncated: false,
                }),
            ),
            entry(
                4,
                Entry::ToolRequest(pb::ToolRequest {
                    tool_request_id: "tr_1".into(),
                    tool: "get_page".into(),
                    args: Some(pedelec_common::json::to_value(&json!({"q": "x"}))),
                    ..Default::default()
                }),
            ),
            entry(
                5,
                Entry::ToolOutcome(pb::ToolOutcome {
                    tool_request_id: "tr_1".into(),
                    reason: pb::ToolSettleReason::Resolved as i32,
                    outcome: Some(pb::tool_outcome::Outcome::Result(
                        pedelec_common::json::to_value(&json!({"title": "t"})),
                    )),
                    ..Default::default()
                }),
            ),
            entry(
                6,
                Entry::AgentMessage(pb::Chat {
                    text: "hi".into(),
                    ..Default::default()
                }),
            ),
            entry(
                7,
                Entry::OperationFinished(pb::HistoryOperationFinished {
                    finished: Some(pb::OperationFinished {
                        operation_id: "op_1".into(),
                        kind: pb::OperationKind::SendText as i32,
                        outcome: pb::OperationOutcome::Completed as i32,
                        error: None,
                    }),
                    usage: Some(pb::Usage {
                        total_tokens: 15,
                        ..Default::default()
                    }),
                }),
            ),
        ];
        assert_eq!(
            transcript(&entries),
            "· 1 older entries dropped\n\
             you: hello\n\
             \x20    there\n\
             tool get_page {\"q\":\"x\"}\n\
             tool get_page → {\"title\":\"t\"}\n\
             agent: hi\n\
             · send_text completed, 15 tokens so far\n"
        );
    }

    #[test]
    fn ok_and_error_documents_have_the_documented_shape() {
        assert_eq!(
            ok_document(&json!({"x": 1})),
            r#"{"ok":true,"result":{"x":1}}"#
        );
        let err = CliError::Tool {
            code: "TOOL_HANDLER_ERROR".into(),
            message: "no \"such\" row".into(),
            details: Some(json!({"row": 3})),
        };
        assert_eq!(
            error_document(&err),
            r#"{"ok":false,"error":{"code":"TOOL_HANDLER_ERROR","message":"no \"such\" row","details":{"row":3}}}"#
        );
        let doc: Json = serde_json::from_str(&error_document(&CliError::NoThreadId)).unwrap();
        assert_eq!(doc["ok"], false);
        assert_eq!(doc["error"]["code"], "INVALID_INPUT");
        assert!(doc["error"]["details"].is_null());
        assert!(doc["error"].as_object().unwrap().contains_key("details"));
    }

    #[test]
    fn human_error_is_code_colon_message() {
        assert_eq!(
            human_error(&CliError::Unavailable("nobody home".into())),
            "CORE_UNAVAILABLE: nobody home"
        );
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["A", "LONG"],
            &[vec!["xyz".into(), "1".into()], vec!["q".into(), "".into()]],
        );
        assert_eq!(t, "A    LONG\nxyz  1\nq\n");
    }

    #[test]
    fn sites_read_as_levels_and_blocked() {
        use pedelec_proto::v1::{AccessLevel, FolderGrant};
        let granted = Site {
            origin: "https://a.example".into(),
            access: AccessLevel::Edit as i32,
            providers: vec!["codex".into(), "claude".into()],
            folders: vec![FolderGrant {
                path: "/w".into(),
                once: true,
            }],
            ..Default::default()
        };
        let blocked = Site {
            origin: "https://b.example".into(),
            blocked: true,
            ..Default::default()
        };
        let t = sites_table(&[granted.clone(), blocked]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ORIGIN"), "{t}");
        assert!(
            lines[1].contains("edit") && lines[1].contains("codex,claude"),
            "{t}"
        );
        assert!(lines[2].contains("blocked"), "{t}");
        let text = site_text(&granted);
        assert!(text.contains("access:    edit\n"), "{text}");
        assert!(text.contains("folders:   /w (once)\n"), "{text}");
        assert!(text.contains("expires:   when revoked\n"), "{text}");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
