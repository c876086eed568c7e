//! The JSON forms of the service messages: the one home of every shape the
//! native host sends to the extension and `pedelec-cli` prints. Field names are
//! camelCase and written here by hand, so the contract does not move when the
//! generated code does; `protocol/native-messaging.schema.json` describes them
//! and a test checks the real host's output against it.
//!
//! Conventions (docs/native-messaging.md §3): timestamps are milliseconds since
//! the Unix epoch (null when unknown); statuses are lower-case words (`waiting_tool_result`); absent
//! optional objects are `null`, never missing. What a page sees reveals no
//! local internals: a managed workspace's path and a provider's stderr tail
//! stay in gRPC and the logs.

use std::collections::BTreeMap;

use pedelec_proto::prost_types::Timestamp;
use pedelec_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::json as pjson;

/// Milliseconds since the Unix epoch, or null.
pub fn millis(ts: Option<&Timestamp>) -> Value {
    ts.map_or(Value::Null, |t| json!(crate::timestamp_ms(t)))
}

pub fn status(status: i32) -> &'static str {
    match pb::SessionStatus::try_from(status) {
        Ok(pb::SessionStatus::Idle) => "idle",
        Ok(pb::SessionStatus::Running) => "running",
        Ok(pb::SessionStatus::WaitingToolResult) => "waiting_tool_result",
        Ok(pb::SessionStatus::Ended) => "ended",
        Ok(pb::SessionStatus::Error) => "error",
        // Never set on a real thread; said plainly rather than guessed.
        Ok(pb::SessionStatus::Unspecified) | Err(_) => "unknown",
    }
}

pub fn operation_kind(kind: i32) -> &'static str {
    match pb::OperationKind::try_from(kind) {
        Ok(pb::OperationKind::SendText) => "send_text",
        Ok(pb::OperationKind::Prepare) => "prepare",
        Ok(pb::OperationKind::Unspecified) | Err(_) => "unknown",
    }
}

/// Null while the operation runs.
pub fn outcome(outcome: i32) -> Value {
    match pb::OperationOutcome::try_from(outcome) {
        Ok(pb::OperationOutcome::Completed) => json!("completed"),
        Ok(pb::OperationOutcome::Failed) => json!("failed"),
        Ok(pb::OperationOutcome::Cancelled) => json!("cancelled"),
        Ok(pb::OperationOutcome::Unspecified) | Err(_) => Value::Null,
    }
}

pub fn settle_reason(reason: i32) -> &'static str {
    match pb::ToolSettleReason::try_from(reason) {
        Ok(pb::ToolSettleReason::Resolved) => "resolved",
        Ok(pb::ToolSettleReason::Failed) => "failed",
        Ok(pb::ToolSettleReason::Timeout) => "timeout",
        Ok(pb::ToolSettleReason::Dropped) => "dropped",
        Ok(pb::ToolSettleReason::CallerGone) => "caller_gone",
        Ok(pb::ToolSettleReason::Unspecified) | Err(_) => "unknown",
    }
}

pub fn end_reason(reason: i32) -> &'static str {
    match pb::EndReason::try_from(reason) {
        Ok(pb::EndReason::AutoEnd) => "auto_end",
        Ok(pb::EndReason::Requested | pb::EndReason::Unspecified) | Err(_) => "requested",
    }
}

/// Parses the `reason` a client gives to `end`.
pub fn parse_end_reason(word: &str) -> Option<pb::EndReason> {
    match word {
        "requested" => Some(pb::EndReason::Requested),
        "auto_end" => Some(pb::EndReason::AutoEnd),
        _ => None,
    }
}

/// Detail keys that describe the local machine rather than the error.
const LOCAL_DETAILS: &[&str] = &["stderrTail"];

/// `{code, message, details, source}`.
pub fn error(e: &pb::PedelecError) -> Value {
    let source = match pb::ErrorSource::try_from(e.source) {
        Ok(pb::ErrorSource::Provider) => "provider",
        _ => "core",
    };
    let mut details = e.details.as_ref().map_or(Value::Null, pjson::from_value);
    if let Value::Object(map) = &mut details {
        for key in LOCAL_DETAILS {
            map.remove(*key);
        }
    }
    // Events reach pages: no local path, whoever wrote the error.
    crate::page_safe::scrub_json(&mut details, &[]);
    json!({
        "code": e.code,
        "message": crate::page_safe::without_paths(&e.message, &[]),
        "details": details,
        "source": source,
    })
}

fn opt_error(e: Option<&pb::PedelecError>) -> Value {
    e.map_or(Value::Null, error)
}

pub fn operation(op: &pb::Operation) -> Value {
    json!({
        "operationId": op.operation_id,
        "kind": operation_kind(op.kind),
        "outcome": outcome(op.outcome),
        "error": opt_error(op.error.as_ref()),
    })
}

pub fn tool_request(t: &pb::ToolRequest) -> Value {
    json!({
        "toolRequestId": t.tool_request_id,
        "tool": t.tool,
        "args": t.args.as_ref().map_or(Value::Null, pjson::from_value),
        "operationId": t.operation_id,
        "timeoutMs": t.timeout_ms,
        "deadlineAt": millis(t.deadline_at.as_ref()),
    })
}

pub fn usage(u: &pb::Usage) -> Value {
    json!({
        "totalTokens": u.total_tokens,
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
    })
}

/// The authoritative state of a thread. Not an event of its history: `lastSeq`
/// is the seq of the newest event it reflects.
pub fn snapshot(s: &pb::Snapshot) -> Value {
    let workspace_path = if s.workspace_explicit {
        json!(s.workspace_path)
    } else {
        Value::Null
    };
    json!({
        "sessionId": s.session_id,
        "status": status(s.status),
        "activeOperation": s.active_operation.as_ref().map_or(Value::Null, operation),
        "lastOperation": s.last_operation.as_ref().map_or(Value::Null, operation),
        "recentOperations": s.recent_operations.iter().map(operation).collect::<Vec<_>>(),
        "pendingToolRequest": s.pending_tool_request.as_ref().map_or(Value::Null, tool_request),
        "usage": s.usage.as_ref().map_or(Value::Null, usage),
        "provider": s.provider,
        "effortLevel": s.effort_level,
        "model": s.model,
        "autoEndOnDisconnect": s.auto_end_on_disconnect,
        "workspacePath": workspace_path,
        "createdAt": millis(s.created_at.as_ref()),
        "lastSeq": s.last_seq,
        "replayGap": s.replay_gap,
    })
}

/// The body of an event: `{type, …}`.
fn event_body(e: &pb::session_event::Event) -> Value {
    use pb::session_event::Event as E;
    let with_type = |mut v: Value, kind: &str| {
        v["type"] = json!(kind);
        v
    };
    match e {
        E::Snapshot(s) => json!({"type": "snapshot", "snapshot": snapshot(s)}),
        E::Status(s) => json!({"type": "status", "status": status(s.status)}),
        E::ChatDelta(d) => serde_json::to_value(ChatDeltaJson::new(d))
            .expect("a struct of strings always serializes"),
        E::Chat(c) => json!({
            "type": "chat",
            "operationId": c.operation_id,
            "messageId": c.message_id,
            "text": c.text,
        }),
        E::ToolRequest(t) => with_type(tool_request(t), "tool_request"),
        E::ToolRequestCleared(c) => json!({
            "type": "tool_request_cleared",
            "toolRequestId": c.tool_request_id,
            "reason": settle_reason(c.reason),
        }),
        E::Usage(u) => with_type(usage(u), "usage"),
        E::OperationStarted(o) => json!({
            "type": "operation_started",
            "operationId": o.operation_id,
            "kind": operation_kind(o.kind),
        }),
        E::OperationFinished(o) => json!({
            "type": "operation_finished",
            "operationId": o.operation_id,
            "kind": operation_kind(o.kind),
            "outcome": outcome(o.outcome),
            "error": opt_error(o.error.as_ref()),
        }),
        E::Error(e) => {
            let mut v = with_type(error(e), "error");
            v["operationId"] = if e.operation_id.is_empty() {
                Value::Null
            } else {
                json!(e.operation_id)
            };
            v
        }
        E::Ended(e) => json!({"type": "ended", "reason": end_reason(e.reason)}),
    }
}

/// `{sessionId, seq, at, event}`, ready to serialize; None for an event
/// without a body (a newer service's kind this build does not know). Chat
/// deltas, most of a turn's events by count, serialize straight from the
/// message; the other kinds go through [`event_body`]'s `Value`.
pub fn event(e: &pb::SessionEvent) -> Option<EventJson<'_>> {
    let body = match e.event.as_ref()? {
        pb::session_event::Event::ChatDelta(d) => EventBodyJson::ChatDelta(ChatDeltaJson::new(d)),
        other => EventBodyJson::Other(event_body(other)),
    };
    Some(EventJson {
        at: e.at.as_ref().map(crate::timestamp_ms),
        event: body,
        seq: e.seq,
        session_id: &e.session_id,
    })
}

/// See [`event`]. Fields in sorted order, as a `Value` (a sorted map) writes
/// them, so the bytes are the same whichever way an event is serialized.
#[derive(Serialize)]
pub struct EventJson<'a> {
    /// Milliseconds since the Unix epoch, or null.
    at: Option<u64>,
    event: EventBodyJson<'a>,
    seq: u64,
    #[serde(rename = "sessionId")]
    session_id: &'a str,
}

#[derive(Serialize)]
#[serde(untagged)]
enum EventBodyJson<'a> {
    ChatDelta(ChatDeltaJson<'a>),
    Other(Value),
}

/// `{messageId, operationId, text, type:"chat_delta"}` (sorted, as above).
#[derive(Serialize)]
struct ChatDeltaJson<'a> {
    #[serde(rename = "messageId")]
    message_id: &'a str,
    #[serde(rename = "operationId")]
    operation_id: &'a str,
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> ChatDeltaJson<'a> {
    fn new(d: &'a pb::ChatDelta) -> Self {
        ChatDeltaJson {
            kind: "chat_delta",
            operation_id: &d.operation_id,
            message_id: &d.message_id,
            text: &d.text,
        }
    }
}

/// One entry of a thread's history (docs/history.md): `{id, seq, at,
/// operationId, type, …}`, the `type`'s fields as in the event it came from.
/// Errors (the thread's, an operation's, the page's tool error) go through
/// the same page rules as events' ([`error`], `page_safe`).
pub fn history_entry(e: &pb::HistoryEntry) -> Value {
    use pb::history_entry::Entry;
    let body = match &e.entry {
        Some(Entry::UserText(t)) => json!({
            "type": "user_text",
            "text": t.text,
            "truncated": t.truncated,
        }),
        Some(Entry::AgentMessage(c)) => json!({
            "type": "agent_message",
            "messageId": c.message_id,
            "text": c.text,
        }),
        Some(Entry::ToolRequest(t)) => {
            let mut v = tool_request(t);
            v["type"] = json!("tool_request");
            v
        }
        Some(Entry::ToolOutcome(o)) => {
            let (result, error) = match &o.outcome {
                Some(pb::tool_outcome::Outcome::Result(v)) => (pjson::from_value(v), Value::Null),
                Some(pb::tool_outcome::Outcome::Error(err)) => (Value::Null, tool_error(err)),
                None => (Value::Null, Value::Null),
            };
            json!({
                "type": "tool_outcome",
                "toolRequestId": o.tool_request_id,
                "reason": settle_reason(o.reason),
                "result": result,
                "error": error,
                "truncated": o.truncated,
                "resultPreview": if o.truncated { json!(o.result_preview) } else { Value::Null },
            })
        }
        Some(Entry::OperationStarted(o)) => json!({
            "type": "operation_started",
            "kind": operation_kind(o.kind),
        }),
        Some(Entry::OperationFinished(f)) => {
            let op = f.finished.clone().unwrap_or_default();
            json!({
                "type": "operation_finished",
                "kind": operation_kind(op.kind),
                "outcome": outcome(op.outcome),
                "error": opt_error(op.error.as_ref()),
                "usage": f.usage.as_ref().map_or(Value::Null, usage),
            })
        }
        Some(Entry::Error(err)) => {
            let mut v = error(err);
            v["type"] = json!("error");
            v
        }
        Some(Entry::Dropped(d)) => json!({"type": "dropped", "count": d.count}),
        None => json!({"type": "unknown"}),
    };
    let mut v = body;
    v["id"] = json!(e.id);
    v["seq"] = json!(e.seq);
    v["at"] = millis(e.at.as_ref());
    v["operationId"] = if e.operation_id.is_empty() {
        Value::Null
    } else {
        json!(e.operation_id)
    };
    v
}

/// A page's tool error as history keeps it: `{code, message, details}`,
/// without local paths.
fn tool_error(e: &pb::ToolError) -> Value {
    let mut details = e.details.as_ref().map_or(Value::Null, pjson::from_value);
    crate::page_safe::scrub_json(&mut details, &[]);
    json!({
        "code": e.code,
        "message": crate::page_safe::without_paths(&e.message, &[]),
        "details": details,
    })
}

/// The GetHistory reply: `{entries, hasMore, coveredSeq}`.
pub fn history(h: &pb::GetHistoryResponse) -> Value {
    json!({
        // An entry without a body (a newer service's kind this build does
        // not know) is left out, as `event` leaves out such an event.
        "entries": h
            .entries
            .iter()
            .filter(|e| e.entry.is_some())
            .map(history_entry)
            .collect::<Vec<_>>(),
        "hasMore": h.has_more,
        "coveredSeq": h.covered_seq,
    })
}

pub fn provider_info(p: &pb::ProviderInfo) -> Value {
    json!({
        "name": p.name,
        "code": p.code,
        "available": p.available,
        "isDefault": p.is_default,
        "error": p.error,
        "effortValues": p.effort_values,
        "models": p.models,
        "modelsPending": p.models_pending,
    })
}

pub fn ticket(t: &pb::Ticket) -> Value {
    json!({
        "url": t.url,
        "token": t.token,
        "expiresAt": millis(t.expires_at.as_ref()),
        "path": t.path,
    })
}

pub fn asset(a: &pb::Asset) -> Value {
    json!({
        "name": a.name,
        "path": a.path,
        "sizeBytes": a.size_bytes,
        "modifiedAt": millis(a.modified_at.as_ref()),
    })
}

/// A thread in a listing (local tools only: it names the origin and the
/// workspace path).
pub fn summary(s: &pb::SessionSummary) -> Value {
    json!({
        "sessionId": s.session_id,
        "origin": s.origin,
        "status": status(s.status),
        "provider": s.provider,
        "effortLevel": s.effort_level,
        "createdAt": millis(s.created_at.as_ref()),
        "workspacePath": s.workspace_path,
        "lastSeq": s.last_seq,
        "attachedRoutes": s.attached_routes,
    })
}

/// A thread as the extension's popup lists it (`list_sessions`): no
/// workspace path, which a page-facing shape never needs.
pub fn site_session(s: &pb::SessionSummary) -> Value {
    let mut listed = summary(s);
    if let Some(fields) = listed.as_object_mut() {
        fields.remove("workspacePath");
        fields.remove("lastSeq");
    }
    listed
}

/// The word for an access level (`tools`, `edit`, `full`); None for
/// unspecified (a blocked site) or a level this build does not know.
pub fn access_level(level: i32) -> Option<&'static str> {
    match pb::AccessLevel::try_from(level) {
        Ok(pb::AccessLevel::Tools) => Some("tools"),
        Ok(pb::AccessLevel::Edit) => Some("edit"),
        Ok(pb::AccessLevel::Full) => Some("full"),
        Ok(pb::AccessLevel::Unspecified) | Err(_) => None,
    }
}

/// Parses an access level word (`tools`, `edit`, `full`).
pub fn parse_access_level(word: &str) -> Option<pb::AccessLevel> {
    match word {
        "tools" => Some(pb::AccessLevel::Tools),
        "edit" => Some(pb::AccessLevel::Edit),
        "full" => Some(pb::AccessLevel::Full),
        _ => None,
    }
}

/// A site's grant: `{origin, access, providers, folders: [{path, once}],
/// anyModel, grantedAt, lastUsedAt, expiresAt, blocked, embedders}`; `access`
/// is null on a blocked site.
pub fn site(s: &pb::Site) -> Value {
    let folders: Vec<Value> = s
        .folders
        .iter()
        .map(|f| json!({"path": f.path, "once": f.once}))
        .collect();
    json!({
        "origin": s.origin,
        "access": access_level(s.access),
        "providers": s.providers,
        "folders": folders,
        "anyModel": s.any_model,
        // Always set by SessionService; 0 rather than null keeps the shape a number.
        "grantedAt": s.granted_at.as_ref().map_or(0, crate::timestamp_ms),
        "lastUsedAt": millis(s.last_used_at.as_ref()),
        "expiresAt": millis(s.expires_at.as_ref()),
        "blocked": s.blocked,
        "embedders": s.embedders,
    })
}

pub fn tool_spec(spec: &pb::ToolSpec) -> Value {
    json!({
        "name": spec.name,
        "description": spec.description,
        "argsSchema": spec.args_schema.as_ref().map_or_else(|| json!({}), |s| Value::Object(pjson::from_struct(s))),
        "timeoutMs": spec.timeout_ms,
    })
}

/// The settings document: the form of `settings.json` and of `pedelec-cli
/// settings get`. camelCase, sorted keys, every field optional on read so a
/// hand-written or older file loads; unknown fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SettingsDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_provider: Option<String>,
    pub profiles: BTreeMap<String, ProfilesDoc>,
    pub ollama_endpoint: String,
    pub ollama_api_key: String,
    pub tavily_api_key: String,
    /// Providers kept on the shell path for page tools (no MCP server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shell_tools_only: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProfilesDoc {
    pub levels: BTreeMap<String, LevelDoc>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LevelDoc {
    pub model: String,
    pub effort: String,
}

impl From<SettingsDoc> for pb::Settings {
    fn from(d: SettingsDoc) -> pb::Settings {
        pb::Settings {
            default_provider: d.default_provider,
            profiles: d
                .profiles
                .into_iter()
                .map(|(code, p)| {
                    let levels = p
                        .levels
                        .into_iter()
                        .map(|(level, l)| {
                            let profile = pb::EffortProfile {
                                model: l.model,
                                effort: l.effort,
                            };
                            (level, profile)
                        })
                        .collect();
                    (code, pb::ProviderProfiles { levels })
                })
                .collect(),
            ollama_endpoint: d.ollama_endpoint,
            ollama_api_key: d.ollama_api_key,
            tavily_api_key: d.tavily_api_key,
            shell_tools_only: d.shell_tools_only,
        }
    }
}

impl From<&pb::Settings> for SettingsDoc {
    fn from(s: &pb::Settings) -> SettingsDoc {
        SettingsDoc {
            default_provider: s.default_provider.clone(),
            profiles: s
                .profiles
                .iter()
                .map(|(code, p)| {
                    let levels = p
                        .levels
                        .iter()
                        .map(|(level, l)| {
                            let doc = LevelDoc {
                                model: l.model.clone(),
                                effort: l.effort.clone(),
                            };
                            (level.clone(), doc)
                        })
                        .collect();
                    (code.clone(), ProfilesDoc { levels })
                })
                .collect(),
            ollama_endpoint: s.ollama_endpoint.clone(),
            ollama_api_key: s.ollama_api_key.clone(),
            tavily_api_key: s.tavily_api_key.clone(),
            shell_tools_only: s.shell_tools_only.clone(),
        }
    }
}

/// How a stored key is shown: set or not, and its last four characters when
/// it is long enough that they give nothing away (`••••1234`).
pub fn mask_key(key: &str) -> Value {
    if key.is_empty() {
        return json!({"set": false, "masked": ""});
    }
    let chars: Vec<char> = key.chars().collect();
    let masked = if chars.len() >= 12 {
        let tail: String = chars[chars.len() - 4..].iter().collect();
        format!("••••{tail}")
    } else {
        "••••".to_string()
    };
    json!({"set": true, "masked": masked})
}

/// The `get_full_settings` / `update_settings` result: the settings document
/// with each key replaced by its mask.
pub fn masked_settings(s: &pb::Settings) -> Value {
    let doc = SettingsDoc::from(s);
    let mut value = serde_json::to_value(&doc).unwrap_or_else(|_| json!({}));
    value["defaultProvider"] = json!(doc.default_provider);
    value["ollamaApiKey"] = mask_key(&doc.ollama_api_key);
    value["tavilyApiKey"] = mask_key(&doc.tavily_api_key);
    // Always present here (the file leaves an empty list out).
    value["shellToolsOnly"] = json!(doc.shell_tools_only);
    value
}

pub fn settings(s: &pb::Settings) -> Value {
    serde_json::to_value(SettingsDoc::from(s)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_errors_leave_out_local_details() {
        let e = pb::PedelecError {
            code: "PROVIDER_FAILED".into(),
            message: "codex exited with status 1".into(),
            details: Some(pjson::to_value(
                &json!({"exitCode": 1, "stderrTail": "/home/u/.codex/…"}),
            )),
            source: pb::ErrorSource::Provider as i32,
            operation_id: "op_1".into(),
        };
        assert_eq!(
            error(&e),
            json!({"code": "PROVIDER_FAILED", "message": "codex exited with status 1",
                   "details": {"exitCode": 1}, "source": "provider"})
        );
        let body = event_body(&pb::session_event::Event::Error(e));
        assert_eq!(body["operationId"], "op_1");
        assert_eq!(body["type"], "error");
    }

    #[test]
    fn an_events_error_names_no_local_path() {
        let e = pb::PedelecError {
            code: "WORKSPACE_OPEN_FAILED".into(),
            message: "cannot enter /home/u/proj: gone (manifest /tools/0/name)".into(),
            details: Some(pjson::to_value(
                &json!({"at": "/tmp/x", "path": "/tools/0"}),
            )),
            ..Default::default()
        };
        let page = error(&e);
        assert_eq!(
            page["message"],
            "cannot enter <path>: gone (manifest /tools/0/name)"
        );
        assert_eq!(page["details"], json!({"at": "<path>", "path": "/tools/0"}));
    }

    #[test]
    fn a_managed_workspace_is_not_shown() {
        let mut s = pb::Snapshot {
            workspace_path: "/data/workspaces/thr_1".into(),
            ..Default::default()
        };
        assert_eq!(snapshot(&s)["workspacePath"], Value::Null);
        s.workspace_explicit = true;
        assert_eq!(snapshot(&s)["workspacePath"], "/data/workspaces/thr_1");
    }

    #[test]
    fn tool_spec_is_camel_case() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let spec = pb::ToolSpec {
            name: "search".into(),
            description: "Find rows".into(),
            args_schema: Some(pjson::to_struct(schema.as_object().unwrap())),
            timeout_ms: 5000,
        };
        assert_eq!(
            tool_spec(&spec),
            json!({"name": "search", "description": "Find rows", "argsSchema": schema, "timeoutMs": 5000})
        );
    }

    #[test]
    fn statuses_are_lower_case_words() {
        assert_eq!(
            status(pb::SessionStatus::WaitingToolResult as i32),
            "waiting_tool_result"
        );
        assert_eq!(status(99), "unknown");
        assert_eq!(status(0), "unknown");
    }

    #[test]
    fn timestamps_are_epoch_millis() {
        let t = Timestamp {
            seconds: 1_764_524_403,
            nanos: 123_456_789,
        };
        assert_eq!(millis(Some(&t)), json!(1_764_524_403_123u64));
        assert_eq!(millis(None), Value::Null);
    }

    #[test]
    fn settings_round_trip_through_the_document() {
        let doc: SettingsDoc = serde_json::from_value(json!({
            "defaultProvider": "codex",
            "profiles": {"codex": {"levels": {"high": {"model": "gpt-5.5", "effort": "high"}}}},
            "ollamaEndpoint": "http://127.0.0.1:11434",
            "somethingNew": true
        }))
        .unwrap();
        let pbs = pb::Settings::from(doc.clone());
        assert_eq!(SettingsDoc::from(&pbs), doc);
        assert_eq!(
            settings(&pbs)["profiles"]["codex"]["levels"]["high"]["model"],
            "gpt-5.5"
        );
    }
}
