//! `pedelec-multicall`: pedelecd, the four services and the native host in
//! one executable. The release build installs it once, under each program's
//! name as a hard link; the name a process is started under picks the
//! program. The six processes then map one file, so its code pages are in
//! memory once, not six times (docs/decisions.md, "One executable for the
//! long-running processes"). Each program's own crate keeps its binary for
//! development and tests; both start at that crate's `program::main`.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use pedelec_common::ServiceName;
use pedelec_common::install::NATIVE_HOST;

/// A program's start: its crate's `program::main`.
type Program = fn() -> ExitCode;

/// Each program's file name and where it starts, in the order `--list`
/// prints them (pedelecd first: install copies from pedelecd's folder).
const PROGRAMS: [(&str, Program); 6] = [
    (
        ServiceName::Launcher.binary(),
        pedelec_launcher::program::main,
    ),
    (
        ServiceName::Session.binary(),
        pedelec_session::program::main,
    ),
    (
        ServiceName::ToolBridge.binary(),
        pedelec_toolbridge::program::main,
    ),
    (
        ServiceName::Provider.binary(),
        pedelec_provider::program::main,
    ),
    (ServiceName::Asset.binary(), pedelec_asset::program::main),
    (NATIVE_HOST, pedelec_native_host::program::main),
];

fn main() -> ExitCode {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    let name = Path::new(&arg0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if let Some((_, program)) = PROGRAMS.iter().find(|(n, _)| *n == name) {
        return program();
    }
    let names: Vec<&str> = PROGRAMS.iter().map(|(n, _)| *n).collect();
    // Under its own name: `--list` gives build-release.sh the names to link.
    if std::env::args().nth(1).as_deref() == Some("--list") {
        println!("{}", names.join("\n"));
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "pedelec-multicall: started as {name:?}; it runs as one of {} (a link by that name), or lists them with --list",
        names.join(", ")
    );
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_is_installed_and_every_service_is_here() {
        for (name, _) in PROGRAMS {
            assert!(
                pedelec_launcher::install::BINARIES.contains(&name),
                "{name} is not in install::BINARIES"
            );
        }
        for service in ServiceName::SUPERVISED
            .into_iter()
            .chain([ServiceName::Launcher])
        {
            assert!(
                PROGRAMS.iter().any(|(n, _)| *n == service.binary()),
                "{} has no entry",
                service.binary()
            );
        }
    }
}
