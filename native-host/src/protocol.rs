//! The JSON protocol between the extension and the host: requests parsed into
//! typed values, and the hand-written camelCase shapes of results and events
//! (independent of prost's field names, so the contract cannot drift with the
//! generated code). docs/native-messaging.md shows every message.

#[cfg(test)]
use pedelec_common::json as pjson;
use pedelec_common::wire;
use pedelec_proto::prost_types::FieldMask;
#[cfg(test)]
use pedelec_proto::prost_types::Timestamp;
use pedelec_proto::v1 as pb;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::error::HostError;

/// Bumped when a shape changes incompatibly; `hello` checks it and `ping`
/// reports it. 2: hello, end reasons, message ids, recent operations, tool
/// deadlines, operation ids on error events.
pub const PROTOCOL_VERSION: u32 = 2;

/// What this host offers beyond the base protocol, for `hello`.
pub const CAPABILITIES: &[&str] = &[
    "chunks",
    "end_reason",
    "message_id",
    "recent_operations",
    "tool_deadline",
    "replay_gap_event",
];

/// A parsed request: the id to answer with, the page origin and what to do.
#[derive(Debug, PartialEq)]
pub struct Envelope {
    pub id: Value,
    /// The page origin, as the extension set it; empty for the types that do
    /// not need one.
    pub origin: String,
    pub request: Request,
}

/// A frame that could not be parsed: answered with `id` (null when none could
/// be read) and `error`.
#[derive(Debug)]
pub struct Rejected {
    pub id: Value,
    pub error: HostError,
}

#[derive(Debug, PartialEq)]
pub enum Request {
    Hello {
        protocol_version: u32,
    },
    Ping,
    ListProviders,
    GetSettings,
    CreateSession(CreateSession),
    Attach(Attach),
    Detach {
        session_id: String,
    },
    SendText {
        session_id: String,
        text: String,
    },
    Prepare {
        session_id: String,
    },
    Cancel {
        session_id: String,
    },
    End {
        session_id: String,
        reason: pb::EndReason,
    },
    Reactivate {
        session_id: String,
    },
    GetSession {
        session_id: String,
    },
    /// A page of the thread's conversation history (docs §3).
    GetHistory(GetHistory),
    SubmitToolResult(SubmitToolResult),
    CreateUploadTicket(UploadTicket),
    CreateDownloadTicket(DownloadTicket),
    ListAssets {
        session_id: String,
    },
    /// Every setting, keys masked; only from the extension's own pages.
    GetFullSettings,
    /// Changes settings; only from the extension's own pages.
    UpdateSettings(SettingsUpdate),
    /// Every granted or blocked site; only from the extension's own pages.
    ListSites,
    /// Creates or replaces a site's grant (the SiteInput as a `pb::Site`).
    GrantSite(pb::Site),
    /// Blocks a site (and ends its sessions).
    BlockSite {
        site: String,
    },
    /// Forgets a site's grant or block (and ends its sessions).
    RevokeSite {
        site: String,
    },
    /// Ends a site's sessions, keeping its grant.
    EndSiteSessions {
        site: String,
    },
    /// Every origin's threads, without workspace paths.
    ListSessions,
}

impl Request {
    pub fn type_name(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Ping => "ping",
            Request::ListProviders => "list_providers",
            Request::GetSettings => "get_settings",
            Request::CreateSession(_) => "create_session",
            Request::Attach(_) => "attach",
            Request::Detach { .. } => "detach",
            Request::SendText { .. } => "send_text",
            Request::Prepare { .. } => "prepare",
            Request::Cancel { .. } => "cancel",
            Request::End { .. } => "end",
            Request::Reactivate { .. } => "reactivate",
            Request::GetSession { .. } => "get_session",
            Request::GetHistory(_) => "get_history",
            Request::SubmitToolResult(_) => "submit_tool_result",
            Request::CreateUploadTicket(_) => "create_upload_ticket",
            Request::CreateDownloadTicket(_) => "create_download_ticket",
            Request::ListAssets { .. } => "list_assets",
            Request::GetFullSettings => "get_full_settings",
            Request::UpdateSettings(_) => "update_settings",
            Request::ListSites => "list_sites",
            Request::GrantSite(_) => "grant_site",
            Request::BlockSite { .. } => "block_site",
            Request::RevokeSite { .. } => "revoke_site",
            Request::EndSiteSessions { .. } => "end_site_sessions",
            Request::ListSessions => "list_sessions",
        }
    }

    /// The requests only the extension's own pages may send (settings with
    /// credentials, site grants, every origin's sessions): a web page's route
    /// gets SETTINGS_ACCESS_DENIED for them.
    pub fn extension_only(&self) -> bool {
        matches!(
            self,
            Request::GetFullSettings
                | Request::UpdateSettings(_)
                | Request::ListSites
                | Request::GrantSite(_)
                | Request::BlockSite { .. }
                | Request::RevokeSite { .. }
                | Request::EndSiteSessions { .. }
                | Request::ListSessions
        )
    }
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSession {
    pub provider: Option<String>,
    pub effort_level: Option<String>,
    pub model: Option<String>,
    pub skills: Option<Map<String, Value>>,
    /// The default: page-scoped sessions (they end when the page goes).
    #[serde(default = "yes")]
    pub auto_end_on_disconnect: bool,
    pub workspace: Option<Workspace>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, PartialEq, Deserialize)]
pub struct Workspace {
    pub path: String,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attach {
    pub session_id: String,
    pub after_seq: Option<u64>,
    pub route_id: Option<String>,
    /// Consecutive chat deltas may travel merged while the reader lags
    /// (`coalesce`; docs §4). Off unless asked for.
    #[serde(default)]
    pub merge_deltas: bool,
}

/// `get_history`: the newest `limit` entries older than entry id `before`
/// (absent or 0: from the newest; `limit` absent or 0: SessionService's default).
#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetHistory {
    pub session_id: String,
    #[serde(default)]
    pub before: u64,
    #[serde(default)]
    pub limit: u32,
}

#[derive(Debug, PartialEq)]
pub struct SubmitToolResult {
    pub session_id: String,
    pub tool_request_id: String,
    pub outcome: ToolOutcome,
}

#[derive(Debug, PartialEq)]
pub enum ToolOutcome {
    Result(Value),
    Error {
        code: String,
        message: String,
        details: Option<Value>,
    },
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UploadTicket {
    pub session_id: String,
    pub target_path: Option<String>,
    pub name: String,
    pub size_bytes: u64,
    #[serde(default)]
    pub content_type: String,
}

/// `update_settings`: absent fields are kept; `defaultProvider: null` unsets
/// it; `profiles` replaces the profiles of each provider it names;
/// `shellToolsOnly` replaces the list; keys change only by an explicit action.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsUpdate {
    #[serde(default, deserialize_with = "present")]
    pub default_provider: Option<Option<String>>,
    pub profiles: Option<std::collections::BTreeMap<String, wire::ProfilesDoc>>,
    pub ollama_endpoint: Option<String>,
    pub ollama_api_key: Option<KeyChange>,
    pub tavily_api_key: Option<KeyChange>,
    pub shell_tools_only: Option<Vec<String>>,
}

/// What to do with a stored key: the page never sees a key, so it cannot
/// send one back; it keeps, replaces or clears it.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum KeyChange {
    Keep,
    Replace { value: String },
    Clear,
}

/// A field that is present (even as `null`) is `Some`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadTicket {
    pub session_id: String,
    pub path: String,
}

/// `grant_site`'s `site`: a grant as the user decided it (the services set
/// grantedAt, lastUsedAt and blocked). `access: null` reaches GrantSite as
/// unspecified, which it refuses.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SiteInput {
    origin: String,
    access: Option<String>,
    providers: Vec<String>,
    folders: Vec<FolderInput>,
    any_model: bool,
    embedders: Vec<String>,
    #[serde(default)]
    expires_at: Option<u64>,
}

#[derive(Deserialize)]
struct FolderInput {
    path: String,
    once: bool,
}

#[derive(Deserialize)]
struct GrantPayload {
    site: SiteInput,
}

/// The payload of the requests that name one site.
#[derive(Deserialize)]
struct SitePayload {
    origin: String,
}

fn site_grant(input: SiteInput) -> Result<pb::Site, String> {
    let access = match input.access.as_deref() {
        None => pb::AccessLevel::Unspecified,
        Some(word) => wire::parse_access_level(word).ok_or_else(|| {
            format!(
                "bad payload for grant_site: access {word:?} is not one of \"tools\", \"edit\", \"full\""
            )
        })?,
    };
    Ok(pb::Site {
        origin: input.origin,
        access: access as i32,
        providers: input.providers,
        folders: input
            .folders
            .into_iter()
            .map(|f| pb::FolderGrant {
                path: f.path,
                once: f.once,
            })
            .collect(),
        any_model: input.any_model,
        expires_at: input.expires_at.map(pedelec_common::ms_to_timestamp),
        embedders: input.embedders,
        ..Default::default()
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadPayload {
    session_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HelloPayload {
    protocol_version: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndPayload {
    session_id: String,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendTextPayload {
    session_id: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultPayload {
    session_id: String,
    tool_request_id: String,
    error: Option<ToolErrorPayload>,
}

#[derive(Deserialize)]
struct ToolErrorPayload {
    code: String,
    message: String,
    details: Option<Value>,
}

/// The UpdateSettings request for `update`: only the values it carries, and
/// an `update_mask` naming only them, so a setting changed meanwhile by someone
/// else (`pedelec-cli settings set`, another options page) is kept instead of
/// being overwritten with what this page last read. A provider in `profiles`
/// is one path (`profiles.<code>`): its levels replace that provider's, no
/// levels removes them, and every other provider's profiles are kept.
/// ProviderService validates the result. `None` when the update changes
/// nothing: an empty mask would mean a full replace.
pub fn settings_update_request(update: SettingsUpdate) -> Option<pb::UpdateSettingsRequest> {
    let mut settings = pb::Settings::default();
    let mut paths = Vec::new();
    if let Some(default) = update.default_provider {
        settings.default_provider = default;
        paths.push("default_provider".to_string());
    }
    if let Some(mut profiles) = update.profiles {
        // In the page's (sorted) order; the entries without levels stay out of `settings`.
        paths.extend(profiles.keys().map(|code| format!("profiles.{code}")));
        profiles.retain(|_, p| !p.levels.is_empty());
        let doc = wire::SettingsDoc {
            profiles,
            ..Default::default()
        };
        settings.profiles = pb::Settings::from(doc).profiles;
    }
    if let Some(endpoint) = update.ollama_endpoint {
        settings.ollama_endpoint = endpoint;
        paths.push("ollama_endpoint".to_string());
    }
    for (key, path, change) in [
        (
            &mut settings.ollama_api_key,
            "ollama_api_key",
            update.ollama_api_key,
        ),
        (
            &mut settings.tavily_api_key,
            "tavily_api_key",
            update.tavily_api_key,
        ),
    ] {
        match change {
            None | Some(KeyChange::Keep) => continue,
            Some(KeyChange::Replace { value }) => *key = value,
            // Named in the mask and empty in `settings`: cleared.
            Some(KeyChange::Clear) => {}
        }
        paths.push(path.to_string());
    }
    if let Some(codes) = update.shell_tools_only {
        settings.shell_tools_only = codes;
        paths.push("shell_tools_only".to_string());
    }
    if paths.is_empty() {
        return None;
    }
    Some(pb::UpdateSettingsRequest {
        settings: Some(settings),
        update_mask: Some(FieldMask { paths }),
    })
}

fn invalid(id: &Value, message: impl Into<String>) -> Rejected {
    Rejected {
        id: id.clone(),
        error: HostError::invalid(message),
    }
}

/// The deepest JSON nesting a request may have, the request object itself
/// being level 1. JSON crosses gRPC as `google.protobuf.Struct`/`Value`, where
/// each object level costs three protobuf message levels, and protobuf
/// decoders (prost included) refuse more than 100: a deeper tool result or
/// skills schema would fail inside a service. Refusing it here names the limit.
pub const MAX_JSON_DEPTH: usize = 32;

fn too_deep(id: &Value) -> Rejected {
    invalid(
        id,
        format!(
            "the request nests JSON deeper than {MAX_JSON_DEPTH} levels (the limit for \
             requests, as JSON crosses gRPC as google.protobuf.Struct)"
        ),
    )
}

/// How deeply `value` nests (a scalar is 0, `{}` and `[]` are 1); stops
/// counting past `limit`.
pub fn json_depth(value: &Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(level);
        if deepest > limit {
            break;
        }
        stack.extend(children.map(|c| (c, level + 1)));
    }
    deepest
}

/// Parses one frame's body. Never panics, whatever the bytes.
pub fn parse(body: &[u8]) -> Result<Envelope, Rejected> {
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => {
            // Still answer with the id when the rest of the frame is readable.
            let id = serde_json::from_str::<Value>(&String::from_utf8_lossy(body))
                .ok()
                .and_then(|v| v.get("id").cloned())
                .filter(valid_id)
                .unwrap_or(Value::Null);
            return Err(invalid(&id, format!("frame is not valid UTF-8: {e}")));
        }
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // serde_json's own bound (128 levels) is past ours: say which applies.
        if e.to_string().contains("recursion limit") {
            too_deep(&Value::Null)
        } else {
            invalid(&Value::Null, format!("frame is not valid JSON: {e}"))
        }
    })?;
    let deep = json_depth(&value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH;
    let Value::Object(mut obj) = value else {
        return Err(invalid(&Value::Null, "a request must be a JSON object"));
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    if !valid_id(&id) {
        // The reply's id is a request id or null (the schema's ErrorReply):
        // an id of another kind is one that could not be read.
        return Err(invalid(&Value::Null, "`id` must be a string or a number"));
    }
    if deep {
        return Err(too_deep(&id));
    }
    let kind = match obj.remove("type") {
        Some(Value::String(s)) => s,
        _ => return Err(invalid(&id, "`type` must be a string")),
    };
    let origin = match obj.remove("origin") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(_) => return Err(invalid(&id, "`origin` must be a string")),
    };
    let payload = match obj.remove("payload") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(invalid(&id, "`payload` must be an object")),
    };
    let request = request(&kind, payload).map_err(|m| invalid(&id, m))?;
    let needs_origin = !matches!(
        request,
        Request::Hello { .. } | Request::Ping | Request::ListProviders | Request::GetSettings
    );
    if needs_origin && origin.is_empty() {
        return Err(invalid(
            &id,
            format!("`origin` is required for {kind} (the page origin, set by the extension)"),
        ));
    }
    Ok(Envelope {
        id,
        origin,
        request,
    })
}

fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

fn payload<T: DeserializeOwned>(kind: &str, map: Map<String, Value>) -> Result<T, String> {
    serde_json::from_value(Value::Object(map)).map_err(|e| format!("bad payload for {kind}: {e}"))
}

fn request(kind: &str, mut map: Map<String, Value>) -> Result<Request, String> {
    let thread = |map| payload::<ThreadPayload>(kind, map).map(|p| p.session_id);
    Ok(match kind {
        "hello" => Request::Hello {
            protocol_version: payload::<HelloPayload>(kind, map)?.protocol_version,
        },
        "ping" => Request::Ping,
        "list_providers" => Request::ListProviders,
        "get_settings" => Request::GetSettings,
        "create_session" => Request::CreateSession(payload(kind, map)?),
        "attach" => Request::Attach(payload(kind, map)?),
        "detach" => Request::Detach {
            session_id: thread(map)?,
        },
        "send_text" => {
            let p: SendTextPayload = payload(kind, map)?;
            Request::SendText {
                session_id: p.session_id,
                text: p.text,
            }
        }
        "prepare" => Request::Prepare {
            session_id: thread(map)?,
        },
        "cancel" => Request::Cancel {
            session_id: thread(map)?,
        },
        "end" => {
            let p: EndPayload = payload(kind, map)?;
            let reason = match p.reason.as_deref() {
                None => pb::EndReason::Requested,
                Some(word) => wire::parse_end_reason(word).ok_or_else(|| {
                    format!(
                        "bad payload for end: reason {word:?} is not one of \"requested\", \"auto_end\""
                    )
                })?,
            };
            Request::End {
                session_id: p.session_id,
                reason,
            }
        }
        "reactivate" => Request::Reactivate {
            session_id: thread(map)?,
        },
        "get_session" => Request::GetSession {
            session_id: thread(map)?,
        },
        "get_history" => Request::GetHistory(payload(kind, map)?),
        "submit_tool_result" => {
            // `result: null` is a legitimate handler result, so presence of the
            // key matters, which serde's Option cannot tell.
            // Taken out rather than cloned: it may be most of a 64 MiB frame.
            let result = map.remove("result");
            let p: ToolResultPayload = payload(kind, map)?;
            let outcome = match (p.error, result) {
                (Some(e), _) => ToolOutcome::Error {
                    code: e.code,
                    message: e.message,
                    details: e.details,
                },
                (None, Some(result)) => ToolOutcome::Result(result),
                (None, None) => {
                    return Err(format!(
                        "bad payload for {kind}: `result` or `error` is required"
                    ));
                }
            };
            Request::SubmitToolResult(SubmitToolResult {
                session_id: p.session_id,
                tool_request_id: p.tool_request_id,
                outcome,
            })
        }
        "create_upload_ticket" => Request::CreateUploadTicket(payload(kind, map)?),
        "create_download_ticket" => Request::CreateDownloadTicket(payload(kind, map)?),
        "get_full_settings" => Request::GetFullSettings,
        "update_settings" => Request::UpdateSettings(payload(kind, map)?),
        "list_assets" => Request::ListAssets {
            session_id: thread(map)?,
        },
        "list_sites" => Request::ListSites,
        "grant_site" => Request::GrantSite(site_grant(payload::<GrantPayload>(kind, map)?.site)?),
        "block_site" => Request::BlockSite {
            site: payload::<SitePayload>(kind, map)?.origin,
        },
        "revoke_site" => Request::RevokeSite {
            site: payload::<SitePayload>(kind, map)?.origin,
        },
        "end_site_sessions" => Request::EndSiteSessions {
            site: payload::<SitePayload>(kind, map)?.origin,
        },
        "list_sessions" => Request::ListSessions,
        other => return Err(format!("unknown request type {other:?}")),
    })
}

// ---- Replies ----

/// `{id, ok:true, result}` serialized.
pub fn ok_reply(id: &Value, result: Value) -> String {
    json!({"id": id, "ok": true, "result": result}).to_string()
}

/// `{id, ok:false, error:{code, message, details}}` serialized.
pub fn error_reply(id: &Value, error: &HostError) -> String {
    json!({"id": id, "ok": false, "error": error.to_json()}).to_string()
}

/// [`error_reply`] for a web page: no local path but those the page gave
/// (`keep`).
pub fn page_error_reply(id: &Value, error: &HostError, keep: &[&str]) -> String {
    json!({"id": id, "ok": false, "error": page_error(error, keep)}).to_string()
}

/// A host error as a web page sees it: the message and the details without
/// a local path but `keep` (`pedelec_common::page_safe`).
fn page_error(error: &HostError, keep: &[&str]) -> Value {
    let mut e = error.to_json();
    for field in ["message", "details"] {
        if let Some(v) = e.get_mut(field) {
            pedelec_common::page_safe::scrub_json(v, keep);
        }
    }
    e
}

impl Request {
    /// The absolute paths this request names (a create's workspace): a page
    /// may be told of them again.
    pub fn given_paths(&self) -> Vec<String> {
        match self {
            Request::CreateSession(c) => c.workspace.iter().map(|w| w.path.clone()).collect(),
            _ => Vec::new(),
        }
    }
}

// ---- Frames (the shapes inside them live in pedelec_common::wire) ----

/// A whole event frame, serialized: `{type:"event", sessionId, seq, at, event}`.
/// `None` for an event without a body (a newer service's kind we do not know).
pub fn event_frame(e: &pb::SessionEvent) -> Option<String> {
    event_frame_merged(e, None)
}

/// An event frame; `first_seq` is a merged chat delta's first seq
/// (`firstSeq`, docs §4; see `coalesce`).
pub fn event_frame_merged(e: &pb::SessionEvent, first_seq: Option<u64>) -> Option<String> {
    // `type` last: the keys stay in sorted order (see `wire::EventJson`).
    #[derive(serde::Serialize)]
    struct EventFrame<'a> {
        #[serde(flatten)]
        event: wire::EventJson<'a>,
        #[serde(rename = "firstSeq", skip_serializing_if = "Option::is_none")]
        first_seq: Option<u64>,
        r#type: &'static str,
    }
    let frame = EventFrame {
        event: wire::event(e)?,
        first_seq,
        r#type: "event",
    };
    Some(serde_json::to_string(&frame).expect("an event frame always serializes"))
}

/// Sent when an attached stream stops without a `detach` (the service went
/// away or ended the stream), so the extension knows to re-attach.
pub fn detached_frame(session_id: &str, reason: &str, error: Option<&HostError>) -> String {
    json!({
        "type": "detached",
        "sessionId": session_id,
        "reason": reason,
        // Sessions are web pages': the error as a page may see it.
        "error": error.map_or(Value::Null, |e| page_error(e, &[])),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_web_pages_error_names_no_local_path_but_its_own() {
        let status = pedelec_common::codes::CodedError::new(
            pedelec_common::Code::WORKSPACE_OPEN_FAILED,
            "workspace \"/home/a/proj\" cannot be used: /home/a/.local/share/pedelec/data",
        )
        .with_details(json!({"where": "/var/x", "n": 1}))
        .to_status();
        let e = HostError::from_status(&status);
        let reply: Value =
            serde_json::from_str(&page_error_reply(&json!(7), &e, &["/home/a/proj"])).unwrap();
        assert_eq!(
            reply["error"]["message"],
            "workspace \"/home/a/proj\" cannot be used: <path>"
        );
        assert_eq!(
            reply["error"]["details"],
            json!({"where": "<path>", "n": 1})
        );
        // The extension's own pages get it whole.
        let whole: Value = serde_json::from_str(&error_reply(&json!(7), &e)).unwrap();
        assert!(
            whole["error"]["message"]
                .as_str()
                .unwrap()
                .contains("/data")
        );
    }

    #[test]
    fn a_create_gives_its_workspace_path() {
        let env = parse(
            br#"{"id":1,"origin":"https://a.example","type":"create_session","payload":{"workspace":{"path":"/w/p"}}}"#,
        );
        assert_eq!(
            env.map(|e| e.request.given_paths()).ok(),
            Some(vec!["/w/p".to_string()])
        );
    }

    use super::*;

    fn parse_str(s: &str) -> Result<Envelope, Rejected> {
        parse(s.as_bytes())
    }

    fn rejected(s: &[u8]) -> (Value, String, String) {
        let r = parse(s).unwrap_err();
        (r.id, r.error.code(), r.error.to_string())
    }

    #[test]
    fn create_session_payload_follows_the_sdk() {
        let env = parse_str(
            r#"{"id":"r1","type":"create_session","origin":"https://app.example","payload":{
                "provider":"codex","effortLevel":"high","model":"m",
                "skills":{"guidance":"g","tools":[{"name":"t","description":"d","argsSchema":{"type":"object"},"timeoutMs":500}]},
                "workspace":{"path":"/w"},"somethingNew":1}}"#,
        )
        .unwrap();
        assert_eq!(env.id, json!("r1"));
        assert_eq!(env.origin, "https://app.example");
        let Request::CreateSession(c) = env.request else {
            panic!()
        };
        assert_eq!(c.provider.as_deref(), Some("codex"));
        assert_eq!(c.effort_level.as_deref(), Some("high"));
        assert!(c.auto_end_on_disconnect, "defaults to true");
        assert_eq!(c.workspace.unwrap().path, "/w");
        assert_eq!(c.skills.unwrap()["tools"][0]["timeoutMs"], 500);
    }

    #[test]
    fn payload_can_be_omitted_for_types_without_fields() {
        let env = parse_str(r#"{"id":7,"type":"ping"}"#).unwrap();
        assert_eq!((env.id, env.request), (json!(7), Request::Ping));
        let env = parse_str(r#"{"id":8,"type":"create_session","origin":"o"}"#).unwrap();
        assert!(
            matches!(env.request, Request::CreateSession(c) if c.auto_end_on_disconnect && c.provider.is_none())
        );
    }

    #[test]
    fn submit_tool_result_tells_null_result_from_missing() {
        let base = r#"{"id":1,"type":"submit_tool_result","origin":"o","payload":{"sessionId":"s","toolRequestId":"t""#;
        let env = parse_str(&format!("{base},\"result\":null}}}}")).unwrap();
        assert!(matches!(
            env.request,
            Request::SubmitToolResult(SubmitToolResult {
                outcome: ToolOutcome::Result(Value::Null),
                ..
            })
        ));
        let env = parse_str(&format!(
            "{base},\"error\":{{\"code\":\"TOOL_HANDLER_ERROR\",\"message\":\"boom\"}}}}}}"
        ))
        .unwrap();
        assert!(matches!(env.request,
            Request::SubmitToolResult(SubmitToolResult { outcome: ToolOutcome::Error { ref code, .. }, .. }) if code == "TOOL_HANDLER_ERROR"));
        let (id, code, msg) = rejected(format!("{base}}}}}").as_bytes());
        assert_eq!((id, code.as_str()), (json!(1), "INVALID_INPUT"));
        assert!(msg.contains("`result` or `error`"), "{msg}");
    }

    #[test]
    fn bad_requests_are_invalid_input_with_the_id_when_readable() {
        let cases: &[(&[u8], Value, &str)] = &[
            (b"not json", Value::Null, "not valid JSON"),
            (b"[1,2]", Value::Null, "JSON object"),
            (br#"{"type":"ping"}"#, Value::Null, "`id`"),
            (br#"{"id":{"x":1},"type":"ping"}"#, Value::Null, "`id`"),
            (br#"{"id":true,"type":"ping"}"#, Value::Null, "`id`"),
            (br#"{"id":null,"type":"ping"}"#, Value::Null, "`id`"),
            (br#"{"id":"a","type":"fly"}"#, json!("a"), "unknown request type"),
            (br#"{"id":"b"}"#, json!("b"), "`type`"),
            (br#"{"id":"c","type":"send_text","origin":"o","payload":{"sessionId":"s"}}"#, json!("c"), "missing field `text`"),
            (br#"{"id":"d","type":"send_text","payload":{"sessionId":"s","text":"x"}}"#, json!("d"), "`origin` is required"),
            (br#"{"id":"e","type":"end","origin":"o","payload":[]}"#, json!("e"), "`payload` must be an object"),
            (br#"{"id":"f","type":"attach","origin":"o","payload":{"sessionId":"s","afterSeq":-1}}"#, json!("f"), "bad payload for attach"),
            (b"{\"id\":\"g\",\"type\":\"ping\",\"x\":\"\xff\"}", json!("g"), "UTF-8"),
        ];
        for (input, want_id, needle) in cases {
            let (id, code, msg) = rejected(input);
            assert_eq!(&id, want_id, "{}", String::from_utf8_lossy(input));
            assert_eq!(code, "INVALID_INPUT");
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        }
    }

    #[test]
    fn keys_are_masked_and_change_only_by_action() {
        assert_eq!(wire::mask_key(""), json!({"set": false, "masked": ""}));
        assert_eq!(
            wire::mask_key("short"),
            json!({"set": true, "masked": "••••"})
        );
        assert_eq!(
            wire::mask_key("tvly-abcdefgh1234"),
            json!({"set": true, "masked": "••••1234"})
        );
        let current = pb::Settings {
            default_provider: Some("codex".into()),
            ollama_endpoint: "http://h:1".into(),
            ollama_api_key: "old-ollama-key".into(),
            tavily_api_key: "old-tavily-key".into(),
            ..Default::default()
        };
        let masked = wire::masked_settings(&current);
        assert!(!masked.to_string().contains("old-"), "{masked}");
        assert_eq!(masked["defaultProvider"], "codex");

        let parse_update = |text: &str| -> SettingsUpdate { serde_json::from_str(text).unwrap() };
        let paths = |req: &pb::UpdateSettingsRequest| -> Vec<String> {
            req.update_mask.clone().unwrap_or_default().paths
        };
        // Nothing to change: no request (an empty mask would replace everything).
        assert_eq!(settings_update_request(parse_update("{}")), None);
        assert_eq!(
            settings_update_request(parse_update(r#"{"ollamaApiKey":{"action":"keep"}}"#)),
            None
        );
        let req = settings_update_request(parse_update(
            r#"{"defaultProvider":null,"ollamaApiKey":{"action":"replace","value":"new"},"tavilyApiKey":{"action":"clear"}}"#,
        ))
        .unwrap();
        // Only what the page touched is named; the endpoint and profiles are not.
        assert_eq!(
            paths(&req),
            ["default_provider", "ollama_api_key", "tavily_api_key"]
        );
        let sent = req.settings.unwrap();
        assert_eq!(sent.default_provider, None);
        assert_eq!(sent.ollama_api_key, "new");
        assert_eq!(sent.tavily_api_key, "");
        // Each provider in `profiles` is its own path; one without levels is removed.
        let req = settings_update_request(parse_update(
            r#"{"profiles":{"ollama":{"levels":{"high":{"model":"qwen3:32b","effort":""}}},"codex":{"levels":{}}},"ollamaEndpoint":"","shellToolsOnly":["claude"]}"#,
        ))
        .unwrap();
        assert_eq!(
            paths(&req),
            [
                "profiles.codex",
                "profiles.ollama",
                "ollama_endpoint",
                "shell_tools_only"
            ]
        );
        let sent = req.settings.unwrap();
        assert_eq!(sent.shell_tools_only, ["claude"]);
        assert_eq!(sent.profiles["ollama"].levels["high"].model, "qwen3:32b");
        assert!(!sent.profiles.contains_key("codex"));
        // A key value outside a replace action is not accepted.
        assert!(serde_json::from_str::<SettingsUpdate>(r#"{"ollamaApiKey":"k"}"#).is_err());
        assert!(serde_json::from_str::<SettingsUpdate>(r#"{"unknown":1}"#).is_err());
    }

    #[test]
    fn every_type_parses() {
        let s = r#""sessionId":"s""#;
        for (kind, payload) in [
            ("hello", r#"{"protocolVersion":2}"#.to_string()),
            ("ping", "{}".to_string()),
            ("list_providers", "{}".into()),
            ("get_settings", "{}".into()),
            ("create_session", "{}".into()),
            (
                "attach",
                format!("{{{s},\"afterSeq\":3,\"routeId\":\"r\"}}"),
            ),
            ("detach", format!("{{{s}}}")),
            ("send_text", format!("{{{s},\"text\":\"hi\"}}")),
            ("prepare", format!("{{{s}}}")),
            ("cancel", format!("{{{s}}}")),
            ("end", format!("{{{s}}}")),
            ("reactivate", format!("{{{s}}}")),
            ("get_session", format!("{{{s}}}")),
            ("get_history", format!("{{{s},\"before\":7,\"limit\":20}}")),
            (
                "submit_tool_result",
                format!("{{{s},\"toolRequestId\":\"t\",\"result\":{{\"a\":1}}}}"),
            ),
            (
                "create_upload_ticket",
                format!(
                    "{{{s},\"name\":\"a.txt\",\"sizeBytes\":3,\"contentType\":\"text/plain\"}}"
                ),
            ),
            (
                "create_download_ticket",
                format!("{{{s},\"path\":\"a.txt\"}}"),
            ),
            ("list_assets", format!("{{{s}}}")),
            ("get_full_settings", "{}".into()),
            (
                "update_settings",
                r#"{"defaultProvider":null,"ollamaApiKey":{"action":"clear"}}"#.into(),
            ),
            ("list_sites", "{}".into()),
            (
                "grant_site",
                r#"{"site":{"origin":"https://a.example","access":"edit","providers":["codex"],"folders":[{"path":"/w","once":true}],"anyModel":false,"embedders":[]}}"#.into(),
            ),
            ("block_site", r#"{"origin":"https://a.example"}"#.into()),
            ("revoke_site", r#"{"origin":"https://a.example"}"#.into()),
            ("end_site_sessions", r#"{"origin":"https://a.example"}"#.into()),
            ("list_sessions", "{}".into()),
        ] {
            let frame =
                format!("{{\"id\":1,\"type\":\"{kind}\",\"origin\":\"o\",\"payload\":{payload}}}");
            let env = parse_str(&frame).unwrap_or_else(|e| panic!("{kind}: {:?}", e.error));
            assert_eq!(env.request.type_name(), kind);
        }
    }

    #[test]
    fn grant_site_takes_the_site_input_and_names_bad_levels() {
        let grant = |site: &str| {
            parse_str(&format!(
                r#"{{"id":1,"type":"grant_site","origin":"o","payload":{{"site":{site}}}}}"#
            ))
        };
        let env = grant(
            r#"{"origin":"https://a.example","access":"tools","providers":["codex","claude"],
                "folders":[{"path":"/w","once":true}],"anyModel":true,"embedders":["https://b.example"],
                "expiresAt":1764524403123}"#,
        )
        .unwrap();
        let Request::GrantSite(site) = env.request else {
            panic!()
        };
        assert_eq!(site.origin, "https://a.example");
        assert_eq!(site.access, pb::AccessLevel::Tools as i32);
        assert_eq!(site.providers, ["codex", "claude"]);
        assert_eq!(
            site.folders,
            [pb::FolderGrant {
                path: "/w".into(),
                once: true
            }]
        );
        assert!(site.any_model && !site.blocked);
        assert_eq!(site.embedders, ["https://b.example"]);
        assert_eq!(
            site.expires_at.as_ref().map(pedelec_common::timestamp_ms),
            Some(1_764_524_403_123)
        );
        // null: unspecified, which GrantSite refuses (the services' rule).
        let env = grant(
            r#"{"origin":"https://a.example","access":null,"providers":[],"folders":[],"anyModel":false,"embedders":[]}"#,
        )
        .unwrap();
        assert!(
            matches!(env.request, Request::GrantSite(s) if s.access == 0 && s.expires_at.is_none())
        );
        for (site, needle) in [
            (
                r#"{"origin":"https://a.example","access":"admin","providers":[],"folders":[],"anyModel":false,"embedders":[]}"#,
                "access \"admin\"",
            ),
            (
                r#"{"origin":"https://a.example","access":"edit","folders":[],"anyModel":false,"embedders":[]}"#,
                "missing field `providers`",
            ),
        ] {
            let e = grant(site).unwrap_err();
            assert_eq!(e.error.code(), "INVALID_INPUT");
            assert!(e.error.to_string().contains(needle), "{}", e.error);
        }
        let e =
            parse_str(r#"{"id":2,"type":"revoke_site","origin":"o","payload":{}}"#).unwrap_err();
        assert!(
            e.error.to_string().contains("missing field `origin`"),
            "{}",
            e.error
        );
    }

    #[test]
    fn only_settings_sites_and_every_origins_sessions_are_extension_only() {
        for (kind, payload, only) in [
            ("get_full_settings", "{}", true),
            ("list_sites", "{}", true),
            ("revoke_site", r#"{"origin":"https://a.example"}"#, true),
            ("list_sessions", "{}", true),
            ("get_settings", "{}", false),
            ("create_session", "{}", false),
        ] {
            let env = parse_str(&format!(
                r#"{{"id":1,"type":"{kind}","origin":"o","payload":{payload}}}"#
            ))
            .unwrap();
            assert_eq!(env.request.extension_only(), only, "{kind}");
        }
    }

    #[test]
    fn events_have_stable_camel_case_shapes() {
        use pb::session_event::Event as E;
        let at = Some(Timestamp {
            seconds: 1_764_524_403,
            nanos: 123_456_789,
        });
        let frame = |event| {
            let text = event_frame(&pb::SessionEvent {
                session_id: "thr_1".into(),
                seq: 5,
                at,
                first_seq: None,
                event: Some(event),
            })
            .unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            // The same bytes as the sorted `Value` form, whichever path wrote them.
            assert_eq!(text, v.to_string());
            assert_eq!(v["type"], "event");
            assert_eq!(v["sessionId"], "thr_1");
            assert_eq!(v["seq"], 5);
            assert_eq!(v["at"], 1_764_524_403_123i64);
            v["event"].clone()
        };
        assert_eq!(
            frame(E::ChatDelta(pb::ChatDelta {
                operation_id: "op_1".into(),
                text: "Hel".into(),
                message_id: "msg_1_1".into(),
            })),
            json!({"type": "chat_delta", "operationId": "op_1", "messageId": "msg_1_1", "text": "Hel"})
        );
        assert_eq!(
            frame(E::Status(pb::StatusChanged {
                status: pb::SessionStatus::WaitingToolResult as i32
            })),
            json!({"type": "status", "status": "waiting_tool_result"})
        );
        assert_eq!(
            frame(E::ToolRequest(pb::ToolRequest {
                tool_request_id: "tr_1".into(),
                tool: "get_page".into(),
                args: Some(pjson::to_value(&json!({"q": [1, "x"]}))),
                operation_id: "op_1".into(),
                timeout_ms: 30_000,
                deadline_at: at,
            })),
            json!({"type": "tool_request", "toolRequestId": "tr_1", "tool": "get_page", "args": {"q": [1, "x"]},
                   "operationId": "op_1", "timeoutMs": 30_000, "deadlineAt": 1_764_524_403_123i64})
        );
        assert_eq!(
            frame(E::OperationFinished(pb::OperationFinished {
                operation_id: "op_1".into(),
                kind: pb::OperationKind::SendText as i32,
                outcome: pb::OperationOutcome::Failed as i32,
                error: Some(pb::PedelecError {
                    code: "PROVIDER_FAILED".into(),
                    message: "m".into(),
                    details: None,
                    source: pb::ErrorSource::Provider as i32,
                    operation_id: String::new(),
                }),
            })),
            json!({"type": "operation_finished", "operationId": "op_1", "kind": "send_text", "outcome": "failed",
                   "error": {"code": "PROVIDER_FAILED", "message": "m", "details": null, "source": "provider"}})
        );
        assert_eq!(
            frame(E::Usage(pb::Usage {
                total_tokens: 3,
                input_tokens: 2,
                output_tokens: 1,
                cumulative: false
            })),
            json!({"type": "usage", "totalTokens": 3, "inputTokens": 2, "outputTokens": 1})
        );
        let snap = frame(E::Snapshot(pb::Snapshot {
            status: pb::SessionStatus::Idle as i32,
            session_id: "thr_1".into(),
            provider: "cursor".into(),
            created_at: at,
            ..Default::default()
        }));
        assert_eq!(snap["snapshot"]["status"], "idle");
        assert_eq!(snap["snapshot"]["createdAt"], 1_764_524_403_123i64);
        assert_eq!(snap["snapshot"]["activeOperation"], Value::Null);
        assert_eq!(snap["snapshot"]["usage"], Value::Null);
        assert!(event_frame(&pb::SessionEvent::default()).is_none());
    }

    #[test]
    fn get_history_pages_by_entry_id_and_defaults_to_the_newest() {
        let parse_history = |payload: &str| {
            parse_str(&format!(
                r#"{{"id":1,"type":"get_history","origin":"https://a.example","payload":{payload}}}"#
            ))
        };
        let env = parse_history(r#"{"sessionId":"thr_1"}"#).unwrap();
        assert_eq!(env.origin, "https://a.example");
        assert!(!env.request.extension_only());
        assert_eq!(
            env.request,
            Request::GetHistory(GetHistory {
                session_id: "thr_1".into(),
                before: 0,
                limit: 0
            })
        );
        let env = parse_history(r#"{"sessionId":"thr_1","before":41,"limit":1000}"#).unwrap();
        assert!(matches!(
            env.request,
            Request::GetHistory(GetHistory {
                before: 41,
                limit: 1000,
                ..
            })
        ));
        for bad in [
            r#"{}"#,
            r#"{"sessionId":"thr_1","before":-1}"#,
            r#"{"sessionId":"thr_1","limit":"10"}"#,
            r#"{"sessionId":"thr_1","limit":4294967296}"#,
        ] {
            let e = parse_history(bad).unwrap_err();
            assert_eq!(e.error.code(), "INVALID_INPUT", "{bad}");
            assert!(e.error.to_string().contains("get_history"), "{}", e.error);
        }
        // Like every thread request, it needs the page's origin.
        let e = parse_str(r#"{"id":1,"type":"get_history","payload":{"sessionId":"thr_1"}}"#)
            .unwrap_err();
        assert_eq!(e.error.code(), "INVALID_INPUT");
    }

    /// The reply of `get_history` as the host builds it (`wire::history`):
    /// camelCase entries with their id, seq, time and operation, and no local
    /// path in an error a page reads.
    #[test]
    fn history_entries_have_camel_case_shapes_and_page_safe_errors() {
        use pb::history_entry::Entry;
        let at = Some(Timestamp {
            seconds: 1_764_524_403,
            nanos: 123_456_789,
        });
        let entry = |id: u64, seq: u64, op: &str, e: Entry| pb::HistoryEntry {
            id,
            operation_id: op.into(),
            seq,
            at,
            entry: Some(e),
        };
        let local = "/etc/pedelec/agent/stderr.log";
        let reply = wire::history(&pb::GetHistoryResponse {
            entries: vec![
                entry(1, 0, "", Entry::Dropped(pb::HistoryDropped { count: 12 })),
                entry(
                    2,
                    4,
                    "op_1",
                    Entry::OperationStarted(pb::OperationStarted {
                        operation_id: "op_1".into(),
                        kind: pb::OperationKind::SendText as i32,
                    }),
                ),
                entry(
                    3,
                    4,
                    "op_1",
                    Entry::UserText(pb::UserText {
                        text: "What is on the page?".into(),
                        truncated: false,
                    }),
                ),
                entry(
                    4,
                    6,
                    "op_1",
                    Entry::ToolRequest(pb::ToolRequest {
                        tool_request_id: "tr_1".into(),
                        tool: "get_page".into(),
                        args: Some(pjson::to_value(&json!({"q": 1}))),
                        operation_id: "op_1".into(),
                        timeout_ms: 30_000,
                        deadline_at: at,
                    }),
                ),
                entry(
                    5,
                    8,
                    "op_1",
                    Entry::ToolOutcome(pb::ToolOutcome {
                        tool_request_id: "tr_1".into(),
                        reason: pb::ToolSettleReason::Resolved as i32,
                        outcome: Some(pb::tool_outcome::Outcome::Error(pb::ToolError {
                            code: "TOOL_HANDLER_ERROR".into(),
                            message: format!("could not read {local}"),
                            details: Some(pjson::to_value(&json!({"file": local}))),
                        })),
                        truncated: false,
                        result_preview: String::new(),
                    }),
                ),
                entry(
                    6,
                    10,
                    "op_1",
                    Entry::AgentMessage(pb::Chat {
                        operation_id: "op_1".into(),
                        text: "A title.".into(),
                        message_id: "msg_1".into(),
                    }),
                ),
                entry(
                    7,
                    11,
                    "op_1",
                    Entry::Error(pb::PedelecError {
                        code: "PROVIDER_FAILED".into(),
                        message: format!("the agent failed, see {local}"),
                        details: Some(pjson::to_value(&json!({"stderrTail": "secret"}))),
                        source: pb::ErrorSource::Provider as i32,
                        operation_id: "op_1".into(),
                    }),
                ),
                entry(
                    8,
                    12,
                    "op_1",
                    Entry::OperationFinished(pb::HistoryOperationFinished {
                        finished: Some(pb::OperationFinished {
                            operation_id: "op_1".into(),
                            kind: pb::OperationKind::SendText as i32,
                            outcome: pb::OperationOutcome::Completed as i32,
                            error: None,
                        }),
                        usage: Some(pb::Usage {
                            total_tokens: 3,
                            input_tokens: 2,
                            output_tokens: 1,
                            cumulative: true,
                        }),
                    }),
                ),
                // A newer service's kind: left out, as an event without a body.
                pb::HistoryEntry {
                    id: 9,
                    seq: 13,
                    ..Default::default()
                },
            ],
            has_more: true,
            covered_seq: 12,
        });
        assert_eq!(reply["hasMore"], true);
        assert_eq!(reply["coveredSeq"], 12);
        let e = reply["entries"].as_array().unwrap();
        assert_eq!(e.len(), 8);
        let ms = 1_764_524_403_123i64;
        assert_eq!(
            e[0],
            json!({"id": 1, "seq": 0, "at": ms, "operationId": null, "type": "dropped", "count": 12})
        );
        assert_eq!(
            e[1],
            json!({"id": 2, "seq": 4, "at": ms, "operationId": "op_1", "type": "operation_started", "kind": "send_text"})
        );
        assert_eq!(
            e[2],
            json!({"id": 3, "seq": 4, "at": ms, "operationId": "op_1", "type": "user_text",
                   "text": "What is on the page?", "truncated": false})
        );
        assert_eq!(
            e[3],
            json!({"id": 4, "seq": 6, "at": ms, "operationId": "op_1", "type": "tool_request",
                   "toolRequestId": "tr_1", "tool": "get_page", "args": {"q": 1}, "timeoutMs": 30_000,
                   "deadlineAt": ms})
        );
        assert_eq!(e[4]["type"], "tool_outcome");
        assert_eq!(e[4]["reason"], "resolved");
        assert_eq!(e[4]["result"], Value::Null);
        assert_eq!(e[4]["error"]["code"], "TOOL_HANDLER_ERROR");
        assert_eq!(
            e[5],
            json!({"id": 6, "seq": 10, "at": ms, "operationId": "op_1", "type": "agent_message",
                   "messageId": "msg_1", "text": "A title."})
        );
        assert_eq!(e[6]["type"], "error");
        assert_eq!(e[6]["source"], "provider");
        assert_eq!(e[6]["details"], json!({}), "no stderr for a page");
        assert_eq!(
            e[7],
            json!({"id": 8, "seq": 12, "at": ms, "operationId": "op_1", "type": "operation_finished",
                   "kind": "send_text", "outcome": "completed", "error": null,
                   "usage": {"totalTokens": 3, "inputTokens": 2, "outputTokens": 1}})
        );
        let text = reply.to_string();
        assert!(
            !text.contains(local),
            "a local path reached the page: {text}"
        );
        assert!(!text.contains("secret"), "{text}");
    }
}

#[cfg(test)]
mod depth_tests {
    use super::*;
    use prost::Message;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    fn frame(payload: Value, kind: &str) -> String {
        json!({"id": "d", "type": kind, "origin": "https://a.example", "payload": payload})
            .to_string()
    }

    /// Nesting inside a request at the limit still decodes in a service
    /// (prost stops at 100 message levels), with room for a few wrappers.
    #[test]
    fn the_depth_limit_stays_below_protobufs() {
        // The frame adds 2 levels above `result` (envelope, payload) and 5
        // above an argsSchema (envelope, payload, skills, tools, tool).
        let result = nested(MAX_JSON_DEPTH - 2 + 3);
        let req = pb::SubmitToolResultRequest {
            outcome: Some(pb::submit_tool_result_request::Outcome::Result(
                pjson::to_value(&result),
            )),
            ..Default::default()
        };
        assert!(pb::SubmitToolResultRequest::decode(&req.encode_to_vec()[..]).is_ok());
        let skills =
            json!({"tools": [{"name": "x", "argsSchema": nested(MAX_JSON_DEPTH - 5 + 3)}]});
        let req = pb::CreateSessionRequest {
            skills: Some(pjson::to_struct(skills.as_object().unwrap())),
            ..Default::default()
        };
        assert!(pb::CreateSessionRequest::decode(&req.encode_to_vec()[..]).is_ok());
    }

    #[test]
    fn deep_tool_results_and_schemas_are_invalid_input_naming_the_limit() {
        let ok = frame(
            json!({"sessionId": "s", "toolRequestId": "t", "result": nested(MAX_JSON_DEPTH - 2)}),
            "submit_tool_result",
        );
        assert!(parse(ok.as_bytes()).is_ok());
        for body in [
            frame(
                json!({"sessionId": "s", "toolRequestId": "t", "result": nested(MAX_JSON_DEPTH - 1)}),
                "submit_tool_result",
            ),
            frame(
                json!({"skills": {"tools": [{"name": "x", "description": "d", "argsSchema": nested(40)}]}}),
                "create_session",
            ),
            // Past serde_json's own 128 levels.
            format!(
                r#"{{"id":"d","type":"submit_tool_result","origin":"o","payload":{{"sessionId":"s","toolRequestId":"t","result":{}1{}}}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
        ] {
            let r = parse(body.as_bytes()).unwrap_err();
            assert_eq!(r.error.code(), "INVALID_INPUT");
            assert!(
                r.error
                    .to_string()
                    .contains(&format!("deeper than {MAX_JSON_DEPTH} levels")),
                "{}",
                r.error
            );
        }
        // The id is kept when it could be read.
        let deep = frame(
            json!({"sessionId": "s", "toolRequestId": "t", "result": nested(60)}),
            "submit_tool_result",
        );
        assert_eq!(parse(deep.as_bytes()).unwrap_err().id, json!("d"));
    }

    #[test]
    fn depth_counts_containers_only() {
        assert_eq!(json_depth(&json!(1), 64), 0);
        assert_eq!(json_depth(&json!([]), 64), 1);
        assert_eq!(json_depth(&json!({"a": [1, {"b": []}], "c": 2}), 64), 4);
        assert_eq!(json_depth(&nested(10), 64), 10);
        assert!(json_depth(&nested(100), 5) > 5);
    }
}
