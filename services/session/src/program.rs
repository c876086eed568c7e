//! The pedelec-session program: its flags, then the service until it stops. Its
//! own binary and the shared release executable (`pedelec-multicall`) both
//! start here.

use std::time::Duration;

use clap::Parser;
use pedelec_common::ServiceName;
use pedelec_common::args::{ServiceArgs, run_service};
use pedelec_common::env;

/// Pedelec SessionService: serves session.sock in the runtime directory.
#[derive(Parser)]
#[command(name = ServiceName::Session.binary(), version)]
struct Flags {
    #[command(flatten)]
    service: ServiceArgs,
    /// Milliseconds an auto-end thread may have no attached route before it is ended.
    #[arg(long, env = env::AUTO_END_GRACE_MS)]
    auto_end_grace_ms: Option<u64>,
    /// Milliseconds an ended thread without routes stays in memory (then it is
    /// kept in the journal only and loaded again when asked for).
    #[arg(long, env = env::EVICT_ENDED_MS)]
    evict_ended_ms: Option<u64>,
    /// Milliseconds an ended thread is kept at all (default a week); then its
    /// journal record and its managed workspace are removed.
    #[arg(long, env = env::ENDED_RETENTION_MS)]
    ended_retention_ms: Option<u64>,
    /// Turns one web origin may have running at once.
    #[arg(long, env = env::MAX_RUNNING_TURNS_PER_ORIGIN)]
    max_running_turns_per_origin: Option<usize>,
    /// Turns all callers together may have running at once.
    #[arg(long, env = env::MAX_RUNNING_TURNS)]
    max_running_turns: Option<usize>,
    /// Sessions one web origin may create per rate window (at most that many at once).
    #[arg(long, env = env::CREATE_RATE_LIMIT)]
    create_rate_limit: Option<u32>,
    /// Turns (SendText, Prepare) one web origin may start per rate window.
    #[arg(long, env = env::TURN_RATE_LIMIT)]
    turn_rate_limit: Option<u32>,
    /// Milliseconds of the window those two rates are counted over.
    #[arg(long, env = env::RATE_WINDOW_MS)]
    rate_window_ms: Option<u64>,
}

// #[inline]: compiled where it is called; in pedelec-multicall that is 1.4 MB
// less text (docs/decisions.md, "One executable for the long-running processes").
#[inline]
pub fn main(args: Vec<std::ffi::OsString>) -> std::process::ExitCode {
    let flags = Flags::parse_from(args);
    run_service(
        ServiceName::Session,
        &flags.service,
        |runtime, data, service_secret| {
            let mut config = crate::Config::new(runtime, data);
            config.service_secret = service_secret;
            if let Some(ms) = flags.auto_end_grace_ms {
                config.auto_end_grace = Duration::from_millis(ms);
            }
            if let Some(ms) = flags.evict_ended_ms {
                config.evict_ended_after = Duration::from_millis(ms);
            }
            if let Some(ms) = flags.ended_retention_ms {
                config.ended_retention = Duration::from_millis(ms);
            }
            let limits = &mut config.limits;
            if let Some(n) = flags.max_running_turns_per_origin {
                limits.max_running_turns_per_origin = n;
            }
            if let Some(n) = flags.max_running_turns {
                limits.max_running_turns = n;
            }
            if let Some(n) = flags.create_rate_limit {
                limits.creates_per_window = n;
            }
            if let Some(n) = flags.turn_rate_limit {
                limits.turn_starts_per_window = n;
            }
            if let Some(ms) = flags.rate_window_ms {
                limits.rate_window = Duration::from_millis(ms);
            }
            crate::run(config)
        },
    )
}
