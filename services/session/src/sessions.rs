//! `Sessions`: the SessionService logic as a plain Rust type. The tonic
//! adapter in `grpc.rs` only translates.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pb::session_event::Event;
use pedelec_common::clients::{ProviderClient, ToolBridgeClient};
use pedelec_common::secret::ServiceSecret;
use pedelec_common::{Clients, Code, CodedError, DataDir, RuntimeDir, ids, json};
use pedelec_proto::v1 as pb;
use pedelec_provider::settings::SettingsStore;
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;

use crate::error::{SessionError, upstream};
use crate::record::{Journal, OpKind, Outcome, Status, ThreadRecord, UsageRecord};
use crate::replay::ReplayLimits;
use crate::thread::{SnapshotView, Thread};
use crate::turn;

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
    /// settings.json, read (never written) to resolve a named provider's
    /// profile without asking ProviderService (`create`, the first turn's
    /// prompt).
    pub settings: SettingsStore,
    /// Runs once in [`Sessions::live_thread`] between the lookup and the
    /// locks, so a test can evict the thread exactly there.
    #[cfg(test)]
    pub(crate) pause_after_lookup: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// The folder Pedelec keeps inside every workspace (assets, agent state).
const RUNTIME_FOLDER: &str = ".pedelec-runtime";

/// Events an ended thread keeps for routes catching up with its end.
const ENDED_REPLAY_EVENTS: usize = 64;

/// When the first spare journal files are made after start; a create before
/// then makes its own.
const FIRST_SPARES_AFTER: Duration = Duration::from_millis(100);

/// How many events a route takes from the replay buffer at a time.
const ROUTE_BATCH: usize = 256;

/// Why a thread's tool calls are dropped (ToolBridge's `Drop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DropTools {
    /// The operation was cancelled; the thread keeps its tools.
    Cancelled,
    /// The thread ended; ToolBridge forgets its manifest and token.
    Ended,
}

/// An attached route's stream of events.
pub type EventStream = mpsc::Receiver<Result<pb::SessionEvent, tonic::Status>>;

/// The services SessionService calls: ProviderService and ToolBridgeService
/// on their sockets, or in-process fakes in the unit tests.
#[derive(Clone)]
pub struct Upstream {
    pub provider: ProviderClient,
    pub tools: ToolBridgeClient,
}

impl Upstream {
    /// Lazy connections to the sibling services' sockets in `runtime_dir`,
    /// presenting `secret` on their internal RPCs.
    pub fn on_sockets(runtime_dir: &RuntimeDir, secret: Option<&ServiceSecret>) -> Upstream {
        let clients = Clients::new(runtime_dir.clone()).with_service_secret(secret);
        Upstream {
            provider: clients.provider(),
            tools: clients.toolbridge(),
        }
    }
}

impl Sessions {
    /// Loads the journal (threads survive a restart of this service) and
    /// starts following the tool bridge.
    pub fn open(config: Config, upstream: Upstream) -> Sessions {
        let Upstream { provider, tools } = upstream;
        let journal = Journal::new(config.data_dir.sessions());
        let settings = SettingsStore::new(config.data_dir.settings_file());
        let sessions = Sessions {
            inner: Arc::new(Inner {
                config,
                journal,
                threads: Mutex::new(HashMap::new()),
                provider,
                tools,
                settings,
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
        tokio::spawn(crate::tools::follow(sessions.clone()));
        sessions
    }

    /// Makes the next creates' journal files on the blocking pool: a new inode
    /// can cost most of a millisecond on this kind of disk
    /// (`paths::RecyclingWriter`), which a create should not wait for.
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
        for record in records {
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
        let mut thread = Thread::new(record, self.inner.config.replay);
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

    fn threads(&self) -> MutexGuard<'_, HashMap<String, SharedThread>> {
        self.inner.threads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The thread `id` for internal callers (no origin to check).
    pub(crate) fn thread_unchecked(&self, id: &str) -> Option<SharedThread> {
        self.lookup(id)
    }

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
        let known = match token.as_deref().map(MetadataValue::try_from) {
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

    /// The thread `id`, if `origin` owns it.
    pub fn thread(&self, id: &str, origin: &str) -> Result<SharedThread, SessionError> {
        if id.is_empty() {
            return Err(SessionError::InvalidInput("session_id is empty".into()));
        }
        if origin.is_empty() {
            return Err(SessionError::InvalidInput("origin is empty".into()));
        }
        let thread = self
            .lookup(id)
            .ok_or_else(|| SessionError::ThreadNotFound(id.to_string()))?;
        if lock(&thread).record.origin != origin {
            return Err(SessionError::AccessDenied(id.to_string()));
        }
        Ok(thread)
    }

    pub async fn create(
        &self,
        req: pb::CreateSessionRequest,
    ) -> Result<pb::CreateSessionResponse, SessionError> {
        if req.origin.is_empty() {
            return Err(SessionError::InvalidInput("origin is empty".into()));
        }
        self.check_open_threads(&req.origin)?;
        let explicit_workspace = match req.workspace_path.as_deref() {
            Some(path) if !path.is_empty() => Some(self.check_explicit_workspace(path)?),
            _ => None,
        };
        let profile = self.resolve_profile(&req).await?;
        // The manifest is checked here, by ToolBridgeService's own parser; the
        // bridge is given it when the thread's first operation starts
        // (`tools_ready`). A create then asks no other service when it names
        // its provider (docs/decisions.md, "Create").
        let manifest = req.skills.as_ref().map(json::from_struct);
        if let Some(manifest) = &manifest {
            crate::tools::check_manifest(manifest).await?;
        }
        let session_id = ids::new_id("thr");
        // A managed workspace is made on first use (`make_workspace`): a
        // thread that is never used costs no folder, and a create no mkdir.
        let (workspace_path, managed_workspace) = match explicit_workspace {
            Some(path) => (path, false),
            None => (
                self.inner.config.data_dir.workspaces().join(&session_id),
                true,
            ),
        };

        let record = ThreadRecord {
            session_id: session_id.clone(),
            origin: req.origin,
            provider: profile.provider.clone(),
            effort_level: profile.effort_level.clone(),
            model: req.model.filter(|m| !m.is_empty()).unwrap_or(profile.model),
            effort: profile.effort,
            workspace_path,
            managed_workspace,
            workspace_made: !managed_workspace,
            auto_end_on_disconnect: req.auto_end_on_disconnect,
            created_at_ms: now_ms(),
            status: Status::Idle,
            provider_session_id: None,
            ever_attached: false,
            first_turn_done: false,
            usage: None,
            cumulative_seen: UsageRecord::default(),
            manifest: manifest.map(serde_json::Value::Object),
            tool_token: None,
            active_operation: None,
            recent_operations: Vec::new(),
            pending_tool_request: None,
            last_seq: 0,
            seq_reserved: 0,
        };
        let mut thread = Thread::new(record, self.inner.config.replay);
        // Checked again: other creates of the origin may have finished while
        // this one awaited ProviderService or the manifest's check.
        self.check_open_threads(&thread.record.origin)?;
        thread.save(&self.inner.journal)?;
        let snapshot = thread.snapshot();
        self.threads()
            .insert(session_id.clone(), Arc::new(Mutex::new(thread)));
        self.refill_spares();
        tracing::info!(session = %session_id, provider = %profile.provider, "created thread");
        Ok(pb::CreateSessionResponse {
            session_id,
            provider: profile.provider,
            effort_level: profile.effort_level,
            snapshot: Some(snapshot),
        })
    }

    /// The thread's provider and effort profile. A named provider's comes
    /// from settings.json, read here; the default provider must also be
    /// installed, which ProviderService checks (and caches).
    async fn resolve_profile(
        &self,
        req: &pb::CreateSessionRequest,
    ) -> Result<pb::ResolvedProfile, SessionError> {
        let effort_level = req.effort_level.as_deref().filter(|e| !e.is_empty());
        match req.provider.as_deref().filter(|p| !p.is_empty()) {
            Some(code) => pedelec_provider::resolve_named(&self.inner.settings, code, effort_level)
                .map_err(|e| SessionError::Upstream(e.to_coded())),
            None => {
                let request = pb::ResolveProfileRequest {
                    provider: None,
                    effort_level: effort_level.map(str::to_string),
                };
                let mut provider = self.inner.provider.clone();
                match provider.resolve_profile(request).await {
                    Ok(resp) => Ok(resp.into_inner()),
                    Err(status) => Err(upstream(status)),
                }
            }
        }
    }

    /// `LIMIT_EXCEEDED` when `origin` already holds the most open threads
    /// allowed. Counted without holding the map lock across thread locks, so
    /// creates racing on other workers may pass together (by at most a few).
    fn check_open_threads(&self, origin: &str) -> Result<(), SessionError> {
        let all: Vec<SharedThread> = self.threads().values().cloned().collect();
        let open = all
            .iter()
            .filter(|t| {
                let t = lock(t);
                t.record.origin == origin && t.record.status != Status::Ended
            })
            .count();
        let max = self.inner.config.max_open_threads_per_origin;
        if open >= max {
            return Err(SessionError::Limit(format!(
                "{origin} already has {open} open sessions (the most allowed is {max}); end one first"
            )));
        }
        Ok(())
    }

    /// An explicit workspace must be an absolute, existing directory that
    /// neither lies inside nor contains the managed workspaces root.
    fn check_explicit_workspace(&self, path: &str) -> Result<PathBuf, SessionError> {
        let requested = Path::new(path);
        if !requested.is_absolute() {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} is not absolute"
            )));
        }
        let workspace_error = |reason: String| SessionError::Workspace {
            path: path.to_string(),
            reason,
        };
        let canonical = requested
            .canonicalize()
            .map_err(|e| workspace_error(e.to_string()))?;
        if !canonical.is_dir() {
            return Err(workspace_error("not a directory".into()));
        }
        let managed_root = self.inner.config.data_dir.workspaces();
        let managed = managed_root.canonicalize().unwrap_or(managed_root);
        if canonical.starts_with(&managed) || managed.starts_with(&canonical) {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} overlaps the managed workspaces root {}",
                managed.display()
            )));
        }
        // Pedelec's own folders (a thread's uploaded assets among them) hold
        // what a page put there: as another agent's workspace they would hand
        // it the page's AGENTS.md, .claude/settings.json, opencode.json.
        if canonical
            .components()
            .any(|c| c.as_os_str() == RUNTIME_FOLDER)
        {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} lies inside a {RUNTIME_FOLDER} folder (Pedelec's own files)"
            )));
        }
        // Sharing another thread's workspace is allowed (the seeds); a folder
        // inside one is not: that thread's agent writes there.
        if let Some(owner) = self.workspace_containing(&canonical) {
            return Err(SessionError::InvalidInput(format!(
                "workspace_path {path:?} lies inside the workspace of thread {owner}"
            )));
        }
        Ok(canonical)
    }

    /// A thread (in memory or in the journal) whose workspace strictly contains `path`.
    fn workspace_containing(&self, path: &Path) -> Option<String> {
        let inside = |ws: &Path| path != ws && path.starts_with(ws);
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        if let Some(t) = threads
            .iter()
            .find(|t| inside(&lock(t).record.workspace_path))
        {
            return Some(lock(t).id().to_string());
        }
        let (records, _) = self.inner.journal.load_all();
        records
            .into_iter()
            .find(|r| inside(&r.workspace_path))
            .map(|r| r.session_id)
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
                    t.record.tool_token.clone().unwrap_or_default(),
                ),
                _ => return Ok(()),
            }
        };
        let token = self.register_tools(&id, manifest, token).await?;
        lock(thread).record.tool_token = token;
        Ok(())
    }

    /// [`Sessions::reregister_tools`] where nothing waits for it: a failure
    /// is logged, and the next operation tries again (`tools_ready`).
    async fn reregister_tools_or_log(&self, thread: &SharedThread) {
        if let Err(e) = self.reregister_tools(thread).await {
            tracing::warn!(session = %lock(thread).id(), error = %e, "could not re-register tools");
        }
    }

    pub fn attach(&self, req: pb::AttachRequest) -> Result<EventStream, SessionError> {
        let (tx, rx) = mpsc::channel(1024);
        // The route is taken on the copy in memory: a route keeps a thread
        // from eviction only if it is on the copy eviction looks at.
        let (thread, (key, initial, mut cursor, mut changes)) =
            self.live_thread(&req.session_id, &req.origin, |t| {
                let key = t.add_route();
                if !t.record.ever_attached {
                    t.record.ever_attached = true;
                    // Only auto-end reads it after a restart (`recover`): for other
                    // threads the flag rides along with the next write, and the
                    // first attach costs no journal write (issue 19).
                    if t.record.auto_end_on_disconnect {
                        // Logged when it fails.
                        let _ = t.save(&self.inner.journal);
                    }
                }
                let last = t.record.last_seq;
                let initial = match req.after_seq {
                    None => vec![t.snapshot_event(SnapshotView::Current)],
                    Some(after) => match t.replay.after(after, last, usize::MAX) {
                        Some(events) => std::iter::once(t.snapshot_event(SnapshotView::Current))
                            .chain(events)
                            .collect(),
                        None => vec![t.snapshot_event(SnapshotView::AfterGap)],
                    },
                };
                (key, initial, last, t.notify.subscribe())
            })?;
        tracing::debug!(session = %req.session_id, route = %req.route_id, "route attached");
        // The first message waits in the channel before the stream is handed
        // to tonic, so the response's headers and the snapshot go out in one
        // write (one wake-up of the client, not two). A fresh channel has room.
        let mut initial = initial.into_iter();
        if let Some(first) = initial.next() {
            let _ = tx.try_send(Ok(first));
        }
        let route = RouteGuard {
            sessions: self.clone(),
            thread: thread.clone(),
            key,
        };
        tokio::spawn(async move {
            let _route = route;
            for event in initial {
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            // Small batches: a route far behind holds a few hundred cloned
            // events at a time, not everything it has yet to send.
            let mut more = false;
            loop {
                if !more {
                    tokio::select! {
                        _ = tx.closed() => return,
                        changed = changes.changed() => if changed.is_err() { return },
                    }
                }
                let batch = {
                    let mut t = lock(&thread);
                    let last = t.record.last_seq;
                    let batch = match t.replay.after(cursor, last, ROUTE_BATCH) {
                        Some(events) => {
                            cursor = events.last().map_or(last, |e| e.seq);
                            events
                        }
                        None => {
                            cursor = last;
                            vec![t.snapshot_event(SnapshotView::AfterGap)]
                        }
                    };
                    more = cursor < last;
                    t.route_took(key, cursor);
                    batch
                };
                for event in batch {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(rx)
    }

    fn route_gone(&self, thread: &SharedThread, key: u64) {
        let (auto_end, evict) = {
            let mut t = lock(thread);
            t.remove_route(key);
            let ended = t.record.status == Status::Ended;
            let last = t.routes.is_empty();
            (
                last && t.record.auto_end_on_disconnect && !ended,
                last && ended,
            )
        };
        if auto_end {
            self.schedule_auto_end(thread);
        }
        if evict {
            self.schedule_eviction(thread);
        }
    }

    /// Ends the thread if no route attaches within the grace period.
    fn schedule_auto_end(&self, thread: &SharedThread) {
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
    fn end_locked(
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
        t.replay.keep_last(ENDED_REPLAY_EVENTS);
        let saved = t.save(&self.inner.journal);
        Some((t.id().to_string(), saved))
    }

    /// Fails the thread's pending tool calls (and, when it ended, forgets its
    /// tools). A running turn needs no call: finishing the operation makes its
    /// task drop the RunTurn stream, and ProviderService kills the process
    /// group when its stream goes away. An ended thread also releases what
    /// the provider keeps between turns (codex's app-server): CancelTurn on a
    /// thread with no running turn does that.
    async fn drop_tool_calls(&self, session_id: String, why: DropTools) {
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

    pub async fn reactivate(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        // On the copy in memory: reactivating an evicted copy would give its
        // tools to a thread nobody finds again.
        let (thread, snapshot) = self.live_thread(id, origin, |t| {
            if t.record.status == Status::Ended {
                let path = &t.record.workspace_path;
                // A managed workspace not made yet is made on first use.
                if t.record.workspace_made && !path.is_dir() {
                    return Err(SessionError::Workspace {
                        path: path.display().to_string(),
                        reason: "the recorded workspace no longer exists".into(),
                    });
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

    pub fn get(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        Ok(lock(&self.thread(id, origin)?).snapshot())
    }

    /// The snapshot of a thread whose workspace folder exists: made now if it
    /// is a managed workspace not made yet (`OpenWorkspace`). An ended
    /// thread's snapshot is returned as it is.
    pub fn open_workspace(&self, id: &str, origin: &str) -> Result<pb::Snapshot, SessionError> {
        let thread = self.thread(id, origin)?;
        let mut t = lock(&thread);
        if t.record.status != Status::Ended {
            self.make_workspace(&mut t)?;
        }
        Ok(t.snapshot())
    }

    /// Makes a managed workspace's folder (private, like the data dir) the
    /// first time the thread needs it, and records that it was made: from then
    /// on a missing folder is WORKSPACE_OPEN_FAILED, as for an explicit one.
    /// Blocking, but one `mkdir`, once per thread.
    pub(crate) fn make_workspace(&self, t: &mut Thread) -> Result<(), SessionError> {
        let path = &t.record.workspace_path;
        let workspace_error = |reason: String| SessionError::Workspace {
            path: path.display().to_string(),
            reason,
        };
        if t.record.workspace_made {
            return if path.is_dir() {
                Ok(())
            } else {
                Err(workspace_error(
                    "the recorded workspace no longer exists".into(),
                ))
            };
        }
        pedelec_common::paths::ensure_private_dir(path)
            .map_err(|e| workspace_error(e.to_string()))?;
        t.record.workspace_made = true;
        // A failed write only leaves the record saying "not made": the folder
        // is there, and making it again finds it.
        if let Err(e) = t.save(&self.inner.journal) {
            tracing::warn!(session = %t.id(), error = %e, "could not record the new workspace");
        }
        Ok(())
    }

    pub fn list(&self, origin: Option<&str>) -> Vec<pb::SessionSummary> {
        let threads: Vec<SharedThread> = self.threads().values().cloned().collect();
        let mut out: Vec<pb::SessionSummary> = threads.iter().map(|t| lock(t).summary()).collect();
        // Ended threads that live in the journal only (an admin call: reading
        // the folder is fine here).
        let (records, _) = self.inner.journal.load_all();
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
        out
    }

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
        let operation_id = ids::new_id("op");
        let stop = {
            let mut t = lock(&thread);
            if t.record.status == Status::Ended {
                return Err(SessionError::Ended(id.to_string()));
            }
            if let Some(op) = &t.record.active_operation {
                return Err(SessionError::Busy(id.to_string(), op.operation_id.clone()));
            }
            t.start_operation(operation_id.clone(), kind);
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
            let mut t = lock(&thread);
            match t.record.pending_tool_request.as_mut() {
                Some(p) if p.tool_request_id == req.tool_request_id && !p.answered => {
                    p.answered = true;
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
        let mut t = lock(&thread);
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
                }
                Err(upstream(status))
            }
        }
    }
}

/// Counts a route while its stream task lives; dropping it may start auto-end.
struct RouteGuard {
    sessions: Sessions,
    thread: SharedThread,
    key: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.sessions.route_gone(&self.thread, self.key);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
