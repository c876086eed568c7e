//! `pedelec-multicall`: pedelecd, the four services and the native host in
//! one executable. The release build installs it once, under each program's
//! name as a hard link; the name a process is started under picks the
//! program. The six processes then map one file, so its code pages are in
//! memory once, not six times (docs/decisions.md, "One executable for the
//! long-running processes"). Each program's own crate keeps its binary for
//! development and tests; both start at that crate's `program::main`.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use pedelec_common::Program;
use pedelec_common::process::fork_server::ProgramMain;

/// Where a program of this executable starts: its crate's `program::main`;
/// None for the programs built as executables of their own.
fn start(program: Program) -> Option<ProgramMain> {
    match program {
        Program::Launcher => Some(launcher),
        Program::Session => Some(pedelec_session::program::main),
        Program::ToolBridge => Some(pedelec_toolbridge::program::main),
        Program::Provider => Some(pedelec_provider::program::main),
        Program::Asset => Some(pedelec_asset::program::main),
        Program::NativeHost => Some(pedelec_native_host::program::main),
        Program::Cli | Program::Agent => None,
    }
}

/// pedelecd, told that the services are in this executable: `pedelecd up`
/// forks them instead of exec'ing the file again.
fn launcher(args: Vec<OsString>) -> ExitCode {
    pedelec_launcher::program::main(args, Some(start))
}

fn main() -> ExitCode {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    let name = Path::new(&arg0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let started = Program::parse(name)
        .filter(|p| Program::LONG_RUNNING.contains(p))
        .and_then(start);
    if let Some(program) = started {
        return program(std::env::args_os().collect());
    }
    let names: Vec<&str> = Program::LONG_RUNNING
        .iter()
        .map(|p| p.file_name())
        .collect();
    // Under its own name: `--list` gives build-release.sh and
    // tools/hot-functions.py the names to link, one a line, pedelecd first
    // (install copies from pedelecd's folder).
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
    use pedelec_common::ServiceName;

    #[test]
    fn every_long_running_program_is_here_and_installed() {
        for program in Program::ALL {
            assert_eq!(
                start(program).is_some(),
                Program::LONG_RUNNING.contains(&program),
                "{program:?}"
            );
        }
        for program in Program::LONG_RUNNING {
            assert!(
                pedelec_launcher::install::BINARIES.contains(&program.file_name()),
                "{program:?} is not in install::BINARIES"
            );
        }
        for service in ServiceName::SUPERVISED
            .into_iter()
            .chain([ServiceName::Launcher])
        {
            assert!(Program::LONG_RUNNING.contains(&service.program()));
        }
    }
}
