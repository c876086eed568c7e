//! Auto-end: a thread created with `auto_end_on_disconnect` ends when no
//! route has been attached for the grace period.

use pedelec_proto::v1 as pb;

use super::end::DropTools;
use super::{Sessions, SharedThread, lock};

impl Sessions {
    /// Ends the thread if no route attaches within the grace period.
    pub(super) fn schedule_auto_end(&self, thread: &SharedThread) {
        let generation = lock(thread).route_generation;
        let sessions = self.clone();
        let thread = thread.clone();
        let grace = self.inner.config.auto_end_grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let ended = {
                let mut t = lock(&thread);
                if t.routes.is_empty() && t.route_generation == generation {
                    tracing::info!(session = t.id(), "last route gone: auto-ending");
                    // A failed write is logged: no caller waits for an auto-end.
                    sessions
                        .end_locked(&mut t, pb::EndReason::AutoEnd)
                        .map(|(id, _saved)| id)
                } else {
                    None
                }
            };
            if let Some(id) = ended {
                sessions.schedule_eviction(&thread);
                sessions.drop_tool_calls(id, DropTools::Ended).await;
            }
        });
    }
}
