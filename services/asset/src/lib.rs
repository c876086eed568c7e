//! AssetService: files shared between the page and the agent through the
//! thread's workspace (`<workspace>/.pedelec-runtime/assets/<session id>/`). Small control
//! calls go over gRPC; page bodies go over a loopback HTTP server this service
//! runs, authorised by single-use tickets.

// No unsafe code: the *at() calls are in `pedelec_common::beneath`.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pedelec_common::secret::ServiceSecret;
use pedelec_common::server::ServiceServer;
use pedelec_common::{Clients, DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1::asset_service_server::AssetServiceServer;

pub mod assets;
pub mod error;
mod grpc;
pub mod http;
pub mod paths;
pub mod program;
pub mod quota;
pub mod tickets;

pub use assets::{Assets, Limits};
pub use error::AssetError;
pub use grpc::AssetGrpc;

/// Where the service lives on disk, and its limits.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
    pub max_asset_bytes: u64,
    pub ticket_ttl: Duration,
    /// How long one HTTP upload's body may take in all.
    pub upload_deadline: Duration,
    /// The most one thread's assets folder, and all of one origin's, may hold.
    pub thread_quota_bytes: u64,
    pub origin_quota_bytes: u64,
    /// Presented on the internal RPCs of the other services (AssetService
    /// serves none and calls none today: its hub carries it like every
    /// service's does).
    pub service_secret: Option<ServiceSecret>,
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
    let server = ServiceServer::prepare(ServiceName::Asset, &config.runtime_dir, &config.data_dir)?;
    let listener = http::bind()
        .await
        .map_err(|e| AssetError::io("bind the transfer server on 127.0.0.1", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| AssetError::io("transfer server address", e))?;
    let sessions = Clients::new(config.runtime_dir.clone())
        .with_service_secret(config.service_secret.as_ref())
        .session();
    let limits = Limits {
        max_asset_bytes: config.max_asset_bytes,
        ticket_ttl: config.ticket_ttl,
        upload_deadline: config.upload_deadline,
        thread_quota_bytes: config.thread_quota_bytes,
        origin_quota_bytes: config.origin_quota_bytes,
    };
    let assets = Arc::new(Assets::new(sessions, limits, format!("http://{addr}")));
    tracing::info!(%addr, max_asset_bytes = limits.max_asset_bytes, ticket_ttl_ms = limits.ticket_ttl.as_millis() as u64, thread_quota_bytes = limits.thread_quota_bytes, origin_quota_bytes = limits.origin_quota_bytes, "transfer server listening");
    let transfer = tokio::spawn(http::serve(listener, assets.clone()));
    let result = server
        .serve(AssetServiceServer::new(AssetGrpc::new(assets)), shutdown)
        .await;
    transfer.abort();
    result?;
    Ok(())
}
