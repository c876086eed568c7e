//! The one error enum of the crate, and the one place it becomes a Pedelec code,
//! a gRPC status and an HTTP status.

use hyper::StatusCode;
use pedelec_common::{Code, CodedError, CommonError};

/// Why the transfer server refused a ticket; each maps to its own HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketRefusal {
    /// No usable `Authorization: Bearer` header (401).
    NoCredentials,
    /// A token that does not match, or a request from another origin (403).
    Forbidden,
    /// No such ticket: never issued, already used, expired, or of the other kind (404).
    Unknown,
}

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error(transparent)]
    Common(#[from] CommonError),
    /// An error SessionService answered (THREAD_NOT_FOUND, THREAD_ACCESS_DENIED, …), kept as is.
    #[error("{0}")]
    Thread(CodedError),
    #[error("thread {0} has ended; its assets are no longer accessible")]
    SessionEnded(String),
    #[error("{0}")]
    InvalidInput(String),
    /// A resource bound was reached (live tickets of one origin, the asset
    /// quota of a thread or an origin).
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    PathInvalid(String),
    #[error("no asset at {0}")]
    NotFound(String),
    #[error("{size} bytes exceeds the asset size limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("the body has {got} bytes, the announced size is {expected}")]
    SizeMismatch { expected: u64, got: u64 },
    #[error("{message}")]
    TicketInvalid {
        refusal: TicketRefusal,
        message: String,
    },
    /// `what` is in the page's terms (its asset path, "the thread's assets
    /// folder"), never a local path: the message reaches the page, the
    /// location goes to the log where the error is made.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl AssetError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        AssetError::Io {
            what: what.into(),
            source,
        }
    }

    pub fn ticket(refusal: TicketRefusal, message: impl Into<String>) -> Self {
        AssetError::TicketInvalid {
            refusal,
            message: message.into(),
        }
    }

    /// The Pedelec error this is, as it crosses a process boundary.
    pub fn coded(&self) -> CodedError {
        let code = match self {
            AssetError::Thread(e) => return e.clone(),
            AssetError::Common(e) => e.code(),
            AssetError::SessionEnded(_) => Code::SESSION_ENDED,
            AssetError::InvalidInput(_) | AssetError::SizeMismatch { .. } => Code::INVALID_INPUT,
            AssetError::Limit(_) => Code::LIMIT_EXCEEDED,
            AssetError::PathInvalid(_) => Code::ASSET_PATH_INVALID,
            AssetError::NotFound(_) => Code::ASSET_NOT_FOUND,
            AssetError::TooLarge { .. } => Code::ASSET_TOO_LARGE,
            AssetError::TicketInvalid { .. } => Code::ASSET_TICKET_INVALID,
            AssetError::Io { source, .. } if pedelec_common::is_storage_full(source) => {
                Code::STORAGE_FULL
            }
            AssetError::Io { .. } => Code::INTERNAL,
        };
        CodedError::new(code, self.to_string())
    }

    pub fn to_status(&self) -> tonic::Status {
        self.coded().to_status()
    }

    /// The status the transfer server answers with.
    pub fn http_status(&self) -> StatusCode {
        if let AssetError::TicketInvalid { refusal, .. } = self {
            return match refusal {
                TicketRefusal::NoCredentials => StatusCode::UNAUTHORIZED,
                TicketRefusal::Forbidden => StatusCode::FORBIDDEN,
                TicketRefusal::Unknown => StatusCode::NOT_FOUND,
            };
        }
        match self.coded().code {
            Code::INVALID_INPUT | Code::ASSET_PATH_INVALID => StatusCode::BAD_REQUEST,
            Code::ASSET_NOT_FOUND | Code::THREAD_NOT_FOUND => StatusCode::NOT_FOUND,
            Code::THREAD_ACCESS_DENIED | Code::SITE_NOT_APPROVED => StatusCode::FORBIDDEN,
            Code::ASSET_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            Code::SESSION_ENDED | Code::WORKSPACE_OPEN_FAILED => StatusCode::CONFLICT,
            Code::CORE_UNAVAILABLE => StatusCode::SERVICE_UNAVAILABLE,
            // Both say: the disk, or the share of it this thread or site may
            // use, has no room for this body now (413 says it is too big
            // whatever is stored).
            Code::STORAGE_FULL | Code::LIMIT_EXCEEDED => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<AssetError> for tonic::Status {
    fn from(e: AssetError) -> Self {
        e.to_status()
    }
}
