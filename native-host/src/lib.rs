//! `pedelec-native-host`: the program Chrome starts for the Pedelec extension.
//! It speaks Chrome's native-messaging framing on stdin/stdout and translates
//! each request into a call on the Pedelec services (docs/architecture.md;
//! the wire format is in docs/native-messaging.md).

#![forbid(unsafe_code)]

pub mod caller;
pub mod coalesce;
pub mod core;
pub mod error;
pub mod event_stream;
pub mod frame;
pub mod host;
pub mod log;
pub mod program;
pub mod protocol;

pub use error::HostError;

/// The whole program after argv (`args`: the arguments after the program's
/// name): logs, caller check, serve stdin until EOF.
pub async fn main(args: Vec<String>) {
    // A browser-started host has the browser's environment, not the
    // installer's: the install's host config fills in what it does not say.
    let config = pedelec_common::install::HostConfig::beside_current_exe();
    let installed = config.as_ref().ok().and_then(Option::as_ref);
    let runtime = pedelec_common::install::runtime_dir(installed);
    let log_file = log::init(runtime.as_ref().ok());
    if let Err(why) = &config {
        tracing::warn!(error = %why, "ignoring an unreadable host config");
    }
    let allowed_ids = pedelec_common::install::allowed_ids(installed);
    let caller = caller::Caller::from_args(&args);
    let origin = caller.describe();
    let admission = if !caller.is_allowed(&allowed_ids) {
        tracing::warn!(extension = %origin, allowed = ?allowed_ids, "refusing an extension this host was not installed for");
        host::Admission::Refuse(HostError::NotAllowed {
            origin: origin.clone(),
        })
    } else {
        match runtime {
            Ok(runtime) => {
                tracing::info!(extension = %origin, pid = std::process::id(), runtime = %runtime.path().display(), "native host started");
                host::Admission::Serve(core::Core::new(runtime, installed, log_file))
            }
            // No folder for the sockets: nothing can be reached or started.
            Err(why) => {
                tracing::error!(error = %why, "no runtime dir; refusing every request");
                host::Admission::Refuse(HostError::CoreUnavailable(why.to_string()))
            }
        }
    };
    host::run(
        pedelec_common::stdio::stdin(),
        pedelec_common::stdio::stdout(),
        caller,
        admission,
    )
    .await;
    tracing::info!("native host exiting");
}
