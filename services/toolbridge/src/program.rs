//! The pedelec-toolbridge program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::args::{DirArgs, SecretArgs};

/// Pedelec ToolBridgeService: page tools, the first-turn prompt, pending calls.
#[derive(Parser)]
#[command(name = "pedelec-toolbridge", version)]
struct Args {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(flatten)]
    secret: SecretArgs,
}

pub fn main() -> ExitCode {
    pedelec_common::runtime::block_on("pedelec-toolbridge", serve())
}

async fn serve() -> ExitCode {
    let args = Args::parse();
    pedelec_common::telemetry::init("pedelec-toolbridge");
    let service_secret = match args.secret.read() {
        Ok(secret) => secret,
        Err(e) => {
            tracing::error!(error = %e, "pedelec-toolbridge failed");
            return ExitCode::FAILURE;
        }
    };
    let config = crate::Config {
        runtime_dir: args.dirs.runtime(),
        data_dir: args.dirs.data(),
        service_secret,
    };
    match crate::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "pedelec-toolbridge failed");
            ExitCode::FAILURE
        }
    }
}
