//! `Sessions`: the SessionService logic as a plain Rust type. The tonic
//! adapter in `grpc.rs` only translates. This file holds the type, its
//! configuration and the map of threads (lookup, the journal at start-up,
//! eviction); each RPC's work lives in a module of its own.

mod attach;
mod auto_end;
mod create;
mod end;
mod history;
mod operation;
mod sites;
mod tool_results;
mod workspace;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pedelec_common::clients::{ProviderClient, ToolBridgeClient};
use pedelec_common::secret::ServiceSecret;
use pedelec_common::{Clients, Code, CodedError, DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1 as pb;
use tokio::sync::mpsc;

use crate::error::SessionError;
use crate::limits::{LimitConfig, Limits};
use crate::record::{Journal, Outcome, Status, ThreadRecord, Workspace};
use crate::replay::ReplayLimits;
use crate::settings::LatestSettings;
use crate::sites::{NeverGrantable, Sites};
use crate::thread::Thread;
use crate::workspaces::WorkspaceIndex;

/// What a SessionService process needs to know.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
    /// How long an auto-end thread may have no route before it is ended.
    pub auto_end_grace: Duration,
    pub replay: ReplayLimits,
    /// How long an ended thread without routes stays in memory; after that it
    /// lives in the journal only and is loaded again when asked for.
    pub evict_ended_after: Duration,
    /// Threads one origin may hold open (not ended) at once; past it,
    /// CreateSession is `LIMIT_EXCEEDED`.
    pub max_open_threads_per_origin: usize,
    /// Running turns per web origin and overall, creates and turn starts
    /// per web origin and window (`crate::limits`).
    pub limits: LimitConfig,
    /// How long an ended thread's record (and managed workspace) is kept
    /// after its end (`crate::prune`).
    pub ended_retention: Duration,
    /// Presented on ToolBridge's and ProviderService's internal RPCs; None
    /// when the service was started by hand without one.
    pub service_secret: Option<ServiceSecret>,
}

pub type SharedThread = Arc<Mutex<Thread>>;

/// Locks a thread; a panic elsewhere must not make every later call panic too.
pub fn lock(thread: &SharedThread) -> MutexGuard<'_, Thread> {
    thread.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Clone)]
pub struct Sessions {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub config: Config,
    pub journal: Journal,
    threads: Mutex<HashMap<String, SharedThread>>,
    pub provider: ProviderClient,
    pub tools: ToolBridgeClient,
    /// The settings ProviderService last sent, to resolve a named provider's
    /// profile without asking it (`create`, the first turn's prompt).
    pub settings: LatestSettings,
    /// What the user granted each web origin (`sites.json`).
    pub sites: Arc<Sites>,
    /// The caps on running turns and the request rates.
    pub limits: Arc<Limits>,
    /// Which journaled threads work in which explicit folder.
    pub workspaces: WorkspaceIndex,
    /// Runs once in [`Sessions::live_thread`] between the lookup and the
    /// locks, so a test can evict the thread exactly there.
    #[cfg(test)]
    pub(crate) pause_after_lookup: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// When the first spare journal files are made after start; a create before
/// then makes its own.
const FIRST_SPARES_AFTER: Duration = Duration::from_millis(100);

/// An attached route's stream of events. Boxed in the queue: tokio's channel
/// allocates its slots 32 at a time, and a `SessionEvent` inline is about
/// 700 bytes (its largest variant, the snapshot), so each route kept a 22 KiB
/// block for as long as it lived; fifty attached pages held 1.1 MiB that way
/// at idle and 2.3 MiB after a burst (docs/benchmarks.md, "Memory").
pub type EventStream = mpsc::Receiver<Box<pb::SessionEvent>>;

/// The services SessionService calls: ProviderService and ToolBridgeService
/// on their sockets, or in-process fakes in the unit tests.
#[derive(Clone)]
pub struct Upstream {
    pub provider: ProviderClient,
    pub tools: ToolBridgeClient,
    /// Their sockets: each watch's first try waits for its socket to appear
    /// (`reconnect::keep_open`).
    provider_socket: PathBuf,
    tools_socket: PathBuf,
}

impl Upstream {
    /// Lazy connections to the sibling services' sockets in `runtime_dir`,
    /// presenting `secret` on their internal RPCs.
    pub fn on_sockets(runtime_dir: &RuntimeDir, secret: Option<&ServiceSecret>) -> Upstream {
        let clients = Clients::new(runtime_dir.clone()).with_service_secret(secret);
        Upstream {
            provider: clients.provider(),
            tools: clients.toolbridge(),
            provider_socket: runtime_dir.socket(ServiceName::Provider),
            tools_socket: runtime_dir.socket(ServiceName::ToolBridge),
        }
    }
}

impl Sessions {
    /// Loads the journal (threads survive a restart of this service) and
    /// starts following the tool bridge and the provider settings.
    pub fn open(config: Config, upstream: Upstream) -> Sessions {
        let Upstream {
            provider,
            tools,
            provider_socket,
            tools_socket,
        } = upstream;
        let journal = Journal::new(config.data_dir.sessions());
        let never = NeverGrantable::of_process(&config.data_dir, &config.runtime_dir);
        let limits = Limits::new(config.limits);
        let sites = Arc::new(Sites::load(config.data_dir.sites_file(), never));
        let sessions = Sessions {
            inner: Arc::new(Inner {
                config,
                journal,
                threads: Mutex::new(HashMap::new()),
                provider,
                tools,
                settings: LatestSettings::default(),
                sites,
                limits,
                workspaces: WorkspaceIndex::default(),
                #[cfg(test)]
                pause_after_lookup: Mutex::new(None),
            }),
        };
        sessions.recover();
        // Not while the other services start too (`up.all_healthy`): a new
        // inode can cost most of a millisecond of CPU on this kind of disk.
        let later = sessions.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FIRST_SPARES_AFTER).await;
            later.refill_spares();
        });
        tokio::spawn(crate::prune::sweep_every(sessions.clone()));
        tokio::spawn(crate::tools::follow(sessions.clone(), tools_socket));
        tokio::spawn(crate::settings::follow(sessions.clone(), provider_socket));
        sessions
    }

    /// Makes the next creates' journal files on the blocking pool: a new inode
    /// can cost most of a millisecond on this kind of disk
    /// (`recycle::RecyclingWriter`), which a create should not wait for.
    fn refill_spares(&self) {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = inner.journal.refill() {
                tracing::debug!(error = %e, "no spare journal file");
            }
        });
    }

    fn recover(&self) {
        let (records, failures) = self.inner.journal.load_all();
        for (path, error) in failures {
            tracing::error!(file = %path.display(), %error, "skipping unreadable journal record");
        }
        let count = records.len();
        let now = pedelec_common::now_ms();
        for record in records {
            if self.expired(&record, now) {
                self.remove_record(&record);
                continue;
            }
            if record.workspace == Workspace::Explicit {
                self.inner.workspaces.insert(
                    &record.workspace_path,
                    &record.session_id,
                    &record.origin,
                );
            }
            if record.status == Status::Ended {
                continue; // loaded when asked for
            }
            let thread = self.restore(record);
            let auto_end = thread.record.auto_end_on_disconnect
                && thread.record.ever_attached
                && thread.record.status != Status::Ended;
            let id = thread.id().to_string();
            let shared = Arc::new(Mutex::new(thread));
            self.threads().insert(id, shared.clone());
            if auto_end {
                // Routes were lost with the old process; they have the grace period to come back.
                self.schedule_auto_end(&shared);
            }
        }
        if count > 0 {
            tracing::info!(threads = count, "found threads in the journal");
        }
    }

    /// A thread from its journal record, as it must be after a restart: an
    /// operation that was running has failed with CORE_RESTARTED.
    fn restore(&self, mut record: ThreadRecord) -> Thread {
        // Numbering continues above anything handed out before the restart.
        record.last_seq = record.last_seq.max(record.seq_reserved);
        // A record from before `ended_at_ms` existed: its file's last write is
        // when it ended, and stays so once this restore writes it again.
        if record.status == Status::Ended && record.ended_at_ms.is_none() {
            record.ended_at_ms = self.inner.journal.modified_ms(&record.session_id);
        }
        let mut thread = Thread::new(record, self.inner.config.replay);
        thread.history = self.history_of(thread.id());
        {
            if let Some(op) = thread.record.active_operation.clone() {
                let error = CodedError::new(
                    Code::CORE_RESTARTED,
                    "SessionService restarted while the operation was running",
                );
                thread.finish_operation(
                    &op.operation_id,
                    Outcome::Failed,
                    Some((error, pb::ErrorSource::Core)),
                    Status::Error,
                );
            } else if matches!(
                thread.record.status,
                Status::Running | Status::WaitingToolResult
            ) {
                thread.set_status(Status::Idle);
            }
        }
        // Logged when it fails; the record on disk already holds the thread.
        let _ = thread.save(&self.inner.journal);
        thread
    }

    /// The thread `id` in memory, or loaded from the journal (an ended thread
    /// that was evicted).
    fn lookup(&self, id: &str) -> Option<SharedThread> {
        if let Some(thread) = self.threads().get(id) {
            return Some(thread.clone());
        }
        let record = self.inner.journal.load(id)?;
        let thread = Arc::new(Mutex::new(self.restore(record)));
        let shared = self
            .threads()
            .entry(id.to_string())
            .or_insert(thread)
            .clone();
        self.schedule_eviction(&shared);
        Some(shared)
    }

    /// Drops an ended thread without routes from memory after a while; the
    /// journal keeps it for Get, Attach and Reactivate.
    fn schedule_eviction(&self, thread: &SharedThread) {
        let sessions = self.clone();
        let thread = thread.clone();
        let after = self.inner.config.evict_ended_after;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            sessions.evict_if_unused(&thread);
        });
    }

    /// Drops `thread` from memory if it is ended and has no route. True when it did.
    pub(crate) fn evict_if_unused(&self, thread: &SharedThread) -> bool {
        // The map's lock first, then the thread's (the order used
        // everywhere), so no attach can slip in between check and removal.
        let mut threads = self.threads();
        let t = lock(thread);
        if t.record.status != Status::Ended || !t.routes.is_empty() {
            return false;
        }
        if threads.get(t.id()).is_some_and(|s| Arc::ptr_eq(s, thread)) {
            threads.remove(t.id());
            tracing::debug!(session = t.id(), "ended thread evicted from memory");
            return true;
        }
        false
    }

    /// [`Sessions::thread`], then `change` on it under its lock, with the
    /// guarantee that it is the copy in memory, the one every later call
    /// finds. A plain lookup then lock leaves a window in which an ended
    /// thread is evicted: a route or a reactivation would land on a copy
    /// nobody finds again (the route then never sees the thread's events;
    /// the reactivated thread's next call loads the journal's copy, without
    /// tools). Checked under the map's lock, the order eviction locks in; a
    /// copy evicted in between is looked up (loaded) again.
    fn live_thread<R>(
        &self,
        id: &str,
        origin: &str,
        change: impl FnOnce(&mut Thread) -> R,
    ) -> Result<(SharedThread, R), SessionError> {
        loop {
            let thread = self.thread(id, origin)?;
            #[cfg(test)]
            if let Some(pause) = self
                .inner
                .pause_after_lookup
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                pause();
            }
            let threads = self.threads();
            let mut t = lock(&thread);
            if !threads.get(id).is_some_and(|s| Arc::ptr_eq(s, &thread)) {
                continue;
            }
            // Holding the thread's lock keeps eviction out from here on.
            drop(threads);
            let out = change(&mut t);
            drop(t);
            return Ok((thread, out));
        }
    }

    #[cfg(test)]
    pub(crate) fn in_memory(&self, id: &str) -> bool {
        self.threads().contains_key(id)
    }

    pub(crate) fn threads(&self) -> MutexGuard<'_, HashMap<String, SharedThread>> {
        self.inner.threads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The thread `id` for internal callers (no origin to check).
    pub(crate) fn thread_unchecked(&self, id: &str) -> Option<SharedThread> {
        self.lookup(id)
    }

    /// The thread `id`, if `origin` owns it and, being a web origin, has a
    /// live grant: every thread-scoped request comes through here.
    pub fn thread(&self, id: &str, origin: &str) -> Result<SharedThread, SessionError> {
        if id.is_empty() {
            return Err(SessionError::InvalidInput("session_id is empty".into()));
        }
        if origin.is_empty() {
            return Err(SessionError::InvalidInput("origin is empty".into()));
        }
        self.inner.sites.require(origin)?;
        let thread = self
            .lookup(id)
            .ok_or_else(|| SessionError::ThreadNotFound(id.to_string()))?;
        if lock(&thread).record.origin != origin {
            return Err(SessionError::AccessDenied(id.to_string()));
        }
        Ok(thread)
    }

    pub fn get(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        Ok(lock(&self.thread(id, origin)?).snapshot())
    }

    pub async fn list(
        &self,
        origin: Option<&str>,
    ) -> Result<Vec<pb::SessionSummary>, SessionError> {
        if let Some(origin) = origin {
            self.inner.sites.require(origin)?;
        }
        // Ended threads that live in the journal only. Reading every record
        // is file work: off the one runtime thread, so streams keep flowing.
        let sessions = self.clone();
        let (records, _) = tokio::task::spawn_blocking(move || sessions.inner.journal.load_all())
            .await
            .map_err(|e| SessionError::Internal(format!("reading the journal: {e}")))?;
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        let mut out: Vec<pb::SessionSummary> = threads.iter().map(|t| lock(t).summary()).collect();
        for record in records {
            if record.status == Status::Ended
                && !out.iter().any(|s| s.session_id == record.session_id)
            {
                out.push(Thread::new(record, self.inner.config.replay).summary());
            }
        }
        out.retain(|s| origin.is_none_or(|o| s.origin == o));
        out.sort_by(|a, b| {
            let key = |s: &pb::SessionSummary| s.created_at.map(|t| (t.seconds, t.nanos));
            key(a).cmp(&key(b)).then(a.session_id.cmp(&b.session_id))
        });
        Ok(out)
    }
}
