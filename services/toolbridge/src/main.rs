#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::args::DirArgs;

/// Pedelec ToolBridgeService: page tools, the first-turn prompt, pending calls.
#[derive(Parser)]
#[command(name = "pedelec-toolbridge", version)]
struct Args {
    #[command(flatten)]
    dirs: DirArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    pedelec_common::telemetry::init("pedelec-toolbridge");
    let config = pedelec_toolbridge::Config {
        runtime_dir: args.dirs.runtime(),
        data_dir: args.dirs.data(),
    };
    match pedelec_toolbridge::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "pedelec-toolbridge failed");
            ExitCode::FAILURE
        }
    }
}
