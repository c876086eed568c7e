use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pedelec_common::{DataDir, RuntimeDir};

/// Pedelec ToolBridgeService: page tools, the first-turn prompt, pending calls.
#[derive(Parser)]
#[command(name = "pedelec-toolbridge", version)]
struct Args {
    /// Sockets folder (default: $PEDELEC_RUNTIME_DIR, else $XDG_RUNTIME_DIR/pedelec).
    #[arg(long)]
    runtime_dir: Option<PathBuf>,
    /// State folder (default: $PEDELEC_HOME, else the platform data dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    pedelec_common::telemetry::init("pedelec-toolbridge");
    let config = pedelec_toolbridge::Config {
        runtime_dir: args
            .runtime_dir
            .map_or_else(RuntimeDir::from_env, RuntimeDir::at),
        data_dir: args.data_dir.map_or_else(DataDir::from_env, DataDir::at),
    };
    match pedelec_toolbridge::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "pedelec-toolbridge failed");
            ExitCode::FAILURE
        }
    }
}
