//! Codex turns through `codex app-server`: JSON-RPC 2.0 without the
//! `jsonrpc` field, one JSON object per line on its stdin and stdout; a
//! client sends `initialize`, then `initialized`, before anything else.
//! Verified against the pinned codex 0.171.0 ([`MIN_VERSION`]).
//!
//! One app-server process per Pedelec thread while the thread is active: it
//! starts with the thread's first turn, later turns reuse it (no start-up, the
//! thread already loaded), and it stops when the thread idles
//! ([`AppServers::idle`]), when a turn is cancelled (the interrupt leaves the
//! turn's shell commands running, closing the app-server ends them), or when
//! more than [`super::servers::MAX_RUNNING`] would run (the least recently
//! used idle one goes); that machinery is shared with `opencode serve`
//! ([`super::servers`]).
//! A new process resumes the codex thread with `thread/resume`.
//!
//! Streaming: `item/agentMessage/delta` → chat_delta, a completed agentMessage
//! item → chat, `thread/tokenUsage/updated` (the thread's total) → usage,
//! `turn/completed` ends the turn (its error, codex's own text, fails it).
//! The thread runs in the sandbox of the turn's level (`thread/start` and
//! `thread/resume`'s `sandbox`, [`codex::sandbox_mode`]) with approval policy
//! `never`; the level is part of the process's fingerprint, so a thread whose
//! level changes gets a new process. Approval requests are answered at once
//! ([`answer_server_request`]): granted at full access, declined below it,
//! so none can hang a turn; requests Pedelec cannot answer get a JSON-RPC
//! error.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::{Code, env, process};
use pedelec_proto::v1::provider_event::Event as Out;
use serde_json::{Value as Json, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};

use super::events::{SEE_THE_LOG, Sink, Stop, error_event, exited};
use super::job::Job;
use super::lock;
use super::servers::{Fallback, Input, Kind, Listener, Server, ServerChild, Servers, SpawnError};
use crate::adapters::{Access, LineSplitter, MAX_LINE, codex, json_object};

/// The oldest codex whose app-server speaks the protocol this module was
/// verified against (the pinned 0.171.0); older ones run `codex exec --json`.
pub const MIN_VERSION: [u64; 3] = [0, 171, 0];

/// Spawn → `initialize` answered. The npm wrapper answers in ~100 ms; this
/// allows for a cold disk and a loaded machine.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a thread/start, thread/resume or turn/start answer may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The running app-servers, by Pedelec thread, and which codex installs have
/// one.
pub type AppServers = Servers<Proc>;

/// The registry: `PEDELEC_CODEX_APP_SERVER=0` turns it off,
/// `PEDELEC_CODEX_IDLE_MS` sets how long an idle app-server lives.
pub(super) fn servers() -> AppServers {
    AppServers::new(Kind {
        what: "codex app-server",
        program: codex::PROGRAM,
        min_version: MIN_VERSION,
        switch: env::CODEX_APP_SERVER,
        idle_ms: env::CODEX_IDLE_MS,
    })
}

impl Server for Proc {
    fn child(&self) -> &ServerChild {
        &self.child
    }
}

/// What the reader hands to the rest: responses to our requests and the
/// notifications of the running turn.
struct Shared {
    /// The level the process was started for (see [`answer_server_request`]).
    access: Access,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Json, String>>>>,
    /// The running turn's notifications.
    listener: Listener,
}

/// One running `codex app-server`.
pub struct Proc {
    child: ServerChild,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    /// Codex thread ids loaded into this process (thread/start or thread/resume done).
    threads: Mutex<Vec<String>>,
}

impl Proc {
    async fn spawn(job: &Job, program: &Path) -> Result<Proc, SpawnError> {
        let mut args = vec!["app-server".to_string()];
        for setting in codex::access_settings(job.turn.access) {
            args.push("-c".to_string());
            args.push(setting);
        }
        if let Some(cli) = &job.turn.mcp {
            // The same MCP registration an exec turn gets, for the process.
            for setting in codex::mcp_settings(cli) {
                args.push("-c".to_string());
                args.push(setting);
            }
        }
        let (child, stdout) =
            ServerChild::spawn(job, program, &args, &[], Input::Lines, "codex app-server").await?;
        let shared = Arc::new(Shared {
            access: job.turn.access,
            pending: Mutex::default(),
            listener: Listener::default(),
        });
        // Weak: stopping drops the one strong sender, which must close stdin.
        tokio::spawn(read_loop(stdout, Arc::clone(&shared), child.stdin_handle()));
        let proc = Proc {
            child,
            shared,
            next_id: AtomicU64::new(1),
            threads: Mutex::default(),
        };
        let init = proc.request(
            "initialize",
            json!({
                "clientInfo": {"name": "pedelec", "title": "Pedelec", "version": env!("CARGO_PKG_VERSION")},
                "capabilities": {
                    "experimentalApi": true,
                    "optOutNotificationMethods": [
                        "account/rateLimits/updated", "configWarning", "remoteControl/status/changed"
                    ]
                }
            }),
        );
        match tokio::time::timeout(INIT_TIMEOUT, init).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                proc.stop(job.grace).await;
                // The program has no app-server we can speak to (it exited or refused).
                return Err(SpawnError::Unsupported(format!(
                    "codex app-server did not initialize: {e}{}",
                    proc.child.stderr_line()
                )));
            }
            Err(_) => {
                proc.stop(job.grace).await;
                return Err(SpawnError::Other(format!(
                    "codex app-server did not answer initialize within {INIT_TIMEOUT:?}"
                )));
            }
        }
        proc.notify("initialized", json!({}));
        Ok(proc)
    }

    fn send(&self, message: &Json) -> bool {
        let mut line = message.to_string();
        line.push('\n');
        self.child.send_line(line)
    }

    fn notify(&self, method: &str, params: Json) {
        self.send(&json!({"method": method, "params": params}));
    }

    /// Sends a request; resolves with its result or error message. Fails when
    /// the process goes away first.
    async fn request(&self, method: &str, params: Json) -> Result<Json, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        if !self.send(&json!({"id": id, "method": method, "params": params})) {
            lock(&self.shared.pending).remove(&id);
            return Err("the app-server is not running".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("the app-server exited".into()))
    }
}

/// Reads the app-server's stdout: responses resolve requests, server
/// requests are answered, notifications go to the running turn.
async fn read_loop(
    stdout: tokio::process::ChildStdout,
    shared: Arc<Shared>,
    writer: Option<mpsc::WeakUnboundedSender<String>>,
) {
    let mut stdout = stdout;
    let mut splitter = LineSplitter::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut queue = std::collections::VecDeque::new();
    loop {
        let Some(line) = queue.pop_front() else {
            match stdout.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => queue.extend(splitter.push(&chunk[..n])),
            }
            continue;
        };
        let Ok(line) = line else {
            // An over-long line (an echo of a huge tool output).
            tracing::warn!(
                "codex app-server printed a line over {MAX_LINE} bytes; it was discarded"
            );
            continue;
        };
        let Some(msg) = json_object(&line) else {
            continue;
        };
        let method = msg.get("method").and_then(Json::as_str);
        let id = msg.get("id").filter(|i| !i.is_null());
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { continue };
                let Some(tx) = lock(&shared.pending).remove(&id) else {
                    continue;
                };
                let answer = match msg.get("error") {
                    Some(e) => Err(e
                        .get("message")
                        .and_then(Json::as_str)
                        .unwrap_or("error")
                        .to_string()),
                    None => Ok(msg.get("result").cloned().unwrap_or(Json::Null)),
                };
                let _ = tx.send(answer);
            }
            (Some(method), Some(id)) => {
                let reply = answer_server_request(method, msg.get("params"), id, shared.access);
                let mut line = reply.to_string();
                line.push('\n');
                if let Some(w) = writer.as_ref().and_then(mpsc::WeakUnboundedSender::upgrade) {
                    let _ = w.send(line);
                }
            }
            (Some(_), None) => shared.listener.deliver(msg).await,
            (None, None) => {}
        }
    }
    // EOF: the process is gone; its requests and its turn learn it now.
    lock(&shared.pending).clear();
    shared.listener.close();
}

/// Answers a request from the app-server per the process's level. At full
/// access approvals are granted; below it, a command, a patch or more
/// permissions asked for are beyond what the sandbox allows, so they are
/// declined (the model reads the refusal). An MCP elicitation is accepted at
/// full access, and below it only from the page's own server (the page's
/// tools work at every level). What needs a person at a terminal is refused
/// with an error, which codex reports to the model, so nothing hangs.
fn answer_server_request(method: &str, params: Option<&Json>, id: &Json, access: Access) -> Json {
    let full = access.is_full();
    let result = match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            json!({"decision": if full { "accept" } else { "decline" }})
        }
        "execCommandApproval" | "applyPatchApproval" => {
            json!({"decision": if full { "approved" } else { "denied" }})
        }
        "item/permissions/requestApproval" => {
            let asked = params.and_then(|p| p.get("permissions")).cloned();
            let granted = asked.filter(|_| full).unwrap_or(json!({}));
            json!({"permissions": granted, "scope": "turn"})
        }
        "mcpServer/elicitation/request" => {
            let server = params
                .and_then(|p| p.get("serverName"))
                .and_then(Json::as_str);
            if full || server == Some(crate::adapters::MCP_SERVER) {
                json!({"action": "accept", "content": null})
            } else {
                json!({"action": "decline", "content": null})
            }
        }
        other => {
            tracing::debug!(method = other, "codex app-server request refused");
            return json!({
                "id": id,
                "error": {"code": -32601, "message": format!("Pedelec does not answer {other}")}
            });
        }
    };
    json!({"id": id, "result": result})
}

/// A turn's end as seen by [`run_turn`].
enum End {
    /// turn/completed arrived (any status; a failure was reported already).
    Completed,
    /// The app-server exited during the turn.
    Died,
}

/// Runs one codex turn through the thread's app-server. `Err(Fallback)` when
/// none could be started and nothing was sent yet: the caller runs `codex exec`.
pub(super) async fn run_turn(
    servers: &Arc<AppServers>,
    job: &Job,
    program: &Path,
    sink: &mut Sink,
) -> Result<(), Fallback> {
    let proc = servers
        .begin(job, program, Proc::spawn(job, program))
        .await?;
    let pid = proc.child.pid;
    tracing::info!(session = %job.session_id, pid, path = "app-server", "codex turn");
    let mut notes = proc.shared.listener.listen();
    let outcome = drive(&proc, job, sink, &mut notes).await;
    proc.shared.listener.close();
    match outcome {
        Ok(End::Completed) => servers.completed(job, &proc, sink).await,
        Ok(End::Died) => {
            servers.forget(&job.session_id);
            let status = proc.child.wait_exit().await;
            let how = format!("codex app-server {}", process::ended(status));
            // Its stderr stays in the log; the page hears how it ended.
            tracing::warn!(session = %job.session_id, "{how}{}", proc.child.stderr_line());
            let message = format!("{how}; {SEE_THE_LOG}");
            if sink
                .send(error_event(Code::PROVIDER_FAILED, message, None))
                .await
                .is_ok()
            {
                let _ = sink.send(exited(status)).await;
            }
            proc.stop(job.grace).await;
        }
        Err((stop, turn_id)) => {
            // Interrupt, so codex records the turn as aborted; the interrupt
            // leaves the turn's shell commands running, stopping the
            // app-server ends them.
            let interrupt = async {
                if let Some(turn_id) = turn_id {
                    let thread_id = lock(&proc.threads).last().cloned().unwrap_or_default();
                    let interrupt = proc.request(
                        "turn/interrupt",
                        json!({"threadId": thread_id, "turnId": turn_id}),
                    );
                    let _ = tokio::time::timeout(job.grace, interrupt).await;
                }
            };
            servers.stopped(job, &proc, stop, sink, interrupt).await;
        }
    }
    Ok(())
}

/// Loads the thread, starts the turn and forwards its notifications until it
/// completes. `Err` carries why it stopped early and the turn id, if started.
async fn drive(
    proc: &Proc,
    job: &Job,
    sink: &mut Sink,
    notes: &mut mpsc::Receiver<Json>,
) -> Result<End, (Stop, Option<String>)> {
    let early = |stop| (stop, None);
    sink.send(Out::Started(pedelec_proto::v1::TurnStarted {
        pid: proc.child.pid as u32,
    }))
    .await
    .map_err(early)?;
    let thread_id = match load_thread(proc, job, sink).await? {
        Some(id) => id,
        None => return Ok(End::Completed),
    };
    let mut params = json!({
        "threadId": thread_id,
        "input": [{"type": "text", "text": job.turn.prompt, "text_elements": []}],
    });
    if let Some(model) = &job.turn.model {
        params["model"] = json!(model);
    }
    if let Some(effort) = &job.turn.effort {
        params["effort"] = json!(effort);
    }
    let started = tokio::select! {
        r = tokio::time::timeout(REQUEST_TIMEOUT, proc.request("turn/start", params)) => r,
        stop = sink.stopped() => return Err((stop, None)),
    };
    let turn_id = match started {
        Ok(Ok(r)) => r
            .pointer("/turn/id")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        Ok(Err(message)) => {
            if !proc.child.is_alive() {
                return Ok(End::Died);
            }
            fail(sink, message).await.map_err(early)?;
            return Ok(End::Completed);
        }
        Err(_) => {
            let message = format!("codex did not start the turn within {REQUEST_TIMEOUT:?}");
            fail(sink, message).await.map_err(early)?;
            return Ok(End::Completed);
        }
    };
    let with_turn = |stop| (stop, Some(turn_id.clone()));
    // A non-retried `error` notification, held for turn/completed.
    let mut held_error: Option<String> = None;
    loop {
        let note = tokio::select! {
            note = notes.recv() => note,
            stop = sink.stopped() => return Err(with_turn(stop)),
        };
        let Some(note) = note else {
            return Ok(End::Died);
        };
        let params = note.get("params").unwrap_or(&Json::Null);
        let out = match note
            .get("method")
            .and_then(Json::as_str)
            .unwrap_or_default()
        {
            "item/agentMessage/delta" => params
                .get("delta")
                .and_then(Json::as_str)
                .filter(|d| !d.is_empty())
                .map(|d| Out::ChatDelta(d.to_string())),
            "item/completed" => {
                let item = params.get("item").unwrap_or(&Json::Null);
                (item.get("type").and_then(Json::as_str) == Some("agentMessage"))
                    .then(|| item.get("text").and_then(Json::as_str))
                    .flatten()
                    .filter(|t| !t.is_empty())
                    .map(|t| Out::Chat(t.to_string()))
            }
            "thread/tokenUsage/updated" => {
                // The thread's running total, like exec's turn.completed.usage.
                params.pointer("/tokenUsage/total").map(|t| {
                    let n = |k: &str| t.get(k).and_then(Json::as_u64).unwrap_or(0);
                    let (input, output) = (n("inputTokens"), n("outputTokens"));
                    Out::Usage(pedelec_proto::v1::Usage {
                        total_tokens: input.saturating_add(output),
                        input_tokens: input,
                        output_tokens: output,
                        cumulative: true,
                    })
                })
            }
            "error" => {
                if params.get("willRetry").and_then(Json::as_bool) != Some(true)
                    && let Some(m) = params.pointer("/error/message").and_then(Json::as_str)
                {
                    held_error.get_or_insert_with(|| m.to_string());
                }
                None
            }
            "turn/completed" => {
                let turn = params.get("turn").unwrap_or(&Json::Null);
                if turn
                    .get("id")
                    .and_then(Json::as_str)
                    .is_some_and(|id| id != turn_id)
                {
                    continue; // a stale turn's end
                }
                if turn.get("status").and_then(Json::as_str) == Some("failed") {
                    let message = turn
                        .pointer("/error/message")
                        .and_then(Json::as_str)
                        .map(str::to_string)
                        .or(held_error.take())
                        .unwrap_or_else(|| "codex turn failed".to_string());
                    fail(sink, message).await.map_err(with_turn)?;
                }
                return Ok(End::Completed);
            }
            _ => None,
        };
        if let Some(out) = out {
            sink.send(out).await.map_err(with_turn)?;
        }
    }
}

/// thread/start, or thread/resume of the provider session, unless this
/// process has the thread loaded. `Ok(None)`: it failed and was reported.
async fn load_thread(
    proc: &Proc,
    job: &Job,
    sink: &mut Sink,
) -> Result<Option<String>, (Stop, Option<String>)> {
    if let Some(id) = lock(&proc.threads).last().cloned() {
        return Ok(Some(id));
    }
    // The level's sandbox without prompts: what `codex exec` runs.
    let mut params = json!({
        "cwd": job.turn.workspace,
        "approvalPolicy": "never",
        "sandbox": codex::sandbox_mode(job.turn.access),
    });

    let method = match &job.turn.resume_id {
        Some(id) => {
            params["threadId"] = json!(id);
            params["excludeTurns"] = json!(true);
            "thread/resume"
        }
        None => {
            if let Some(model) = &job.turn.model {
                params["model"] = json!(model);
            }
            "thread/start"
        }
    };
    let answer = tokio::select! {
        r = tokio::time::timeout(REQUEST_TIMEOUT, proc.request(method, params)) => r,
        stop = sink.stopped() => return Err((stop, None)),
    };
    let message = match answer {
        Ok(Ok(r)) => match r.pointer("/thread/id").and_then(Json::as_str) {
            Some(id) => {
                lock(&proc.threads).push(id.to_string());
                sink.send(Out::ProviderSessionId(
                    pedelec_proto::v1::ProviderSessionId { id: id.to_string() },
                ))
                .await
                .map_err(|s| (s, None))?;
                return Ok(Some(id.to_string()));
            }
            None => format!("codex {method} answered without a thread id"),
        },
        Ok(Err(m)) => m,
        Err(_) => format!("codex did not answer {method} within {REQUEST_TIMEOUT:?}"),
    };
    fail(sink, message).await.map_err(|s| (s, None))?;
    Ok(None)
}

/// Reports the turn's failure with codex's own text (its JSON body as details).
async fn fail(sink: &mut Sink, message: String) -> Result<(), Stop> {
    let details = serde_json::from_str::<Json>(&message)
        .ok()
        .filter(Json::is_object);
    sink.send(error_event(Code::PROVIDER_FAILED, message, details))
        .await
}

#[cfg(test)]
mod tests {
    use super::super::servers::parse_version;
    use super::*;

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(parse_version("codex-cli 0.171.0\n"), Some([0, 171, 0]));
        assert_eq!(parse_version("codex-cli 0.0.0-stub"), Some([0, 0, 0]));
        assert_eq!(parse_version("codex-cli 1.2.3-alpha.4"), Some([1, 2, 3]));
        assert_eq!(parse_version("{\"type\":\"thread.started\"}"), None);
        assert!(parse_version("codex-cli 0.170.9").unwrap() < MIN_VERSION);
        assert!(parse_version("codex-cli 0.172.0").unwrap() >= MIN_VERSION);
    }

    #[test]
    fn approvals_are_granted_at_full_access_and_other_requests_refused() {
        let id = json!(0);
        let full = Access::Full;
        let a = answer_server_request("item/commandExecution/requestApproval", None, &id, full);
        assert_eq!(a, json!({"id": 0, "result": {"decision": "accept"}}));
        let a = answer_server_request("execCommandApproval", None, &id, full);
        assert_eq!(a["result"]["decision"], "approved");
        let p = json!({"permissions": {"network": {"enabled": true}}});
        let a = answer_server_request("item/permissions/requestApproval", Some(&p), &id, full);
        assert_eq!(a["result"]["permissions"], p["permissions"]);
        let other = json!({"serverName": "other"});
        let a = answer_server_request("mcpServer/elicitation/request", Some(&other), &id, full);
        assert_eq!(a["result"]["action"], "accept");
        let a = answer_server_request("item/tool/requestUserInput", None, &id, full);
        assert_eq!(a["error"]["code"], -32601);
    }

    #[test]
    fn below_full_access_approvals_are_declined_but_the_pages_tools_pass() {
        let id = json!(1);
        for access in [Access::Tools, Access::Edit] {
            for method in [
                "item/commandExecution/requestApproval",
                "item/fileChange/requestApproval",
            ] {
                let a = answer_server_request(method, None, &id, access);
                assert_eq!(a["result"]["decision"], "decline", "{method} {access:?}");
            }
            for method in ["execCommandApproval", "applyPatchApproval"] {
                let a = answer_server_request(method, None, &id, access);
                assert_eq!(a["result"]["decision"], "denied", "{method} {access:?}");
            }
            let p = json!({"permissions": {"network": {"enabled": true}}});
            let a =
                answer_server_request("item/permissions/requestApproval", Some(&p), &id, access);
            assert_eq!(a["result"]["permissions"], json!({}));
            let ours = json!({"serverName": "pedelec"});
            let a =
                answer_server_request("mcpServer/elicitation/request", Some(&ours), &id, access);
            assert_eq!(a["result"]["action"], "accept");
            let other = json!({"serverName": "other"});
            let a =
                answer_server_request("mcpServer/elicitation/request", Some(&other), &id, access);
            assert_eq!(a["result"]["action"], "decline");
        }
    }
}
