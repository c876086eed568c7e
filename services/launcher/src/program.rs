//! The pedelecd program: the process hardening, its command line, the fork
//! server, then the subcommand. Its own binary and the shared release
//! executable (`pedelec-multicall`) both start here.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use pedelec_common::process::fork_server::{ForkServer, Programs, Started};
use pedelec_common::{ServiceName, env};

use crate::cli::{self, Cli, Command};

/// `services`: where the services of this executable start, when it holds
/// them (pedelec-multicall); `pedelecd up` then forks them from a fork
/// server instead of exec'ing them.
// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main(args: Vec<OsString>, services: Option<Programs>) -> ExitCode {
    // First: `up` makes the service secret, which no other process of the
    // user may read from this one (docs/security.md).
    if let Err(e) = pedelec_common::process::make_non_dumpable() {
        eprintln!("pedelecd: cannot make the process non-dumpable: {e}");
        return ExitCode::from(crate::error::exit::FAILURE);
    }
    // Before anything else: the fork server copies this process as it is
    // (one thread, and a heap nearly empty, since every page pedelecd and
    // the services later write becomes a copy the fork server keeps).
    let forks = match services.filter(|_| forks_services(&args)) {
        Some(services) => match ForkServer::start(services) {
            Ok(Started::Launcher(server)) => Some(server),
            // A service forked from the fork server, or the fork server, ended.
            Ok(Started::Ended(code)) => return code,
            Err(e) => {
                eprintln!(
                    "pedelecd: no fork server ({e}); the services are started from their files"
                );
                None
            }
        },
        None => None,
    };
    let cli = Cli::parse_from(args);
    // Only `up` starts services; for any other command it goes (killed and
    // reaped) here.
    let forks = forks
        .filter(|_| matches!(cli.command, Command::Up))
        .map(Arc::new);
    let program = ServiceName::Launcher.binary();
    pedelec_common::telemetry::init(program);
    ExitCode::from(pedelec_common::runtime::block_on(
        program,
        cli::run(cli, forks),
    ))
}

/// A command line that may be `up` (it is parsed later: a fork server made
/// for another command goes again), not turned off by
/// `PEDELEC_FORK_SERVICES=0`, and every service's file is this executable
/// (hard links of one file): a forked service runs the code its file holds.
fn forks_services(args: &[OsString]) -> bool {
    if !args.iter().skip(1).any(|a| a == "up")
        || std::env::var_os(env::FORK_SERVICES).is_some_and(|v| v == "0")
    {
        return false;
    }
    let (Some(bin_dir), Ok(this)) = (
        pedelec_common::paths::bin_dir(),
        std::fs::metadata("/proc/self/exe"),
    ) else {
        return false;
    };
    let same_file = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.dev() == this.dev() && m.ino() == this.ino())
    };
    ServiceName::SUPERVISED
        .iter()
        .all(|s| same_file(&bin_dir.join(s.binary())))
}
