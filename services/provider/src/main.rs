use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use pedelec_common::{DataDir, RuntimeDir};

/// Pedelec's ProviderService: settings, provider CLIs and agent turns, on `provider.sock`.
#[derive(Parser)]
#[command(name = "pedelec-provider", version)]
struct Args {
    /// Folder of the sockets [default: $PEDELEC_RUNTIME_DIR, else $XDG_RUNTIME_DIR/pedelec]
    #[arg(long)]
    runtime_dir: Option<PathBuf>,
    /// Folder of settings.json [default: $PEDELEC_HOME, else the platform data dir]
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    pedelec_common::telemetry::init("pedelec-provider");
    let runtime_dir = args
        .runtime_dir
        .map(RuntimeDir::at)
        .unwrap_or_else(RuntimeDir::from_env);
    let data_dir = args
        .data_dir
        .map(DataDir::at)
        .unwrap_or_else(DataDir::from_env);
    match pedelec_provider::run(pedelec_provider::Config::new(runtime_dir, data_dir)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("pedelec-provider: {e}");
            ExitCode::FAILURE
        }
    }
}
