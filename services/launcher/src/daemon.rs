//! `pedelecd up`: the foreground launcher.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pedelec_common::process::fork_server::ForkServer;
use pedelec_common::secret::ServiceSecret;
use pedelec_common::{DataDir, ServiceName, uds};
use pedelec_proto::v1::supervisor_service_server::SupervisorServiceServer;
use tokio::signal::unix::{SignalKind, signal};
use tonic::service::Routes;

use crate::backoff::RestartPolicy;
use crate::error::LauncherError;
use crate::grpc::SupervisorGrpc;
use crate::lock::{self, Acquired};
use crate::supervisor::{Supervisor, SupervisorConfig};
use crate::{Dirs, client};

/// Cold start ceiling: every service healthy (or failed) within this.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the service binaries are: `$PEDELEC_BIN_DIR`, else beside pedelecd.
pub fn bin_dir() -> Result<PathBuf, LauncherError> {
    pedelec_common::paths::bin_dir().ok_or_else(|| {
        LauncherError::io(
            "current_exe",
            std::io::Error::other("cannot find the running executable"),
        )
    })
}

/// Runs the launcher until SIGTERM/SIGINT, then stops everything and clears
/// the app state ("app exit").
pub async fn up(dirs: &Dirs, forks: Option<Arc<ForkServer>>) -> Result<(), LauncherError> {
    let t0 = Instant::now();
    // Installed first, so a stop that arrives during start-up is handled in order.
    let mut term = signal(SignalKind::terminate()).map_err(|e| LauncherError::io("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| LauncherError::io("SIGINT", e))?;

    dirs.runtime.ensure()?;
    dirs.data.ensure()?;
    let socket = dirs.runtime.socket(ServiceName::Launcher);
    if let Ok(status) = client::status(&dirs.runtime).await {
        return Err(LauncherError::AlreadyRunning {
            pid: status.launcher_pid,
            socket,
        });
    }
    let _lock = match lock::acquire(&dirs.runtime.path().join("launcher.lock"))? {
        Acquired::Locked(lock) => lock,
        Acquired::Busy(pid) => {
            // The other one may still be binding its socket; prefer its own word.
            let pid = match client::status(&dirs.runtime).await {
                Ok(status) => status.launcher_pid,
                Err(_) => pid.unwrap_or(0),
            };
            return Err(LauncherError::AlreadyRunning { pid, socket });
        }
    };
    // An orderly stop whose cleanup did not finish is finished now. Without
    // its marker the last run ended by a crash, a kill or a power loss: no
    // app exit happened, so its threads come back (as after a service crash).
    if dirs.data.app_exit_marker().exists() {
        app_exit(&dirs.data);
    }

    let supervisor = Supervisor::start(SupervisorConfig {
        runtime_dir: dirs.runtime.clone(),
        data_dir: dirs.data.clone(),
        bin_dir: bin_dir()?,
        policy: RestartPolicy::default(),
        // One per launcher run: its services are started and restarted with it.
        secret: ServiceSecret::generate(),
        forks,
    })?;
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let routes = Routes::new(SupervisorServiceServer::new(SupervisorGrpc::new(
        supervisor.clone(),
    )));
    let server_socket = socket.clone();
    let mut server = tokio::spawn(async move {
        uds::serve(&server_socket, ServiceName::Launcher, routes, async {
            let _ = server_stopped.await;
        })
        .await
    });

    let mut stop_requested = false;
    let settled = tokio::select! {
        settled = supervisor.wait_settled(START_TIMEOUT) => settled,
        _ = term.recv() => { stop_requested = true; false }
        _ = int.recv() => { stop_requested = true; false }
    };
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let snapshot = supervisor.snapshot();
    let serving = snapshot
        .services
        .iter()
        .filter(|s| s.state == pedelec_proto::v1::ServiceState::Serving)
        .count();
    if settled && serving == snapshot.services.len() {
        tracing::info!(
            pid = snapshot.pid,
            "all {serving} services healthy in {ms:.1} ms"
        );
    } else {
        tracing::warn!(
            pid = snapshot.pid,
            "{serving} of {} services healthy after {ms:.1} ms",
            snapshot.services.len()
        );
    }

    let server_result = if stop_requested {
        None
    } else {
        tokio::select! {
            _ = term.recv() => None,
            _ = int.recv() => None,
            result = &mut server => Some(result),
        }
    };
    tracing::info!("stopping services");
    supervisor.stop_all().await;
    let _ = stop_server.send(());
    let server_result = match server_result {
        Some(result) => result,
        // Clients holding connections open must not keep the launcher alive.
        None => match tokio::time::timeout(Duration::from_secs(2), &mut server).await {
            Ok(result) => result,
            Err(_) => {
                server.abort();
                Ok(Ok(()))
            }
        },
    };
    // We hold the lock, so the socket is ours even if the server did not remove it.
    let _ = std::fs::remove_file(&socket);
    app_exit(&dirs.data);
    tracing::info!("stopped");
    match server_result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(LauncherError::Rpc(format!("launcher server task: {e}"))),
    }
}

/// The app exit: every thread and managed workspace goes. The marker
/// stays until nothing is left, so the next start retries what failed.
fn app_exit(data: &DataDir) {
    let marker = data.app_exit_marker();
    if let Err(e) = std::fs::write(&marker, b"") {
        tracing::warn!(path = %marker.display(), error = %e, "could not mark the app exit");
    }
    let failures = data.clear_app_state();
    for (path, e) in &failures {
        tracing::warn!(path = %path.display(), error = %e, "could not remove app state; retried at next start");
    }
    if failures.is_empty() {
        let _ = std::fs::remove_file(&marker);
    }
}
