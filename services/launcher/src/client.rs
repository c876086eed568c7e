//! Talking to a running launcher over `launcher.sock`, with the client hub's
//! SupervisorService client.

use std::time::{Duration, Instant};

use pedelec_common::clients::SupervisorClient;
use pedelec_common::{Clients, CommonError, RuntimeDir, ServiceName, process};
use pedelec_proto::v1::{
    RestartServiceRequest, ServiceStatus, SupervisorStatus, SupervisorStatusRequest,
};

use crate::error::LauncherError;

/// How long `status` waits for an answer.
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `stop` waits for the launcher to be gone.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

async fn client(runtime: &RuntimeDir) -> Result<SupervisorClient, LauncherError> {
    if !runtime.socket(ServiceName::Launcher).exists() {
        return Err(LauncherError::NotRunning);
    }
    let clients = Clients::new(runtime.clone());
    // A socket refused before anything was sent (not this user's folder or
    // server) says so; anything else is nothing running.
    clients
        .connect(ServiceName::Launcher)
        .await
        .map_err(|e| match e {
            CommonError::Untrusted { .. } => LauncherError::Common(e),
            _ => LauncherError::NotRunning,
        })?;
    Ok(clients.supervisor())
}

/// Asks the launcher to restart one service; answers once it is healthy again.
pub async fn restart(
    runtime: &RuntimeDir,
    service: ServiceName,
) -> Result<ServiceStatus, LauncherError> {
    let mut client = client(runtime).await?;
    let request = RestartServiceRequest {
        service: service.as_str().to_string(),
    };
    client
        .restart(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| LauncherError::Rpc(status.message().to_string()))
}

/// The launcher's Status; `NotRunning` when nothing answers on the socket.
pub async fn status(runtime: &RuntimeDir) -> Result<SupervisorStatus, LauncherError> {
    let mut client = client(runtime).await?;
    let call = client.status(SupervisorStatusRequest {});
    match tokio::time::timeout(STATUS_TIMEOUT, call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(LauncherError::Rpc(status.message().to_string())),
        Err(_) => Err(LauncherError::Rpc(format!(
            "{} did not answer within {}s",
            runtime.socket(ServiceName::Launcher).display(),
            STATUS_TIMEOUT.as_secs()
        ))),
    }
}

/// Stops the running launcher (SIGTERM) and waits until it is gone and its
/// socket no longer answers; prints what happened. `pedelecd stop` and
/// uninstall use it.
pub async fn stop(runtime: &RuntimeDir) -> Result<(), LauncherError> {
    let pid = match status(runtime).await {
        Ok(running) => running.launcher_pid,
        Err(LauncherError::NotRunning) => {
            println!("pedelecd is not running");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    process::signal(pid, process::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if !process::is_alive(pid) && status(runtime).await.is_err() {
            println!("stopped");
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LauncherError::StopTimeout {
                pid,
                secs: STOP_TIMEOUT.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
