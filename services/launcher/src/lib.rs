//! pedelecd: starts the four Pedelec services, waits for their health,
//! restarts a crashed one with backoff, stops them all on SIGTERM, and serves
//! SupervisorService on `launcher.sock`.

#![forbid(unsafe_code)]

pub mod backoff;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod doctor;
pub mod error;
pub mod grpc;
pub mod install;
pub mod lock;
pub mod program;
pub mod supervisor;

pub use error::LauncherError;
pub use supervisor::{Supervisor, SupervisorConfig};

use pedelec_common::{DataDir, RuntimeDir};

/// The runtime and data dirs, resolved once from flags or the environment.
#[derive(Clone, Debug)]
pub struct Dirs {
    pub runtime: RuntimeDir,
    pub data: DataDir,
}
