//! The pedelec-asset program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use pedelec_common::ServiceName;
use pedelec_common::args::{ServiceArgs, run_service};
use pedelec_common::env;

/// Pedelec AssetService: files shared between the page and the agent.
#[derive(Parser)]
#[command(name = ServiceName::Asset.binary(), version)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    /// Largest accepted asset, in bytes.
    #[arg(long, env = env::ASSET_MAX_BYTES, default_value_t = 100 * 1024 * 1024)]
    max_asset_bytes: u64,
    /// How long a transfer ticket stays valid, in milliseconds.
    #[arg(long, env = env::ASSET_TICKET_TTL_MS, default_value_t = 5 * 60 * 1000)]
    ticket_ttl_ms: u64,
    /// How long one HTTP upload's body may take in all, in milliseconds; a
    /// body still arriving then is refused and its temp file removed.
    #[arg(long, env = env::ASSET_UPLOAD_DEADLINE_MS, default_value_t = 15 * 60 * 1000)]
    upload_deadline_ms: u64,
    /// The most one thread's assets folder may hold, in bytes.
    #[arg(long, env = env::ASSET_THREAD_QUOTA_BYTES, default_value_t = crate::assets::THREAD_QUOTA_BYTES)]
    thread_quota_bytes: u64,
    /// The most the assets folders of one origin's threads may hold in all, in bytes.
    #[arg(long, env = env::ASSET_ORIGIN_QUOTA_BYTES, default_value_t = crate::assets::ORIGIN_QUOTA_BYTES)]
    origin_quota_bytes: u64,
}

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    run_service(
        ServiceName::Asset,
        &args.service,
        |runtime_dir, data_dir, service_secret| {
            crate::run(crate::Config {
                runtime_dir,
                data_dir,
                max_asset_bytes: args.max_asset_bytes,
                ticket_ttl: Duration::from_millis(args.ticket_ttl_ms),
                upload_deadline: Duration::from_millis(args.upload_deadline_ms),
                thread_quota_bytes: args.thread_quota_bytes,
                origin_quota_bytes: args.origin_quota_bytes,
                service_secret,
            })
        },
    )
}
