//! GetHistory: a page of a thread's conversation history (`crate::history`).

use std::path::PathBuf;

use pedelec_proto::v1 as pb;

use super::{Sessions, lock};
use crate::error::SessionError;
use crate::history::{DEFAULT_PAGE, History, MAX_PAGE};

impl Sessions {
    /// Where thread `id`'s history is kept: next to its journal record.
    pub(crate) fn history_file(&self, id: &str) -> PathBuf {
        crate::history::file_in(&self.inner.config.data_dir.sessions(), id)
    }

    /// Thread `id`'s history, read when first used.
    pub(crate) fn history_of(&self, id: &str) -> History {
        History::at(self.history_file(id))
    }

    /// The entries below `before` (0: the newest), at most `limit` (0: 100),
    /// oldest first. Only the thread's own origin reads them, as with Get;
    /// `cli` (pedelec-cli, a local caller) reads any thread's.
    pub async fn history(
        &self,
        req: pb::GetHistoryRequest,
    ) -> Result<pb::GetHistoryResponse, SessionError> {
        let limit = match req.limit {
            0 => DEFAULT_PAGE,
            n if n > MAX_PAGE => {
                return Err(SessionError::InvalidInput(format!(
                    "limit {n} is above {MAX_PAGE}"
                )));
            }
            n => n,
        };
        let sessions = self.clone();
        // The first read of a thread loads its file; the page is one read.
        tokio::task::spawn_blocking(move || {
            let thread = if req.origin == pedelec_common::CLI_ORIGIN && !req.session_id.is_empty() {
                sessions
                    .thread_unchecked(&req.session_id)
                    .ok_or_else(|| SessionError::ThreadNotFound(req.session_id.clone()))?
            } else {
                sessions.thread(&req.session_id, &req.origin)?
            };
            let (page, covered_seq) = {
                let mut t = lock(&thread);
                (t.history.page(req.before, limit), t.record.last_seq)
            };
            let page = page.map_err(read_failed)?;
            Ok(pb::GetHistoryResponse {
                entries: page.read().map_err(read_failed)?,
                has_more: page.has_more,
                covered_seq,
            })
        })
        .await
        .map_err(|e| SessionError::Internal(format!("history read: {e}")))?
    }
}

fn read_failed(e: std::io::Error) -> SessionError {
    tracing::error!(error = %e, "history read failed");
    SessionError::Internal("the session's history could not be read".into())
}
