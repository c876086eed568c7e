//! The one home of a per-thread agent server's plumbing, shared by codex's
//! app-server ([`super::appserver`]) and `opencode serve`
//! ([`super::serve`]): one long-lived process per active Pedelec thread,
//! started by the thread's first turn, reused by its next turns, stopped
//! when the thread idles, ends or is cancelled, with a bound on how many run
//! at once ([`Servers`]); a verdict per program file on whether its server
//! is used at all; the process itself, spawned and stopped like an agent
//! turn ([`ServerChild`]); and the hand-over of a server's messages to the
//! running turn ([`Listener`]). The two modules keep only their protocol.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::process;
use serde_json::Value as Json;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdout;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::cli::STDERR_TAIL;
use super::events::{Sink, Stop, turn_ended};
use super::job::Job;
use super::lock;
use crate::availability::{FileStamp, ProgramEnv, run_version};
use crate::launch::{AgentProcs, read_tail};

/// At most this many servers of a kind run at once; an idle one is stopped
/// to make room, and a turn beyond the bound with none idle runs anyway (a
/// thread is never refused), so the bound is a target, not a hard cap.
pub const MAX_RUNNING: usize = 8;

/// How long an idle thread's server lives by default.
pub const IDLE: Duration = Duration::from_secs(10 * 60);

/// Messages waiting for the running turn; the server's reader then waits,
/// which holds the server back instead of growing memory.
const NOTE_BUFFER: usize = 256;

/// What tells one kind of server from another.
pub struct Kind {
    /// For the logs and messages: "opencode serve".
    pub what: &'static str,
    /// The program's name, for its `--version`'s messages.
    pub program: &'static str,
    /// The oldest version whose server this crate speaks to; older ones run
    /// the one-shot command.
    pub min_version: [u64; 3],
    /// `<switch>=0` in the service's environment: never use the server.
    pub switch: &'static str,
    /// The idle lifetime in milliseconds, else [`IDLE`].
    pub idle_ms: &'static str,
}

/// One long-lived agent process serving one thread: its process and
/// whatever the protocol on top keeps.
pub trait Server: Send + Sync + 'static {
    fn child(&self) -> &ServerChild;
    /// Whether it can take a turn; by default, whether its process lives.
    fn is_alive(&self) -> bool {
        self.child().is_alive()
    }
    /// Stops the process and whatever it started; idempotent.
    fn stop(&self, grace: Duration) -> impl Future<Output = ()> + Send {
        self.child().stop(grace)
    }
}

/// Why a server could not be had; the caller runs the one-shot command.
pub enum SpawnError {
    /// The program has no server we can speak to: its turns fall back for good.
    Unsupported(String),
    /// It could not start this time (timeout, spawn error).
    Other(String),
}

/// Why a turn could not use its thread's server (none could be started and
/// nothing was sent yet); the caller runs the one-shot command.
#[derive(Debug)]
pub struct Fallback(pub String);

/// The running servers of one kind, by Pedelec thread.
pub struct Servers<S> {
    kind: Kind,
    procs: Mutex<HashMap<String, Arc<S>>>,
    /// Per program file: whether its server is used.
    support: Mutex<HashMap<PathBuf, (Option<FileStamp>, bool)>>,
    pub idle: Duration,
    pub max_running: usize,
    /// `false`: turns always run the one-shot command.
    pub enabled: bool,
}

impl<S: Server> Servers<S> {
    /// The registry, its idle lifetime from the environment.
    pub fn new(kind: Kind) -> Self {
        let idle = std::env::var(kind.idle_ms)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(IDLE);
        Servers {
            kind,
            procs: Mutex::default(),
            support: Mutex::default(),
            idle,
            max_running: MAX_RUNNING,
            enabled: true,
        }
    }

    /// Whether turns of `program` go through its server: not when the kind's
    /// switch is `0` or the server is turned off, nor when `--version` names
    /// a version older than the kind's oldest or none, nor after its server
    /// failed to start. Decided once per program file (path, inode, size,
    /// mtime).
    pub(super) async fn usable(&self, program: &Path, programs: &ProgramEnv) -> bool {
        if std::env::var(self.kind.switch).is_ok_and(|v| v == "0") || !self.enabled {
            return false;
        }
        let stamp = FileStamp::of(program);
        if let Some((seen, ok)) = lock(&self.support).get(program)
            && *seen == stamp
        {
            return *ok;
        }
        let ok = match run_version(program, self.kind.program, programs).await {
            Ok(out) => parse_version(&out).is_some_and(|v| v >= self.kind.min_version),
            Err(_) => false,
        };
        tracing::info!(program = %program.display(), server = ok, "{} transport chosen", self.kind.what);
        lock(&self.support).insert(program.to_path_buf(), (stamp, ok));
        ok
    }

    fn mark_unusable(&self, program: &Path) {
        lock(&self.support).insert(program.to_path_buf(), (FileStamp::of(program), false));
    }

    /// Number of servers running now.
    pub fn running(&self) -> usize {
        lock(&self.procs).len()
    }

    /// The pid (= process group) of the thread's server, if one runs.
    pub fn pid_of(&self, session_id: &str) -> Option<i32> {
        lock(&self.procs).get(session_id).map(|p| p.child().pid)
    }

    /// Stops the thread's server, if any. Returns whether one ran.
    pub async fn release(&self, session_id: &str, grace: Duration) -> bool {
        let proc = self.forget(session_id);
        match proc {
            Some(p) => {
                p.stop(grace).await;
                true
            }
            None => false,
        }
    }

    /// Takes the thread's server out of the registry (it died or is being stopped).
    pub(super) fn forget(&self, session_id: &str) -> Option<Arc<S>> {
        lock(&self.procs).remove(session_id)
    }

    /// Service shutdown: every server goes.
    pub async fn stop_all(&self, grace: Duration) {
        let all: Vec<_> = lock(&self.procs).drain().map(|(_, p)| p).collect();
        for p in all {
            p.stop(grace).await;
        }
    }

    /// The start of a turn on the thread's server: the server started with
    /// the job's values ([`Job::fingerprint`]), started by `spawn` if needed,
    /// marked busy and published as the turn's process group.
    pub(super) async fn begin<F>(
        &self,
        job: &Job,
        program: &Path,
        spawn: F,
    ) -> Result<Arc<S>, Fallback>
    where
        F: Future<Output = Result<S, SpawnError>>,
    {
        let proc = self.acquire(job, program, spawn).await.map_err(Fallback)?;
        job.pgid.store(proc.child().pid, Ordering::Release);
        Ok(proc)
    }

    async fn acquire<F>(&self, job: &Job, program: &Path, spawn: F) -> Result<Arc<S>, String>
    where
        F: Future<Output = Result<S, SpawnError>>,
    {
        let fingerprint = job.fingerprint(program);
        let existing = self.forget(&job.session_id);
        if let Some(p) = existing {
            if p.child().fingerprint == fingerprint && p.is_alive() {
                p.child().set_idle(false);
                lock(&self.procs).insert(job.session_id.clone(), Arc::clone(&p));
                return Ok(p);
            }
            // The workspace, tool environment or program changed (or it died).
            p.stop(job.grace).await;
        }
        self.make_room(job.grace).await;
        let proc = match spawn.await {
            Ok(p) => Arc::new(p),
            Err(SpawnError::Unsupported(why)) => {
                self.mark_unusable(program);
                return Err(why);
            }
            Err(SpawnError::Other(why)) => return Err(why),
        };
        proc.child().set_idle(false);
        lock(&self.procs).insert(job.session_id.clone(), Arc::clone(&proc));
        Ok(proc)
    }

    /// Stops the least recently used idle servers beyond the bound.
    async fn make_room(&self, grace: Duration) {
        loop {
            let victim = {
                let mut procs = lock(&self.procs);
                if procs.len() < self.max_running {
                    return;
                }
                let oldest = procs
                    .iter()
                    .filter(|(_, p)| p.child().idle_since().is_some())
                    .min_by_key(|(_, p)| p.child().idle_since())
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => procs.remove(&k),
                    None => return,
                }
            };
            if let Some(p) = victim {
                tracing::info!(
                    pid = p.child().pid,
                    "stopping an idle {} to stay within the bound",
                    self.kind.what
                );
                p.stop(grace).await;
            }
        }
    }

    /// A turn that completed: `exited` with code 0, and the server is
    /// stopped if it stays idle.
    pub(super) async fn completed(self: &Arc<Self>, job: &Job, proc: &Arc<S>, sink: &mut Sink) {
        let _ = sink.send(turn_ended(Some(0))).await;
        self.arm_idle_stop(job.session_id.clone(), proc, job.grace);
    }

    /// A turn cancelled, or whose reader went away: `polite` asks the server
    /// to end the turn (so the agent records it as aborted), then the server
    /// is stopped, since what the turn started may still run; a cancelled
    /// turn still hears its `exited`.
    pub(super) async fn stopped(
        &self,
        job: &Job,
        proc: &S,
        stop: Stop,
        sink: &mut Sink,
        polite: impl Future<Output = ()>,
    ) {
        self.forget(&job.session_id);
        polite.await;
        proc.stop(job.grace).await;
        tracing::debug!(session = %job.session_id, ?stop, "{} turn stopped", self.kind.what);
        if stop == Stop::Cancelled {
            sink.send_final(turn_ended(None)).await;
        }
    }

    /// After a turn: marks the server idle and stops it if it stays so.
    fn arm_idle_stop(self: &Arc<Self>, session_id: String, proc: &Arc<S>, grace: Duration) {
        let servers = Arc::clone(self);
        let mine = Arc::downgrade(proc);
        let idle = self.idle;
        let stamp = proc.child().set_idle(true);
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let Some(p) = mine.upgrade() else { return };
            let still_idle = p.child().idle_since() == stamp;
            drop(p);
            if !still_idle {
                return;
            }
            let stale = {
                let mut procs = lock(&servers.procs);
                match procs.get(&session_id) {
                    Some(p) if p.child().idle_since() == stamp => procs.remove(&session_id),
                    _ => None,
                }
            };
            if let Some(p) = stale {
                tracing::info!(session = %session_id, pid = p.child().pid, "stopping an idle {}", servers.kind.what);
                p.stop(grace).await;
            }
        });
    }
}

/// How a server reads its requests.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Nothing on stdin (/dev/null); it is spoken to some other way.
    None,
    /// Lines on stdin ([`ServerChild::send_line`]); closing stdin asks it to
    /// exit, which a stop tries first.
    Lines,
}

/// The process side of a server: spawned like an agent turn (the turn's
/// environment, its own process group, PDEATHSIG, a record under
/// `<runtime dir>/turns/`), its stderr tail kept, its exit watched.
pub struct ServerChild {
    pub pid: i32,
    /// For the logs: "opencode serve".
    what: &'static str,
    /// What it was started with ([`Job::fingerprint`]): a turn with other
    /// values needs a new one.
    fingerprint: String,
    exit: watch::Receiver<Option<ExitStatus>>,
    stderr: Arc<Mutex<String>>,
    record: Option<PathBuf>,
    /// Its process group and cgroup.
    procs: AgentProcs,
    /// [`Input::Lines`]: the one strong sender to its stdin; dropping it
    /// closes stdin.
    stdin: Mutex<Option<mpsc::UnboundedSender<String>>>,
    stopped: AtomicBool,
    /// `None` while a turn runs; else since when it is idle.
    idle: Mutex<Option<Instant>>,
}

impl ServerChild {
    /// Spawns `program` as the job's agent in its workspace, with `args` and
    /// `env` on top of the agent's environment; stdout is piped and handed back.
    pub(super) async fn spawn(
        job: &Job,
        program: &Path,
        args: &[impl AsRef<OsStr>],
        env: &[(&str, String)],
        input: Input,
        what: &'static str,
    ) -> Result<(ServerChild, ChildStdout), SpawnError> {
        let (mut cmd, mut procs) = job.agent_command(program, &job.turn.workspace).await;
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(match input {
                Input::None => Stdio::null(),
                Input::Lines => Stdio::piped(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = process::spawn(&mut cmd).await.map_err(|e| {
            SpawnError::Other(format!(
                "could not start {what} in {}: {e}",
                job.turn.workspace.display()
            ))
        })?;
        let pid = child.id().expect("a just-spawned child has a pid") as i32;
        procs.started(pid);
        tracing::debug!(pid, "{what} started");
        let record = job.records.as_ref().and_then(|r| r.write(&procs));
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().map(|mut pipe| {
            let (writer, mut lines) = mpsc::unbounded_channel::<String>();
            tokio::spawn(async move {
                while let Some(line) = lines.recv().await {
                    if pipe.write_all(line.as_bytes()).await.is_err() {
                        break;
                    }
                }
                // Dropping the pipe closes stdin: the server exits.
            });
            writer
        });
        let stderr_pipe = child.stderr.take();
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = Arc::clone(&stderr);
            tokio::spawn(async move {
                let tail = read_tail(stderr_pipe, STDERR_TAIL).await;
                *lock(&stderr) = tail;
            });
        }
        let (exit_tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let status = child
                .wait()
                .await
                .unwrap_or_else(|_| process::failed_status());
            exit_tx.send_replace(Some(status));
        });
        let server = ServerChild {
            pid,
            what,
            fingerprint: job.fingerprint(program),
            exit,
            stderr,
            record,
            procs,
            stdin: Mutex::new(stdin),
            stopped: AtomicBool::new(false),
            idle: Mutex::new(None),
        };
        Ok((server, stdout))
    }

    /// Writes `line` (newline included) to its stdin; `false` once stdin is
    /// closed or was never open.
    pub fn send_line(&self, line: String) -> bool {
        lock(&self.stdin)
            .as_ref()
            .is_some_and(|w| w.send(line).is_ok())
    }

    /// A handle to its stdin that does not keep it open (for its reader,
    /// which answers the server's own requests).
    pub fn stdin_handle(&self) -> Option<mpsc::WeakUnboundedSender<String>> {
        lock(&self.stdin)
            .as_ref()
            .map(mpsc::UnboundedSender::downgrade)
    }

    pub fn is_alive(&self) -> bool {
        self.exit.borrow().is_none() && !self.stopped.load(Ordering::Acquire)
    }

    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    pub fn idle_since(&self) -> Option<Instant> {
        *lock(&self.idle)
    }

    /// Marks it busy (a turn starts) or idle from now; returns the stamp.
    pub fn set_idle(&self, idle: bool) -> Option<Instant> {
        let stamp = idle.then(Instant::now);
        *lock(&self.idle) = stamp;
        stamp
    }

    /// " (stderr: <its last non-empty line>)", or nothing.
    pub fn stderr_line(&self) -> String {
        let tail = lock(&self.stderr).clone();
        match tail.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
            Some(l) => format!(" (stderr: {l})"),
            None => String::new(),
        }
    }

    pub async fn wait_exit(&self) -> ExitStatus {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(s) => s.expect("waited for Some"),
            Err(_) => process::failed_status(),
        }
    }

    /// Closes stdin, if open, and gives it the grace period to exit (codex's
    /// app-server then ends its commands); then SIGTERM to the group, SIGKILL
    /// after the grace period, and finally SIGKILL to whatever of its group
    /// and cgroup is left (commands it started). Returns once all of it is
    /// gone, so the thread's next server (a page may resume at once after
    /// End) never meets its predecessor: codex holds a thread's writer lock
    /// until its process is gone.
    pub async fn stop(&self, grace: Duration) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        if lock(&self.stdin).take().is_some() {
            let _ = tokio::time::timeout(grace, self.wait_exit()).await;
        }
        if !self.has_exited() {
            self.procs.terminate();
            if tokio::time::timeout(grace, self.wait_exit()).await.is_err() {
                self.procs.kill();
                self.wait_exit().await;
            }
        }
        if !self.procs.end(grace).await {
            tracing::warn!(pid = self.pid, "{}'s processes outlived SIGKILL", self.what);
        }
        tracing::info!(pid = self.pid, "{} stopped", self.what);
        if let Some(r) = &self.record {
            let _ = std::fs::remove_file(r);
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if !self.stopped.load(Ordering::Acquire) {
            self.procs.kill();
            if let Some(r) = &self.record {
                let _ = std::fs::remove_file(r);
            }
        }
    }
}

/// Where a server's reader hands the running turn its messages; nobody
/// listens between turns.
#[derive(Default)]
pub struct Listener(Mutex<Option<mpsc::Sender<Json>>>);

impl Listener {
    /// A turn starts: the messages from now until [`Listener::close`] or the
    /// end of the server's output (then the receiver ends).
    pub fn listen(&self) -> mpsc::Receiver<Json> {
        let (tx, rx) = mpsc::channel(NOTE_BUFFER);
        *lock(&self.0) = Some(tx);
        rx
    }

    /// The turn is over, or the server's output ended.
    pub fn close(&self) {
        lock(&self.0).take();
    }

    /// Hands `message` to the running turn, if any, waiting while its buffer
    /// is full.
    pub async fn deliver(&self, message: Json) {
        let to = lock(&self.0).clone();
        if let Some(to) = to {
            let _ = to.send(message).await;
        }
    }
}

/// "opencode 1.18.33" or "1.18.33" → [1, 18, 33]: the first word with a dot.
pub fn parse_version(out: &str) -> Option<[u64; 3]> {
    let word = out.split_whitespace().find(|w| w.contains('.'))?;
    let word = word.trim_start_matches('v');
    let mut parts = word.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    Some([parts.next()??, parts.next()??, parts.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("1.18.33\n"), Some([1, 18, 33]));
        assert_eq!(parse_version("opencode v1.2.3-beta.1"), Some([1, 2, 3]));
        assert_eq!(parse_version("codex-cli 0.171.0"), Some([0, 171, 0]));
        assert_eq!(parse_version("no version here"), None);
    }
}
