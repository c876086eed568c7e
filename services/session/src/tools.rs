//! A thread's tools at ToolBridgeService: the manifest's check at create, its
//! registration (at the thread's first operation, and again after a restart of
//! either service), and the Watch stream: a tool call of the agent puts its
//! thread in `waiting_tool_result` with a `tool_request` event; its settlement
//! clears it and the thread runs on.
//!
//! These changes are not journaled one by one: a restart of this service ends
//! the agent's turn (its RunTurn stream breaks) and so fails the operation and
//! its pending request anyway. Only their seqs must be covered.

use std::path::PathBuf;

use pb::session_event::Event;
use pb::tool_event::Event as ToolEvent;
use pedelec_common::secret::Secret;
use pedelec_common::{Code, json};
use pedelec_proto::v1 as pb;
use tonic::metadata::MetadataValue;

use crate::SessionError;
use crate::error::upstream;
use crate::reconnect::keep_open;
use crate::record::{Status, ToolRequestRecord};
use crate::sessions::{Sessions, SharedThread, lock};

/// Watches ToolBridgeService for as long as the process lives, reconnecting
/// after the bridge restarts. Each (re)connection registers every live manifest
/// again with its token: a restarted bridge (or this service after a restart)
/// may not have them. Registering twice is harmless: registrations of one
/// thread take turns, so the second sends the token the first one stored.
pub async fn follow(sessions: Sessions, socket: PathBuf) {
    let open = || {
        let sessions = sessions.clone();
        async move {
            let stream = sessions
                .inner
                .tools
                .clone()
                .watch(pb::WatchToolsRequest {})
                .await?;
            // The bridge replays the requests it still holds first; any other
            // pending request died with a previous bridge (its caller got an
            // error), so it must not keep the thread waiting.
            sessions.clear_pending_tool_requests();
            sessions.reregister_all_tools();
            Ok((stream.into_inner(), move |event| apply(&sessions, event)))
        }
    };
    keep_open("tool watch", &socket, open, || {}).await
}

impl Sessions {
    /// Clears every pending tool request (the bridge that held them is gone).
    pub(crate) fn clear_pending_tool_requests(&self) {
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        for thread in &threads {
            let mut t = lock(thread);
            let Some(pending) = t.record.pending_tool_request.take() else {
                continue;
            };
            t.emit(Event::ToolRequestCleared(pb::ToolRequestCleared {
                tool_request_id: pending.tool_request_id,
                reason: pb::ToolSettleReason::Dropped as i32,
            }));
            if t.record.status == Status::WaitingToolResult {
                t.set_status(Status::Running);
            }
            t.cover_seqs(&self.inner.journal);
        }
    }

    /// Before a turn starts: ToolBridge knows the thread's manifest and
    /// token. A thread without a token is registered now: its first
    /// operation registers it (CreateSession only checks the manifest), as
    /// after a restart of this service (the journal keeps no token). After a
    /// restart of ToolBridge the manifests are registered again
    /// in the background once this service's Watch reconnects, and the Watch
    /// can learn of the old bridge's end only after the new one serves: a turn
    /// starting first would have every tool call of its agent refused
    /// (TOOL_ACCESS_DENIED). One GetToolSpec with the thread's token for a tool
    /// no manifest can name tells, at the cost of a round trip: the bridge
    /// checks the token first, so TOOL_ACCESS_DENIED means it does not know
    /// the thread, which is then registered now. Any other answer (the tool is
    /// not found, the bridge is down) leaves things as they are.
    ///
    /// A registration that fails is the operation's error: its agent could
    /// call none of the page's tools.
    pub(crate) async fn tools_ready(&self, thread: &SharedThread) -> Result<(), SessionError> {
        let (session_id, token) = {
            let t = lock(thread);
            if t.record.manifest.is_none() {
                return Ok(());
            }
            (t.id().to_string(), t.record.tool_token.clone())
        };
        let registered_before = token.is_some();
        let known = match token.as_ref().map(|t| MetadataValue::try_from(t.expose())) {
            Some(Ok(token)) => {
                let mut probe = tonic::Request::new(pb::GetToolSpecRequest {
                    session_id,
                    tool: String::new(),
                });
                probe
                    .metadata_mut()
                    .insert(pedelec_common::TOOL_TOKEN_HEADER, token);
                match self.inner.tools.clone().get_tool_spec(probe).await {
                    Ok(_) => true,
                    Err(status) => {
                        pedelec_common::code_of_status(&status).as_deref()
                            != Some(Code::TOOL_ACCESS_DENIED.as_str())
                    }
                }
            }
            _ => false,
        };
        if known {
            return Ok(());
        }
        if registered_before {
            tracing::info!(session = %lock(thread).id(), "the bridge lost the thread's tools; registering them before the turn");
        }
        self.reregister_tools(thread).await
    }

    /// Registers every live manifest again, in the background.
    pub(crate) fn reregister_all_tools(&self) {
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        let sessions = self.clone();
        tokio::spawn(async move {
            for thread in &threads {
                sessions.reregister_tools_or_log(thread).await;
            }
        });
    }

    /// Registers a manifest with ToolBridgeService and returns the tool token.
    async fn register_tools(
        &self,
        session_id: &str,
        manifest: prost_types::Struct,
        tool_token: String,
    ) -> Result<Option<String>, SessionError> {
        let result = self
            .inner
            .tools
            .clone()
            .register(pb::RegisterToolsRequest {
                session_id: session_id.to_string(),
                manifest: Some(manifest),
                tool_token,
            })
            .await;
        match result {
            Ok(resp) => Ok(Some(resp.into_inner().tool_token)),
            Err(status) => Err(upstream(status)),
        }
    }

    /// Gives the bridge the thread's manifest: at the thread's first operation,
    /// and again after a restart (of this service or of ToolBridgeService),
    /// with the same token while this service still holds it, else with a new
    /// one (the journal keeps no token).
    pub(crate) async fn reregister_tools(&self, thread: &SharedThread) -> Result<(), SessionError> {
        let registering = lock(thread).registering.clone();
        let _one_at_a_time = registering.lock().await;
        let (id, manifest, token) = {
            let t = lock(thread);
            if t.record.status == Status::Ended {
                return Ok(());
            }
            match &t.record.manifest {
                Some(serde_json::Value::Object(m)) => (
                    t.id().to_string(),
                    json::to_struct(m),
                    t.record.tool_token.clone().unwrap_or_default().into_inner(),
                ),
                _ => return Ok(()),
            }
        };
        let token = self.register_tools(&id, manifest, token).await?;
        lock(thread).record.tool_token = token.map(Secret::from);
        Ok(())
    }

    /// [`Sessions::reregister_tools`] where nothing waits for it: a failure
    /// is logged, and the next operation tries again (`tools_ready`).
    pub(crate) async fn reregister_tools_or_log(&self, thread: &SharedThread) {
        if let Err(e) = self.reregister_tools(thread).await {
            tracing::warn!(session = %lock(thread).id(), error = %e, "could not re-register tools");
        }
    }
}

fn refuse(sessions: &Sessions, session_id: String, tool_request_id: String) {
    let mut tools = sessions.inner.tools.clone();
    tokio::spawn(async move {
        let error = pb::ToolError {
            code: pedelec_common::Code::CANCELLED.to_string(),
            message: "no operation is running on this thread".into(),
            details: None,
        };
        let _ = tools
            .resolve(pb::ResolveToolRequest {
                session_id,
                tool_request_id,
                outcome: Some(pb::resolve_tool_request::Outcome::Error(error)),
            })
            .await;
    });
}

fn apply(sessions: &Sessions, event: pb::ToolEvent) {
    match event.event {
        Some(ToolEvent::Requested(requested)) => {
            let Some(thread) = sessions.thread_unchecked(&requested.session_id) else {
                return;
            };
            let mut t = lock(&thread);
            if t.record
                .pending_tool_request
                .as_ref()
                .is_some_and(|p| p.tool_request_id == requested.tool_request_id)
            {
                return; // replayed after a Watch reconnect: the page has it already
            }
            let Some(operation_id) = t
                .record
                .active_operation
                .as_ref()
                .map(|op| op.operation_id.clone())
            else {
                // No page is waiting for it: fail it at once, or it would hold the
                // thread's tool queue until its timeout.
                tracing::warn!(session = t.id(), "tool call outside an operation");
                refuse(sessions, requested.session_id, requested.tool_request_id);
                return;
            };
            let record = ToolRequestRecord {
                tool_request_id: requested.tool_request_id,
                tool: requested.tool,
                args: requested
                    .args
                    .as_ref()
                    .map(json::from_value)
                    .unwrap_or(serde_json::Value::Null),
                operation_id,
                timeout_ms: requested.timeout_ms,
                deadline_at_ms: requested
                    .deadline_at
                    .map_or(0, |t| pedelec_common::timestamp_ms(&t)),
                answered: false,
            };
            t.emit(Event::ToolRequest(crate::thread::tool_request_to_pb(
                &record,
            )));
            t.record.pending_tool_request = Some(record);
            t.set_status(Status::WaitingToolResult);
            t.cover_seqs(&sessions.inner.journal);
        }
        Some(ToolEvent::Settled(settled)) => {
            let Some(thread) = sessions.thread_unchecked(&settled.session_id) else {
                return;
            };
            let mut t = lock(&thread);
            let pending = t.record.pending_tool_request.as_ref();
            if pending.is_none_or(|p| p.tool_request_id != settled.tool_request_id) {
                return; // already cleared (answered, operation finished or thread ended)
            }
            t.record.pending_tool_request = None;
            t.emit(Event::ToolRequestCleared(pb::ToolRequestCleared {
                tool_request_id: settled.tool_request_id,
                reason: settled.reason,
            }));
            if t.record.status == Status::WaitingToolResult {
                t.set_status(Status::Running);
            }
            t.cover_seqs(&sessions.inner.journal);
        }
        None => {}
    }
}

/// A create's manifest, checked by the parser ToolBridgeService uses
/// (`pedelec-manifest`) and refused with the error the bridge would give
/// (`TOOLS_MANIFEST_INVALID` and the JSON pointer), so a bad manifest is
/// refused at create although the bridge learns of it only at the first
/// operation. Compiling the schemas' patterns is CPU work kept off the runtime
/// thread, as in the bridge.
pub(crate) async fn check_manifest(
    manifest: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), SessionError> {
    use pedelec_manifest::{Manifest, has_patterns};
    if !has_patterns(manifest) {
        return Manifest::parse(manifest)
            .map(drop)
            .map_err(SessionError::ManifestInvalid);
    }
    let manifest = manifest.clone();
    tokio::task::spawn_blocking(move || Manifest::parse(&manifest).map(drop))
        .await
        .map_err(|e| SessionError::Internal(format!("the manifest check failed: {e}")))?
        .map_err(SessionError::ManifestInvalid)
}
