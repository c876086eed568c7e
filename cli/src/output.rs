//! What pedelec-cli prints: the agent's JSON documents, the human tables, and
//! the camelCase JSON forms of the service messages.

use std::io::Write;

use pedelec_common::json::{from_struct, from_value};
use pedelec_proto::v1::{
    Operation, OperationKind, OperationOutcome, PedelecError, ProviderInfo, SessionStatus,
    SessionSummary, Settings, Snapshot, ToolRequest, ToolSpec, Usage,
};
use serde_json::{Map, Value as Json, json};

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

pub fn tool_spec_json(spec: &ToolSpec) -> Json {
    json!({
        "name": spec.name,
        "description": spec.description,
        "argsSchema": spec.args_schema.as_ref().map(|s| Json::Object(from_struct(s))).unwrap_or_else(|| json!({})),
        "timeoutMs": spec.timeout_ms,
    })
}

pub fn status_name(status: i32) -> &'static str {
    match SessionStatus::try_from(status) {
        Ok(SessionStatus::Idle) => "idle",
        Ok(SessionStatus::Running) => "running",
        Ok(SessionStatus::WaitingToolResult) => "waiting_tool_result",
        Ok(SessionStatus::Ended) => "ended",
        Ok(SessionStatus::Error) => "error",
        Ok(SessionStatus::Unspecified) | Err(_) => "unspecified",
    }
}

pub fn summary_json(s: &SessionSummary) -> Json {
    json!({
        "sessionId": s.session_id,
        "origin": s.origin,
        "status": status_name(s.status),
        "provider": s.provider,
        "effortLevel": s.effort_level,
        "createdAt": s.created_at.as_ref().map(rfc3339),
        "workspacePath": s.workspace_path,
        "lastSeq": s.last_seq,
        "attachedRoutes": s.attached_routes,
    })
}

pub fn sessions_table(sessions: &[SessionSummary]) -> String {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.session_id.clone(),
                s.origin.clone(),
                status_name(s.status).to_string(),
                s.provider.clone(),
                s.attached_routes.to_string(),
                s.last_seq.to_string(),
            ]
        })
        .collect();
    table(
        &["ID", "ORIGIN", "STATUS", "PROVIDER", "ROUTES", "LAST SEQ"],
        &rows,
    )
}

fn operation_json(op: &Operation) -> Json {
    let kind = match OperationKind::try_from(op.kind) {
        Ok(OperationKind::SendText) => "send_text",
        Ok(OperationKind::Prepare) => "prepare",
        _ => "unspecified",
    };
    let outcome = match OperationOutcome::try_from(op.outcome) {
        Ok(OperationOutcome::Completed) => json!("completed"),
        Ok(OperationOutcome::Failed) => json!("failed"),
        Ok(OperationOutcome::Cancelled) => json!("cancelled"),
        _ => Json::Null,
    };
    json!({
        "operationId": op.operation_id,
        "kind": kind,
        "outcome": outcome,
        "error": op.error.as_ref().map(pedelec_error_json),
    })
}

fn pedelec_error_json(e: &PedelecError) -> Json {
    let source = if e.source == pedelec_proto::v1::ErrorSource::Provider as i32 {
        "provider"
    } else {
        "core"
    };
    json!({
        "code": e.code,
        "message": e.message,
        "details": e.details.as_ref().map(from_value),
        "source": source,
    })
}

fn tool_request_json(r: &ToolRequest) -> Json {
    json!({
        "toolRequestId": r.tool_request_id,
        "tool": r.tool,
        "args": r.args.as_ref().map(from_value),
        "operationId": r.operation_id,
    })
}

fn usage_json(u: &Usage) -> Json {
    json!({
        "totalTokens": u.total_tokens,
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
    })
}

pub fn snapshot_json(s: &Snapshot) -> Json {
    json!({
        "sessionId": s.session_id,
        "status": status_name(s.status),
        "activeOperation": s.active_operation.as_ref().map(operation_json),
        "lastOperation": s.last_operation.as_ref().map(operation_json),
        "pendingToolRequest": s.pending_tool_request.as_ref().map(tool_request_json),
        "usage": s.usage.as_ref().map(usage_json),
        "provider": s.provider,
        "effortLevel": s.effort_level,
        "model": s.model,
        "autoEndOnDisconnect": s.auto_end_on_disconnect,
        "createdAt": s.created_at.as_ref().map(rfc3339),
        "workspacePath": s.workspace_path,
        "lastSeq": s.last_seq,
        "replayGap": s.replay_gap,
    })
}

pub fn provider_json(p: &ProviderInfo) -> Json {
    json!({
        "code": p.code,
        "name": p.name,
        "available": p.available,
        "isDefault": p.is_default,
        "error": p.error,
    })
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

/// The same camelCase shape ProviderService writes to settings.json.
pub fn settings_json(s: &Settings) -> Json {
    let mut profiles = Map::new();
    for (code, p) in &s.profiles {
        let mut levels = Map::new();
        for (level, l) in &p.levels {
            levels.insert(level.clone(), json!({"model": l.model, "effort": l.effort}));
        }
        profiles.insert(code.clone(), json!({"levels": levels}));
    }
    json!({
        "defaultProvider": s.default_provider,
        "profiles": profiles,
        "ollamaEndpoint": s.ollama_endpoint,
        "ollamaApiKey": s.ollama_api_key,
        "tavilyApiKey": s.tavily_api_key,
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.mmm]Z`, without pulling in a date crate.
pub fn rfc3339(t: &prost_types::Timestamp) -> String {
    let secs = t.seconds;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let millis = (t.nanos.max(0) / 1_000_000) as i64;
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
    use pedelec_common::json::to_struct;
    use pedelec_proto::v1::{EffortProfile, ProviderProfiles};

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
    fn tool_spec_is_camel_case() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let spec = ToolSpec {
            name: "search".into(),
            description: "Find rows".into(),
            args_schema: Some(to_struct(schema.as_object().unwrap())),
            timeout_ms: 5000,
        };
        assert_eq!(
            tool_spec_json(&spec),
            json!({"name": "search", "description": "Find rows", "argsSchema": schema, "timeoutMs": 5000})
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
    fn settings_match_the_file_form() {
        let mut levels = std::collections::HashMap::new();
        levels.insert(
            "high".to_string(),
            EffortProfile {
                model: "gpt-5".into(),
                effort: "high".into(),
            },
        );
        let mut profiles = std::collections::HashMap::new();
        profiles.insert("codex".to_string(), ProviderProfiles { levels });
        let s = Settings {
            default_provider: Some("codex".into()),
            profiles,
            ollama_endpoint: "http://127.0.0.1:11434".into(),
            ..Default::default()
        };
        assert_eq!(
            settings_json(&s),
            json!({
                "defaultProvider": "codex",
                "profiles": {"codex": {"levels": {"high": {"model": "gpt-5", "effort": "high"}}}},
                "ollamaEndpoint": "http://127.0.0.1:11434",
                "ollamaApiKey": "",
                "tavilyApiKey": "",
            })
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(rfc3339(&t(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(&t(951_782_400, 0)), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(&t(1_700_000_000, 123_000_000)),
            "2023-11-14T22:13:20.123Z"
        );
    }

    #[test]
    fn status_names_are_snake_case() {
        assert_eq!(
            status_name(SessionStatus::WaitingToolResult as i32),
            "waiting_tool_result"
        );
        assert_eq!(status_name(99), "unspecified");
    }
}
