//! ToolBridgeService: the registry of each thread's page tools, the first-turn
//! prompt block and the pending tool calls.
//!
//! The logic lives in plain types — [`manifest`] (validation, the
//! `pedelec-manifest` crate SessionService checks a create with), [`validate`]
//! (arguments), [`prompt`] (the first-turn block) and [`bridge`] (registry and
//! pending calls) — and [`ToolBridgeGrpc`] is a thin tonic adapter over them.

#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;

use pedelec_common::secret::{InternalGate, ServiceSecret};
use pedelec_common::server::ServiceServer;
use pedelec_common::{DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1::tool_bridge_service_server::ToolBridgeServiceServer;

pub mod bridge;
mod error;
mod grpc;
pub use pedelec_manifest as manifest;
pub mod program;
pub mod prompt;
pub mod validate;

pub use bridge::{
    BridgeEvent, CallRequest, DropReason, Outcome, Registered, SettleReason, ToolBridge,
    ToolSpecInfo,
};
pub use error::ToolBridgeError;
pub use grpc::ToolBridgeGrpc;

/// Where the service lives on disk.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
    /// What the internal RPCs (Register, RenderPrompt, Watch, Resolve, Drop)
    /// require; None admits every caller (a service started by hand).
    pub service_secret: Option<ServiceSecret>,
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
    let server = ServiceServer::prepare(
        ServiceName::ToolBridge,
        &config.runtime_dir,
        &config.data_dir,
    )?;
    let bridge = Arc::new(ToolBridge::new());
    tracing::info!(cli = %bridge.cli_path().display(), "pedelec-cli path for prompts");
    let grpc = ToolBridgeGrpc::new(bridge, InternalGate::new(config.service_secret));
    server
        .serve(ToolBridgeServiceServer::new(grpc), shutdown)
        .await?;
    Ok(())
}
