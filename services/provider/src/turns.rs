//! RunTurn and CancelTurn: one provider CLI process per turn, its stdout decoded
//! by the adapters into `ProviderEvent`s, and at most one running turn per thread.
//!
//! Every turn's stream ends with exactly one `exited` event, also when the
//! program is missing or could not start, so SessionService has a single flow.
//! The process runs in its own process group and is always signalled as a
//! group: the npm `codex` wrapper orphans its native child if only the wrapper
//! dies (TESTING.md §2).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pb::provider_event::Event as Out;
use pedelec_common::process::{self, SIGKILL, failed_status, signal_group};
use pedelec_common::{Code, json};
use pedelec_proto::v1 as pb;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::adapters::{Decoder, Event, MAX_LINE, Provider, TurnSpec};
use crate::availability::ProgramEnv;
use crate::catalog;
use crate::error::ProviderError;
use crate::launch::{self, AgentProcs, Hidden, Launch};

mod appserver;
mod serve;
mod servers;
pub use appserver::{AppServers, MAX_RUNNING, MIN_VERSION};
pub use serve::OpencodeServers;

/// How long a process group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// Events buffered toward the gRPC stream; a slow reader holds the provider's
/// stdout back instead of growing memory.
const EVENT_BUFFER: usize = 256;

/// Bytes of stderr kept for a failure's details.
const STDERR_TAIL: usize = 8 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// After the provider exits, how long its stdout may stay open (a leftover
/// background child holding the pipe) before the rest of the group is killed.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// Linux's limit on one argv string (MAX_ARG_STRLEN, 32 pages), NUL included.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// The folder under the runtime dir where each running turn's process group
/// is recorded, so a restarted service can end what a crashed one left.
pub const TURN_RECORDS: &str = "turns";

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

/// Where turn records live: `<runtime dir>/turns/<pgid>`.
#[derive(Clone, Debug)]
struct Records {
    runtime_dir: PathBuf,
    dir: PathBuf,
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
    /// (see [`reap_orphans`]) and gives the agent `PEDELEC_RUNTIME_DIR`.
    pub fn with_records(mut self, runtime_dir: &Path) -> Self {
        self.records = Some(Records {
            runtime_dir: runtime_dir.to_path_buf(),
            dir: runtime_dir.join(TURN_RECORDS),
        });
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
            job.run(Sink { tx, stop: stop_rx }).await;
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

/// At service start: SIGKILLs every process group a previous (crashed)
/// instance recorded in `<runtime_dir>/turns/` that still exists, and removes
/// the records. A group whose leader still lives is only killed when the
/// leader's environment names this runtime dir (a reused pid is left alone).
/// Returns the groups signalled.
pub fn reap_orphans(runtime_dir: &Path) -> Vec<i32> {
    let dir = runtime_dir.join(TURN_RECORDS);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let marker = runtime_marker(runtime_dir);
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let pgid = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|p| *p > 1);
        if let Some(pgid) = pgid {
            let ours = match std::fs::read(format!("/proc/{pgid}/environ")) {
                Ok(env) => env.split(|b| *b == 0).any(|v| v == marker.as_slice()),
                // The leader is gone (its id cannot be reused while the group
                // lives) or unreadable: the group is the recorded one.
                Err(_) => true,
            };
            if ours && signal_group(pgid, SIGKILL) {
                tracing::warn!(pgid, "killed an agent process group left by a previous run");
                killed.push(pgid);
            }
            // The record names the agent's cgroup, if it had one: what left
            // the group is there.
            let cgroup = std::fs::read_to_string(&path).unwrap_or_default();
            let cgroup = Path::new(cgroup.trim());
            if cgroup.is_absolute() && cgroup.starts_with("/sys/fs/cgroup") {
                process::cgroup::kill_and_remove_dir(cgroup);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

fn runtime_marker(runtime_dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut marker = b"PEDELEC_RUNTIME_DIR=".to_vec();
    marker.extend_from_slice(runtime_dir.as_os_str().as_bytes());
    marker
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The map stays consistent even if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn wait_done(mut done: watch::Receiver<()>) {
    while done.changed().await.is_ok() {}
}

/// Why event delivery stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// CancelTurn, or replaced by a newer turn of the same thread.
    Cancelled,
    /// The stream's reader went away.
    Gone,
}

/// The sending half of a turn's stream, aware of cancellation.
struct Sink {
    tx: mpsc::Sender<pb::ProviderEvent>,
    stop: watch::Receiver<bool>,
}

impl Sink {
    async fn send(&mut self, event: Out) -> Result<(), Stop> {
        let event = pb::ProviderEvent { event: Some(event) };
        tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => Err(Stop::Cancelled),
            sent = self.tx.send(event) => sent.map_err(|_| Stop::Gone),
        }
    }

    /// Resolves when the turn must stop; never while it may go on.
    async fn stopped(&mut self) -> Stop {
        tokio::select! {
            _ = self.stop.wait_for(|s| *s) => Stop::Cancelled,
            _ = self.tx.closed() => Stop::Gone,
        }
    }

    /// Last words after a cancel: delivered if anyone still listens.
    async fn send_final(&self, event: Out) {
        let _ = self.tx.send(pb::ProviderEvent { event: Some(event) }).await;
    }
}

/// A validated request.
struct Job {
    session_id: String,
    provider: Provider,
    spec: &'static catalog::ProviderSpec,
    turn: TurnSpec,
    tool_env: HashMap<String, String>,
    /// Set after `tool_env`, so a request cannot override it.
    agent_env: HashMap<String, String>,
    programs: ProgramEnv,
    grace: Duration,
    records: Option<Records>,
    /// Where the turn publishes its process group for `Turns::stop_all`.
    pgid: Arc<AtomicI32>,
    codex: Arc<AppServers>,
    opencode: Arc<OpencodeServers>,
    launch: Arc<Launch>,
}

impl Job {
    fn new(
        req: pb::RunTurnRequest,
        programs: &ProgramEnv,
        grace: Duration,
    ) -> Result<Job, ProviderError> {
        if req.session_id.is_empty() {
            return Err(ProviderError::invalid("session_id: required"));
        }
        let unknown = || ProviderError::ProviderNotFound {
            code: req.provider.clone(),
            expected: catalog::codes_list(),
        };
        let spec = catalog::find(&req.provider).ok_or_else(unknown)?;
        let provider = spec.provider;
        let workspace = PathBuf::from(&req.workspace);
        if !workspace.is_absolute() {
            return Err(ProviderError::invalid(format!(
                "workspace: {:?} is not an absolute path",
                req.workspace
            )));
        }
        if let Some(key) = req
            .tool_env
            .keys()
            .find(|k| k.is_empty() || k.contains(['=', '\0']))
        {
            return Err(ProviderError::invalid(format!(
                "tool_env: {key:?} is not a variable name"
            )));
        }
        if req.tool_env.values().any(|v| v.contains('\0')) {
            return Err(ProviderError::invalid("tool_env: a value contains NUL"));
        }
        let profile = req.profile.unwrap_or_default();
        let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
        Ok(Job {
            session_id: req.session_id,
            provider,
            spec,
            turn: TurnSpec {
                workspace,
                prompt: req.prompt,
                model: non_empty(profile.model),
                effort: non_empty(profile.effort),
                resume_id: req.provider_session_id.and_then(non_empty),
                mcp: None,
            },
            tool_env: req.tool_env,
            agent_env: HashMap::new(),
            programs: programs.clone(),
            grace,
            records: None,
            pgid: Arc::default(),
            codex: Arc::new(appserver::servers()),
            opencode: Arc::new(serve::servers()),
            launch: Arc::new(Launch::from_process()),
        })
    }

    async fn run(self, mut sink: Sink) {
        // Once per service: whether agents are confined (servers' fingerprints
        // depend on it).
        self.launch.verdict(self.programs.path.as_deref()).await;
        if self.spec.needs_model && self.turn.model.is_none() {
            let message = format!(
                "{} needs a model; set one in the provider's effort profile",
                self.spec.code
            );
            return refuse(&mut sink, Code::MODEL_REQUIRED, message).await;
        }
        let program = match self.programs.locate(self.spec) {
            Ok(p) => p,
            Err(message) => return refuse(&mut sink, Code::PROVIDER_NOT_FOUND, message).await,
        };
        if self.turn.prompt.contains('\0') {
            let message = "prompt: contains a NUL byte".to_string();
            return refuse(&mut sink, Code::INVALID_INPUT, message).await;
        }
        if self.provider == Provider::Codex
            && appserver::usable(&self.codex, &program, &self.programs).await
        {
            let servers = Arc::clone(&self.codex);
            match appserver::run_turn(&servers, &self, &program, &mut sink).await {
                Ok(()) => return,
                Err(appserver::Fallback(why)) => {
                    tracing::warn!(session = %self.session_id, "codex app-server unusable, running codex exec: {why}");
                }
            }
        }
        if self.provider == Provider::Codex {
            tracing::info!(session = %self.session_id, path = "exec", "codex turn");
        }
        if self.provider == Provider::Opencode {
            if serve::usable(&self.opencode, &program, &self.programs).await {
                let servers = Arc::clone(&self.opencode);
                match serve::run_turn(&servers, &self, &program, &mut sink).await {
                    Ok(()) => return,
                    Err(serve::Fallback(why)) => {
                        tracing::warn!(session = %self.session_id, "opencode serve unusable, running opencode run: {why}");
                    }
                }
            }
            tracing::info!(session = %self.session_id, path = "run", "opencode turn");
        }
        let line = self.provider.command(&self.turn);
        if let Some(long) = line.args.iter().find(|a| a.len() >= MAX_ARG_BYTES) {
            let message = format!(
                "the prompt is too large for {}: it takes the prompt on its command line, which allows at most {} bytes per argument (this one is {} bytes)",
                self.spec.program,
                MAX_ARG_BYTES - 1,
                long.len()
            );
            return refuse(&mut sink, Code::MESSAGE_TOO_LARGE, message).await;
        }
        let (mut cmd, mut procs) = self.agent_command(&program, &line.cwd).await;
        cmd.args(&line.args)
            .stdin(if line.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The CLI's own variables (e.g. opencode's config); never PATH.
        cmd.envs(line.env.iter().map(|(k, v)| (k, v)));
        let mut child = match process::spawn(&mut cmd).await {
            Ok(c) => c,
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                let message = format!(
                    "could not start {}: its command line and environment are over the system's limit ({e})",
                    self.spec.program
                );
                return refuse(&mut sink, Code::MESSAGE_TOO_LARGE, message).await;
            }
            Err(e) => {
                let message = format!(
                    "could not start {} in {}: {e}",
                    self.spec.program,
                    line.cwd.display()
                );
                return refuse(&mut sink, Code::PROVIDER_FAILED, message).await;
            }
        };
        let pid = child.id().expect("a just-spawned child has a pid");
        procs.started(pid as i32);
        let record = self
            .records
            .as_ref()
            .and_then(|r| record_turn(&r.dir, &procs));
        let mut group = Group {
            procs,
            armed: true,
            record,
        };
        self.pgid.store(pid as i32, Ordering::Release);
        tracing::debug!(session = %self.session_id, provider = self.spec.code, pid, "turn started");

        if let (Some(mut stdin), Some(prompt)) = (child.stdin.take(), line.stdin) {
            tokio::spawn(async move {
                // A CLI may exit without reading its stdin; that is its business.
                let _ = stdin.write_all(prompt.as_bytes()).await;
            });
        }
        let stderr = tokio::spawn(read_tail(child.stderr.take()));
        let stdout = child.stdout.take();

        let mut run = TurnState {
            sink,
            decoder: Decoder::new(self.provider),
            dropped_logged: 0,
            had_chat: false,
            error: None,
        };
        let outcome = run.supervise(&mut child, stdout, &group.procs).await;
        let status = match outcome {
            Ok(status) => status,
            Err(stop) => {
                let status = group.terminate(&mut child, self.grace).await;
                stderr.abort();
                tracing::debug!(session = %self.session_id, pid, ?stop, ?status, "turn stopped");
                if stop == Stop::Cancelled {
                    run.sink.send_final(exited(status)).await;
                }
                return;
            }
        };
        // The leader is gone; members it left behind (no longer needed, they
        // would outlive the turn) go too.
        group.reap_leftovers(self.grace).await;
        let stderr_tail = tokio::time::timeout(DRAIN_AFTER_EXIT, stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let error = run.final_error(self.spec.program, status, &stderr_tail);
        if let Some(error) = error
            && run.sink.send(error).await.is_err()
        {
            return;
        }
        let _ = run.sink.send(exited(status)).await;
    }

    /// A command that starts `program` as this turn's agent in `cwd` (see
    /// [`Launch::command`]) with the deliberate environment: the service's
    /// variables the allow-list passes, then the runtime dir, the thread's
    /// tool variables, the provider's settings and PATH.
    async fn agent_command(&self, program: &Path, cwd: &Path) -> (Command, AgentProcs) {
        let env = launch::turn_env(
            self.records.as_ref().map(|r| r.runtime_dir.as_path()),
            &self.tool_env,
            &self.agent_env,
            self.agent_path(),
            self.provider == Provider::Claude && process::is_root(),
        );
        self.launch
            .command(program, cwd, self.programs.path.as_deref(), &env)
            .await
    }

    /// What a long-lived agent process was started with: a turn with other
    /// values needs a new one.
    fn fingerprint(&self, program: &Path) -> String {
        let sorted = |m: &HashMap<String, String>| {
            let mut v: Vec<_> = m.iter().collect();
            v.sort();
            format!("{v:?}")
        };
        format!(
            "{}\0{:?}\0{}\0{}\0{}\0{}",
            program.display(),
            self.turn.mcp,
            self.turn.workspace.display(),
            sorted(&self.tool_env),
            sorted(&self.agent_env),
            self.launch.fingerprint()
        )
    }

    /// The service's PATH with the executable's folder (where `pedelec-cli`
    /// is built and installed) first, so the agent can call tools.
    fn agent_path(&self) -> OsString {
        let rest = self
            .programs
            .path
            .as_deref()
            .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
            .unwrap_or_default();
        let dirs = self.programs.exe_dir.iter().cloned().chain(rest);
        std::env::join_paths(dirs).unwrap_or_else(|_| {
            // An entry with ':' cannot be joined; keep the service's PATH as it was.
            self.programs.path.clone().unwrap_or_default()
        })
    }
}

/// The state of a turn while its process runs.
struct TurnState {
    sink: Sink,
    decoder: Decoder,
    dropped_logged: u64,
    had_chat: bool,
    /// The adapter's error, held until exit so the exit code and stderr can
    /// join its details (SessionService acts on it only at the end anyway).
    error: Option<(String, Option<Json>, Option<Code>)>,
}

impl TurnState {
    /// Forwards stdout until the process has exited and its stdout is drained.
    async fn supervise(
        &mut self,
        child: &mut Child,
        stdout: Option<tokio::process::ChildStdout>,
        procs: &AgentProcs,
    ) -> Result<ExitStatus, Stop> {
        let pid = procs.pgid() as u32;
        self.sink
            .send(Out::Started(pb::TurnStarted { pid }))
            .await?;
        let mut stdout = stdout;
        let mut buf = vec![0u8; READ_CHUNK];
        let mut status: Option<ExitStatus> = None;
        // Armed once the process has exited.
        let drain_deadline = tokio::time::sleep(Duration::from_secs(365 * 86400));
        tokio::pin!(drain_deadline);
        loop {
            if stdout.is_none()
                && let Some(status) = status
            {
                return Ok(status);
            }
            tokio::select! {
                read = read_some(&mut stdout, &mut buf), if stdout.is_some() => {
                    let events = match read {
                        Ok(n) if n > 0 => self.decoder.push(&buf[..n]),
                        _ => {
                            stdout = None;
                            self.decoder.finish()
                        }
                    };
                    self.forward(events).await?;
                }
                exit = child.wait(), if status.is_none() => {
                    status = Some(exit.unwrap_or_else(|e| {
                        tracing::warn!(pid, "waiting for the provider failed: {e}");
                        failed_status()
                    }));
                    drain_deadline.as_mut().reset(Instant::now() + DRAIN_AFTER_EXIT);
                }
                () = &mut drain_deadline, if status.is_some() => {
                    // Something it started still holds stdout; end it.
                    procs.kill();
                    stdout = None;
                    let events = self.decoder.finish();
                    self.forward(events).await?;
                }
                stop = self.sink.stopped() => return Err(stop),
            }
        }
    }

    async fn forward(&mut self, events: Vec<Event>) -> Result<(), Stop> {
        let dropped = self.decoder.dropped_lines();
        if dropped > self.dropped_logged {
            tracing::warn!(
                dropped,
                "provider printed a line over {MAX_LINE} bytes; it was discarded"
            );
            self.dropped_logged = dropped;
            // The client hears of it at once; the turn goes on, since such a
            // line is usually an echo of a large tool output, not the answer.
            let warning = pb::PedelecError {
                code: Code::MESSAGE_TOO_LARGE.to_string(),
                message: format!("the agent printed a line over {MAX_LINE} bytes; it was dropped"),
                details: Some(json::to_value(&json!({ "droppedLines": dropped }))),
                source: pb::ErrorSource::Provider as i32,
                ..Default::default()
            };
            self.sink.send(Out::Warning(warning)).await?;
        }
        for event in events {
            let out = match event {
                Event::SessionId(id) => Out::ProviderSessionId(pb::ProviderSessionId { id }),
                Event::ChatDelta(text) => {
                    self.had_chat = true;
                    Out::ChatDelta(text)
                }
                Event::Chat(text) => {
                    self.had_chat = true;
                    Out::Chat(text)
                }
                Event::Usage {
                    input,
                    output,
                    total,
                    cumulative,
                } => Out::Usage(pb::Usage {
                    total_tokens: total,
                    input_tokens: input,
                    output_tokens: output,
                    cumulative,
                }),
                Event::Error {
                    message,
                    details,
                    code,
                } => {
                    // Adapters report at most one; keep the first regardless.
                    self.error.get_or_insert((message, details, code));
                    continue;
                }
            };
            self.sink.send(out).await?;
        }
        Ok(())
    }

    /// The turn's error event, if it failed: the provider's own error, else a
    /// PROVIDER_FAILED naming the exit and the end of stderr.
    fn final_error(&mut self, program: &str, status: ExitStatus, stderr: &str) -> Option<Out> {
        let dropped = self.decoder.dropped_lines();
        let mut facts = serde_json::Map::new();
        if !status.success() {
            match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => facts.insert("exitCode".into(), json!(code)),
                (None, Some(sig)) => facts.insert("signal".into(), json!(sig)),
                _ => None,
            };
            if !stderr.trim().is_empty() {
                facts.insert("stderrTail".into(), json!(stderr));
            }
        }
        if dropped > 0 {
            facts.insert("droppedLines".into(), json!(dropped));
        }
        if let Some((message, details, code)) = self.error.take() {
            let details = match details {
                None if facts.is_empty() => None,
                None => Some(Json::Object(facts)),
                Some(Json::Object(mut map)) => {
                    for (k, v) in facts {
                        map.entry(k).or_insert(v);
                    }
                    Some(Json::Object(map))
                }
                Some(other) => Some(other),
            };
            let code = code.unwrap_or(Code::PROVIDER_FAILED);
            return Some(error_event(code, message, details));
        }
        if !status.success() {
            let how = format!("{program} {}", process::ended(status));
            let message = match stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
                Some(last) => format!("{how}: {last}"),
                None => how,
            };
            return Some(error_event(
                Code::PROVIDER_FAILED,
                message,
                Some(Json::Object(facts)),
            ));
        }
        if dropped > 0 && !self.had_chat {
            // The answer itself may have been the discarded line: a turn that
            // "completed" with nothing to show would hide that.
            let message = format!(
                "{program} printed a line over {MAX_LINE} bytes, which was discarded, and no other answer"
            );
            return Some(error_event(
                Code::PROVIDER_FAILED,
                message,
                Some(Json::Object(facts)),
            ));
        }
        None
    }
}

/// A turn that never started still ends in `exited`, so the consumer's flow
/// is the same for every turn.
async fn refuse(sink: &mut Sink, code: Code, message: String) {
    if sink.send(error_event(code, message, None)).await.is_ok() {
        let _ = sink.send(Out::Exited(pb::TurnExited::default())).await;
    }
}

async fn read_some(
    stdout: &mut Option<tokio::process::ChildStdout>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match stdout {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

fn error_event(code: Code, message: String, details: Option<Json>) -> Out {
    Out::Error(pb::PedelecError {
        code: code.as_str().to_string(),
        message,
        details: details.as_ref().map(json::to_value),
        source: pb::ErrorSource::Provider as i32,
        ..Default::default()
    })
}

/// `exited` for a turn a long-lived server ran: its process lives on, so
/// there is no exit status; `code` is Some(0) for a finished turn, None for a
/// stopped one.
fn turn_ended(code: Option<i32>) -> Out {
    Out::Exited(pb::TurnExited { code, signal: None })
}

fn exited(status: ExitStatus) -> Out {
    Out::Exited(pb::TurnExited {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
    })
}

/// A turn's processes; SIGKILLed on drop unless they were seen gone, so a
/// dropped task (service shutdown, panic) leaves nothing running.
struct Group {
    procs: AgentProcs,
    armed: bool,
    /// The turn's record under `<runtime dir>/turns/`, removed on drop.
    record: Option<PathBuf>,
}

impl Group {
    /// SIGTERM to the group; SIGKILL to what is left after the grace period.
    async fn terminate(&mut self, child: &mut Child, grace: Duration) -> ExitStatus {
        let deadline = Instant::now() + grace;
        self.procs.terminate();
        let status = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) => status,
            _ => {
                self.procs.kill();
                child.wait().await.unwrap_or_else(|_| failed_status())
            }
        };
        self.wait_empty(deadline, grace).await;
        status
    }

    /// After the leader exited: ends members still in the group (SIGTERM,
    /// then SIGKILL after the grace period) and whatever left it.
    async fn reap_leftovers(&mut self, grace: Duration) {
        if self.procs.group_alive() {
            tracing::debug!(
                pgid = self.procs.pgid(),
                "provider left processes behind; terminating them"
            );
            self.procs.terminate();
        }
        self.wait_empty(Instant::now() + grace, grace).await;
    }

    /// Polls until the group is empty or the deadline passes, then SIGKILLs
    /// what is left of it and of the cgroup, and waits for that.
    async fn wait_empty(&mut self, deadline: Instant, grace: Duration) {
        while self.procs.group_alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !self.procs.end(grace).await {
            tracing::warn!(
                pgid = self.procs.pgid(),
                "an agent's processes outlived SIGKILL"
            );
        }
        self.armed = false;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed {
            self.procs.kill();
        }
        if let Some(record) = self.record.take() {
            let _ = std::fs::remove_file(record);
        }
    }
}

/// Writes `<dir>/<pgid>` holding the agent's cgroup folder, if it has one; a
/// failure only costs the crash clean-up, so it is logged.
fn record_turn(dir: &Path, procs: &AgentProcs) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let path = dir.join(procs.pgid().to_string());
    let cgroup = procs.cgroup_dir().unwrap_or_default();
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, cgroup.as_os_str().as_bytes()));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(path = %path.display(), "could not record the turn's process group: {e}");
            None
        }
    }
}

/// Reads a pipe to its end, keeping its last STDERR_TAIL bytes.
async fn read_tail<R: AsyncRead + Unpin>(reader: Option<R>) -> String {
    let Some(mut reader) = reader else {
        return String::new();
    };
    let mut tail = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 2 * STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
    String::from_utf8_lossy(&tail).into_owned()
}

#[cfg(test)]
mod tests;
