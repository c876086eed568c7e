//! SubmitToolResult: the page's answer to a pending tool request, handed to
//! ToolBridgeService.

use pedelec_common::json;
use pedelec_proto::v1 as pb;

use super::{Sessions, lock};
use crate::error::{SessionError, upstream};

impl Sessions {
    pub async fn submit_tool_result(
        &self,
        req: pb::SubmitToolResultRequest,
    ) -> Result<(), SessionError> {
        let thread = self.thread(&req.session_id, &req.origin)?;
        // Measured as ToolBridge measures it, so both refuse the same results.
        let size = match &req.outcome {
            Some(pb::submit_tool_result_request::Outcome::Result(v)) => {
                json::tool_result_len(&json::from_value(v))
            }
            Some(pb::submit_tool_result_request::Outcome::Error(e)) => json::tool_error_len(
                &e.code,
                &e.message,
                e.details.as_ref().map(json::from_value).as_ref(),
            ),
            None => {
                return Err(SessionError::InvalidInput(
                    "a tool result needs a result or an error".into(),
                ));
            }
        };
        if size > pedelec_common::MAX_TOOL_RESULT_BYTES {
            return Err(SessionError::TooLarge(
                size,
                pedelec_common::MAX_TOOL_RESULT_BYTES,
            ));
        }
        // Marked answered before the bridge hands the answer to the agent, so
        // whatever the agent prints next finds the request settled (not
        // dropped), however late the bridge's reply or Watch event arrives.
        {
            let mut guard = lock(&thread);
            let t = &mut *guard;
            match t.record.pending_tool_request.as_mut() {
                Some(p) if p.tool_request_id == req.tool_request_id && !p.answered => {
                    p.answered = true;
                    if let Some(outcome) = &req.outcome {
                        t.history.answered(&req.tool_request_id, outcome, size);
                    }
                }
                _ => return Err(SessionError::UnknownToolRequest(req.tool_request_id)),
            }
        }
        let tool_request_id = req.tool_request_id.clone();
        let outcome = req.outcome.map(|o| match o {
            pb::submit_tool_result_request::Outcome::Result(v) => {
                pb::resolve_tool_request::Outcome::Result(v)
            }
            pb::submit_tool_result_request::Outcome::Error(e) => {
                pb::resolve_tool_request::Outcome::Error(e)
            }
        });
        let resolved = self
            .inner
            .tools
            .clone()
            .resolve(pb::ResolveToolRequest {
                session_id: req.session_id,
                tool_request_id: req.tool_request_id,
                outcome,
            })
            .await;
        let mut guard = lock(&thread);
        let t = &mut *guard;
        match resolved {
            Ok(_) => {
                if t.clear_answered(&tool_request_id) {
                    t.cover_seqs(&self.inner.journal);
                }
                Ok(())
            }
            Err(status) => {
                // Not delivered (timed out in between, bridge down): the
                // request is as it was, for the page to see cleared or retry.
                if let Some(p) = t.record.pending_tool_request.as_mut()
                    && p.tool_request_id == tool_request_id
                {
                    p.answered = false;
                    t.history.unanswered(&tool_request_id);
                }
                Err(upstream(status))
            }
        }
    }
}
