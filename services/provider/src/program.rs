//! The pedelec-provider program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::ServiceName;
use pedelec_common::args::{ServiceArgs, run_service};

/// Pedelec's ProviderService: settings, provider CLIs and agent turns, on `provider.sock`.
#[derive(Parser)]
#[command(name = ServiceName::Provider.binary(), version)]
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
        ServiceName::Provider,
        &args.service,
        |runtime, data, service_secret| {
            let mut config = crate::Config::new(runtime, data);
            config.service_secret = service_secret;
            crate::run(config)
        },
    )
}
