//! ToolBridgeService: the registry of each thread's page tools, the first-turn
//! prompt block and the pending tool calls. For now the service only stands up
//! on its socket; every RPC answers UNIMPLEMENTED until the tools issue lands.

use std::future::Future;
use std::sync::Arc;

use pedelec_common::{CommonError, DataDir, RuntimeDir, ServiceName, uds};
use pedelec_proto::v1::tool_bridge_service_server::ToolBridgeServiceServer;
use tonic::service::Routes;

mod grpc;

pub use grpc::ToolBridgeGrpc;

/// Where the service lives on disk.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolBridgeError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("{0} lands with the tools issue")]
    NotYet(&'static str),
}

impl ToolBridgeError {
    /// The one place a ToolBridge error becomes a gRPC status.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            ToolBridgeError::NotYet(_) => tonic::Status::unimplemented(self.to_string()),
            ToolBridgeError::Common(e) => {
                pedelec_common::CodedError::new(e.code(), e.to_string()).to_status()
            }
        }
    }
}

impl From<ToolBridgeError> for tonic::Status {
    fn from(e: ToolBridgeError) -> Self {
        e.to_status()
    }
}

/// The tool bridge's logic, independent of gRPC.
#[derive(Debug, Default)]
pub struct ToolBridge {}

impl ToolBridge {
    pub fn new() -> Self {
        ToolBridge {}
    }

    /// The answer of every operation until the tools issue fills them in.
    pub fn not_yet(&self, what: &'static str) -> ToolBridgeError {
        ToolBridgeError::NotYet(what)
    }
}

/// Serves ToolBridgeService on `toolbridge.sock` until SIGTERM/SIGINT.
pub async fn run(config: Config) -> Result<(), ToolBridgeError> {
    run_until(config, pedelec_common::shutdown_signal()).await
}

/// Serves until `shutdown` resolves (tests pass their own future).
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ToolBridgeError> {
    config.runtime_dir.ensure()?;
    config.data_dir.ensure()?;
    let bridge = Arc::new(ToolBridge::new());
    let routes = Routes::new(ToolBridgeServiceServer::new(ToolBridgeGrpc::new(bridge)));
    let socket = config.runtime_dir.socket(ServiceName::ToolBridge);
    uds::serve(&socket, ServiceName::ToolBridge, routes, shutdown).await?;
    Ok(())
}
