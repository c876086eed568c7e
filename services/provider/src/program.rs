//! The pedelec-provider program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::args::{DirArgs, SecretArgs};

/// Pedelec's ProviderService: settings, provider CLIs and agent turns, on `provider.sock`.
#[derive(Parser)]
#[command(name = "pedelec-provider", version)]
struct Args {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(flatten)]
    secret: SecretArgs,
}

pub fn main() -> ExitCode {
    pedelec_common::runtime::block_on("pedelec-provider", serve())
}

async fn serve() -> ExitCode {
    let args = Args::parse();
    pedelec_common::telemetry::init("pedelec-provider");
    let mut config = crate::Config::new(args.dirs.runtime(), args.dirs.data());
    config.service_secret = match args.secret.read() {
        Ok(secret) => secret,
        Err(e) => {
            tracing::error!("pedelec-provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    match crate::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("pedelec-provider: {e}");
            ExitCode::FAILURE
        }
    }
}
