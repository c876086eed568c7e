//! The machinery of a per-thread agent server (codex's app-server, opencode's
//! `opencode serve`): one long-lived process per active Pedelec thread,
//! started by the thread's first turn, reused by its next turns, stopped
//! when the thread idles, ends or is cancelled, with a bound on how many run
//! at once, and a verdict per program file on whether its server is used
//! ([`Servers`]). [`ServerChild`] is the process side for a server that is
//! stopped by signals (opencode); codex's app-server is stopped by closing
//! its stdin first and keeps that in its own `Proc`.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::process;
use tokio::sync::watch;
use tokio::time::Instant;

use super::cli::read_tail;
use super::job::Job;
use super::lock;
use crate::availability::FileStamp;
use crate::launch::AgentProcs;

/// One long-lived agent process serving one thread.
pub trait Server: Send + Sync + 'static {
    fn pid(&self) -> i32;
    /// What it was started with ([`Job::fingerprint`]).
    fn fingerprint(&self) -> &str;
    fn is_alive(&self) -> bool;
    /// `None` while a turn runs; else since when it is idle.
    fn idle_since(&self) -> Option<Instant>;
    /// Marks it busy (a turn starts) or idle from now; returns the stamp.
    fn set_idle(&self, idle: bool) -> Option<Instant>;
    /// Stops the process and whatever it started; idempotent.
    fn stop(&self, grace: Duration) -> impl Future<Output = ()> + Send;
}

/// Why a server could not be had; the caller runs the one-shot command.
pub enum SpawnError {
    /// The program has no server we can speak to: its turns fall back for good.
    Unsupported(String),
    /// It could not start this time (timeout, spawn error).
    Other(String),
}

/// The running servers of one kind, by Pedelec thread.
pub struct Servers<S> {
    /// For the logs: "opencode serve".
    what: &'static str,
    procs: Mutex<HashMap<String, Arc<S>>>,
    /// Per program file: whether its server is used.
    support: Mutex<HashMap<PathBuf, (Option<FileStamp>, bool)>>,
    pub idle: Duration,
    pub max_running: usize,
    /// `false`: turns always run the one-shot command.
    pub enabled: bool,
}

impl<S: Server> Servers<S> {
    pub fn new(what: &'static str, idle: Duration, max_running: usize) -> Self {
        Servers {
            what,
            procs: Mutex::default(),
            support: Mutex::default(),
            idle,
            max_running,
            enabled: true,
        }
    }

    /// The idle lifetime from the environment variable `name` (ms), else `default`.
    pub fn idle_from_env(name: &str, default: Duration) -> Duration {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(default)
    }

    /// Whether turns of `program` use its server: `check` decides once per
    /// program file (path, inode, size, mtime), unless the server is turned
    /// off or failed before.
    pub async fn usable(&self, program: &Path, check: impl Future<Output = bool>) -> bool {
        if !self.enabled {
            return false;
        }
        let stamp = FileStamp::of(program);
        if let Some((seen, ok)) = lock(&self.support).get(program)
            && *seen == stamp
        {
            return *ok;
        }
        let ok = check.await;
        tracing::info!(program = %program.display(), server = ok, "{} transport chosen", self.what);
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
        lock(&self.procs).get(session_id).map(|p| p.pid())
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

    /// The thread's server started with `fingerprint`, started by `spawn` if
    /// needed, and marked busy.
    pub(super) async fn acquire<F>(
        &self,
        job: &Job,
        program: &Path,
        fingerprint: &str,
        spawn: F,
    ) -> Result<Arc<S>, String>
    where
        F: Future<Output = Result<S, SpawnError>>,
    {
        let existing = self.forget(&job.session_id);
        if let Some(p) = existing {
            if p.fingerprint() == fingerprint && p.is_alive() {
                p.set_idle(false);
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
        proc.set_idle(false);
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
                    .filter(|(_, p)| p.idle_since().is_some())
                    .min_by_key(|(_, p)| p.idle_since())
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => procs.remove(&k),
                    None => return,
                }
            };
            if let Some(p) = victim {
                tracing::info!(
                    pid = p.pid(),
                    "stopping an idle {} to stay within the bound",
                    self.what
                );
                p.stop(grace).await;
            }
        }
    }

    /// After a turn: marks the server idle and stops it if it stays so.
    pub(super) fn arm_idle_stop(
        self: &Arc<Self>,
        session_id: String,
        proc: &Arc<S>,
        grace: Duration,
    ) {
        let servers = Arc::clone(self);
        let mine = Arc::downgrade(proc);
        let idle = self.idle;
        let stamp = proc.set_idle(true);
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let Some(p) = mine.upgrade() else { return };
            let still_idle = p.idle_since() == stamp;
            drop(p);
            if !still_idle {
                return;
            }
            let stale = {
                let mut procs = lock(&servers.procs);
                match procs.get(&session_id) {
                    Some(p) if p.idle_since() == stamp => procs.remove(&session_id),
                    _ => None,
                }
            };
            if let Some(p) = stale {
                tracing::info!(session = %session_id, pid = p.pid(), "stopping an idle {}", servers.what);
                p.stop(grace).await;
            }
        });
    }
}

/// The process side of a server: spawned like an agent turn (the turn's
/// environment, its own process group, PDEATHSIG, a record under
/// `<runtime dir>/turns/`), its stderr tail kept, its exit watched.
pub struct ServerChild {
    pub pid: i32,
    exit: watch::Receiver<Option<ExitStatus>>,
    stderr: Arc<Mutex<String>>,
    record: Option<PathBuf>,
    /// Its process group and cgroup.
    procs: AgentProcs,
    stopped: AtomicBool,
    idle: Mutex<Option<Instant>>,
}

impl ServerChild {
    /// Spawns `program` as the job's agent in its workspace, with `args` and
    /// `env` on top of the agent's environment; stdout is piped and handed back.
    pub async fn spawn(
        job: &Job,
        program: &Path,
        args: &[&str],
        env: &[(&str, String)],
        what: &str,
    ) -> std::io::Result<(ServerChild, tokio::process::ChildStdout)> {
        let (mut cmd, mut procs) = job.agent_command(program, &job.turn.workspace).await;
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = process::spawn(&mut cmd).await?;
        let pid = child.id().expect("a just-spawned child has a pid") as i32;
        procs.started(pid);
        tracing::debug!(pid, "{what} started");
        let record = job.records.as_ref().and_then(|r| r.write(&procs));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take();
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = Arc::clone(&stderr);
            tokio::spawn(async move {
                let tail = read_tail(stderr_pipe).await;
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
            exit,
            stderr,
            record,
            procs,
            stopped: AtomicBool::new(false),
            idle: Mutex::new(None),
        };
        Ok((server, stdout))
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

    /// SIGTERM to the group, SIGKILL after the grace period, and finally
    /// SIGKILL to whatever of its group is left (commands it started); returns
    /// once the whole group is gone, so the thread's next server (a page may
    /// resume at once after End) never meets its predecessor.
    pub async fn stop(&self, grace: Duration) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        if !self.has_exited() {
            self.procs.terminate();
            if tokio::time::timeout(grace, self.wait_exit()).await.is_err() {
                self.procs.kill();
                self.wait_exit().await;
            }
        }
        if !self.procs.end(grace).await {
            tracing::warn!(pid = self.pid, "a server's processes outlived SIGKILL");
        }
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
