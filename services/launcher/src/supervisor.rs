//! The supervisor: owns the four service processes, one tokio task each, and
//! restarts them when they crash. Plain Rust; the gRPC adapter sits on top.

use std::ffi::OsStr;
use std::future::Future;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use pedelec_common::args::SERVICE_SECRET_STDIN;
use pedelec_common::process::fork_server::{ForkServer, ForkedChild};
use pedelec_common::process::{self, SIGKILL, SIGTERM, describe_exit, signal_group};
use pedelec_common::secret::{self, ServiceSecret};
use pedelec_common::{DataDir, RuntimeDir, ServiceName, env, uds};
use pedelec_proto::v1::ServiceState;
use tokio::process::{Child, Command as ProcessCommand};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::backoff::{CrashTracker, Decision, RestartPolicy};
use crate::error::LauncherError;

/// How long a fresh process gets to answer its health check.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a starting service's health is polled. Until its socket exists
/// a poll is a connect that fails at once, so polling often costs little and
/// shortens `pedelecd up` by up to a poll per service.
const HEALTH_POLL: Duration = Duration::from_millis(1);
/// SIGTERM, then SIGKILL after this long.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// How often a serving service's health is checked.
const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// How long one periodic health check may take.
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// This many failed periodic checks in a row: the service is stuck; it is
/// reported as not serving and restarted.
const HEALTH_FAILURES: u32 = 3;

#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
    /// Where the service binaries are.
    pub bin_dir: PathBuf,
    pub policy: RestartPolicy,
    /// Handed to every service process on its stdin, the same to each and to
    /// every restart (docs/security.md).
    pub secret: ServiceSecret,
    /// Forks the services when they are pedelecd's own executable
    /// (`pedelec_common::process::fork_server`); None: each is exec'd from
    /// its file.
    pub forks: Option<Arc<ForkServer>>,
}

/// One service as `Status` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSnapshot {
    pub name: &'static str,
    pub pid: u32,
    pub socket: PathBuf,
    pub state: ServiceState,
    pub restarts: u32,
    pub uptime: Duration,
    pub last_exit: String,
}

#[derive(Clone, Debug)]
pub struct LauncherSnapshot {
    pub pid: u32,
    pub started_at: SystemTime,
    pub runtime_dir: PathBuf,
    pub data_dir: PathBuf,
    pub services: Vec<ServiceSnapshot>,
}

/// What a service task publishes about itself.
#[derive(Clone, Debug)]
struct Record {
    state: ServiceState,
    pid: u32,
    restarts: u32,
    healthy_since: Option<Instant>,
    last_exit: String,
}

enum Command {
    /// Answered once the new process is healthy (or could not be started).
    Restart(oneshot::Sender<()>),
    Stop(oneshot::Sender<()>),
}

struct Slot {
    name: ServiceName,
    socket: PathBuf,
    record: watch::Receiver<Record>,
    commands: mpsc::UnboundedSender<Command>,
}

pub struct Supervisor {
    pid: u32,
    started_at: SystemTime,
    runtime_dir: PathBuf,
    data_dir: PathBuf,
    slots: Vec<Slot>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Supervisor {
    /// Spawns every supervised service at once (in `SUPERVISED` order) and
    /// returns without waiting for their health; see [`Supervisor::wait_settled`].
    pub fn start(config: SupervisorConfig) -> Result<Arc<Supervisor>, LauncherError> {
        let logs = logs_dir(&config.runtime_dir)?;
        let mut slots = Vec::new();
        let mut tasks = Vec::new();
        for name in ServiceName::SUPERVISED {
            let (record_tx, record_rx) = watch::channel(Record {
                state: ServiceState::Starting,
                pid: 0,
                restarts: 0,
                healthy_since: None,
                last_exit: String::new(),
            });
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
            let socket = config.runtime_dir.socket(name);
            let runner = Runner {
                name,
                binary: config.bin_dir.join(name.binary()),
                socket: socket.clone(),
                log: logs.join(format!("{}.log", name.as_str())),
                runtime_dir: config.runtime_dir.path().to_path_buf(),
                data_dir: config.data_dir.path().to_path_buf(),
                policy: config.policy,
                secret: config.secret.clone(),
                forks: config.forks.clone(),
                record: record_tx,
            };
            tasks.push(tokio::spawn(runner.run(cmd_rx)));
            slots.push(Slot {
                name,
                socket,
                record: record_rx,
                commands: cmd_tx,
            });
        }
        Ok(Arc::new(Supervisor {
            pid: std::process::id(),
            started_at: SystemTime::now(),
            runtime_dir: config.runtime_dir.path().to_path_buf(),
            data_dir: config.data_dir.path().to_path_buf(),
            slots,
            tasks: Mutex::new(tasks),
        }))
    }

    pub fn snapshot(&self) -> LauncherSnapshot {
        LauncherSnapshot {
            pid: self.pid,
            started_at: self.started_at,
            runtime_dir: self.runtime_dir.clone(),
            data_dir: self.data_dir.clone(),
            services: self.slots.iter().map(Slot::snapshot).collect(),
        }
    }

    /// Waits until every service is SERVING or FAILED; false on timeout.
    pub async fn wait_settled(&self, limit: Duration) -> bool {
        let all = async {
            for slot in &self.slots {
                let mut rx = slot.record.clone();
                let _ = rx
                    .wait_for(|r| matches!(r.state, ServiceState::Serving | ServiceState::Failed))
                    .await;
            }
        };
        tokio::time::timeout(limit, all).await.is_ok()
    }

    /// Stops the service (SIGTERM, SIGKILL after the grace), starts it again,
    /// forgets its crashes, and answers once it is healthy.
    pub async fn restart(&self, service: ServiceName) -> Result<ServiceSnapshot, LauncherError> {
        let slot = self
            .slots
            .iter()
            .find(|s| s.name == service)
            .ok_or_else(|| LauncherError::UnknownService(service.as_str().to_string()))?;
        let (tx, rx) = oneshot::channel();
        slot.commands
            .send(Command::Restart(tx))
            .map_err(|_| LauncherError::Rpc("the supervisor is shutting down".into()))?;
        let limit = STOP_GRACE + HEALTH_TIMEOUT + Duration::from_secs(1);
        let _ = tokio::time::timeout(limit, rx).await;
        Ok(slot.snapshot())
    }

    /// Stops every service at once and waits until all have exited.
    pub async fn stop_all(&self) {
        let mut acks = Vec::new();
        for slot in &self.slots {
            let (tx, rx) = oneshot::channel();
            if slot.commands.send(Command::Stop(tx)).is_ok() {
                acks.push(rx);
            }
        }
        for ack in acks {
            let _ = ack.await;
        }
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks lock"));
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Slot {
    fn snapshot(&self) -> ServiceSnapshot {
        let r = self.record.borrow();
        ServiceSnapshot {
            name: self.name.as_str(),
            pid: r.pid,
            socket: self.socket.clone(),
            state: r.state,
            restarts: r.restarts,
            uptime: r.healthy_since.map(|t| t.elapsed()).unwrap_or_default(),
            last_exit: r.last_exit.clone(),
        }
    }
}

/// The supervised service named `name` (what `Restart` and `pedelecd restart` take).
pub fn supervised(name: &str) -> Result<ServiceName, LauncherError> {
    ServiceName::parse(name)
        .filter(|s| ServiceName::SUPERVISED.contains(s))
        .ok_or_else(|| LauncherError::UnknownService(name.to_string()))
}

fn logs_dir(runtime_dir: &RuntimeDir) -> Result<PathBuf, LauncherError> {
    let logs = runtime_dir.logs();
    pedelec_common::paths::ensure_private_dir(&logs)?;
    Ok(logs)
}

/// Resolves once the service answers its health check with SERVING.
async fn wait_serving(socket: PathBuf, name: ServiceName) {
    loop {
        // A wedged process must not hold up the poll loop.
        let check = tokio::time::timeout(Duration::from_secs(1), uds::is_serving(&socket, name));
        if let Ok(true) = check.await {
            return;
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}

/// Why [`Runner::supervise`] stopped watching a process.
enum Interrupt {
    Command(Option<Command>),
    /// Alive but failing its health checks.
    Unresponsive,
}

/// One periodic health check in flight.
type HealthCheck = Pin<Box<dyn Future<Output = bool> + Send>>;

/// How one run of a service process ended.
enum Ended {
    Exited {
        how: String,
        healthy_for: Option<Duration>,
    },
    Restart(oneshot::Sender<()>),
    Stop(Option<oneshot::Sender<()>>),
}

/// The task that keeps one service alive.
struct Runner {
    name: ServiceName,
    binary: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    runtime_dir: PathBuf,
    data_dir: PathBuf,
    policy: RestartPolicy,
    secret: ServiceSecret,
    forks: Option<Arc<ForkServer>>,
    record: watch::Sender<Record>,
}

/// A running service: exec'd from its file, or forked by the fork server.
enum ServiceProcess {
    Execed(Child),
    Forked(ForkedChild),
}

impl ServiceProcess {
    /// None once it has been waited for.
    fn id(&self) -> Option<u32> {
        match self {
            ServiceProcess::Execed(child) => child.id(),
            ServiceProcess::Forked(child) => child.id(),
        }
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            ServiceProcess::Execed(child) => child.wait().await,
            ServiceProcess::Forked(child) => child.wait().await,
        }
    }
}

impl Runner {
    async fn run(self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let service = self.name.as_str();
        let mut tracker = CrashTracker::new(self.policy);
        // Restart callers waiting for the next healthy process.
        let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            let mut child = match self.spawn() {
                Ok(child) => child,
                Err(e) => {
                    tracing::error!(service, error = %e, "cannot start service; marked failed");
                    self.update(|r| {
                        r.state = ServiceState::Failed;
                        r.pid = 0;
                        r.healthy_since = None;
                        r.last_exit = e.to_string();
                    });
                    notify(&mut waiters);
                    match self.idle(&mut commands, &mut tracker, &mut waiters).await {
                        Some(()) => continue,
                        None => return,
                    }
                }
            };
            let pid = child.id().unwrap_or(0);
            tracing::info!(service, pid, "started");
            self.update(|r| {
                r.state = ServiceState::Starting;
                r.pid = pid;
                r.healthy_since = None;
            });
            match self
                .supervise(&mut child, &mut commands, &mut waiters)
                .await
            {
                Ended::Exited { how, healthy_for } => {
                    let decision = tracker.on_crash(healthy_for);
                    let crashes = tracker.crashes_in_a_row();
                    // The status shows how it ended and, while it keeps
                    // crashing, how many times in a row.
                    let last_exit = match decision {
                        Decision::GiveUp => format!("{how} (crash {crashes} in a row; gave up)"),
                        Decision::RestartAfter(_) if crashes > 1 => {
                            format!("{how} (crash {crashes} in a row)")
                        }
                        Decision::RestartAfter(_) => how.clone(),
                    };
                    self.update(|r| {
                        r.pid = 0;
                        r.healthy_since = None;
                        r.last_exit = last_exit;
                    });
                    match decision {
                        Decision::RestartAfter(delay) => {
                            tracing::warn!(service, pid, exit = %how, crashes, ?delay, "service exited; restarting");
                            self.update(|r| r.state = ServiceState::Backoff);
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {}
                                cmd = commands.recv() => match cmd {
                                    Some(Command::Restart(reply)) => {
                                        tracker.reset();
                                        waiters.push(reply);
                                    }
                                    Some(Command::Stop(reply)) => return self.stopped(Some(reply)),
                                    None => return self.stopped(None),
                                },
                            }
                            self.update(|r| r.restarts += 1);
                        }
                        Decision::GiveUp => {
                            tracing::error!(
                                service,
                                exit = %how,
                                crashes,
                                at_max_delay = self.policy.crashes_at_cap,
                                max_delay = ?self.policy.max_delay,
                                "service keeps crashing; marked failed, not restarting until a Restart request"
                            );
                            self.update(|r| r.state = ServiceState::Failed);
                            notify(&mut waiters);
                            if self
                                .idle(&mut commands, &mut tracker, &mut waiters)
                                .await
                                .is_none()
                            {
                                return;
                            }
                        }
                    }
                }
                Ended::Restart(reply) => {
                    tracing::info!(service, pid, "restarting on request");
                    tracker.reset();
                    waiters.push(reply);
                    self.update(|r| {
                        r.restarts += 1;
                        r.pid = 0;
                        r.last_exit = "restarted".to_string();
                    });
                }
                Ended::Stop(reply) => return self.stopped(reply),
            }
        }
    }

    /// FAILED: waits for a Restart (Some) or a Stop (None).
    async fn idle(
        &self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        tracker: &mut CrashTracker,
        waiters: &mut Vec<oneshot::Sender<()>>,
    ) -> Option<()> {
        match commands.recv().await {
            Some(Command::Restart(reply)) => {
                tracker.reset();
                waiters.push(reply);
                self.update(|r| r.restarts += 1);
                Some(())
            }
            Some(Command::Stop(reply)) => {
                self.stopped(Some(reply));
                None
            }
            None => {
                self.stopped(None);
                None
            }
        }
    }

    /// Watches one process: its health, its exit, and requests to stop it.
    async fn supervise(
        &self,
        child: &mut ServiceProcess,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        waiters: &mut Vec<oneshot::Sender<()>>,
    ) -> Ended {
        let service = self.name.as_str();
        let started = Instant::now();
        let pid = child.id().unwrap_or(0);
        let mut health = Box::pin(wait_serving(self.socket.clone(), self.name));
        let deadline = tokio::time::sleep(HEALTH_TIMEOUT);
        tokio::pin!(deadline);
        let mut healthy_at: Option<Instant> = None;
        let mut gave_up_waiting = false;
        let mut ticker = tokio::time::interval(HEALTH_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check: Option<HealthCheck> = None;
        let mut failed_checks = 0u32;
        let interrupt = loop {
            tokio::select! {
                status = child.wait() => {
                    let how = match status {
                        Ok(status) => describe_exit(status),
                        Err(e) => format!("wait failed: {e}"),
                    };
                    return Ended::Exited { how, healthy_for: healthy_at.map(|t| t.elapsed()) };
                }
                _ = &mut health, if healthy_at.is_none() => {
                    let now = Instant::now();
                    healthy_at = Some(now);
                    tracing::info!(service, pid, ms = started.elapsed().as_millis() as u64, "healthy");
                    self.update(|r| {
                        r.state = ServiceState::Serving;
                        r.healthy_since = Some(now);
                    });
                    notify(waiters);
                    ticker.reset();
                }
                // Once serving, a check every HEALTH_INTERVAL: alive is not enough,
                // a stuck process must not show `serving` forever.
                _ = ticker.tick(), if healthy_at.is_some() && check.is_none() => {
                    let socket = self.socket.clone();
                    let name = self.name;
                    check = Some(Box::pin(async move {
                        matches!(
                            tokio::time::timeout(HEALTH_CHECK_TIMEOUT, uds::is_serving(&socket, name)).await,
                            Ok(true)
                        )
                    }));
                }
                ok = async { check.as_mut().expect("guarded").await }, if check.is_some() => {
                    check = None;
                    if ok {
                        if failed_checks > 0 {
                            tracing::info!(service, pid, "health checks pass again");
                        }
                        failed_checks = 0;
                    } else {
                        failed_checks += 1;
                        tracing::warn!(service, pid, failed_checks, "health check failed");
                        if failed_checks >= HEALTH_FAILURES {
                            break Interrupt::Unresponsive;
                        }
                    }
                }
                _ = &mut deadline, if healthy_at.is_none() && !gave_up_waiting => {
                    // Counted as a crash once the exit is seen.
                    tracing::warn!(service, pid, "not healthy after {HEALTH_TIMEOUT:?}; killing it");
                    gave_up_waiting = true;
                    signal_group(pid, SIGKILL);
                }
                cmd = commands.recv() => break Interrupt::Command(cmd),
            }
        };
        // A health check cut short holds a half-open connection; the service's
        // graceful shutdown would wait for it, so it goes before the SIGTERM.
        drop(health);
        drop(check);
        match interrupt {
            Interrupt::Unresponsive => {
                tracing::error!(
                    service,
                    pid,
                    "{HEALTH_FAILURES} health checks in a row failed; restarting it"
                );
                // Not serving from now on, while it is being stopped.
                self.update(|r| {
                    r.state = ServiceState::Backoff;
                    r.healthy_since = None;
                });
                let healthy_for = healthy_at.map(|t| t.elapsed());
                let ended = terminate(service, child).await;
                let how = format!(
                    "unresponsive ({HEALTH_FAILURES} failed health checks), {}",
                    ended.map_or_else(|| "gone".to_string(), describe_exit)
                );
                Ended::Exited { how, healthy_for }
            }
            Interrupt::Command(command) => {
                terminate(service, child).await;
                match command {
                    Some(Command::Restart(reply)) => Ended::Restart(reply),
                    Some(Command::Stop(reply)) => Ended::Stop(Some(reply)),
                    None => Ended::Stop(None),
                }
            }
        }
    }

    fn spawn(&self) -> Result<ServiceProcess, LauncherError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.log)
            .map_err(|e| LauncherError::io(&self.log, e))?;
        // The secret goes over a socket pair on stdin: not the environment
        // (agents inherit the services'), not argv (`ps` shows it), and not a
        // pipe (a pipe can be opened through /proc/<pid>/fd/0 by the user's
        // other processes; a socket cannot be opened that way). It is written
        // once the service is non-dumpable and untraced (secret::hand_over).
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .and_then(|(ours, theirs)| {
                ours.set_nonblocking(true)?;
                Ok((tokio::net::UnixStream::from_std(ours)?, theirs))
            })
            .map_err(|e| LauncherError::io("socketpair for the service secret", e))?;
        let forked = self.forks.as_ref().and_then(|forks| {
            let env = [
                (env::RUNTIME_DIR, self.runtime_dir.as_os_str()),
                (env::HOME, self.data_dir.as_os_str()),
            ];
            let args = [
                OsStr::new(self.name.binary()),
                OsStr::new(SERVICE_SECRET_STDIN),
            ];
            let stdio = [theirs.as_fd(), log.as_fd(), log.as_fd()];
            forks
                .spawn(self.name.program(), &args, &env, stdio)
                .inspect_err(|e| {
                    tracing::warn!(service = self.name.as_str(), error = %e, "the fork server did not start it; starting it from its file");
                })
                .ok()
        });
        let child = match forked {
            Some(child) => ServiceProcess::Forked(child),
            None => ServiceProcess::Execed(self.exec(theirs, log)?),
        };
        // Its own task: the supervision (health, exit) goes on meanwhile, and
        // a service that never says ready is killed by the health deadline.
        let pid = child.id().unwrap_or(0);
        let secret = self.secret.clone();
        let service = self.name.as_str();
        tokio::spawn(async move {
            if let Err(e) = secret::hand_over(ours, pid, &secret).await {
                tracing::warn!(service, pid, "service secret not handed over: {e}");
            }
        });
        Ok(child)
    }

    /// Starts the service from its file, `stdin` its end of the secret's
    /// socket pair, `log` its stdout and stderr.
    fn exec(&self, stdin: UnixStream, log: std::fs::File) -> Result<Child, LauncherError> {
        if !self.binary.is_file() {
            return Err(LauncherError::BinaryNotFound {
                service: self.name.as_str(),
                path: self.binary.clone(),
            });
        }
        let log_err = log
            .try_clone()
            .map_err(|e| LauncherError::io(&self.log, e))?;
        let mut cmd = ProcessCommand::new(&self.binary);
        cmd.arg(SERVICE_SECRET_STDIN)
            .env(env::RUNTIME_DIR, &self.runtime_dir)
            .env(env::HOME, &self.data_dir)
            .stdin(Stdio::from(OwnedFd::from(stdin)))
            .stdout(log)
            .stderr(log_err)
            // Own group: a Ctrl-C on the launcher's terminal must not reach the
            // services directly; the launcher stops them in order.
            .process_group(0)
            .kill_on_drop(true);
        // A service outlives a launcher killed with SIGKILL otherwise. The
        // launcher spawns from its one runtime thread (see main.rs).
        process::die_with_parent(cmd.as_std_mut(), SIGTERM);
        cmd.spawn().map_err(|source| LauncherError::Spawn {
            service: self.name.as_str(),
            path: self.binary.clone(),
            source,
        })
    }

    fn update(&self, f: impl FnOnce(&mut Record)) {
        self.record.send_modify(f);
    }

    fn stopped(&self, reply: Option<oneshot::Sender<()>>) {
        self.update(|r| {
            r.state = ServiceState::Stopped;
            r.pid = 0;
            r.healthy_since = None;
        });
        remove_dead_socket(&self.socket);
        tracing::info!(service = self.name.as_str(), "stopped");
        if let Some(reply) = reply {
            let _ = reply.send(());
        }
    }
}

fn notify(waiters: &mut Vec<oneshot::Sender<()>>) {
    for w in waiters.drain(..) {
        let _ = w.send(());
    }
}

/// SIGTERM to the service's group; SIGKILL if it is still there after the
/// grace (a SIGSTOPped process, too: SIGKILL reaches it). How it ended, if known.
async fn terminate(service: &str, child: &mut ServiceProcess) -> Option<ExitStatus> {
    let Some(pid) = child.id() else {
        return None; // already reaped
    };
    signal_group(pid, SIGTERM);
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            tracing::warn!(
                service,
                pid,
                "did not stop within {STOP_GRACE:?}; killing it"
            );
            signal_group(pid, SIGKILL);
            child.wait().await.ok()
        }
    }
}

/// A service killed with SIGKILL leaves its socket file behind; nobody answers on it.
fn remove_dead_socket(path: &Path) {
    if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_supervised_services_can_be_restarted() {
        assert_eq!(supervised("provider").unwrap(), ServiceName::Provider);
        assert!(matches!(
            supervised("launcher"),
            Err(LauncherError::UnknownService(_))
        ));
        assert!(matches!(
            supervised("nope"),
            Err(LauncherError::UnknownService(_))
        ));
    }
}
