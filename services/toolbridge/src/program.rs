//! The pedelec-toolbridge program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::ServiceName;
use pedelec_common::args::{ServiceArgs, run_service};

/// Pedelec ToolBridgeService: page tools, the first-turn prompt, pending calls.
#[derive(Parser)]
#[command(name = ServiceName::ToolBridge.binary(), version)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
}

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    run_service(
        ServiceName::ToolBridge,
        &args.service,
        |runtime_dir, data_dir, service_secret| {
            crate::run(crate::Config {
                runtime_dir,
                data_dir,
                service_secret,
            })
        },
    )
}
