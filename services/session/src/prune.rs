//! Ended threads are not kept for ever: once a thread has been ended for
//! longer than the retention (a week by default), its journal record and, for
//! a managed workspace, the folder Pedelec made for it are removed, and the
//! thread is THREAD_NOT_FOUND from then on. Until then everything the docs
//! promise of an ended thread holds (Get, Attach, List, Reactivate). Checked
//! at start-up, for each record read, and every hour (or every retention, if
//! shorter) by a sweep of the journal; an explicit workspace is never touched.

use std::time::Duration;

use pedelec_common::now_ms;

use crate::record::{Status, ThreadRecord, Workspace};
use crate::sessions::{Sessions, lock};

/// How often the sweep runs at most.
const SWEEP_EVERY: Duration = Duration::from_secs(60 * 60);

/// Sweeps the journal every [`SWEEP_EVERY`] (the retention, if shorter),
/// for as long as the service runs.
pub async fn sweep_every(sessions: Sessions) {
    let every = sessions
        .inner
        .config
        .ended_retention
        .clamp(Duration::from_millis(10), SWEEP_EVERY);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: start-up has pruned already.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let s = sessions.clone();
        // Reading the journal and removing files: off the async workers.
        let _ = tokio::task::spawn_blocking(move || s.sweep()).await;
    }
}

impl Sessions {
    /// Whether `record` is of a thread ended longer ago than the retention.
    /// A record from before `ended_at_ms` existed counts from its file's last
    /// write.
    pub(crate) fn expired(&self, record: &ThreadRecord, now_ms: u64) -> bool {
        if record.status != Status::Ended {
            return false;
        }
        let ended = record
            .ended_at_ms
            .or_else(|| self.inner.journal.modified_ms(&record.session_id));
        let retention = self.inner.config.ended_retention.as_millis() as u64;
        ended.is_some_and(|at| now_ms.saturating_sub(at) >= retention)
    }

    /// Removes every ended thread past the retention that is not in use:
    /// one in memory with a route attached, or no longer ended, is kept.
    pub(crate) fn sweep(&self) -> usize {
        let (records, _) = self.inner.journal.load_all();
        let now = now_ms();
        let mut removed = 0;
        for record in records.iter().filter(|r| self.expired(r, now)) {
            {
                // The map's lock, then the thread's: the order eviction and
                // lookups take them, so no route can attach in between.
                let mut threads = self.threads();
                if let Some(thread) = threads.get(&record.session_id).cloned() {
                    let t = lock(&thread);
                    if t.record.status != Status::Ended || !t.routes.is_empty() {
                        continue;
                    }
                    drop(t);
                    threads.remove(&record.session_id);
                }
                self.inner.journal.remove(&record.session_id);
            }
            self.remove_record(record);
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(
                threads = removed,
                "removed ended threads past the retention"
            );
        }
        removed
    }

    /// Removes what is kept of an ended thread: its record, its index entry
    /// and its managed workspace (the folder Pedelec made for it under the
    /// data dir, and nothing else).
    pub(crate) fn remove_record(&self, record: &ThreadRecord) {
        let id = &record.session_id;
        self.inner.journal.remove(id);
        crate::history::remove(&self.history_file(id));
        match record.workspace {
            Workspace::Explicit => self.inner.workspaces.remove(&record.workspace_path, id),
            Workspace::ManagedPending | Workspace::ManagedMade => {
                let folder = self.inner.config.data_dir.workspaces().join(id);
                if record.workspace_path == folder
                    && let Err(e) = std::fs::remove_dir_all(&folder)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(session = %id, error = %e, "could not remove an ended thread's workspace");
                }
            }
        }
        tracing::debug!(session = %id, "ended thread removed after the retention");
    }
}
