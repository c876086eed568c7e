//! Tracing setup shared by every binary.

use tracing_subscriber::EnvFilter;

/// Logs to stderr, filtered by `PEDELEC_LOG` (else `RUST_LOG`, else `info`),
/// with the usual `target=level` directives.
pub fn init(process: &str) {
    let filter = std::env::var(crate::env::LOG)
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    // Colours only for a terminal: under pedelecd, stderr is a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    tracing::debug!(process, "tracing ready");
}
