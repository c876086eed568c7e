//! One operation (SendText or Prepare) of a thread: runs the provider turn
//! through ProviderService and turns its events into thread events.

use pb::provider_event::Event as ProviderEvent;
use pb::session_event::Event;
use pedelec_common::{Code, CodedError, json};
use std::sync::Arc;

use pedelec_proto::v1 as pb;
use pedelec_settings::catalog::{self, Provider};
use tokio::sync::Notify;

use crate::error::SessionError;
use crate::record::{OpKind, Outcome, Status, ThreadRecord, UsageRecord};
use crate::sessions::{Sessions, SharedThread, lock};

/// What a Prepare sends: enough to make the provider open a session.
const PREPARE_TEXT: &str =
    "This is a preparation turn: no task yet. Reply with the single word READY.";

/// The environment variables the agent process gets so it can call tools.
pub fn tool_env(
    sessions: &Sessions,
    session_id: &str,
    token: Option<&str>,
) -> std::collections::HashMap<String, String> {
    let mut env = std::collections::HashMap::new();
    env.insert(
        pedelec_common::env::THREAD_ID.to_string(),
        session_id.to_string(),
    );
    env.insert(
        pedelec_common::env::RUNTIME_DIR.to_string(),
        sessions
            .inner
            .config
            .runtime_dir
            .path()
            .display()
            .to_string(),
    );
    if let Some(token) = token {
        env.insert(
            pedelec_common::env::TOOL_TOKEN.to_string(),
            token.to_string(),
        );
    }
    env
}

/// Finishes the operation as failed if its task unwinds, so a bug cannot
/// leave the thread `running` (and every later send `SESSION_BUSY`) for good.
struct FinishOnPanic {
    sessions: Sessions,
    thread: SharedThread,
    operation_id: String,
}

impl Drop for FinishOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let error = CodedError::new(Code::INTERNAL, "the operation's task failed");
            finish(
                &self.sessions,
                &self.thread,
                &self.operation_id,
                Err((error, pb::ErrorSource::Core)),
            );
        }
    }
}

pub async fn run(
    sessions: Sessions,
    thread: SharedThread,
    operation_id: String,
    stop: Arc<Notify>,
    kind: OpKind,
    text: Option<String>,
) {
    let _guard = FinishOnPanic {
        sessions: sessions.clone(),
        thread: thread.clone(),
        operation_id: operation_id.clone(),
    };
    // Before the request is built: a registration may renew the token.
    let tools_ready = sessions.tools_ready(&thread).await;
    let prepared = {
        let mut t = lock(&thread);
        let ours = t
            .record
            .active_operation
            .as_ref()
            .is_some_and(|op| op.operation_id == operation_id);
        if !ours {
            // Cancelled (or ended) before this task ran: nothing to start.
            return;
        }
        // The thread's first operation makes its managed workspace.
        tools_ready
            .and_then(|()| sessions.make_workspace(&mut t))
            .and_then(|()| turn_request(&sessions, &t.record))
    };
    let (mut request, wants_tool_block) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let error = (e.to_coded(), pb::ErrorSource::Core);
            finish(&sessions, &thread, &operation_id, Err(error));
            return;
        }
    };

    // A Prepare on a thread that already has a provider session has nothing to do.
    if kind == OpKind::Prepare && request.provider_session_id.is_some() {
        finish(&sessions, &thread, &operation_id, Ok(()));
        return;
    }

    let body = text.unwrap_or_else(|| PREPARE_TEXT.to_string());
    request.prompt = if wants_tool_block {
        match render_tool_block(&sessions, &request).await {
            Ok(block) if !block.is_empty() => format!("{block}\n\n{body}"),
            Ok(_) => body,
            Err(e) => {
                finish(
                    &sessions,
                    &thread,
                    &operation_id,
                    Err((e, pb::ErrorSource::Core)),
                );
                return;
            }
        }
    } else {
        body
    };

    let outcome = tokio::select! {
        // Biased, stop first: a Cancel or End that came while the prompt was
        // prepared has left its permit, and then RunTurn is never sent, so no
        // agent starts for an operation that is already over.
        biased;
        // Cancel or End already finished the operation; dropping the stream stops the process.
        _ = stop.notified() => return,
        outcome = stream_turn(&sessions, &thread, &operation_id, kind, request) => outcome,
    };
    finish(&sessions, &thread, &operation_id, outcome);
}

/// The RunTurn request for the thread's record (its prompt is set later),
/// and whether the prompt must start with the tool block. The access level
/// is the site's grant as the turn starts (FULL for a local caller); a site
/// whose grant is gone gets no turn.
fn turn_request(
    sessions: &Sessions,
    r: &ThreadRecord,
) -> Result<(pb::RunTurnRequest, bool), SessionError> {
    let access = sessions.inner.sites.level(&r.origin)?;
    let request = pb::RunTurnRequest {
        session_id: r.session_id.clone(),
        provider: r.provider.clone(),
        profile: Some(pb::ResolvedProfile {
            provider: r.provider.clone(),
            effort_level: r.effort_level.clone(),
            model: r.model.clone(),
            effort: r.effort.clone(),
            native_tools: false,
        }),
        workspace: r.workspace_path.display().to_string(),
        prompt: String::new(),
        provider_session_id: r.provider_session_id.clone(),
        tool_env: tool_env(
            sessions,
            &r.session_id,
            r.tool_token.as_ref().map(|t| t.expose()),
        ),
        access: access as i32,
    };
    let wants_tool_block = !r.first_turn_done && r.manifest.is_some();
    Ok((request, wants_tool_block))
}

async fn render_tool_block(
    sessions: &Sessions,
    request: &pb::RunTurnRequest,
) -> Result<String, CodedError> {
    let (session_id, workspace) = (&request.session_id, &request.workspace);
    // Whether this provider's turns get the tools through MCP follows the
    // settings of the moment, resolved in this process as for a create, and
    // the turn's level: where the CLI's commands cannot reach the page's
    // tools, ProviderService gives them natively whatever the settings say.
    let native_tools = match &request.profile {
        Some(p) => {
            let full = request.access == pb::AccessLevel::Full as i32;
            let commands_reach = Provider::from_code(&p.provider)
                .is_none_or(|provider| catalog::shell_reaches_page_tools(provider, full));
            !commands_reach
                || sessions
                    .named_profile(&p.provider, Some(&p.effort_level))
                    .await
                    .map_err(|e| e.to_coded())?
                    .native_tools
        }
        None => false,
    };
    // The thread's own assets folder (AssetService's `ThreadFolder`).
    let assets_dir = std::path::Path::new(workspace)
        .join(".pedelec-runtime/assets")
        .join(session_id)
        .display()
        .to_string();
    match sessions
        .inner
        .tools
        .clone()
        .render_prompt(pb::RenderPromptRequest {
            session_id: session_id.to_string(),
            assets_dir,
            native_tools,
        })
        .await
    {
        Ok(resp) => Ok(resp.into_inner().prompt_block),
        Err(status) => Err(CodedError::from_status(&status, Code::CORE_UNAVAILABLE)),
    }
}

type TurnResult = Result<(), (CodedError, pb::ErrorSource)>;

async fn stream_turn(
    sessions: &Sessions,
    thread: &SharedThread,
    operation_id: &str,
    kind: OpKind,
    request: pb::RunTurnRequest,
) -> TurnResult {
    let core = |status: tonic::Status| {
        (
            CodedError::from_status(&status, Code::CORE_UNAVAILABLE),
            pb::ErrorSource::Core,
        )
    };
    let mut stream = sessions
        .inner
        .provider
        .clone()
        .run_turn(request)
        .await
        .map_err(core)?
        .into_inner();
    // The stream breaking without a Pedelec code means ProviderService went
    // away mid-turn (killed, crashed) and took the agent with it: the page
    // hears CORE_RESTARTED, as for SessionService's own restart, not the
    // transport's words.
    let lost = |status: tonic::Status| {
        let (e, source) = core(status);
        if e.code != Code::CORE_UNAVAILABLE {
            return (e, source);
        }
        let message = format!(
            "ProviderService stopped during the turn and the agent with it; pedelecd restarts it ({})",
            e.message
        );
        (CodedError::new(Code::CORE_RESTARTED, message), source)
    };
    let mut provider_error: Option<CodedError> = None;
    let mut exit: Option<pb::TurnExited> = None;
    let mut flow_control = true;
    while let Some(event) = stream.message().await.map_err(lost)? {
        let Some(event) = event.event else { continue };
        if flow_control && matches!(event, ProviderEvent::ChatDelta(_) | ProviderEvent::Chat(_)) {
            flow_control = wait_for_slow_routes(thread).await;
        }
        let mut t = lock(thread);
        if t.record
            .active_operation
            .as_ref()
            .is_none_or(|op| op.operation_id != operation_id)
        {
            return Ok(()); // finished elsewhere (cancel, end)
        }
        let mut must_save = false;
        if matches!(
            event,
            ProviderEvent::ChatDelta(_)
                | ProviderEvent::Chat(_)
                | ProviderEvent::Usage(_)
                | ProviderEvent::Exited(_)
        ) {
            t.settle_answered_before_output();
        }
        match event {
            ProviderEvent::Started(started) => {
                tracing::debug!(session = t.id(), pid = started.pid, "provider started");
            }
            ProviderEvent::ProviderSessionId(id) => {
                if t.record.provider_session_id.as_deref() != Some(id.id.as_str()) {
                    t.record.provider_session_id = Some(id.id);
                    t.record.cumulative_seen = UsageRecord::default();
                }
                // The provider has seen the first prompt, tool block included.
                t.record.first_turn_done = true;
                must_save = true;
            }
            ProviderEvent::ChatDelta(text) if kind == OpKind::SendText => {
                t.emit_chat_delta(operation_id, text, &sessions.inner.journal);
            }
            ProviderEvent::Chat(text) if kind == OpKind::SendText => {
                t.emit_chat(operation_id, text, &sessions.inner.journal);
            }
            ProviderEvent::ChatDelta(_) | ProviderEvent::Chat(_) => {}
            ProviderEvent::Usage(usage) => {
                let total = add_usage(&mut t.record, &usage);
                t.emit(Event::Usage(crate::thread::usage_to_pb(total)));
                must_save = true;
            }
            ProviderEvent::Error(e) => {
                provider_error = Some(CodedError::from_wire(
                    &e.code,
                    Code::PROVIDER_FAILED,
                    e.message,
                    e.details.as_ref().map(json::from_value),
                ));
            }
            ProviderEvent::Exited(exited) => exit = Some(exited),
            ProviderEvent::Warning(warning) => {
                t.emit_error(warning, operation_id);
                t.cover_seqs(&sessions.inner.journal);
            }
        }
        if must_save {
            // Logged when it fails; a turn has no caller to tell.
            let _ = t.save(&sessions.inner.journal);
        }
    }
    if let Some(error) = provider_error {
        return Err((error, pb::ErrorSource::Provider));
    }
    match exit {
        Some(pb::TurnExited { code: Some(0), .. }) => Ok(()),
        Some(exited) => {
            let how = pedelec_common::process::how_it_ended(exited.code, exited.signal);
            Err((
                CodedError::new(Code::PROVIDER_FAILED, format!("the provider process {how}")),
                pb::ErrorSource::Provider,
            ))
        }
        None => Err((
            CodedError::new(
                Code::PROVIDER_FAILED,
                "the turn stream ended without an exit",
            ),
            pb::ErrorSource::Core,
        )),
    }
}

/// While the slowest attached route has more than half the replay buffer
/// still to take, the agent's text is held back, for this long at most. A fast
/// agent's burst then reaches every route whole instead of overflowing the
/// buffer; a route that takes nothing for that long is stuck, and the turn
/// stops waiting for it (it will see a replay gap and reconcile from a snapshot).
const MAX_STALL: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits while the slowest route lags too far; false when it gave up on it.
async fn wait_for_slow_routes(thread: &SharedThread) -> bool {
    let deadline = tokio::time::Instant::now() + MAX_STALL;
    loop {
        let progress = {
            let t = lock(thread);
            if !t.a_route_lags() {
                return true;
            }
            t.progress.clone()
        };
        let took = progress.notified();
        tokio::pin!(took);
        // Registered before the re-check, so progress in between is not missed.
        took.as_mut().enable();
        if !lock(thread).a_route_lags() {
            return true;
        }
        if tokio::time::timeout_at(deadline, took).await.is_err() {
            tracing::warn!(
                session = lock(thread).id(),
                "a route took no events for {MAX_STALL:?}; no longer waiting for it"
            );
            return false;
        }
    }
}

/// Adds a turn's usage to the thread's totals. Cumulative reports (codex on
/// resume) count only what grew since the last report of the same session.
fn add_usage(record: &mut ThreadRecord, usage: &pb::Usage) -> UsageRecord {
    let reported = UsageRecord {
        total: usage.total_tokens,
        input: usage.input_tokens,
        output: usage.output_tokens,
    };
    let delta = if usage.cumulative {
        let seen = record.cumulative_seen;
        record.cumulative_seen = reported;
        UsageRecord {
            total: reported.total.saturating_sub(seen.total),
            input: reported.input.saturating_sub(seen.input),
            output: reported.output.saturating_sub(seen.output),
        }
    } else {
        reported
    };
    // Saturating: the figures come from an outside program.
    let mut total = record.usage.unwrap_or_default();
    total.total = total.total.saturating_add(delta.total);
    total.input = total.input.saturating_add(delta.input);
    total.output = total.output.saturating_add(delta.output);
    record.usage = Some(total);
    total
}

fn finish(sessions: &Sessions, thread: &SharedThread, operation_id: &str, result: TurnResult) {
    let mut t = lock(thread);
    let finished = match result {
        Ok(()) => t.finish_operation(operation_id, Outcome::Completed, None, Status::Idle),
        Err(error) => t.finish_operation(operation_id, Outcome::Failed, Some(error), Status::Error),
    };
    if finished {
        // Logged when it fails; a turn has no caller to tell.
        let _ = t.save(&sessions.inner.journal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_usage_is_not_counted_twice() {
        let mut record: crate::record::ThreadRecord = serde_json::from_value(serde_json::json!({
            "session_id": "t", "origin": "o", "provider": "codex", "effort_level": "default",
            "model": "", "effort": "", "workspace_path": "/tmp", "managed_workspace": false,
            "auto_end_on_disconnect": false, "created_at_ms": 0, "status": "idle", "last_seq": 0
        }))
        .unwrap();
        let usage = |i, o, cumulative| pb::Usage {
            total_tokens: i + o,
            input_tokens: i,
            output_tokens: o,
            cumulative,
        };
        add_usage(&mut record, &usage(100, 10, true));
        let total = add_usage(&mut record, &usage(250, 30, true));
        assert_eq!(
            total,
            UsageRecord {
                total: 280,
                input: 250,
                output: 30
            }
        );
        let total = add_usage(&mut record, &usage(5, 5, false));
        assert_eq!(total.total, 290);
    }
}
