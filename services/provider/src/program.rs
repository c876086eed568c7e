//! The pedelec-provider program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::args::{DirArgs, SecretArgs, run_service};

/// Pedelec's ProviderService: settings, provider CLIs and agent turns, on `provider.sock`.
#[derive(Parser)]
#[command(name = "pedelec-provider", version)]
struct Args {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(flatten)]
    secret: SecretArgs,
}

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main() -> ExitCode {
    let args = Args::parse();
    run_service("pedelec-provider", &args.secret, |service_secret| {
        let mut config = crate::Config::new(args.dirs.runtime(), args.dirs.data());
        config.service_secret = service_secret;
        crate::run(config)
    })
}
