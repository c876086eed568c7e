//! The error enum of pedelec-common.

use std::path::PathBuf;

use crate::codes::{Code, CodedError};

#[derive(Debug, thiserror::Error)]
pub enum CommonError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is owned by uid {owner}, not by this user (uid {me}); refusing to use it")]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{path} is writable by every user (mode {mode:04o}), so someone else may have left files in it; refusing to use it: check what is in it, then remove it or `chmod 700` it"
    )]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error(
        "{path} is writable by its group (mode {mode:04o}), so another user may have left files in it; refusing to use it: check what is in it, then `chmod 700` it"
    )]
    WritableByGroup { path: PathBuf, mode: u32 },
    #[error("cannot choose Pedelec's {what}: none of {set} is set; set one of them or pass {flag}")]
    NoDir {
        what: &'static str,
        set: &'static str,
        flag: &'static str,
    },
    /// A client refused a socket before sending anything: its folder is not
    /// this user's own and private, or its server runs as another user.
    #[error("refusing to talk to {}: {why}", socket.display())]
    Untrusted { socket: PathBuf, why: String },
    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("socket path {path} is {len} bytes; keep the runtime dir short (limit {limit})")]
    SocketPathTooLong {
        path: PathBuf,
        len: usize,
        limit: usize,
    },
    #[error("another process is already serving on {path}")]
    AlreadyServing { path: PathBuf },
    #[error("cannot connect to {path}: {reason}")]
    Connect { path: PathBuf, reason: String },
    #[error("the tool token is not a valid gRPC metadata value")]
    InvalidToolToken,
    #[error("the service secret handed over on stdin is unusable: {0}")]
    BadServiceSecret(String),
    #[error(
        "{rpc} is internal to Pedelec's services and needs the service secret pedelecd hands them; {}",
        if *presented { "the caller presented a wrong one" } else { "the caller presented none" }
    )]
    ServiceAccessDenied { rpc: &'static str, presented: bool },
}

impl CommonError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CommonError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn code(&self) -> Code {
        match self {
            CommonError::Connect { .. }
            | CommonError::Untrusted { .. }
            | CommonError::NoDir { .. } => Code::CORE_UNAVAILABLE,
            CommonError::InvalidToolToken => Code::INVALID_INPUT,
            CommonError::ServiceAccessDenied { .. } => Code::SERVICE_ACCESS_DENIED,
            _ => Code::INTERNAL,
        }
    }
}

impl From<CommonError> for CodedError {
    fn from(e: CommonError) -> Self {
        CodedError::new(e.code(), e.to_string())
    }
}
