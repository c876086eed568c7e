//! SessionService: threads (sessions), their lifecycle, event streams with
//! replay, auto-end, and the journal that lets threads survive a restart.

#![forbid(unsafe_code)]

/// The crate's one error enum and its Pedelec codes.
mod error;
/// The tonic adapter: SessionService RPCs to `Sessions` calls.
mod grpc;
/// Each thread's durable, bounded conversation history.
mod history;
/// The caps on running turns and the rates of creates and turn starts.
pub mod limits;
/// The program: flags, then the service.
pub mod program;
/// Ended threads' records (and managed workspaces) removed after a while.
mod prune;
/// A stream kept open to another service, reopened with backoff.
mod reconnect;
/// A thread's durable record and the journal of one file per thread.
mod record;
/// The bounded buffer of recent events a route replays from.
mod replay;
/// `Sessions`: the map of threads and each RPC's work, one module per concern.
mod sessions;
/// The provider settings ProviderService sends, and profiles resolved from them.
mod settings;
/// Site grants: `sites.json`, origin rules, the never-grantable folders.
mod sites;
/// One thread in memory: record, replay buffer, routes, event emission.
mod thread;
/// A thread's tools at ToolBridgeService: manifest check, registration, Watch.
mod tools;
/// One operation's provider turn through ProviderService.
mod turn;
/// Which threads work in which explicit folder, for every journaled thread.
mod workspaces;

#[cfg(test)]
mod tests;

use std::time::Duration;

use pedelec_common::{DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1::session_service_server::SessionServiceServer;

pub use error::SessionError;
pub use replay::ReplayLimits;
pub use sessions::{Config, Sessions, Upstream};

/// The grace period before an auto-end thread without routes is ended: long
/// enough for the extension to reconnect a dropped native port and re-attach.
pub const DEFAULT_AUTO_END_GRACE: Duration = Duration::from_secs(5);

impl Config {
    pub fn new(runtime_dir: RuntimeDir, data_dir: DataDir) -> Self {
        Config {
            runtime_dir,
            data_dir,
            auto_end_grace: DEFAULT_AUTO_END_GRACE,
            evict_ended_after: DEFAULT_EVICT_ENDED_AFTER,
            replay: ReplayLimits::default(),
            max_open_threads_per_origin: DEFAULT_MAX_OPEN_THREADS_PER_ORIGIN,
            limits: limits::LimitConfig::default(),
            ended_retention: DEFAULT_ENDED_RETENTION,
            service_secret: None,
        }
    }
}

/// How many threads one origin may hold open (not ended) at once: a page
/// that creates sessions in a loop must not exhaust the user's disk and
/// memory. Far above what a real application keeps open.
pub const DEFAULT_MAX_OPEN_THREADS_PER_ORIGIN: usize = 256;

/// How long an ended thread without routes stays in memory.
pub const DEFAULT_EVICT_ENDED_AFTER: Duration = Duration::from_secs(600);

/// How long an ended thread is kept at all: after this its journal record and
/// its managed workspace are removed, at start-up or by the hourly sweep
/// (docs/decisions.md, "Ended threads are kept a week").
pub const DEFAULT_ENDED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Ensures the directories, loads the journal and serves until SIGTERM/SIGINT.
pub async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    run_until(config, pedelec_common::shutdown_signal()).await
}

/// Serves SessionService on its socket until `shutdown` resolves.
pub async fn run_until(
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Box<dyn std::error::Error>> {
    let server = pedelec_common::server::ServiceServer::prepare(
        ServiceName::Session,
        &config.runtime_dir,
        &config.data_dir,
    )?;
    let upstream = Upstream::on_sockets(&config.runtime_dir, config.service_secret.as_ref());
    let sessions = Sessions::open(config, upstream);
    server
        .serve(
            SessionServiceServer::new(grpc::SessionGrpc(sessions)),
            shutdown,
        )
        .await?;
    Ok(())
}
