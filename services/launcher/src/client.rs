//! Talking to a running launcher over `launcher.sock`.

use std::path::Path;
use std::time::Duration;

use pedelec_common::uds;
use pedelec_proto::v1::supervisor_service_client::SupervisorServiceClient;
use pedelec_proto::v1::{
    RestartServiceRequest, ServiceStatus, SupervisorStatus, SupervisorStatusRequest,
};
use tonic::transport::Channel;

use crate::error::LauncherError;

async fn client(socket: &Path) -> Result<SupervisorServiceClient<Channel>, LauncherError> {
    if !socket.exists() {
        return Err(LauncherError::NotRunning);
    }
    let channel = uds::connect(socket)
        .await
        .map_err(|_| LauncherError::NotRunning)?;
    Ok(SupervisorServiceClient::new(channel))
}

/// Asks the launcher to restart one service; answers once it is healthy again.
pub async fn restart(socket: &Path, service: &str) -> Result<ServiceStatus, LauncherError> {
    let mut client = client(socket).await?;
    let request = RestartServiceRequest {
        service: service.to_string(),
    };
    client
        .restart(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| LauncherError::Rpc(status.message().to_string()))
}

/// The launcher's Status; `NotRunning` when nothing answers on the socket.
pub async fn status(socket: &Path) -> Result<SupervisorStatus, LauncherError> {
    let mut client = client(socket).await?;
    let call = client.status(SupervisorStatusRequest {});
    match tokio::time::timeout(Duration::from_secs(3), call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(LauncherError::Rpc(status.message().to_string())),
        Err(_) => Err(LauncherError::Rpc(format!(
            "{} did not answer within 3s",
            socket.display()
        ))),
    }
}
