//! The services behind the host: gRPC clients over the runtime dir's sockets,
//! and starting `pedelecd` when they do not answer.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pb::asset_service_client::AssetServiceClient;
use pb::provider_service_client::ProviderServiceClient;
use pb::session_service_client::SessionServiceClient;
use pedelec_common::{RuntimeDir, ServiceName, uds};
use pedelec_proto::v1 as pb;
use tokio::sync::Mutex;
use tonic::transport::Channel;

use crate::error::HostError;

/// How long a request waits for `pedelecd start` to bring the services up.
pub const START_WAIT: Duration = Duration::from_secs(10);
/// Messages may be as large as the browser may send (64 MiB); tonic's default
/// 4 MiB would refuse a big tool result or asset list.
const MAX_GRPC_MESSAGE: usize = 64 << 20;

#[derive(Clone)]
pub struct Core {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: RuntimeDir,
    session: Channel,
    provider: Channel,
    asset: Channel,
    /// Set once the services answered; cleared when a call finds them gone.
    up: AtomicBool,
    /// One auto-start at a time; concurrent requests wait for its outcome.
    starting: Mutex<()>,
    pedelecd: PathBuf,
    log_file: Option<PathBuf>,
}

impl Core {
    pub fn new(runtime: RuntimeDir, log_file: Option<PathBuf>) -> Core {
        // Lazy channels connect on first use and reconnect after a restart.
        let channel = |s| uds::connect_lazy(&runtime.socket(s));
        Core {
            inner: Arc::new(Inner {
                session: channel(ServiceName::Session),
                provider: channel(ServiceName::Provider),
                asset: channel(ServiceName::Asset),
                runtime,
                up: AtomicBool::new(false),
                starting: Mutex::new(()),
                pedelecd: pedelecd_path(),
                log_file,
            }),
        }
    }

    pub fn session(&self) -> SessionServiceClient<Channel> {
        SessionServiceClient::new(self.inner.session.clone())
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn provider(&self) -> ProviderServiceClient<Channel> {
        ProviderServiceClient::new(self.inner.provider.clone())
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    pub fn asset(&self) -> AssetServiceClient<Channel> {
        AssetServiceClient::new(self.inner.asset.clone())
            .max_decoding_message_size(MAX_GRPC_MESSAGE)
            .max_encoding_message_size(MAX_GRPC_MESSAGE)
    }

    /// Whether SessionService answers its health check now (no auto-start).
    pub async fn is_running(&self) -> bool {
        uds::is_serving(
            &self.inner.runtime.socket(ServiceName::Session),
            ServiceName::Session,
        )
        .await
    }

    /// Runs `call`; when the services are not known to be up, first makes sure
    /// they are (starting `pedelecd` if needed). A call that could not even
    /// connect reached no service, so it is safe to start them and retry once,
    /// mutations included.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, HostError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        if !self.inner.up.load(Ordering::Acquire) {
            self.ensure_up().await?;
        }
        match call().await {
            Ok(v) => Ok(v),
            Err(status) if never_connected(&status) => {
                tracing::warn!(error = %status, "services not reachable; starting them");
                self.inner.up.store(false, Ordering::Release);
                self.ensure_up().await?;
                call().await.map_err(|s| self.failed(&s))
            }
            Err(status) => Err(self.failed(&status)),
        }
    }

    fn failed(&self, status: &tonic::Status) -> HostError {
        let e = HostError::from_status(status);
        if matches!(e, HostError::CoreUnavailable(_)) {
            self.inner.up.store(false, Ordering::Release);
        }
        e
    }

    /// Makes sure the services serve, starting `pedelecd start` at most once
    /// at a time and waiting up to `START_WAIT` for their health.
    pub async fn ensure_up(&self) -> Result<(), HostError> {
        let _guard = self.inner.starting.lock().await;
        if self.inner.up.load(Ordering::Acquire) || self.all_serving().await {
            self.inner.up.store(true, Ordering::Release);
            return Ok(());
        }
        let started = Instant::now();
        tracing::info!(pedelecd = %self.inner.pedelecd.display(), "services not running; starting pedelecd");
        let reason = self.start_pedelecd().await.err();
        // `pedelecd start` returns once everything is healthy, but it may also
        // have found an instance already starting: poll until the deadline.
        let deadline = started + START_WAIT;
        while Instant::now() < deadline {
            if self.all_serving().await {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "services up"
                );
                self.inner.up.store(true, Ordering::Release);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let why = reason
            .unwrap_or_else(|| "pedelecd started but the services never became healthy".into());
        Err(HostError::CoreUnavailable(format!(
            "Pedelec services are not running and could not be started within {} s: {why}",
            START_WAIT.as_secs()
        )))
    }

    async fn all_serving(&self) -> bool {
        let check = |s| async move { uds::is_serving(&self.inner.runtime.socket(s), s).await };
        let (a, b, c) = tokio::join!(
            check(ServiceName::Session),
            check(ServiceName::Provider),
            check(ServiceName::Asset)
        );
        a && b && c
    }

    /// Runs `pedelecd start` in its own session (so it survives Chrome killing
    /// the host) with its output going to the log, never to our stdout.
    async fn start_pedelecd(&self) -> Result<(), String> {
        let exe = &self.inner.pedelecd;
        if !exe.exists() {
            return Err(format!("{} not found", exe.display()));
        }
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("start")
            .env("PEDELEC_RUNTIME_DIR", self.inner.runtime.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let out = match tokio::time::timeout(START_WAIT, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(format!("waiting for pedelecd start: {e}")),
            Err(_) => return Err("pedelecd start did not finish in time".into()),
        };
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        tracing::info!(status = %out.status, output = %said.trim(), log = ?self.inner.log_file, "pedelecd start finished");
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pedelecd start failed ({}): {}",
                out.status,
                said.trim()
            ))
        }
    }
}

/// `$PEDELEC_BIN_DIR/pedelecd`, else `pedelecd` beside this executable.
fn pedelecd_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("PEDELEC_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("pedelecd");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("pedelecd")))
        .unwrap_or_else(|| PathBuf::from("pedelecd"))
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
