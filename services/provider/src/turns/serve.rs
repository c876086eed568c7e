//! opencode turns through `opencode serve` (an HTTP API on 127.0.0.1 with
//! server-sent events; verified against the pinned opencode 1.18.33, see
//! docs/decisions.md).
//!
//! One server per Pedelec thread while the thread is active (the per-thread
//! machinery shared with codex's app-server is [`super::servers`]): it
//! starts with the thread's first turn on port 0 (the port is read from the
//! line it prints), later turns reuse it, and it stops when the thread
//! idles, ends or is cancelled. Every server gets a random
//! `OPENCODE_SERVER_PASSWORD`, so no other local user can drive it. A new
//! server continues the provider session: opencode keeps sessions in its own
//! database, so a prompt to the session id is enough.
//!
//! A turn: `POST /session` (first turn) or the stored session id, then
//! `POST /session/:id/prompt_async`; the `GET /event` stream then carries
//! `message.part.delta` (text deltas → chat_delta), `message.part.updated`
//! (a finished text part → chat, a step-finish part's tokens → usage),
//! `session.error` (opencode's own text) and `session.idle` (the end).
//! Cancel is `POST /session/:id/abort`, then the server is stopped (the
//! process-group kill stays the fallback). Permission requests are granted
//! once at full access (what `run --dangerously-skip-permissions` does) and
//! rejected below it, questions always rejected, so nothing waits for a
//! person.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use pedelec_common::{Code, env};
use pedelec_proto::v1::provider_event::Event as Out;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::events::{SEE_THE_LOG, Sink, Stop, error_event, turn_ended};
use super::job::Job;
use super::servers::{Fallback, Input, Kind, Listener, Server, ServerChild, Servers, SpawnError};
use crate::adapters::{Access, Event, LineSplitter, MAX_LINE, opencode};

/// The oldest opencode whose server this module was verified against (the
/// pinned 1.18.33; 1.14.46–1.14.48 had an `/event` stream that closed at
/// once); older ones run `opencode run --format json`.
pub const MIN_VERSION: [u64; 3] = [1, 18, 33];

/// Spawn → "listening" line and a connected event stream. opencode takes
/// 1–3 s to start on an idle machine and was seen taking 11 s while two
/// compilers shared the two cores.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one API call may take (they answer at once; the turn itself
/// runs behind `prompt_async`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Basic-auth user name opencode expects when none is configured.
const USER: &str = "opencode";

pub type OpencodeServers = Servers<Proc>;

/// The registry: `PEDELEC_OPENCODE_SERVE=0` turns it off,
/// `PEDELEC_OPENCODE_IDLE_MS` sets how long an idle server lives.
pub fn servers() -> OpencodeServers {
    OpencodeServers::new(Kind {
        what: "opencode serve",
        program: opencode::PROGRAM,
        min_version: MIN_VERSION,
        switch: env::OPENCODE_SERVE,
        idle_ms: env::OPENCODE_IDLE_MS,
    })
}

/// One running `opencode serve`.
pub struct Proc {
    child: ServerChild,
    api: Api,
    /// The running turn's events.
    listener: Arc<Listener>,
    reader: tokio::task::JoinHandle<()>,
}

impl Server for Proc {
    fn child(&self) -> &ServerChild {
        &self.child
    }
    fn is_alive(&self) -> bool {
        self.child.is_alive() && !self.reader.is_finished()
    }
    async fn stop(&self, grace: Duration) {
        self.reader.abort();
        self.child.stop(grace).await;
    }
}

impl Proc {
    async fn spawn(job: &Job, program: &Path) -> Result<Proc, SpawnError> {
        let password = pedelec_common::ids::new_secret();
        let args = ["serve", "--hostname", "127.0.0.1", "--port", "0"];
        // The user's OPENCODE_SERVER_USERNAME, if any, is replaced by the
        // default user name the Basic credentials use.
        let mut env = vec![
            ("OPENCODE_SERVER_PASSWORD", password.clone()),
            ("OPENCODE_SERVER_USERNAME", USER.to_string()),
        ];
        if let Some(config) = opencode::config(&job.turn) {
            // The same MCP registration and permissions a `run` turn gets,
            // for the process (its level is part of its fingerprint).
            env.push((opencode::CONFIG_ENV, config));
        }
        let (child, stdout) =
            ServerChild::spawn(job, program, &args, &env, Input::None, "opencode serve").await?;
        let started = tokio::time::timeout(START_TIMEOUT, listening(stdout)).await;
        let addr = match started {
            Ok(Some(addr)) => addr,
            Ok(None) => {
                child.stop(job.grace).await;
                let status = child.wait_exit().await;
                return Err(SpawnError::Unsupported(format!(
                    "opencode serve {} without saying where it listens{}",
                    pedelec_common::process::ended(status),
                    child.stderr_line()
                )));
            }
            Err(_) => {
                child.stop(job.grace).await;
                return Err(SpawnError::Other(format!(
                    "opencode serve did not listen within {START_TIMEOUT:?}"
                )));
            }
        };
        let api = Api {
            addr,
            auth: format!("Basic {}", base64(format!("{USER}:{password}").as_bytes())),
        };
        let listener = Arc::new(Listener::default());
        let (connected_tx, connected) = tokio::sync::oneshot::channel();
        let reader = tokio::spawn(read_events(
            api.clone(),
            Arc::clone(&listener),
            connected_tx,
            job.turn.access,
        ));
        let proc = Proc {
            child,
            api,
            listener,
            reader,
        };
        match tokio::time::timeout(START_TIMEOUT, connected).await {
            Ok(Ok(())) => Ok(proc),
            Ok(Err(_)) => {
                proc.stop(job.grace).await;
                Err(SpawnError::Unsupported(
                    "opencode serve's /event stream ended before server.connected".into(),
                ))
            }
            Err(_) => {
                proc.stop(job.grace).await;
                Err(SpawnError::Other(format!(
                    "opencode serve's /event stream sent nothing within {START_TIMEOUT:?}"
                )))
            }
        }
    }
}

/// Reads the server's stdout up to "opencode server listening on
/// http://HOST:PORT"; the rest is drained in the background (logged at
/// debug) so the pipe never fills. `None`: it ended first.
async fn listening(stdout: tokio::process::ChildStdout) -> Option<SocketAddr> {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let addr = line
            .split_once("listening on http://")
            .and_then(|(_, rest)| rest.trim().trim_end_matches('/').parse().ok());
        if let Some(addr) = addr {
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!("opencode serve: {line}");
                }
            });
            return Some(addr);
        }
        tracing::debug!("opencode serve: {line}");
    }
    None
}

/// Standard base64 with padding (for the Basic credentials only).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Where a server listens and its credentials.
#[derive(Clone)]
struct Api {
    addr: SocketAddr,
    auth: String,
}

impl Api {
    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("could not connect to opencode serve at {}: {e}", self.addr))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("opencode serve: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Json>,
    ) -> hyper::Request<Full<Bytes>> {
        let body = body.map(Json::to_string).unwrap_or_default();
        hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("authorization", &self.auth)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body)))
            .expect("a request built from valid parts")
    }

    /// One call; `Ok` with the status and the body as JSON (or as a string).
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Json>,
    ) -> Result<(u16, Json), String> {
        let once = async {
            let mut sender = self.connect().await?;
            let res = sender
                .send_request(self.request(method, path, body))
                .await
                .map_err(|e| format!("opencode serve did not answer {method} {path}: {e}"))?;
            let status = res.status().as_u16();
            let bytes = res
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("opencode serve's answer to {method} {path} broke off: {e}"))?
                .to_bytes();
            let json = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&bytes).into_owned()));
            Ok((status, json))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, once)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "opencode serve did not answer {method} {path} within {REQUEST_TIMEOUT:?}"
                ))
            })
    }

    /// [`Api::call`] that must succeed (2xx); `Err` has opencode's own text.
    async fn ok(
        &self,
        method: &str,
        path: &str,
        body: Option<&Json>,
    ) -> Result<Json, (String, Option<Json>)> {
        match self.call(method, path, body).await {
            Ok((status, json)) if (200..300).contains(&status) => Ok(json),
            Ok((status, json)) => {
                let message = match &json {
                    Json::String(s) if !s.trim().is_empty() => s.trim().to_string(),
                    Json::Object(_) => opencode::error_message(&json),
                    _ => format!("opencode serve answered {method} {path} with HTTP {status}"),
                };
                Err((message, Some(json).filter(Json::is_object)))
            }
            Err(message) => Err((message, None)),
        }
    }
}

/// Follows the server's `GET /event` stream for the process's life: every
/// event goes to the running turn, if any; permission requests are answered
/// per the server's level ([`permission_reply`]) and questions rejected (for
/// any session of this server, sub-agents included), so nothing waits for a
/// person. Returns when the stream ends.
async fn read_events(
    api: Api,
    listener: Arc<Listener>,
    connected: tokio::sync::oneshot::Sender<()>,
    access: Access,
) {
    let mut connected = Some(connected);
    let res = async {
        let mut sender = api.connect().await?;
        sender
            .send_request(api.request("GET", "/event", None))
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    let mut body = match res {
        Ok(res) if res.status().is_success() => res.into_body(),
        Ok(res) => {
            tracing::warn!(status = %res.status(), "opencode serve refused its /event stream");
            return;
        }
        Err(e) => {
            tracing::warn!("opencode serve's /event stream could not be opened: {e}");
            return;
        }
    };
    let mut splitter = LineSplitter::new();
    let mut data = String::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        for line in splitter.push(&chunk) {
            let Ok(line) = line else {
                tracing::warn!(
                    "opencode serve sent an event over {MAX_LINE} bytes; it was discarded"
                );
                data.clear();
                continue;
            };
            let line = line.trim_end_matches('\r');
            if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
                continue;
            }
            if !line.is_empty() || data.is_empty() {
                continue;
            }
            let Ok(event) = serde_json::from_str::<Json>(&std::mem::take(&mut data)) else {
                continue;
            };
            match event.get("type").and_then(Json::as_str).unwrap_or_default() {
                "server.connected" => {
                    if let Some(c) = connected.take() {
                        let _ = c.send(());
                    }
                }
                "permission.asked" => {
                    answer(&api, &event, "permission", permission_reply(access));
                }
                "question.asked" => answer(&api, &event, "question", Json::Null),
                _ => {}
            }
            listener.deliver(event).await;
        }
    }
    // The stream ended (the process is going or gone): the turn learns it now.
    listener.close();
}

/// The answer to every permission request: at Full it is granted once (what
/// `run --dangerously-skip-permissions` does); below, the level's config
/// already allows what the level allows, so what still asks (a file outside
/// the workspace, a command, a repeated call) is beyond it and refused.
fn permission_reply(access: Access) -> Json {
    let reply = if access.is_full() { "once" } else { "reject" };
    json!({ "reply": reply })
}

/// Answers a permission request, or rejects a question, off the reader.
fn answer(api: &Api, event: &Json, what: &'static str, reply: Json) {
    let Some(id) = event.pointer("/properties/id").and_then(Json::as_str) else {
        return;
    };
    let (path, body) = match what {
        "permission" => (format!("/permission/{id}/reply"), Some(reply)),
        _ => (format!("/question/{id}/reject"), None),
    };
    let api = api.clone();
    tokio::spawn(async move {
        match api.ok("POST", &path, body.as_ref()).await {
            Ok(_) => tracing::debug!(path, "opencode {what} request answered"),
            Err((e, _)) => tracing::warn!(path, "opencode {what} request not answered: {e}"),
        }
    });
}

/// A turn's end as seen by [`run_turn`].
enum End {
    /// session.idle arrived (a failure was reported already).
    Completed,
    /// The server or its event stream went away during the turn.
    Died,
}

/// Runs one opencode turn through the thread's server. `Err(Fallback)` when
/// none could be started and nothing was sent yet: the caller runs `opencode run`.
pub(super) async fn run_turn(
    servers: &Arc<OpencodeServers>,
    job: &Job,
    program: &Path,
    sink: &mut Sink,
) -> Result<(), Fallback> {
    let proc = servers
        .begin(job, program, Proc::spawn(job, program))
        .await?;
    tracing::info!(session = %job.session_id, pid = proc.child.pid, path = "serve", "opencode turn");
    let mut notes = proc.listener.listen();
    let mut session = None;
    let outcome = drive(&proc, job, sink, &mut notes, &mut session).await;
    proc.listener.close();
    match outcome {
        Ok(End::Completed) => servers.completed(job, &proc, sink).await,
        Ok(End::Died) => {
            servers.forget(&job.session_id);
            let how = if proc.child.has_exited() {
                pedelec_common::process::ended(proc.child.wait_exit().await)
            } else {
                "closed its event stream".to_string()
            };
            // Its stderr stays in the log; the page hears how it ended.
            tracing::warn!(session = %job.session_id, "opencode serve {how}{}", proc.child.stderr_line());
            let message = format!("opencode serve {how}; {SEE_THE_LOG}");
            proc.stop(job.grace).await;
            if sink
                .send(error_event(Code::PROVIDER_FAILED, message, None))
                .await
                .is_ok()
            {
                let _ = sink.send(turn_ended(None)).await;
            }
        }
        Err(stop) => {
            // Abort, so opencode records the turn as aborted; stopping the
            // server then ends what it started.
            let abort = async {
                if let Some(id) = &session {
                    let path = format!("/session/{id}/abort");
                    let _ = tokio::time::timeout(job.grace, proc.api.ok("POST", &path, None)).await;
                }
            };
            servers.stopped(job, &proc, stop, sink, abort).await;
        }
    }
    Ok(())
}

/// Opens or continues the opencode session, sends the prompt and forwards
/// the session's events until it is idle again. `session` is set once the
/// prompt may be running (for the abort).
async fn drive(
    proc: &Proc,
    job: &Job,
    sink: &mut Sink,
    notes: &mut mpsc::Receiver<Json>,
    session: &mut Option<String>,
) -> Result<End, Stop> {
    sink.send(Out::Started(pedelec_proto::v1::TurnStarted {
        pid: proc.child.pid as u32,
    }))
    .await?;
    let id = match &job.turn.resume_id {
        Some(id) => id.clone(),
        None => {
            let empty = json!({});
            let created = tokio::select! {
                r = proc.api.ok("POST", "/session", Some(&empty)) => r,
                stop = sink.stopped() => return Err(stop),
            };
            match created.map(|s| s.get("id").and_then(Json::as_str).map(str::to_string)) {
                Ok(Some(id)) => id,
                Ok(None) => {
                    let message = "opencode serve created a session without an id".to_string();
                    return fail(sink, message, None).await;
                }
                Err((message, details)) => return fail(sink, message, details).await,
            }
        }
    };
    sink.send(Out::ProviderSessionId(
        pedelec_proto::v1::ProviderSessionId { id: id.clone() },
    ))
    .await?;
    let mut body = json!({"parts": [{"type": "text", "text": job.turn.prompt}]});
    if let Some(model) = &job.turn.model {
        // `provider/model`, as `opencode run --model` takes it.
        match model.split_once('/') {
            Some((provider, model)) => {
                body["model"] = json!({"providerID": provider, "modelID": model});
            }
            None => {
                let message = format!("opencode needs the model as provider/model, not {model:?}");
                return fail(sink, message, None).await;
            }
        }
    }
    if let Some(effort) = &job.turn.effort {
        body["variant"] = json!(effort);
    }
    *session = Some(id.clone());
    let path = format!("/session/{id}/prompt_async");
    let sent = tokio::select! {
        r = proc.api.ok("POST", &path, Some(&body)) => r,
        stop = sink.stopped() => return Err(stop),
    };
    if let Err((message, details)) = sent {
        if !proc.is_alive() {
            return Ok(End::Died);
        }
        return fail(sink, message, details).await;
    }
    let mut turn = TurnView::new(id);
    loop {
        let note = tokio::select! {
            note = notes.recv() => note,
            stop = sink.stopped() => return Err(stop),
        };
        let Some(note) = note else {
            return Ok(End::Died);
        };
        for out in turn.on_event(&note) {
            match out {
                Seen::Out(out) => sink.send(out).await?,
                Seen::Idle => {
                    return match turn.error.take() {
                        Some((message, details)) => fail(sink, message, details).await,
                        None => Ok(End::Completed),
                    };
                }
            }
        }
    }
}

/// Reports the turn's failure with opencode's own text (its error object as details).
async fn fail(sink: &mut Sink, message: String, details: Option<Json>) -> Result<End, Stop> {
    sink.send(error_event(Code::PROVIDER_FAILED, message, details))
        .await?;
    Ok(End::Completed)
}

/// What one event means for the turn.
#[derive(Debug, PartialEq)]
enum Seen {
    Out(Out),
    /// The session is idle again after working on the prompt: the turn is over.
    Idle,
}

/// The turn's reading of the event stream: which messages are the
/// assistant's, which parts are its text, what was already reported.
struct TurnView {
    session: String,
    assistant: HashSet<String>,
    text_parts: HashSet<String>,
    /// Parts already reported (a finished part may be updated again).
    done_parts: HashSet<String>,
    /// `session.status` busy seen: an idle before it is a previous turn's.
    busy: bool,
    /// The first `session.error`, reported at the end.
    error: Option<(String, Option<Json>)>,
}

impl TurnView {
    fn new(session: String) -> Self {
        TurnView {
            session,
            assistant: HashSet::new(),
            text_parts: HashSet::new(),
            done_parts: HashSet::new(),
            busy: false,
            error: None,
        }
    }

    fn on_event(&mut self, event: &Json) -> Vec<Seen> {
        let props = event.get("properties").unwrap_or(&Json::Null);
        let session = props
            .get("sessionID")
            .or_else(|| props.pointer("/part/sessionID"))
            .or_else(|| props.pointer("/info/sessionID"))
            .and_then(Json::as_str);
        if session != Some(self.session.as_str()) {
            return Vec::new();
        }
        let str_of = |v: &Json, p: &str| v.pointer(p).and_then(Json::as_str).map(str::to_string);
        let mut out = Vec::new();
        match event.get("type").and_then(Json::as_str).unwrap_or_default() {
            "message.updated" => {
                if str_of(props, "/info/role").as_deref() == Some("assistant")
                    && let Some(id) = str_of(props, "/info/id")
                {
                    self.assistant.insert(id);
                }
            }
            "message.part.updated" => {
                let part = props.get("part").unwrap_or(&Json::Null);
                let (Some(id), Some(message)) = (str_of(part, "/id"), str_of(part, "/messageID"))
                else {
                    return out;
                };
                if !self.assistant.contains(&message) || self.done_parts.contains(&id) {
                    return out;
                }
                match part.get("type").and_then(Json::as_str).unwrap_or_default() {
                    "text" => {
                        self.text_parts.insert(id.clone());
                        let finished = part.pointer("/time/end").is_some();
                        let synthetic = part.get("synthetic").and_then(Json::as_bool) == Some(true);
                        if finished {
                            self.done_parts.insert(id);
                            if let Some(text) = str_of(part, "/text").filter(|t| !t.is_empty())
                                && !synthetic
                            {
                                out.push(Seen::Out(Out::Chat(text)));
                            }
                        }
                    }
                    "step-finish" => {
                        self.done_parts.insert(id);
                        if let Some(Event::Usage {
                            input,
                            output,
                            total,
                            cumulative,
                        }) = part.get("tokens").and_then(opencode::step_usage)
                        {
                            out.push(Seen::Out(Out::Usage(pedelec_proto::v1::Usage {
                                input_tokens: input,
                                output_tokens: output,
                                total_tokens: total,
                                cumulative,
                            })));
                        }
                    }
                    _ => {}
                }
            }
            "message.part.delta" => {
                let is_text = str_of(props, "/field").as_deref() == Some("text")
                    && str_of(props, "/partID").is_some_and(|p| {
                        self.text_parts.contains(&p) && !self.done_parts.contains(&p)
                    });
                if is_text && let Some(delta) = str_of(props, "/delta").filter(|d| !d.is_empty()) {
                    out.push(Seen::Out(Out::ChatDelta(delta)));
                }
            }
            "session.status" => match str_of(props, "/status/type").as_deref() {
                Some("busy") => self.busy = true,
                Some("retry") => tracing::info!(
                    session = %self.session,
                    "opencode retries the model request: {}",
                    str_of(props, "/status/message").unwrap_or_default()
                ),
                _ => {}
            },
            "session.error" => {
                let error = props.get("error").cloned().unwrap_or(Json::Null);
                let aborted =
                    error.get("name").and_then(Json::as_str) == Some("MessageAbortedError");
                if !aborted && self.error.is_none() {
                    self.error = Some((opencode::error_message(&error), Some(error)));
                }
            }
            "session.idle" if self.busy => out.push(Seen::Idle),
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "ses_1";

    #[test]
    fn permission_requests_are_granted_only_at_full_access() {
        assert_eq!(permission_reply(Access::Full), json!({"reply": "once"}));
        for access in [Access::Tools, Access::Edit] {
            assert_eq!(permission_reply(access), json!({"reply": "reject"}));
        }
    }

    fn ev(kind: &str, props: Json) -> Json {
        json!({"id": "evt_x", "type": kind, "properties": props})
    }

    /// The event sequence the real opencode 1.18.33 sent for a streamed
    /// answer (trimmed to the fields read), with a user text part, another
    /// session's events and a reasoning part that must not become chat.
    #[test]
    fn deltas_chat_usage_and_idle() {
        let mut t = TurnView::new(S.into());
        let user = json!({"type": "text", "text": "hello", "messageID": "msg_u", "sessionID": S, "id": "prt_u"});
        let events = [
            ev(
                "session.status",
                json!({"sessionID": S, "status": {"type": "idle"}}),
            ),
            ev("session.idle", json!({"sessionID": S})),
            ev(
                "message.updated",
                json!({"sessionID": S, "info": {"id": "msg_u", "role": "user", "sessionID": S}}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": user}),
            ),
            ev(
                "session.status",
                json!({"sessionID": S, "status": {"type": "busy"}}),
            ),
            ev(
                "message.updated",
                json!({"sessionID": S, "info": {"id": "msg_a", "role": "assistant", "sessionID": S}}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": {"id": "prt_r", "messageID": "msg_a", "sessionID": S, "type": "reasoning", "text": ""}}),
            ),
            ev(
                "message.part.delta",
                json!({"sessionID": S, "messageID": "msg_a", "partID": "prt_r", "field": "text", "delta": "thinking"}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": {"id": "prt_t", "messageID": "msg_a", "sessionID": S, "type": "text", "text": "", "time": {"start": 1}}}),
            ),
            ev(
                "message.part.delta",
                json!({"sessionID": S, "messageID": "msg_a", "partID": "prt_t", "field": "text", "delta": "one two "}),
            ),
            ev(
                "message.part.delta",
                json!({"sessionID": "ses_other", "messageID": "msg_o", "partID": "prt_t", "field": "text", "delta": "not ours"}),
            ),
            ev(
                "message.part.delta",
                json!({"sessionID": S, "messageID": "msg_a", "partID": "prt_t", "field": "text", "delta": "three"}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": {"id": "prt_t", "messageID": "msg_a", "sessionID": S, "type": "text", "text": "one two three", "time": {"start": 1, "end": 2}}}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": {"id": "prt_t", "messageID": "msg_a", "sessionID": S, "type": "text", "text": "one two three", "time": {"start": 1, "end": 2}}}),
            ),
            ev(
                "message.part.updated",
                json!({"sessionID": S, "part": {"id": "prt_f", "messageID": "msg_a", "sessionID": S, "type": "step-finish", "reason": "stop", "tokens": {"total": 120, "input": 100, "output": 20, "reasoning": 0, "cache": {"read": 5, "write": 0}}}}),
            ),
            ev(
                "session.status",
                json!({"sessionID": S, "status": {"type": "idle"}}),
            ),
            ev("session.idle", json!({"sessionID": S})),
        ];
        let seen: Vec<Seen> = events.iter().flat_map(|e| t.on_event(e)).collect();
        assert_eq!(
            seen,
            vec![
                Seen::Out(Out::ChatDelta("one two ".into())),
                Seen::Out(Out::ChatDelta("three".into())),
                Seen::Out(Out::Chat("one two three".into())),
                Seen::Out(Out::Usage(pedelec_proto::v1::Usage {
                    input_tokens: 105,
                    output_tokens: 20,
                    total_tokens: 125,
                    cumulative: false,
                })),
                Seen::Idle,
            ]
        );
    }

    #[test]
    fn session_error_is_held_with_opencodes_text_and_abort_is_not_an_error() {
        let mut t = TurnView::new(S.into());
        t.on_event(&ev(
            "session.status",
            json!({"sessionID": S, "status": {"type": "busy"}}),
        ));
        let aborted = json!({"name": "MessageAbortedError", "data": {"message": "aborted"}});
        t.on_event(&ev(
            "session.error",
            json!({"sessionID": S, "error": aborted}),
        ));
        assert!(t.error.is_none());
        let api = json!({"name": "APIError", "data": {"message": "mock chat error 400", "statusCode": 400}});
        t.on_event(&ev("session.error", json!({"sessionID": S, "error": api})));
        let (message, details) = t.error.clone().unwrap();
        assert_eq!(message, "mock chat error 400");
        assert_eq!(details.unwrap()["data"]["statusCode"], 400);
        assert_eq!(
            t.on_event(&ev("session.idle", json!({"sessionID": S}))),
            vec![Seen::Idle]
        );
    }

    #[test]
    fn basic_credentials_encode() {
        assert_eq!(base64(b"opencode:abc123"), "b3BlbmNvZGU6YWJjMTIz");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
    }
}
