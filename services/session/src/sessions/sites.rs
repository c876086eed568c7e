//! The site RPCs: the grants themselves are `crate::sites::Sites`'; here is
//! what a revoke or a block does to the site's threads.

use pedelec_proto::v1 as pb;

use super::end::DropTools;
use super::{Sessions, SharedThread, lock};
use crate::error::SessionError;

impl Sessions {
    pub fn list_sites(&self) -> Vec<pb::Site> {
        self.inner.sites.list()
    }

    /// GrantSite. The file is written (and fsynced) off the async workers.
    pub async fn grant_site(&self, site: pb::Site) -> Result<pb::Site, SessionError> {
        let sites = self.inner.sites.clone();
        blocking(move || sites.grant(site)).await
    }

    /// BlockSite: the block is stored first, then the site's sessions end.
    pub async fn block_site(&self, origin: String) -> Result<pb::Site, SessionError> {
        let sites = self.inner.sites.clone();
        let o = origin.clone();
        let site = blocking(move || sites.block(&o)).await?;
        self.end_site_sessions(&origin).await;
        Ok(site)
    }

    /// RevokeSite: the grant is gone first (no new request passes), then its
    /// sessions end.
    pub async fn revoke_site(&self, origin: String) -> Result<Vec<String>, SessionError> {
        if origin.is_empty() {
            return Err(SessionError::InvalidInput("origin is empty".into()));
        }
        let sites = self.inner.sites.clone();
        let o = origin.clone();
        blocking(move || sites.revoke(&o)).await?;
        Ok(self.end_site_sessions(&origin).await)
    }

    /// Ends every open thread of `origin` (a running turn is cancelled, the
    /// provider released, pending tool calls failed), whatever its
    /// auto-end setting. Returns the ids of the threads it ended.
    pub async fn end_site_sessions(&self, origin: &str) -> Vec<String> {
        // Threads that are not ended are all in memory (`recover`).
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        let mut ended = Vec::new();
        for thread in threads {
            let mut t = lock(&thread);
            if t.record.origin != origin {
                continue;
            }
            if let Some((id, saved)) = self.end_locked(&mut t, pb::EndReason::Requested) {
                if let Err(e) = saved {
                    // Ended in memory either way; the journal catches up on the next write.
                    tracing::warn!(session = %id, error = %e, "could not record the end");
                }
                drop(t);
                self.schedule_eviction(&thread);
                ended.push(id);
            }
        }
        // Released together: each may wait for its provider a while.
        let mut releases = tokio::task::JoinSet::new();
        for id in &ended {
            let (sessions, id) = (self.clone(), id.clone());
            releases.spawn(async move { sessions.drop_tool_calls(id, DropTools::Ended).await });
        }
        releases.join_all().await;
        if !ended.is_empty() {
            tracing::info!(%origin, sessions = ended.len(), "ended a site's sessions");
        }
        ended
    }
}

/// Runs `f` on the blocking pool (a file write with fsync).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SessionError::Internal(format!("site grants: {e}")))?
}
