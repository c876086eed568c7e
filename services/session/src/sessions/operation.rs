//! SendText, Prepare and Cancel: one operation at a time per thread; its
//! turn runs in `crate::turn`.

use pedelec_common::{Code, CodedError, ids};
use pedelec_proto::v1 as pb;

use super::end::DropTools;
use super::{Sessions, lock};
use crate::error::SessionError;
use crate::record::{OpKind, Outcome, Status};
use crate::turn;

impl Sessions {
    pub fn send_text(&self, id: &str, origin: &str, text: String) -> Result<String, SessionError> {
        if text.is_empty() {
            return Err(SessionError::InvalidInput("text is empty".into()));
        }
        // No CLI can take a NUL in its prompt (argv or stdin text).
        if text.contains('\0') {
            return Err(SessionError::InvalidInput(
                "text contains a NUL character".into(),
            ));
        }
        self.start(id, origin, OpKind::SendText, Some(text))
    }

    pub fn prepare(&self, id: &str, origin: &str) -> Result<String, SessionError> {
        self.start(id, origin, OpKind::Prepare, None)
    }

    fn start(
        &self,
        id: &str,
        origin: &str,
        kind: OpKind,
        text: Option<String>,
    ) -> Result<String, SessionError> {
        let thread = self.thread(id, origin)?;
        // Every start a web origin asks for counts, a refused one too.
        self.inner.limits.take_turn_start(origin)?;
        let operation_id = ids::new_id("op");
        let stop = {
            let mut t = lock(&thread);
            if t.record.status == Status::Ended {
                return Err(SessionError::Ended(id.to_string()));
            }
            if let Some(op) = &t.record.active_operation {
                return Err(SessionError::Busy(id.to_string(), op.operation_id.clone()));
            }
            // Held by the thread until the operation finishes, however.
            let slot = self.inner.limits.turn_slot(origin)?;
            if let Some(text) = &text {
                t.history.user_text_next(text);
            }
            t.start_operation(operation_id.clone(), kind);
            t.turn_slot = Some(slot);
            if let Err(e) = t.save(&self.inner.journal) {
                // Not started: the operation ends at once, with the reason.
                t.finish_operation(
                    &operation_id,
                    Outcome::Failed,
                    Some((e.to_coded(), pb::ErrorSource::Core)),
                    Status::Idle,
                );
                return Err(e);
            }
            // This operation's stop signal, taken now: by the time the task
            // runs, a Cancel and the next operation may have replaced it.
            t.stop_operation.clone()
        };
        tokio::spawn(turn::run(
            self.clone(),
            thread,
            operation_id.clone(),
            stop,
            kind,
            text,
        ));
        Ok(operation_id)
    }

    pub async fn cancel(&self, id: &str, origin: &str) -> Result<String, SessionError> {
        let thread = self.thread(id, origin)?;
        let cancelled = {
            let mut t = lock(&thread);
            let Some(op) = t.record.active_operation.clone() else {
                return Ok(String::new());
            };
            let error = CodedError::new(Code::CANCELLED, "cancelled by request");
            t.finish_operation(
                &op.operation_id,
                Outcome::Cancelled,
                Some((error, pb::ErrorSource::Core)),
                Status::Idle,
            );
            // The cancel happens either way; a failed write is still reported.
            (op.operation_id, t.save(&self.inner.journal))
        };
        let (cancelled, saved) = cancelled;
        // The operation's task sees the stop signal and drops its RunTurn stream,
        // which makes ProviderService kill the process group. A separate
        // CancelTurn here could arrive after the next turn started and kill that.
        // Pending tool calls fail now; the manifest stays for the next turn.
        self.drop_tool_calls(id.to_string(), DropTools::Cancelled)
            .await;
        saved.map(|()| cancelled)
    }
}
