//! `pedelec-native-host`: the program Chrome starts for the Pedelec extension.
//! It speaks Chrome's native-messaging framing on stdin/stdout and translates
//! each request into a call on the Pedelec services (docs/architecture.md;
//! the wire format is in docs/native-messaging.md).

#![forbid(unsafe_code)]

pub mod core;
pub mod error;
pub mod frame;
pub mod host;
pub mod log;
pub mod program;
pub mod protocol;

pub use error::HostError;

/// The whole program after argv: logs, origin check, serve stdin until EOF.
pub async fn main(extension_origin: Option<String>) {
    // A browser-started host has the browser's environment, not the
    // installer's: the install's host config fills in what it does not say.
    let config = pedelec_common::install::HostConfig::beside_current_exe();
    let installed = config.as_ref().ok().and_then(Option::as_ref);
    let runtime = pedelec_common::install::runtime_dir(installed);
    let log_file = log::init(&runtime);
    if let Err(why) = &config {
        tracing::warn!(error = %why, "ignoring an unreadable host config");
    }
    let allowed_ids = pedelec_common::install::allowed_ids(installed);
    let admission = if host::is_allowed(extension_origin.as_deref(), &allowed_ids) {
        host::Admission::Serve
    } else {
        host::Admission::Refuse
    };
    let origin = extension_origin.unwrap_or_default();
    if admission == host::Admission::Serve {
        tracing::info!(extension = %origin, pid = std::process::id(), runtime = %runtime.path().display(), "native host started");
    } else {
        tracing::warn!(extension = %origin, allowed = ?allowed_ids, "refusing an extension this host was not installed for");
    }
    let core = core::Core::new(runtime, installed, log_file);
    host::run(
        pedelec_common::stdio::stdin(),
        pedelec_common::stdio::stdout(),
        core,
        origin,
        admission,
    )
    .await;
    tracing::info!("native host exiting");
}
