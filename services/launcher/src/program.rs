//! The pedelecd program: the process hardening, its command line, then the
//! subcommand. Its own binary and the shared release executable
//! (`pedelec-multicall`) both start here.

use std::process::ExitCode;

use clap::Parser;
use pedelec_common::ServiceName;

use crate::cli::{self, Cli};

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main() -> ExitCode {
    // First: `up` makes the service secret, which no other process of the
    // user may read from this one (docs/security.md).
    if let Err(e) = pedelec_common::process::make_non_dumpable() {
        eprintln!("pedelecd: cannot make the process non-dumpable: {e}");
        return ExitCode::from(crate::error::exit::FAILURE);
    }
    let cli = Cli::parse();
    let program = ServiceName::Launcher.binary();
    pedelec_common::telemetry::init(program);
    ExitCode::from(pedelec_common::runtime::block_on(program, cli::run(cli)))
}
