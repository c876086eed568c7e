//! RunTurn and CancelTurn: the registry of running turns ([`Turns`]), at most
//! one per thread, and its public API.
//!
//! Every turn's stream ends with exactly one `exited` event, also when the
//! program is missing or could not start, so SessionService has a single flow.
//! An agent runs in its own process group and is always signalled as a
//! group: the npm `codex` wrapper orphans its native child if only the
//! wrapper dies.
//!
//! Where the rest lives: `job` validates a request and picks the path that
//! runs it; `cli` runs one CLI process per turn; `appserver` and `serve` run
//! codex and opencode turns on a long-lived server per thread, whose
//! registry is `servers`; `events` is a turn's side of the stream;
//! `terminate` ends a turn's processes; `record` and `orphans` let a
//! restarted service end what a crashed one left running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::process::{SIGKILL, signal_group};
use pedelec_proto::v1 as pb;
use tokio::sync::{mpsc, watch};

use crate::availability::ProgramEnv;
use crate::error::ProviderError;
use crate::launch::{Hidden, Launch};
use events::Sink;
use job::Job;
use record::Records;

mod appserver;
mod cli;
mod events;
mod job;
pub mod joined;
mod orphans;
mod record;
mod serve;
mod servers;
mod terminate;

pub use appserver::{AppServers, MIN_VERSION};
pub use cli::MAX_ARG_BYTES;
pub use orphans::reap_orphans;
pub use record::{RecordKey, TURN_RECORDS};
pub use serve::OpencodeServers;
pub use servers::MAX_RUNNING;

/// How long a process group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// Events buffered toward the gRPC stream; a slow reader holds the provider's
/// stdout back instead of growing memory.
const EVENT_BUFFER: usize = 256;

/// The running turns, one per thread.
pub struct Turns {
    programs: ProgramEnv,
    grace: Duration,
    running: Arc<Mutex<HashMap<String, Running>>>,
    next_id: AtomicU64,
    records: Option<Records>,
    /// Codex threads' app-servers (the processes outlive a turn).
    codex: Arc<AppServers>,
    /// opencode threads' `opencode serve` processes (the same).
    opencode: Arc<OpencodeServers>,
    /// How agent processes start: their environment, confinement, cgroup.
    launch: Arc<Launch>,
}

struct Running {
    id: u64,
    /// The turn's process group once spawned, else 0.
    pgid: Arc<AtomicI32>,
    /// Set to true to cancel; the turn terminates its process group.
    stop: Arc<watch::Sender<bool>>,
    /// Closed (sender dropped) once the turn has fully ended.
    done: watch::Receiver<()>,
}

impl Turns {
    /// `programs` locates the CLIs; its PATH (with `exe_dir` first, where
    /// `pedelec-cli` lives) is also the agent process's PATH.
    pub fn new(programs: ProgramEnv) -> Self {
        Turns {
            programs,
            grace: GRACE,
            running: Arc::default(),
            next_id: AtomicU64::new(1),
            records: None,
            codex: Arc::new(appserver::servers()),
            opencode: Arc::new(serve::servers()),
            launch: Arc::new(Launch::from_process()),
        }
    }

    /// Starts agents confined where bubblewrap works, hiding `hidden`, each
    /// in its own cgroup where one can be made (the service does; the
    /// in-process tests of this crate run agents plain).
    pub fn with_confinement(mut self, hidden: Hidden) -> Self {
        self.launch = Arc::new(Launch::from_process().confined(hidden));
        self
    }

    /// Whether codex turns may use `codex app-server` (when the installed
    /// codex has a usable one); `false` always runs `codex exec --json`.
    pub fn with_codex_app_server(mut self, enabled: bool) -> Self {
        Arc::get_mut(&mut self.codex)
            .expect("set before any turn")
            .enabled = enabled;
        self
    }

    /// The codex app-servers (their count and pids, for tests and benchmarks).
    pub fn codex_app_servers(&self) -> &AppServers {
        &self.codex
    }

    /// Whether opencode turns may use `opencode serve` (when the installed
    /// opencode has a usable one); `false` always runs `opencode run`.
    pub fn with_opencode_serve(mut self, enabled: bool) -> Self {
        Arc::get_mut(&mut self.opencode)
            .expect("set before any turn")
            .enabled = enabled;
        self
    }

    /// The opencode servers (their count and pids, for tests and benchmarks).
    pub fn opencode_servers(&self) -> &OpencodeServers {
        &self.opencode
    }

    /// Records each running turn's process group in `<runtime_dir>/turns/`
    /// sealed with `key` (see [`reap_orphans`]), and gives the agent
    /// `PEDELEC_RUNTIME_DIR`.
    pub fn with_records(mut self, runtime_dir: &Path, key: RecordKey) -> Self {
        self.records = Some(Records::new(runtime_dir, key));
        self
    }

    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Starts a turn; events arrive on the receiver, `exited` last. Dropping
    /// the receiver stops the process. A turn still running for the same
    /// thread is terminated first (SessionService only starts a new one after
    /// the old operation ended, so the old one is stale).
    pub fn run(
        &self,
        req: pb::RunTurnRequest,
    ) -> Result<mpsc::Receiver<pb::ProviderEvent>, ProviderError> {
        self.run_with_env(req, HashMap::new(), None)
    }

    /// [`Turns::run`] with `agent_env` added to the agent's environment last
    /// (ProviderService's settings for pedelec-agent: endpoint and keys,
    /// which must never travel on argv), and `mcp` (the `pedelec-cli` that
    /// serves the page's tools) registered as the CLI's MCP server.
    pub fn run_with_env(
        &self,
        req: pb::RunTurnRequest,
        agent_env: HashMap<String, String>,
        mcp: Option<PathBuf>,
    ) -> Result<mpsc::Receiver<pb::ProviderEvent>, ProviderError> {
        let mut job = Job::new(req, &self.programs, self.grace)?;
        job.agent_env = agent_env;
        job.turn.mcp = mcp;
        job.records = self.records.clone();
        job.codex = Arc::clone(&self.codex);
        job.opencode = Arc::clone(&self.opencode);
        job.launch = Arc::clone(&self.launch);
        let pgid = Arc::new(AtomicI32::new(0));
        job.pgid = Arc::clone(&pgid);
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let session_id = job.session_id.clone();
        let previous = lock(&self.running).insert(
            session_id.clone(),
            Running {
                id,
                pgid,
                stop: Arc::new(stop),
                done,
            },
        );
        let running = Arc::clone(&self.running);
        tokio::spawn(async move {
            if let Some(previous) = previous {
                previous.stop.send_replace(true);
                wait_done(previous.done).await;
            }
            job.run(Sink::new(tx, stop_rx)).await;
            let mut map = lock(&running);
            if map.get(&session_id).is_some_and(|r| r.id == id) {
                map.remove(&session_id);
            }
            drop(map);
            drop(done_tx);
        });
        Ok(rx)
    }

    /// Terminates the thread's running turn (SIGTERM to its group, SIGKILL
    /// after the grace period; a codex app-server turn is interrupted, an
    /// opencode serve turn aborted) and waits until it has ended, then stops
    /// the thread's codex app-server or opencode server, if any. Returns
    /// whether there was a turn. The server goes in every case: a turn that
    /// has just finished may still be registered when an ended thread's
    /// CancelTurn arrives, and its server must not outlive the thread.
    pub async fn cancel(&self, session_id: &str) -> bool {
        let entry = lock(&self.running)
            .get(session_id)
            .map(|r| (Arc::clone(&r.stop), r.done.clone()));
        let had_turn = match entry {
            Some((stop, done)) => {
                stop.send_replace(true);
                wait_done(done).await;
                true
            }
            None => false,
        };
        self.codex.release(session_id, self.grace).await;
        self.opencode.release(session_id, self.grace).await;
        had_turn
    }

    /// Whether a turn is registered for the thread.
    #[cfg(test)]
    pub(crate) fn is_running(&self, session_id: &str) -> bool {
        lock(&self.running).contains_key(session_id)
    }

    /// Service shutdown: stops every running turn (SIGTERM to its group),
    /// waits up to `within` for them to end, then SIGKILLs the groups left.
    pub async fn stop_all(&self, within: Duration) {
        let turns: Vec<_> = lock(&self.running)
            .values()
            .map(|r| (Arc::clone(&r.stop), r.done.clone(), Arc::clone(&r.pgid)))
            .collect();
        self.codex.stop_all(within).await;
        self.opencode.stop_all(within).await;
        if turns.is_empty() {
            return;
        }
        tracing::info!(turns = turns.len(), "stopping the running turns");
        for (stop, _, _) in &turns {
            stop.send_replace(true);
        }
        let all_done = wait_all(turns.iter().map(|(_, done, _)| wait_done(done.clone())));
        if tokio::time::timeout(within, all_done).await.is_err() {
            for (_, _, pgid) in &turns {
                let pgid = pgid.load(Ordering::Acquire);
                if pgid > 0 {
                    signal_group(pgid, SIGKILL);
                }
            }
        }
    }
}

async fn wait_all<F: std::future::Future<Output = ()>>(futs: impl Iterator<Item = F>) {
    for f in futs {
        f.await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The map stays consistent even if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn wait_done(mut done: watch::Receiver<()>) {
    while done.changed().await.is_ok() {}
}

#[cfg(test)]
mod tests;
