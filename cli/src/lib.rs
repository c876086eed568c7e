//! pedelec-cli: `tool-spec` / `tool-call` for agent CLIs inside a turn
//! (module `tools`), and local admin commands (module `admin`).
//! `main.rs` only parses flags and calls in here.

#![deny(unsafe_code)] // allowed only in `arena`, the allocator

pub mod admin;
pub mod arena;
pub mod error;
pub mod mcp;
pub mod output;
pub mod tools;

pub use error::CliError;

/// A single-threaded runtime: each invocation makes one or two RPCs, and a
/// worker pool would only add start-up time.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| CliError::Unavailable(format!("cannot start the async runtime: {e}")))
}

/// The subcommands whose errors are for people (stderr text), not agents.
const HUMAN_COMMANDS: [&str; 4] = ["sessions", "providers", "settings", "sites"];
const AGENT_COMMANDS: [&str; 3] = ["tool-spec", "tool-call", "mcp"];

/// Whether a usage error in `args` should also print the JSON error document:
/// yes unless the first command word is a human command, so an agent that got
/// its command line wrong still reads JSON.
pub fn agent_mode(args: &[String]) -> bool {
    for arg in args.iter().skip(1) {
        if HUMAN_COMMANDS.contains(&arg.as_str()) {
            return false;
        }
        if AGENT_COMMANDS.contains(&arg.as_str()) {
            return true;
        }
    }
    true
}

/// Reports a command-line error: clap's text (with usage) on stderr, and for
/// agents the JSON error document on stdout. Returns the exit code (2).
pub fn usage_error(rendered: &str, agent: bool) -> i32 {
    eprint!("{rendered}");
    let err = CliError::Usage(usage_message(rendered));
    if agent {
        output::print_document(&output::error_document(&err));
    }
    err.exit_code()
}

/// The essence of clap's message: the part before the usage block, without the
/// `error: ` prefix, on one line.
pub fn usage_message(rendered: &str) -> String {
    let head = rendered.split("\n\n").next().unwrap_or(rendered);
    let head = head.trim().strip_prefix("error: ").unwrap_or(head.trim());
    head.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        std::iter::once("pedelec-cli")
            .chain(s.split_whitespace())
            .map(String::from)
            .collect()
    }

    #[test]
    fn agent_mode_unless_a_human_command_comes_first() {
        assert!(agent_mode(&argv("tool-call")));
        assert!(agent_mode(&argv("--thread-id x tool-spec")));
        assert!(agent_mode(&argv("--bogus")));
        assert!(agent_mode(&argv("")));
        assert!(!agent_mode(&argv("sessions show")));
        assert!(!agent_mode(&argv("settings set nope")));
        // A tool argument named like a command does not switch modes.
        assert!(agent_mode(&argv("tool-call settings")));
    }

    #[test]
    fn usage_message_is_one_line_without_prefix() {
        let rendered = "error: the following required arguments were not provided:\n  <TOOL>\n\nUsage: pedelec-cli tool-spec <TOOL>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_message(rendered),
            "the following required arguments were not provided: <TOOL>"
        );
    }
}
