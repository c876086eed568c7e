//! Talking to a running launcher over `launcher.sock`, with the client hub's
//! SupervisorService client.

use std::time::Duration;

use pedelec_common::clients::SupervisorClient;
use pedelec_common::{Clients, RuntimeDir, ServiceName};
use pedelec_proto::v1::{
    RestartServiceRequest, ServiceStatus, SupervisorStatus, SupervisorStatusRequest,
};

use crate::error::LauncherError;

/// How long `status` waits for an answer.
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

async fn client(runtime: &RuntimeDir) -> Result<SupervisorClient, LauncherError> {
    if !runtime.socket(ServiceName::Launcher).exists() {
        return Err(LauncherError::NotRunning);
    }
    let clients = Clients::new(runtime.clone());
    clients
        .connect(ServiceName::Launcher)
        .await
        .map_err(|_| LauncherError::NotRunning)?;
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
