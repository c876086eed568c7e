//! AssetService: files shared between the page and the agent through the
//! thread's workspace, moved over a loopback HTTP server. For now the service only stands up
//! on its socket; every RPC answers UNIMPLEMENTED until the assets issue lands.

use std::future::Future;
use std::sync::Arc;

use pedelec_common::{CommonError, DataDir, RuntimeDir, ServiceName, uds};
use pedelec_proto::v1::asset_service_server::AssetServiceServer;
use tonic::service::Routes;

mod grpc;

pub use grpc::AssetGrpc;

/// Where the service lives on disk.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
}

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("{0} lands with the assets issue")]
    NotYet(&'static str),
}

impl AssetError {
    /// The one place an asset error becomes a gRPC status.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            AssetError::NotYet(_) => tonic::Status::unimplemented(self.to_string()),
            AssetError::Common(e) => {
                pedelec_common::CodedError::new(e.code(), e.to_string()).to_status()
            }
        }
    }
}

impl From<AssetError> for tonic::Status {
    fn from(e: AssetError) -> Self {
        e.to_status()
    }
}

/// The asset service's logic, independent of gRPC.
#[derive(Debug, Default)]
pub struct Assets {}

impl Assets {
    pub fn new() -> Self {
        Assets {}
    }

    /// The answer of every operation until the assets issue fills them in.
    pub fn not_yet(&self, what: &'static str) -> AssetError {
        AssetError::NotYet(what)
    }
}

/// Serves AssetService on `asset.sock` until SIGTERM/SIGINT.
pub async fn run(config: Config) -> Result<(), AssetError> {
    run_until(config, pedelec_common::shutdown_signal()).await
}

/// Serves until `shutdown` resolves (tests pass their own future).
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AssetError> {
    config.runtime_dir.ensure()?;
    config.data_dir.ensure()?;
    let assets = Arc::new(Assets::new());
    let routes = Routes::new(AssetServiceServer::new(AssetGrpc::new(assets)));
    let socket = config.runtime_dir.socket(ServiceName::Asset);
    uds::serve(&socket, ServiceName::Asset, routes, shutdown).await?;
    Ok(())
}
