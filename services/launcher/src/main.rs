#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use pedelec_launcher::cli::{self, Cli};

fn main() -> ExitCode {
    // First: `up` makes the service secret, which no other process of the
    // user may read from this one (docs/security.md).
    if let Err(e) = pedelec_common::process::make_non_dumpable() {
        eprintln!("pedelecd: cannot make the process non-dumpable: {e}");
        return ExitCode::from(pedelec_launcher::error::exit::FAILURE);
    }
    let cli = Cli::parse();
    pedelec_common::telemetry::init("pedelecd");
    // One thread: the launcher is mostly idle, and PR_SET_PDEATHSIG fires when
    // the *thread* that spawned a child exits, so children must be spawned from
    // a thread that lives as long as the process.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pedelecd: cannot start the async runtime: {e}");
            return ExitCode::from(pedelec_launcher::error::exit::FAILURE);
        }
    };
    ExitCode::from(runtime.block_on(cli::run(cli)))
}
