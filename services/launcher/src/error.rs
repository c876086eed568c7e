//! The launcher's one error enum, mapped here (and only here) to a gRPC status
//! and to the CLI's exit code.

use std::path::PathBuf;

use pedelec_common::{Code, CodedError, CommonError};

/// Exit codes of `pedelecd`, stable for scripts and tests; defined in
/// pedelec-common because the native host reads them.
pub use pedelec_common::pedelecd_exit as exit;

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("pedelecd is already running (pid {pid}) on {}", socket.display())]
    AlreadyRunning { pid: u32, socket: PathBuf },
    #[error("pedelecd is not running")]
    NotRunning,
    #[error("unknown service {0:?} (expected provider, toolbridge, asset or session)")]
    UnknownService(String),
    #[error("{service} binary not found at {}", path.display())]
    BinaryNotFound {
        service: &'static str,
        path: PathBuf,
    },
    #[error("cannot start {service} ({}): {source}", path.display())]
    Spawn {
        service: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    StartFailed(String),
    #[error("pedelecd (pid {pid}) did not stop within {secs}s")]
    StopTimeout { pid: u32, secs: u64 },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    Install(String),
    #[error("launcher RPC failed: {0}")]
    Rpc(String),
    #[error(transparent)]
    Common(#[from] CommonError),
}

impl LauncherError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LauncherError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            LauncherError::NotRunning => exit::NOT_RUNNING,
            LauncherError::AlreadyRunning { .. } => exit::ALREADY_RUNNING,
            LauncherError::InvalidInput(_) => exit::USAGE,
            _ => exit::FAILURE,
        }
    }

    fn code(&self) -> Code {
        match self {
            LauncherError::UnknownService(_) | LauncherError::InvalidInput(_) => {
                Code::INVALID_INPUT
            }
            LauncherError::NotRunning => Code::CORE_UNAVAILABLE,
            LauncherError::Common(e) => e.code(),
            _ => Code::INTERNAL,
        }
    }

    pub fn to_status(&self) -> tonic::Status {
        CodedError::new(self.code(), self.to_string()).to_status()
    }
}

impl From<LauncherError> for tonic::Status {
    fn from(e: LauncherError) -> Self {
        e.to_status()
    }
}
