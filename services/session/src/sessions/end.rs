//! End and Reactivate, and what an end releases (the provider, the tool calls).

use pb::session_event::Event;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;

use super::{Sessions, lock};
use crate::error::SessionError;
use crate::record::{Outcome, Status};
use crate::thread::Thread;

/// Why a thread's tool calls are dropped (ToolBridge's `Drop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DropTools {
    /// The operation was cancelled; the thread keeps its tools.
    Cancelled,
    /// The thread ended; ToolBridge forgets its manifest and token.
    Ended,
}

impl Sessions {
    pub async fn end(
        &self,
        id: &str,
        origin: &str,
        reason: pb::EndReason,
    ) -> Result<pb::Snapshot, SessionError> {
        let thread = self.thread(id, origin)?;
        let reason = match reason {
            pb::EndReason::Unspecified => pb::EndReason::Requested,
            given => given,
        };
        let (snapshot, ended) = {
            let mut t = lock(&thread);
            let ended = self.end_locked(&mut t, reason);
            (t.snapshot(), ended)
        };
        // Awaited, so a Reactivate right after cannot have its registration
        // overtaken by this drop.
        if let Some((id, saved)) = ended {
            self.schedule_eviction(&thread);
            self.drop_tool_calls(id, DropTools::Ended).await;
            // The thread has ended either way; a failed write is still reported.
            saved?;
        }
        Ok(snapshot)
    }

    /// Moves a thread to Ended (idempotent). Returns its id when it did, so the
    /// caller can release the provider and the tool calls outside the lock,
    /// with whether the journal record was written.
    pub(super) fn end_locked(
        &self,
        t: &mut Thread,
        reason: pb::EndReason,
    ) -> Option<(String, Result<(), SessionError>)> {
        if t.record.status == Status::Ended {
            return None;
        }
        match t.record.active_operation.clone() {
            Some(op) => {
                let error = CodedError::new(Code::SESSION_ENDED, "the thread ended");
                t.finish_operation(
                    &op.operation_id,
                    Outcome::Cancelled,
                    Some((error, pb::ErrorSource::Core)),
                    Status::Ended,
                );
            }
            None => t.set_status(Status::Ended),
        }
        t.emit(Event::Ended(pb::Ended {
            reason: reason as i32,
        }));
        // Routes catching up with the end find the same tail an idle thread keeps.
        t.replay.keep_idle_tail();
        let saved = t.save(&self.inner.journal);
        Some((t.id().to_string(), saved))
    }

    /// Fails the thread's pending tool calls (and, when it ended, forgets its
    /// tools). A running turn needs no call: finishing the operation makes its
    /// task drop the RunTurn stream, and ProviderService kills the process
    /// group when its stream goes away. An ended thread also releases what
    /// the provider keeps between turns (codex's app-server): CancelTurn on a
    /// thread with no running turn does that.
    pub(super) async fn drop_tool_calls(&self, session_id: String, why: DropTools) {
        // The two services are asked at once: neither depends on the other.
        let release = async {
            if why != DropTools::Ended {
                return;
            }
            let mut provider = self.inner.provider.clone();
            let released = provider.cancel_turn(pb::CancelTurnRequest {
                session_id: session_id.clone(),
            });
            if let Ok(Err(status)) =
                tokio::time::timeout(std::time::Duration::from_secs(5), released).await
            {
                tracing::warn!(session = %session_id, error = %status.message(), "could not release the provider");
            }
        };
        let drop = async {
            let mut tools = self.inner.tools.clone();
            let dropped = tools.drop(pb::DropToolsRequest {
                session_id: session_id.clone(),
                keep_manifest: why == DropTools::Cancelled,
            });
            match tokio::time::timeout(std::time::Duration::from_secs(2), dropped).await {
                Ok(Ok(_)) => {}
                Ok(Err(status)) => {
                    tracing::warn!(session = %session_id, error = %status.message(), "could not drop tool calls")
                }
                Err(_) => tracing::warn!(session = %session_id, "dropping tool calls timed out"),
            }
        };
        tokio::join!(release, drop);
    }

    /// Reactivating an ended thread opens it again, so it counts against the
    /// origin's open threads like a create (`LIMIT_EXCEEDED` at the cap, and
    /// the thread stays ended).
    pub async fn reactivate(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        let ended = lock(&self.thread(id, origin)?).record.status == Status::Ended;
        if ended {
            self.check_open_threads(origin)?;
        }
        // On the copy in memory: reactivating an evicted copy would give its
        // tools to a thread nobody finds again.
        let (thread, snapshot) = self.live_thread(id, origin, |t| {
            if t.record.status == Status::Ended {
                let path = &t.record.workspace_path;
                // A managed workspace not made yet is made on first use.
                if t.record.workspace.must_exist() && !path.is_dir() {
                    return Err(super::workspace::workspace_gone(t.id(), path));
                }
                t.set_status(Status::Idle);
                if let Err(e) = t.save(&self.inner.journal) {
                    // The journal still says ended, and so does the thread.
                    t.set_status(Status::Ended);
                    return Err(e);
                }
            }
            Ok(t.snapshot())
        })?;
        let snapshot = snapshot?;
        self.reregister_tools_or_log(&thread).await;
        Ok(snapshot)
    }
}
