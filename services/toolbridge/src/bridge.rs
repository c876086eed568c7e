//! The tool registry and the pending tool calls of every thread.
//!
//! How a CallTool ends (the rule the gRPC adapter follows):
//! - The bridge *refusing* the call is a gRPC error status with a Pedelec code:
//!   `TOOL_ACCESS_DENIED` (missing/wrong token, unknown thread), `TOOL_NOT_FOUND`,
//!   `TOOL_ARGS_INVALID`, `INVALID_INPUT`. Nothing was sent to the page.
//! - Every outcome of an *accepted* call is an OK response: the page's result,
//!   or a `ToolError` in `outcome.error` — the page's own error, `TOOL_TIMEOUT`,
//!   `CANCELLED` (the operation was cancelled) or `SESSION_ENDED` (the thread
//!   ended). So pedelec-cli can tell "the tool said no" (exit 1) from "the call
//!   never happened" (exit 2).
//!
//! Per thread only one request is exposed to the page at a time; later calls
//! wait in a FIFO queue and are announced (`Requested`) when their turn comes.
//! A call's timeout runs from the moment CallTool accepted it, queue time
//! included, so the caller's bound always holds. A queued call that ends before
//! it was exposed (timeout, caller gone, drop) was never announced, so no
//! `Settled` event is sent for it either. Events are sent while the registry
//! lock is held, which keeps them in the order the state changed.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use pedelec_common::{Code, CodedError, MAX_TOOL_RESULT_BYTES, ids, json};
use serde_json::{Map, Value as Json, json};
use tokio::sync::{broadcast, oneshot};

use crate::error::ToolBridgeError;
use crate::manifest::{MAX_TIMEOUT_MS, Manifest};
use crate::{prompt, validate};

/// Watch subscribers that fall this far behind lose events (and it is logged).
/// The channel holds this many slots from the start; each holds an `Arc`, not
/// the event itself (4096 events inline were 0.6 MiB of ToolBridge's idle size).
const EVENT_BUFFER: usize = 4096;

/// Why a thread's tool calls are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Its operation was cancelled: the thread goes on, with its tools.
    Cancelled,
    /// The thread ended: its manifest and token go too.
    Ended,
}

/// What the caller of a tool gets back: the page's result or a tool error.
pub type Outcome = std::result::Result<Json, CodedError>;

type Result<T> = std::result::Result<T, ToolBridgeError>;

/// Calls one thread may have waiting for the page (the one shown plus the
/// queue). An agent that fires calls in a loop gets `LIMIT_EXCEEDED` past it
/// instead of growing the service's memory without bound.
pub const MAX_WAITING_CALLS: usize = 64;

/// Why a pending request stopped being pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleReason {
    Resolved,
    Failed,
    Timeout,
    Dropped,
    CallerGone,
}

impl SettleReason {
    pub fn to_pb(self) -> pedelec_proto::v1::ToolSettleReason {
        use pedelec_proto::v1::ToolSettleReason as Pb;
        match self {
            SettleReason::Resolved => Pb::Resolved,
            SettleReason::Failed => Pb::Failed,
            SettleReason::Timeout => Pb::Timeout,
            SettleReason::Dropped => Pb::Dropped,
            SettleReason::CallerGone => Pb::CallerGone,
        }
    }

    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleReason::Resolved => "resolved",
            SettleReason::Failed => "failed",
            SettleReason::Timeout => "timeout",
            SettleReason::Dropped => "dropped",
            SettleReason::CallerGone => "caller_gone",
        }
    }
}

/// What Watch subscribers see.
#[derive(Clone, Debug, PartialEq)]
pub enum BridgeEvent {
    Requested {
        session_id: String,
        tool_request_id: String,
        tool: String,
        args: Json,
        /// The call's effective timeout and when it runs out, so the page can
        /// show how long it has.
        timeout_ms: u32,
        deadline: SystemTime,
    },
    Settled {
        session_id: String,
        tool_request_id: String,
        reason: SettleReason,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub tool_token: pedelec_common::secret::Secret,
    pub tool_count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpecInfo {
    pub name: String,
    pub description: String,
    pub args_schema: Map<String, Json>,
    pub timeout_ms: u32,
}

#[derive(Clone, Debug)]
pub struct CallRequest {
    pub session_id: String,
    pub tool: String,
    pub args: Json,
    pub timeout_ms: Option<u32>,
}

#[derive(Debug)]
struct Pending {
    id: String,
    tool: String,
    args: Json,
    timeout_ms: u32,
    deadline: SystemTime,
    reply: oneshot::Sender<Outcome>,
}

#[derive(Debug)]
struct Thread {
    /// SHA-256 of the thread's tool token: the token itself is not kept here.
    token_hash: [u8; 32],
    manifest: Arc<Manifest>,
    /// The one request the page currently sees.
    exposed: Option<Pending>,
    /// Accepted calls waiting for their turn, oldest first.
    queue: VecDeque<Pending>,
}

/// The bridge's logic, independent of gRPC.
#[derive(Debug)]
pub struct ToolBridge {
    threads: Mutex<HashMap<String, Thread>>,
    events: broadcast::Sender<Arc<BridgeEvent>>,
    cli: PathBuf,
}

impl Default for ToolBridge {
    fn default() -> Self {
        ToolBridge::new()
    }
}

impl ToolBridge {
    /// A bridge writing `pedelec-cli`'s resolved absolute path into prompts.
    pub fn new() -> Self {
        ToolBridge::with_cli_path(prompt::cli_path())
    }

    pub fn with_cli_path(cli: PathBuf) -> Self {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        ToolBridge {
            threads: Mutex::new(HashMap::new()),
            events,
            cli,
        }
    }

    pub fn cli_path(&self) -> &Path {
        &self.cli
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Thread>> {
        // A panic elsewhere must not wedge every thread's tools.
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Validates and stores a thread's manifest. An empty `tool_token` gets a
    /// fresh secret; a given one (re-registration after a restart) is kept.
    /// Calls already pending on the thread stay pending.
    pub fn register(
        &self,
        session_id: &str,
        manifest: &Map<String, Json>,
        tool_token: &str,
    ) -> Result<Registered> {
        if session_id.is_empty() {
            return Err(ToolBridgeError::InvalidInput(
                "session_id is required".into(),
            ));
        }
        let manifest = Arc::new(Manifest::parse(manifest)?);
        let token = if tool_token.is_empty() {
            ids::new_secret()
        } else {
            tool_token.to_string()
        };
        let tool_count = manifest.tools.len() as u32;
        let mut threads = self.lock();
        match threads.get_mut(session_id) {
            Some(thread) => {
                thread.manifest = manifest;
                thread.token_hash = token_hash(&token);
            }
            None => {
                threads.insert(
                    session_id.to_string(),
                    Thread {
                        token_hash: token_hash(&token),
                        manifest,
                        exposed: None,
                        queue: VecDeque::new(),
                    },
                );
            }
        }
        tracing::debug!(session = session_id, tools = tool_count, "tools registered");
        Ok(Registered {
            tool_token: token.into(),
            tool_count,
        })
    }

    /// The first-turn block. A thread the bridge does not know renders the
    /// empty block: SessionService registers only threads created with
    /// skills, and a thread without a registry has no tools to describe.
    pub fn render_prompt(
        &self,
        session_id: &str,
        assets_dir: &str,
        via: prompt::Via,
    ) -> Result<String> {
        let Some(manifest) = self.lock().get(session_id).map(|t| t.manifest.clone()) else {
            return Ok(String::new());
        };
        Ok(prompt::render(
            &manifest, session_id, assets_dir, &self.cli, via,
        ))
    }

    /// The manifest of a thread whose token the caller presented.
    fn authorize(&self, token: Option<&str>, session_id: &str) -> Result<Arc<Manifest>> {
        let threads = self.lock();
        match (threads.get(session_id), token) {
            (Some(thread), Some(token))
                if ids::same_secret(&thread.token_hash, &token_hash(token)) =>
            {
                Ok(thread.manifest.clone())
            }
            _ => Err(ToolBridgeError::AccessDenied),
        }
    }

    pub fn tool_spec(
        &self,
        token: Option<&str>,
        session_id: &str,
        tool: &str,
    ) -> Result<ToolSpecInfo> {
        let manifest = self.authorize(token, session_id)?;
        let tool = manifest
            .tool(tool)
            .ok_or_else(|| ToolBridgeError::ToolNotFound(tool.to_string()))?;
        Ok(ToolSpecInfo {
            name: tool.name.clone(),
            description: tool.description.clone(),
            args_schema: tool.args_schema.clone(),
            timeout_ms: tool.effective_timeout_ms(),
        })
    }

    /// Every tool of the thread and its guidance, for a caller with the token.
    pub fn list_tools(
        &self,
        token: Option<&str>,
        session_id: &str,
    ) -> Result<(Vec<ToolSpecInfo>, String)> {
        let manifest = self.authorize(token, session_id)?;
        let tools = manifest
            .tools
            .iter()
            .map(|tool| ToolSpecInfo {
                name: tool.name.clone(),
                description: tool.description.clone(),
                args_schema: tool.args_schema.clone(),
                timeout_ms: tool.effective_timeout_ms(),
            })
            .collect();
        Ok((tools, manifest.guidance.clone()))
    }

    /// Calls a page tool and waits for its outcome. The returned future owns
    /// the pending request: dropping it settles the request as `caller_gone`.
    pub async fn call_tool(&self, token: Option<&str>, req: CallRequest) -> Result<Outcome> {
        let manifest = self.authorize(token, &req.session_id)?;
        let tool = manifest
            .tool(&req.tool)
            .ok_or_else(|| ToolBridgeError::ToolNotFound(req.tool.clone()))?;
        validate::validate_args(&tool.args_schema, &req.args, &tool.patterns)?;
        let timeout_ms = match req.timeout_ms {
            Some(0) => {
                return Err(ToolBridgeError::InvalidInput(
                    "timeout_ms must be positive".into(),
                ));
            }
            Some(ms) => ms.min(MAX_TIMEOUT_MS),
            None => tool.effective_timeout_ms(),
        };

        let id = ids::new_id("treq");
        let (reply, mut rx) = oneshot::channel();
        {
            let mut threads = self.lock();
            // The thread may have been dropped since the token check.
            let thread = threads
                .get_mut(&req.session_id)
                .ok_or(ToolBridgeError::AccessDenied)?;
            let waiting = thread.queue.len() + usize::from(thread.exposed.is_some());
            if waiting >= MAX_WAITING_CALLS {
                return Err(ToolBridgeError::QueueFull(MAX_WAITING_CALLS));
            }
            thread.queue.push_back(Pending {
                id: id.clone(),
                tool: req.tool.clone(),
                args: req.args,
                timeout_ms,
                deadline: SystemTime::now() + Duration::from_millis(timeout_ms.into()),
                reply,
            });
            self.expose_next(&req.session_id, thread);
        }
        let mut guard = CallGuard {
            bridge: self,
            session_id: &req.session_id,
            id: &id,
            armed: true,
        };
        let waited = tokio::time::timeout(Duration::from_millis(timeout_ms.into()), &mut rx).await;
        guard.armed = false;
        let timed_out = || {
            CodedError::new(
                Code::TOOL_TIMEOUT,
                format!(
                    "the page did not answer tool \"{}\" within {timeout_ms} ms",
                    req.tool
                ),
            )
            .with_details(json!({"tool": req.tool, "timeoutMs": timeout_ms}))
        };
        Ok(match waited {
            Ok(Ok(outcome)) => outcome,
            // Every settlement path sends before dropping the sender; this is
            // only a safety net.
            Ok(Err(_)) => Err(CodedError::new(
                Code::CANCELLED,
                "the tool call was abandoned",
            )),
            Err(_) => {
                if self.settle(&req.session_id, &id, SettleReason::Timeout, None) {
                    Err(timed_out())
                } else {
                    // Settled in the instant before the timer fired: keep that outcome.
                    rx.try_recv().unwrap_or_else(|_| Err(timed_out()))
                }
            }
        })
    }

    /// A new subscriber: the requests already exposed (so a SessionService
    /// that reconnects learns what the page still has to answer), then every
    /// later event.
    pub fn subscribe(&self) -> (Vec<BridgeEvent>, broadcast::Receiver<Arc<BridgeEvent>>) {
        let threads = self.lock();
        let rx = self.events.subscribe();
        let current = threads
            .iter()
            .filter_map(|(session_id, t)| t.exposed.as_ref().map(|p| requested(session_id, p)))
            .collect();
        (current, rx)
    }

    /// The page's answer to the exposed request `tool_request_id`. Unknown or
    /// already settled ids and oversized outcomes change nothing.
    pub fn resolve(&self, session_id: &str, tool_request_id: &str, outcome: Outcome) -> Result<()> {
        let size = outcome_size(&outcome);
        let mut threads = self.lock();
        let thread = threads
            .get_mut(session_id)
            .filter(|t| t.exposed.as_ref().is_some_and(|p| p.id == tool_request_id))
            .ok_or_else(|| ToolBridgeError::NoPendingRequest(tool_request_id.to_string()))?;
        if size > MAX_TOOL_RESULT_BYTES {
            return Err(ToolBridgeError::TooLarge {
                size,
                limit: MAX_TOOL_RESULT_BYTES,
            });
        }
        let reason = if outcome.is_ok() {
            SettleReason::Resolved
        } else {
            SettleReason::Failed
        };
        let pending = thread.exposed.take().expect("checked above");
        let _ = pending.reply.send(outcome);
        self.emit(BridgeEvent::Settled {
            session_id: session_id.to_string(),
            tool_request_id: pending.id,
            reason,
        });
        self.expose_next(session_id, thread);
        Ok(())
    }

    /// Fails every pending and queued call of a thread with an error naming
    /// `why`; when the thread ended, also forgets its manifest and token.
    /// Returns how many calls were failed. An unknown thread is not an error
    /// (End is idempotent).
    pub fn drop_thread(&self, session_id: &str, why: DropReason) -> u32 {
        let mut threads = self.lock();
        let mut removed;
        let thread = match why {
            DropReason::Cancelled => threads.get_mut(session_id),
            DropReason::Ended => {
                removed = threads.remove(session_id);
                removed.as_mut()
            }
        };
        let Some(thread) = thread else { return 0 };
        let error = match why {
            DropReason::Cancelled => CodedError::new(
                Code::CANCELLED,
                "the operation was cancelled before the page answered",
            ),
            DropReason::Ended => CodedError::new(
                Code::SESSION_ENDED,
                "the session ended before the page answered",
            ),
        };
        let mut count = 0;
        if let Some(pending) = thread.exposed.take() {
            count += 1;
            let _ = pending.reply.send(Err(error.clone()));
            self.emit(BridgeEvent::Settled {
                session_id: session_id.to_string(),
                tool_request_id: pending.id,
                reason: SettleReason::Dropped,
            });
        }
        for pending in thread.queue.drain(..) {
            count += 1;
            let _ = pending.reply.send(Err(error.clone()));
        }
        tracing::debug!(
            session = session_id,
            count,
            why = ?why,
            "tool calls dropped"
        );
        count
    }

    /// Ends request `id` without a page answer (timeout, caller gone).
    /// Returns false when it was no longer pending.
    fn settle(
        &self,
        session_id: &str,
        id: &str,
        reason: SettleReason,
        outcome: Option<Outcome>,
    ) -> bool {
        let mut threads = self.lock();
        let Some(thread) = threads.get_mut(session_id) else {
            return false;
        };
        let pending = if thread.exposed.as_ref().is_some_and(|p| p.id == id) {
            let pending = thread.exposed.take().expect("checked above");
            self.emit(BridgeEvent::Settled {
                session_id: session_id.to_string(),
                tool_request_id: pending.id.clone(),
                reason,
            });
            pending
        } else if let Some(pos) = thread.queue.iter().position(|p| p.id == id) {
            thread.queue.remove(pos).expect("position is in range")
        } else {
            return false;
        };
        tracing::debug!(
            session = session_id,
            request = id,
            reason = reason.as_str(),
            "tool request settled"
        );
        if let Some(outcome) = outcome {
            let _ = pending.reply.send(outcome);
        }
        self.expose_next(session_id, thread);
        true
    }

    /// Shows the page the next queued call when nothing is exposed.
    fn expose_next(&self, session_id: &str, thread: &mut Thread) {
        while thread.exposed.is_none() {
            let Some(next) = thread.queue.pop_front() else {
                return;
            };
            // Its caller left while it waited in the queue.
            if next.reply.is_closed() {
                continue;
            }
            self.emit(requested(session_id, &next));
            thread.exposed = Some(next);
        }
    }

    fn emit(&self, event: BridgeEvent) {
        // No subscriber (SessionService not connected yet) is fine: a later
        // subscriber gets the exposed requests from `subscribe`.
        let _ = self.events.send(Arc::new(event));
    }
}

fn requested(session_id: &str, p: &Pending) -> BridgeEvent {
    BridgeEvent::Requested {
        session_id: session_id.to_string(),
        tool_request_id: p.id.clone(),
        tool: p.tool.clone(),
        args: p.args.clone(),
        timeout_ms: p.timeout_ms,
        deadline: p.deadline,
    }
}

/// Settles the request as `caller_gone` when the CallTool future is dropped
/// before it finished (the agent's pedelec-cli went away).
struct CallGuard<'a> {
    bridge: &'a ToolBridge,
    session_id: &'a str,
    id: &'a str,
    armed: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.bridge
                .settle(self.session_id, self.id, SettleReason::CallerGone, None);
        }
    }
}

/// What the bridge keeps of a tool token: a memory dump or a core file of
/// ToolBridge does not hand out working tokens.
fn token_hash(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// The encoded JSON size of an outcome, counted without building the string.
fn outcome_size(outcome: &Outcome) -> usize {
    match outcome {
        Ok(result) => json::tool_result_len(result),
        Err(e) => json::tool_error_len(e.wire_code(), &e.message, e.details.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const SID: &str = "thr_test";

    #[test]
    fn registered_debug_shows_no_tool_token() {
        let reg = Registered {
            tool_token: "tok-secret-value".into(),
            tool_count: 1,
        };
        assert!(!format!("{reg:?}").contains("tok-secret-value"));
    }

    fn bridge_with_tools() -> (Arc<ToolBridge>, String) {
        let bridge = Arc::new(ToolBridge::with_cli_path("/opt/bin/pedelec-cli".into()));
        let manifest = json!({
            "guidance": "be nice",
            "tools": [
                {"name": "echo", "description": "Echo.", "argsSchema": {"type": "object",
                    "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
                {"name": "slow", "description": "Slow.", "timeoutMs": 50,
                    "argsSchema": {"type": "object"}}
            ]
        });
        let reg = bridge
            .register(SID, manifest.as_object().unwrap(), "")
            .unwrap();
        assert_eq!(reg.tool_count, 2);
        (bridge, reg.tool_token.into_inner())
    }

    fn call(tool: &str, args: Json, timeout_ms: Option<u32>) -> CallRequest {
        CallRequest {
            session_id: SID.into(),
            tool: tool.into(),
            args,
            timeout_ms,
        }
    }

    /// Calls accepted on the test thread (exposed or queued).
    fn accepted(bridge: &ToolBridge) -> usize {
        let threads = bridge.lock();
        let t = &threads[SID];
        t.queue.len() + usize::from(t.exposed.is_some())
    }

    /// Starts a call in the background and returns its handle.
    fn spawn_call(
        bridge: &Arc<ToolBridge>,
        token: &str,
        req: CallRequest,
    ) -> tokio::task::JoinHandle<Result<Outcome>> {
        let (bridge, token) = (bridge.clone(), token.to_string());
        tokio::spawn(async move { bridge.call_tool(Some(&token), req).await })
    }

    async fn next(rx: &mut broadcast::Receiver<Arc<BridgeEvent>>) -> BridgeEvent {
        let event = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("event in time")
            .expect("channel open");
        BridgeEvent::clone(&event)
    }

    async fn next_requested(
        rx: &mut broadcast::Receiver<Arc<BridgeEvent>>,
    ) -> (String, String, Json) {
        match next(rx).await {
            BridgeEvent::Requested {
                tool_request_id,
                tool,
                args,
                ..
            } => (tool_request_id, tool, args),
            other => panic!("expected Requested, got {other:?}"),
        }
    }

    async fn next_settled(
        rx: &mut broadcast::Receiver<Arc<BridgeEvent>>,
    ) -> (String, SettleReason) {
        match next(rx).await {
            BridgeEvent::Settled {
                tool_request_id,
                reason,
                ..
            } => (tool_request_id, reason),
            other => panic!("expected Settled, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn resolve_returns_the_result_to_the_caller() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, tool, args) = next_requested(&mut rx).await;
        assert!(id.starts_with("treq_"));
        assert_eq!((tool.as_str(), args), ("echo", json!({"n": 1})));
        bridge.resolve(SID, &id, Ok(json!({"echo": 1}))).unwrap();
        assert_eq!(
            next_settled(&mut rx).await,
            (id.clone(), SettleReason::Resolved)
        );
        assert_eq!(task.await.unwrap().unwrap(), Ok(json!({"echo": 1})));
        // Already settled: a clear error, nothing changes.
        let err = bridge.resolve(SID, &id, Ok(json!(2))).unwrap_err();
        assert_eq!(err.code(), Code::TOOL_REQUEST_NOT_PENDING);
        assert!(err.to_string().contains("no pending tool request"));
    }

    #[tokio::test]
    async fn page_errors_reach_the_caller() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, ..) = next_requested(&mut rx).await;
        let page_error = CodedError::new(Code::TOOL_HANDLER_NOT_FOUND, "no handler")
            .with_details(json!({"tool": "echo"}));
        bridge.resolve(SID, &id, Err(page_error.clone())).unwrap();
        assert_eq!(next_settled(&mut rx).await.1, SettleReason::Failed);
        assert_eq!(task.await.unwrap().unwrap(), Err(page_error));

        // A page error without a code becomes TOOL_HANDLER_ERROR.
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, ..) = next_requested(&mut rx).await;
        let bare = CodedError::from_wire("", Code::TOOL_HANDLER_ERROR, "boom", None);
        bridge.resolve(SID, &id, Err(bare)).unwrap();
        let err = task.await.unwrap().unwrap().unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (Code::TOOL_HANDLER_ERROR, "boom")
        );
    }

    #[tokio::test]
    async fn calls_past_the_waiting_bound_are_refused_and_the_queue_recovers() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let tasks: Vec<_> = (0..MAX_WAITING_CALLS)
            .map(|n| spawn_call(&bridge, &token, call("echo", json!({"n": n}), None)))
            .collect();
        let (first, ..) = next_requested(&mut rx).await;
        while accepted(&bridge) < MAX_WAITING_CALLS {
            tokio::task::yield_now().await;
        }
        let err = bridge
            .call_tool(Some(&token), call("echo", json!({"n": -1}), None))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::LIMIT_EXCEEDED);
        assert_eq!(
            accepted(&bridge),
            MAX_WAITING_CALLS,
            "the refused call queued"
        );

        // One answered makes room for one more.
        bridge.resolve(SID, &first, Ok(json!("ok"))).unwrap();
        let more = spawn_call(&bridge, &token, call("echo", json!({"n": -2}), None));
        while accepted(&bridge) < MAX_WAITING_CALLS {
            tokio::task::yield_now().await;
        }
        bridge.drop_thread(SID, DropReason::Cancelled);
        for t in tasks.into_iter().chain([more]) {
            let _ = t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn calls_queue_in_order_one_exposed_at_a_time() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let mut tasks = Vec::new();
        for n in 0..3 {
            tasks.push(spawn_call(
                &bridge,
                &token,
                call("echo", json!({"n": n}), None),
            ));
            // Enqueue in a known order.
            while accepted(&bridge) < n + 1 {
                tokio::task::yield_now().await;
            }
        }
        for n in 0..3 {
            let (id, _, args) = next_requested(&mut rx).await;
            assert_eq!(args, json!({"n": n}));
            // Nothing else is exposed until this one settles.
            assert!(rx.try_recv().is_err());
            bridge.resolve(SID, &id, Ok(json!(n * 10))).unwrap();
            assert_eq!(next_settled(&mut rx).await.0, id);
        }
        for (n, task) in tasks.into_iter().enumerate() {
            assert_eq!(task.await.unwrap().unwrap(), Ok(json!(n * 10)));
        }
    }

    #[tokio::test]
    async fn tool_timeout_settles_and_exposes_the_next() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        // "slow" has timeoutMs 50.
        let first = spawn_call(&bridge, &token, call("slow", json!({}), None));
        let (id1, ..) = next_requested(&mut rx).await;
        let second = spawn_call(&bridge, &token, call("echo", json!({"n": 2}), None));
        let err = first.await.unwrap().unwrap().unwrap_err();
        assert_eq!(err.code, Code::TOOL_TIMEOUT);
        assert_eq!(err.details.unwrap()["timeoutMs"], 50);
        assert_eq!(
            next_settled(&mut rx).await,
            (id1.clone(), SettleReason::Timeout)
        );
        let (id2, _, args) = next_requested(&mut rx).await;
        assert_eq!(args, json!({"n": 2}));
        // A late answer to the timed-out request is refused, nothing changes.
        assert_eq!(
            bridge.resolve(SID, &id1, Ok(json!(1))).unwrap_err().code(),
            Code::TOOL_REQUEST_NOT_PENDING
        );
        bridge.resolve(SID, &id2, Ok(json!("ok"))).unwrap();
        assert_eq!(second.await.unwrap().unwrap(), Ok(json!("ok")));
    }

    #[tokio::test]
    async fn per_call_timeout_overrides_the_tool() {
        let (bridge, token) = bridge_with_tools();
        let started = std::time::Instant::now();
        let out = bridge
            .call_tool(Some(&token), call("echo", json!({"n": 1}), Some(30)))
            .await
            .unwrap();
        assert_eq!(out.unwrap_err().code, Code::TOOL_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(5));
        let zero = bridge
            .call_tool(Some(&token), call("echo", json!({"n": 1}), Some(0)))
            .await
            .unwrap_err();
        assert_eq!(zero.code(), Code::INVALID_INPUT);
    }

    #[tokio::test]
    async fn a_queued_call_times_out_silently() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let first = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id1, ..) = next_requested(&mut rx).await;
        let queued = bridge
            .call_tool(Some(&token), call("echo", json!({"n": 2}), Some(30)))
            .await
            .unwrap();
        assert_eq!(queued.unwrap_err().code, Code::TOOL_TIMEOUT);
        assert!(bridge.lock()[SID].queue.is_empty());
        assert!(
            rx.try_recv().is_err(),
            "a never-announced call sends no event"
        );
        bridge.resolve(SID, &id1, Ok(json!(1))).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), Ok(json!(1)));
    }

    #[tokio::test]
    async fn resolve_unknown_ids_and_threads() {
        let (bridge, _) = bridge_with_tools();
        for (sid, id) in [(SID, "treq_nope"), ("thr_other", "treq_nope"), (SID, "")] {
            let err = bridge.resolve(sid, id, Ok(json!(1))).unwrap_err();
            assert_eq!(err.code(), Code::TOOL_REQUEST_NOT_PENDING);
        }
    }

    #[tokio::test]
    async fn resolve_for_another_thread_does_not_settle() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, ..) = next_requested(&mut rx).await;
        bridge
            .register("thr_other", json!({}).as_object().unwrap(), "")
            .unwrap();
        assert!(bridge.resolve("thr_other", &id, Ok(json!(1))).is_err());
        bridge.resolve(SID, &id, Ok(json!(2))).unwrap();
        assert_eq!(task.await.unwrap().unwrap(), Ok(json!(2)));
    }

    #[tokio::test]
    async fn too_large_results_are_refused_and_the_request_stays() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, ..) = next_requested(&mut rx).await;
        let big = Json::String("x".repeat(MAX_TOOL_RESULT_BYTES));
        let err = bridge.resolve(SID, &id, Ok(big)).unwrap_err();
        assert_eq!(err.code(), Code::MESSAGE_TOO_LARGE);
        let huge_error =
            CodedError::new(Code::TOOL_HANDLER_ERROR, "x".repeat(MAX_TOOL_RESULT_BYTES));
        let err = bridge.resolve(SID, &id, Err(huge_error)).unwrap_err();
        assert_eq!(err.code(), Code::MESSAGE_TOO_LARGE);
        assert!(rx.try_recv().is_err());
        // Just under the bound (the quotes count) still goes through.
        let fits = Json::String("x".repeat(MAX_TOOL_RESULT_BYTES - 2));
        bridge.resolve(SID, &id, Ok(fits.clone())).unwrap();
        assert_eq!(task.await.unwrap().unwrap(), Ok(fits));
    }

    #[tokio::test]
    async fn drop_keeping_the_manifest_cancels_calls() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let first = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id1, ..) = next_requested(&mut rx).await;
        let second = spawn_call(&bridge, &token, call("echo", json!({"n": 2}), None));
        while bridge.lock()[SID].queue.is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(bridge.drop_thread(SID, DropReason::Cancelled), 2);
        assert_eq!(next_settled(&mut rx).await, (id1, SettleReason::Dropped));
        for task in [first, second] {
            assert_eq!(
                task.await.unwrap().unwrap().unwrap_err().code,
                Code::CANCELLED
            );
        }
        assert!(rx.try_recv().is_err());
        // Manifest and token survive: the next call works.
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 3}), None));
        let (id3, ..) = next_requested(&mut rx).await;
        bridge.resolve(SID, &id3, Ok(json!(3))).unwrap();
        assert_eq!(task.await.unwrap().unwrap(), Ok(json!(3)));
        assert!(
            !bridge
                .render_prompt(SID, "", prompt::Via::Shell)
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn drop_forgetting_the_manifest_ends_calls() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id, ..) = next_requested(&mut rx).await;
        assert_eq!(bridge.drop_thread(SID, DropReason::Ended), 1);
        assert_eq!(next_settled(&mut rx).await, (id, SettleReason::Dropped));
        assert_eq!(
            task.await.unwrap().unwrap().unwrap_err().code,
            Code::SESSION_ENDED
        );
        let err = bridge
            .call_tool(Some(&token), call("echo", json!({"n": 1}), None))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::TOOL_ACCESS_DENIED);
        assert_eq!(
            bridge
                .render_prompt(SID, "/assets", prompt::Via::Shell)
                .unwrap(),
            ""
        );
        // Idempotent.
        assert_eq!(bridge.drop_thread(SID, DropReason::Ended), 0);
        assert_eq!(bridge.drop_thread(SID, DropReason::Cancelled), 0);
    }

    #[tokio::test]
    async fn token_checks() {
        let (bridge, token) = bridge_with_tools();
        assert_eq!(token.len(), 64);
        let denied =
            |r: Result<ToolSpecInfo>| assert_eq!(r.unwrap_err().code(), Code::TOOL_ACCESS_DENIED);
        denied(bridge.tool_spec(None, SID, "echo"));
        denied(bridge.tool_spec(Some("wrong"), SID, "echo"));
        denied(bridge.tool_spec(Some(&token[..63]), SID, "echo"));
        denied(bridge.tool_spec(Some(&token), "thr_unknown", "echo"));
        // Checked before the tool lookup, so a stranger learns nothing.
        denied(bridge.tool_spec(Some("wrong"), SID, "nope"));
        for bad in [None, Some("wrong")] {
            let err = bridge
                .call_tool(bad, call("echo", json!({"n": 1}), None))
                .await
                .unwrap_err();
            assert_eq!(err.code(), Code::TOOL_ACCESS_DENIED);
        }
        let spec = bridge.tool_spec(Some(&token), SID, "slow").unwrap();
        assert_eq!((spec.name.as_str(), spec.timeout_ms), ("slow", 50));
        assert_eq!(
            bridge
                .tool_spec(Some(&token), SID, "echo")
                .unwrap()
                .timeout_ms,
            60_000
        );
    }

    #[test]
    fn list_tools_needs_the_token_and_keeps_manifest_order() {
        let (bridge, token) = bridge_with_tools();
        for bad in [None, Some("wrong")] {
            let err = bridge.list_tools(bad, SID).unwrap_err();
            assert_eq!(err.code(), Code::TOOL_ACCESS_DENIED);
        }
        let err = bridge.list_tools(Some(&token), "thr_unknown").unwrap_err();
        assert_eq!(err.code(), Code::TOOL_ACCESS_DENIED);
        let (tools, guidance) = bridge.list_tools(Some(&token), SID).unwrap();
        assert_eq!(guidance, "be nice");
        let expected: Vec<_> = ["echo", "slow"]
            .iter()
            .map(|n| bridge.tool_spec(Some(&token), SID, n).unwrap())
            .collect();
        assert_eq!(tools, expected);
    }

    #[tokio::test]
    async fn re_registration_keeps_or_renews_the_token() {
        let (bridge, token) = bridge_with_tools();
        let m = json!({"tools": []});
        let kept = bridge
            .register(SID, m.as_object().unwrap(), &token)
            .unwrap();
        assert_eq!(
            (kept.tool_token.expose(), kept.tool_count),
            (token.as_str(), 0)
        );
        let renewed = bridge.register(SID, m.as_object().unwrap(), "").unwrap();
        assert_ne!(renewed.tool_token.expose(), token);
        assert!(bridge.tool_spec(Some(&token), SID, "echo").is_err());
        let err = bridge.register("", m.as_object().unwrap(), "").unwrap_err();
        assert_eq!(err.code(), Code::INVALID_INPUT);
        let bad = json!({"tools": [{"name": "x", "description": "", "argsSchema": {"type": "object", "format": 1}}]});
        let err = bridge
            .register(SID, bad.as_object().unwrap(), "")
            .unwrap_err();
        assert_eq!(err.code(), Code::TOOLS_MANIFEST_INVALID);
        let coded = err.to_coded();
        assert_eq!(
            coded.details,
            Some(json!({"path": "/tools/0/argsSchema/format"}))
        );
        assert!(coded.message.contains("/tools/0/argsSchema/format"));
        // A rejected manifest leaves the old registration alone.
        assert_eq!(
            bridge
                .register(SID, m.as_object().unwrap(), renewed.tool_token.expose())
                .unwrap()
                .tool_count,
            0
        );
    }

    #[tokio::test]
    async fn unknown_tool_and_bad_args_are_refused() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let err = bridge
            .call_tool(Some(&token), call("nope", json!({}), None))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::TOOL_NOT_FOUND);
        assert_eq!(
            bridge
                .tool_spec(Some(&token), SID, "nope")
                .unwrap_err()
                .code(),
            Code::TOOL_NOT_FOUND
        );
        let err = bridge
            .call_tool(Some(&token), call("echo", json!({"n": "one"}), None))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::TOOL_ARGS_INVALID);
        assert_eq!(err.to_coded().details, Some(json!({"path": "/n"})));
        assert!(err.to_string().contains("/n"));
        let err = bridge
            .call_tool(Some(&token), call("echo", json!([1]), None))
            .await
            .unwrap_err();
        assert_eq!(err.to_coded().details, Some(json!({"path": ""})));
        assert!(rx.try_recv().is_err(), "refused calls never reach the page");
    }

    #[tokio::test]
    async fn caller_gone_settles_and_exposes_the_next() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut rx) = bridge.subscribe();
        let first = spawn_call(&bridge, &token, call("echo", json!({"n": 1}), None));
        let (id1, ..) = next_requested(&mut rx).await;
        let second = spawn_call(&bridge, &token, call("echo", json!({"n": 2}), None));
        while bridge.lock()[SID].queue.is_empty() {
            tokio::task::yield_now().await;
        }
        first.abort();
        assert_eq!(
            next_settled(&mut rx).await,
            (id1.clone(), SettleReason::CallerGone)
        );
        let (id2, _, args) = next_requested(&mut rx).await;
        assert_eq!(args, json!({"n": 2}));
        assert!(bridge.resolve(SID, &id1, Ok(json!(1))).is_err());
        bridge.resolve(SID, &id2, Ok(json!(2))).unwrap();
        assert_eq!(second.await.unwrap().unwrap(), Ok(json!(2)));
    }

    #[tokio::test]
    async fn a_late_subscriber_sees_the_exposed_request() {
        let (bridge, token) = bridge_with_tools();
        let (_, mut early) = bridge.subscribe();
        let task = spawn_call(&bridge, &token, call("echo", json!({"n": 7}), None));
        let (id, ..) = next_requested(&mut early).await;
        let (current, _) = bridge.subscribe();
        let [
            BridgeEvent::Requested {
                session_id,
                tool_request_id,
                tool,
                args,
                timeout_ms,
                deadline,
            },
        ] = &current[..]
        else {
            panic!("expected one Requested, got {current:?}");
        };
        assert_eq!(
            (session_id.as_str(), tool_request_id, tool.as_str(), args),
            (SID, &id, "echo", &json!({"n": 7}))
        );
        // The echo tool has the default timeout; the deadline lies that far ahead.
        let ahead = deadline.duration_since(SystemTime::now()).unwrap();
        assert!(
            ahead <= Duration::from_millis((*timeout_ms).into()),
            "{ahead:?}"
        );
        assert!(
            ahead > Duration::from_millis(u64::from(*timeout_ms) / 2),
            "{ahead:?}"
        );
        bridge.resolve(SID, &id, Ok(json!(null))).unwrap();
        assert_eq!(task.await.unwrap().unwrap(), Ok(Json::Null));
    }

    #[test]
    fn secret_comparison() {
        let h = |s: &str| token_hash(s);
        assert!(ids::same_secret(&h("abc"), &h("abc")));
        assert!(!ids::same_secret(&h("abc"), &h("abd")));
        assert!(!ids::same_secret(&h("abc"), &h("ab")));
        assert!(!ids::same_secret(&h("abc"), &h("")));
    }

    /// The bridge keeps a digest, never the token: nothing in its state
    /// (as a memory dump would show it) spells the token.
    #[test]
    fn only_a_digest_of_the_token_is_kept() {
        let (bridge, token) = bridge_with_tools();
        let state = format!("{:?}", bridge.lock().get(SID).unwrap());
        assert!(!state.contains(&token), "{state}");
        assert!(state.contains("token_hash"), "{state}");
        // And the token still opens the thread's tools; another does not.
        assert!(bridge.authorize(Some(&token), SID).is_ok());
        assert!(bridge.authorize(Some("x"), SID).is_err());
    }
}
