//! The services behind the host: gRPC clients over the runtime dir's sockets,
//! and starting `pedelecd` when they do not answer.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pedelec_common::clients::{AssetClient, ProviderClient, SessionClient};
use pedelec_common::install::{HostConfig, ServiceManager};
use pedelec_common::{
    Clients, Code, CodedError, MAX_GRPC_MESSAGE, Program, RuntimeDir, ServiceName, env,
    pedelecd_exit, process, uds,
};
use pedelec_proto::v1 as pb;
use tokio::sync::Mutex;

use crate::error::HostError;

/// How long a request waits for `pedelecd start` to bring the services up.
pub const START_WAIT: Duration = Duration::from_secs(10);
/// How long one health check (or launcher status call) may take: a service
/// that accepts the connection but does not answer counts as down.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// What a request needs up: list_providers/get_settings.
pub const PROVIDER: &[ServiceName] = &[ServiceName::Provider];
/// Session requests.
pub const SESSION: &[ServiceName] = &[ServiceName::Session];
/// create_session (it resolves the provider).
pub const SESSION_PROVIDER: &[ServiceName] = &[ServiceName::Session, ServiceName::Provider];
/// Asset requests (AssetService checks the thread with SessionService).
pub const ASSETS: &[ServiceName] = &[ServiceName::Session, ServiceName::Asset];

/// The services the host calls, in the order of `Inner::up`.
const CALLED: [ServiceName; 3] = [
    ServiceName::Session,
    ServiceName::Provider,
    ServiceName::Asset,
];

#[derive(Clone)]
pub struct Core {
    inner: Arc<Inner>,
}

struct Inner {
    clients: Clients,
    /// Per service of `CALLED`: set once it answered; cleared when a call
    /// finds it gone.
    up: [AtomicBool; 3],
    /// One start attempt at a time, and the outcome of the last one: requests
    /// that waited for an attempt share its outcome instead of trying again.
    attempt: Mutex<Option<Attempt>>,
    pedelecd: PathBuf,
    /// Set when `pedelecd install` installed a login unit/agent: starting goes
    /// through it, so the service manager and the host never both run one.
    service_manager: Option<ServiceManager>,
    log_file: Option<PathBuf>,
}

struct Attempt {
    finished: Instant,
    outcome: Result<(), String>,
}

/// Why `pedelecd start` did not start the services.
enum StartFailed {
    /// Another instance runs (or is starting) on this runtime dir: wait for it.
    AlreadyRunning(String),
    Other(String),
}

fn slot(service: ServiceName) -> usize {
    CALLED.iter().position(|s| *s == service).unwrap_or(0)
}

fn names(services: &[ServiceName]) -> String {
    services
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Core {
    /// `config` is the install's host config, when there is one: it names the
    /// bin dir (unless `$PEDELEC_BIN_DIR` does) and the service manager.
    pub fn new(
        runtime: RuntimeDir,
        config: Option<&HostConfig>,
        log_file: Option<PathBuf>,
    ) -> Core {
        Core {
            inner: Arc::new(Inner {
                // Its channels connect on first use and reconnect after a restart.
                clients: Clients::new(runtime),
                up: Default::default(),
                attempt: Mutex::new(None),
                pedelecd: pedelecd_path(config),
                service_manager: config.and_then(|c| c.service_manager),
                log_file,
            }),
        }
    }

    pub fn session(&self) -> SessionClient {
        self.inner.clients.session()
    }

    /// SessionService's channel, for calls made without the generated client
    /// ([`crate::event_stream`]).
    pub fn session_channel(&self) -> tonic::transport::Channel {
        self.inner.clients.channel(ServiceName::Session)
    }

    pub fn provider(&self) -> ProviderClient {
        self.inner.clients.provider()
    }

    pub fn asset(&self) -> AssetClient {
        self.inner.clients.asset()
    }

    fn runtime(&self) -> &RuntimeDir {
        self.inner.clients.runtime()
    }

    /// Whether SessionService answers its health check now (no auto-start).
    pub async fn is_running(&self) -> bool {
        self.serving(ServiceName::Session).await
    }

    /// Runs `call` with `req`; when a service in `needed` is not known to be
    /// up, first makes sure it is (starting `pedelecd` if needed). A call that
    /// could not even connect reached no service, so it is safe to start them
    /// and retry once, mutations included. The request is cloned once for the
    /// first attempt; the retry takes the original.
    pub async fn call<R, T, F, Fut>(
        &self,
        needed: &[ServiceName],
        req: R,
        call: F,
    ) -> Result<T, HostError>
    where
        R: Clone + prost::Message,
        F: Fn(R) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        too_large(&req)?;
        if !self.known_up(needed) {
            self.ensure_up(needed).await?;
        }
        match call(req.clone()).await {
            Ok(v) => Ok(v),
            Err(status) if never_connected(&status) => {
                tracing::warn!(error = %status, "services not reachable; starting them");
                self.mark(needed, false);
                self.ensure_up(needed).await?;
                call(req).await.map_err(|s| self.failed(needed, &s))
            }
            Err(status) => Err(self.failed(needed, &status)),
        }
    }

    fn known_up(&self, services: &[ServiceName]) -> bool {
        services
            .iter()
            .all(|s| self.inner.up[slot(*s)].load(Ordering::Acquire))
    }

    fn mark(&self, services: &[ServiceName], up: bool) {
        for s in services {
            self.inner.up[slot(*s)].store(up, Ordering::Release);
        }
    }

    /// Only a transport failure says the services are down.
    fn failed(&self, needed: &[ServiceName], status: &tonic::Status) -> HostError {
        let e = HostError::from_status(status);
        if matches!(e, HostError::CoreUnavailable(_)) {
            self.mark(needed, false);
        }
        e
    }

    /// One health check, bounded by `HEALTH_TIMEOUT`.
    async fn serving(&self, service: ServiceName) -> bool {
        matches!(self.health(service).await, Ok(true))
    }

    /// One health check, bounded by `HEALTH_TIMEOUT`; the reason when the
    /// socket was refused before anything was sent (`uds::health`).
    async fn health(&self, service: ServiceName) -> Result<bool, String> {
        let socket = self.runtime().socket(service);
        match tokio::time::timeout(HEALTH_TIMEOUT, uds::health(&socket, service)).await {
            Ok(Ok(serving)) => Ok(serving),
            Ok(Err(refused)) => Err(refused.to_string()),
            Err(_) => Ok(false),
        }
    }

    /// The services of `needed` that do not answer their health check; the
    /// reason when one of their sockets was refused (not this user's folder
    /// or server), which starting `pedelecd` would not change.
    async fn not_serving(&self, needed: &[ServiceName]) -> Result<Vec<ServiceName>, String> {
        let mut checks = tokio::task::JoinSet::new();
        for &s in needed {
            let core = self.clone();
            checks.spawn(async move { (s, core.health(s).await) });
        }
        let mut down = Vec::new();
        let mut refused = None;
        while let Some(r) = checks.join_next().await {
            match r {
                Ok((s, Ok(false))) => down.push(s),
                Ok((_, Err(why))) => refused = Some(why),
                _ => {}
            }
        }
        match refused {
            Some(why) => Err(why),
            None => Ok(down),
        }
    }

    /// Makes sure the services of `needed` serve. One start attempt runs at a
    /// time; a request that waited for one shares its outcome (a failure is
    /// reported at once, not tried again), so concurrent requests cost one
    /// attempt, not one each.
    pub async fn ensure_up(&self, needed: &[ServiceName]) -> Result<(), HostError> {
        let asked = Instant::now();
        if self
            .not_serving(needed)
            .await
            .map_err(HostError::CoreUnavailable)?
            .is_empty()
        {
            self.mark(needed, true);
            return Ok(());
        }
        let mut last = self.inner.attempt.lock().await;
        if let Some(a) = last.as_ref().filter(|a| a.finished >= asked)
            && let Err(why) = &a.outcome
        {
            return Err(HostError::CoreUnavailable(why.clone()));
        }
        // Someone else's attempt may have brought them up meanwhile.
        if self
            .not_serving(needed)
            .await
            .map_err(HostError::CoreUnavailable)?
            .is_empty()
        {
            self.mark(needed, true);
            return Ok(());
        }
        let outcome = self.start(needed).await;
        *last = Some(Attempt {
            finished: Instant::now(),
            outcome: outcome.clone(),
        });
        match outcome {
            Ok(()) => {
                self.mark(needed, true);
                Ok(())
            }
            Err(why) => Err(HostError::CoreUnavailable(why)),
        }
    }

    /// One attempt: when pedelecd runs, restarts a needed service it gave up
    /// on (once); else runs `pedelecd start`. Then waits up to `START_WAIT`
    /// for the needed services' health. Fails at once when there is nothing to
    /// wait for (no pedelecd to run, or it failed and no launcher answers).
    async fn start(&self, needed: &[ServiceName]) -> Result<(), String> {
        let started = Instant::now();
        let deadline = started + START_WAIT;
        let mut restarted: Vec<ServiceName> = Vec::new();
        let mut reason = None;
        let running = self.launcher_status().await.is_some();
        if !running && let Some(manager) = self.inner.service_manager {
            // The installed unit/agent owns pedelecd: ask it, then wait below.
            if let Err(why) = self.start_service(manager).await {
                return Err(format!("Pedelec services could not be started: {why}"));
            }
        } else if !running {
            let exe = &self.inner.pedelecd;
            if !exe.exists() {
                return Err(format!(
                    "Pedelec services are not running and cannot be started: pedelecd not found \
                     at {} (set PEDELEC_BIN_DIR or reinstall Pedelec)",
                    exe.display()
                ));
            }
            tracing::info!(pedelecd = %exe.display(), needed = %names(needed), "services not running; starting pedelecd");
            match self.start_pedelecd().await {
                Ok(()) => {}
                // An instance already starting: wait for it.
                Err(StartFailed::AlreadyRunning(why)) => reason = Some(why),
                // Without a launcher answering there is nothing to wait for.
                Err(StartFailed::Other(why)) => {
                    if self.launcher_status().await.is_none() {
                        return Err(format!("Pedelec services could not be started: {why}"));
                    }
                    reason = Some(why);
                }
            }
        }
        loop {
            let down = self.not_serving(needed).await?;
            if down.is_empty() {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    needed = %names(needed),
                    "services up"
                );
                return Ok(());
            }
            if let Some(status) = self.launcher_status().await {
                for s in &down {
                    let failed = status.services.iter().any(|st| {
                        st.name == s.as_str() && st.state == pb::ServiceState::Failed as i32
                    });
                    if failed && !restarted.contains(s) {
                        restarted.push(*s);
                        tracing::warn!(
                            service = s.as_str(),
                            "pedelecd gave up on a service; restarting it"
                        );
                        if let Err(why) = self.restart(*s, deadline).await {
                            reason = Some(why);
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let down = self.not_serving(needed).await?;
        let why = reason.unwrap_or_else(|| {
            format!(
                "pedelecd runs but {} never became healthy",
                names(if down.is_empty() { needed } else { &down })
            )
        });
        Err(format!(
            "Pedelec services are not running and could not be started within {} s: {why}",
            START_WAIT.as_secs()
        ))
    }

    /// SupervisorService.Status of a running pedelecd; None when none answers.
    async fn launcher_status(&self) -> Option<pb::SupervisorStatus> {
        tokio::time::timeout(HEALTH_TIMEOUT, async {
            let mut client = self.inner.clients.supervisor();
            let status = client.status(pb::SupervisorStatusRequest {}).await.ok()?;
            Some(status.into_inner())
        })
        .await
        .ok()
        .flatten()
    }

    /// SupervisorService.Restart for `service`, bounded by `deadline`.
    async fn restart(&self, service: ServiceName, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        let call = async {
            let mut client = self.inner.clients.supervisor();
            client
                .restart(pb::RestartServiceRequest {
                    service: service.as_str().to_string(),
                })
                .await
                .map(|_| ())
                .map_err(|s| s.message().to_string())
        };
        match tokio::time::timeout(left, call).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(format!("restarting {} failed: {why}", service.as_str())),
            Err(_) => Err(format!(
                "restarting {} did not finish in time",
                service.as_str()
            )),
        }
    }

    /// Asks the user service manager to start the installed unit/agent
    /// (`systemctl --user start pedelec.service`, `launchctl kickstart …`).
    async fn start_service(&self, manager: ServiceManager) -> Result<(), String> {
        let (program, args) = manager.start_command();
        let shown = format!("{program} {}", args.join(" "));
        tracing::info!(command = %shown, "services not running; asking the service manager");
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let run = tokio::time::timeout(START_WAIT, cmd.output());
        match run.await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "{shown} failed ({}): {}",
                process::describe_exit(out.status),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(Err(e)) => Err(format!("cannot run {shown}: {e}")),
            Err(_) => Err(format!("{shown} did not finish in time")),
        }
    }

    /// Runs `pedelecd start` in its own session (so it survives Chrome killing
    /// the host) with its output going to the log, never to our stdout.
    async fn start_pedelecd(&self) -> Result<(), StartFailed> {
        let exe = &self.inner.pedelecd;
        if !exe.exists() {
            return Err(StartFailed::Other(format!("{} not found", exe.display())));
        }
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("start")
            .env(env::RUNTIME_DIR, self.runtime().path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        process::detach(cmd.as_std_mut());
        let child = cmd
            .spawn()
            .map_err(|e| StartFailed::Other(format!("cannot run {}: {e}", exe.display())))?;
        let out = match tokio::time::timeout(START_WAIT, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Err(StartFailed::Other(format!(
                    "waiting for pedelecd start: {e}"
                )));
            }
            Err(_) => {
                return Err(StartFailed::Other(
                    "pedelecd start did not finish in time".into(),
                ));
            }
        };
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        tracing::info!(status = %out.status, output = %said.trim(), log = ?self.inner.log_file, "pedelecd start finished");
        let why = || {
            format!(
                "pedelecd start failed ({}): {}",
                process::describe_exit(out.status),
                said.trim()
            )
        };
        match out.status.code().and_then(|c| u8::try_from(c).ok()) {
            Some(pedelecd_exit::OK) => Ok(()),
            Some(pedelecd_exit::ALREADY_RUNNING) => Err(StartFailed::AlreadyRunning(why())),
            _ => Err(StartFailed::Other(why())),
        }
    }
}

/// A request above the largest gRPC message is refused here: sent, it only
/// breaks the HTTP/2 stream ("h2 protocol error"), which says nothing useful.
/// JSON can grow as protobuf (a `0` in an array becomes 11 bytes).
fn too_large(req: &impl prost::Message) -> Result<(), HostError> {
    let len = req.encoded_len();
    if len <= MAX_GRPC_MESSAGE {
        return Ok(());
    }
    Err(HostError::Service(
        CodedError::new(
            Code::MESSAGE_TOO_LARGE,
            format!(
                "the request is {len} bytes as a gRPC message, above the {} MiB limit",
                MAX_GRPC_MESSAGE >> 20
            ),
        )
        .with_details(serde_json::json!({"length": len, "limit": MAX_GRPC_MESSAGE})),
    ))
}

/// `$PEDELEC_BIN_DIR/pedelecd`, else the host config's bin dir, else
/// `pedelecd` beside this executable.
fn pedelecd_path(config: Option<&HostConfig>) -> PathBuf {
    pedelec_common::install::bin_dir(config)
        .map(|d| d.join(Program::Launcher.file_name()))
        .unwrap_or_else(|| PathBuf::from(Program::Launcher.file_name()))
}

/// Whether the call failed before reaching a service (no socket, refused):
/// only then is a retry safe for a mutation.
fn never_connected(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable || pedelec_common::code_of_status(status).is_some()
    {
        return false;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            );
        }
        cur = e.source();
    }
    false
}
