//! The error enum of pedelec-session, mapped in one place to a Pedelec code.

use pedelec_common::{Code, CodedError};
use pedelec_manifest::ManifestError;
use pedelec_settings::SettingsError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("no thread {0}")]
    ThreadNotFound(String),
    #[error("thread {0} belongs to another origin")]
    AccessDenied(String),
    #[error("thread {0} already runs operation {1}")]
    Busy(String, String),
    #[error("thread {0} has ended")]
    Ended(String),
    /// A workspace that cannot be used, in words that name no local path
    /// but one the caller gave: a thread's recorded workspace that is gone
    /// ("the session's workspace folder …"), or a local caller's explicit
    /// folder with the reason. The detail goes to the log where it is found.
    #[error("{0}")]
    Workspace(String),
    /// An explicit workspace a web origin named, listed in its grant, that
    /// cannot be used now, whatever the reason (missing, not a folder, not
    /// readable, one Pedelec never uses): one answer that maps nothing of
    /// the disk (docs/security.md, "What a page learns of a folder").
    #[error(
        "workspace {0:?} cannot be used: it is missing, not a folder, cannot be read, or is a folder Pedelec never uses as a workspace (the Pedelec log says which)"
    )]
    WorkspaceUnusable(String),
    #[error(
        "tool request {0} is not pending on this thread (unknown, already answered, timed out or cleared)"
    )]
    UnknownToolRequest(String),
    #[error("the tool result is {0} bytes; the limit is {1}")]
    TooLarge(usize, usize),
    /// The thread's journal record could not be written (a full disk, a
    /// removed data dir): the change was not made durable.
    #[error("the session journal could not be written: {0}")]
    Journal(String),
    /// A resource bound (sessions per origin, running turns) was reached.
    #[error("{0}")]
    Limit(String),
    /// A rate limit (creates, turn starts per origin) was reached: a token
    /// comes back after `retry_after` (the message says when, and the
    /// details as `retryAfterMs`).
    #[error("{message}")]
    Rate {
        message: String,
        retry_after: std::time::Duration,
    },
    /// A create's manifest, refused by the rules ToolBridgeService applies,
    /// with the code, message and pointer the bridge would give.
    #[error("{0}")]
    ManifestInvalid(ManifestError),
    /// A named provider's profile, refused by the settings rules, with the
    /// code and message ProviderService would give.
    #[error("{0}")]
    Profile(SettingsError),
    /// A web origin without a live grant (none, blocked, expired, revoked).
    #[error("{0} is not approved: the user has not granted it access (or revoked or blocked it)")]
    SiteNotApproved(String),
    #[error("{0} is plain http and not loopback: only https:// sites can be approved")]
    OriginNotSecure(String),
    #[error("{origin} may not use provider {provider}: it is not in the site's grant")]
    ProviderNotGranted { origin: String, provider: String },
    #[error(
        "{origin} may not name model {model:?}: it is not one of the user's {provider} profile models and the grant allows no other"
    )]
    ModelNotAllowed {
        origin: String,
        provider: String,
        model: String,
    },
    #[error("{origin} may not use folder {path}: it is not in the site's grant")]
    FolderNotGranted { origin: String, path: String },
    #[error("folder {0} can never be granted: {1}")]
    FolderNotGrantable(String, String),
    /// `thread` only for a local caller: a page never learns another
    /// origin's thread ids.
    #[error("folder {path} is (or is inside, or contains) the workspace of {}", match thread {
        Some(thread) => format!("thread {thread} of another origin"),
        None => "another site's session".to_string(),
    })]
    WorkspaceInUse {
        path: String,
        thread: Option<String>,
    },
    /// `sites.json` could not be written: the grant was not changed. The
    /// message names no path (the log has the file's).
    #[error("the site grants could not be written: {0}")]
    SiteStore(#[source] std::io::Error),
    /// An error another service reported, with its own code.
    #[error("{0}")]
    Upstream(CodedError),
    #[error("{0}")]
    Internal(String),
}

impl SessionError {
    pub fn code(&self) -> Code {
        match self {
            SessionError::InvalidInput(_) => Code::INVALID_INPUT,
            SessionError::UnknownToolRequest(_) => Code::TOOL_REQUEST_NOT_PENDING,
            SessionError::ThreadNotFound(_) => Code::THREAD_NOT_FOUND,
            SessionError::TooLarge(..) => Code::MESSAGE_TOO_LARGE,
            SessionError::AccessDenied(_) => Code::THREAD_ACCESS_DENIED,
            SessionError::Busy(..) => Code::SESSION_BUSY,
            SessionError::Ended(_) => Code::SESSION_ENDED,
            SessionError::Workspace(_) | SessionError::WorkspaceUnusable(_) => {
                Code::WORKSPACE_OPEN_FAILED
            }
            SessionError::Journal(_) => Code::JOURNAL_WRITE_FAILED,
            SessionError::Limit(_) | SessionError::Rate { .. } => Code::LIMIT_EXCEEDED,
            SessionError::ManifestInvalid(_) => Code::TOOLS_MANIFEST_INVALID,
            SessionError::Profile(e) => e.code(),
            SessionError::SiteNotApproved(_) => Code::SITE_NOT_APPROVED,
            SessionError::OriginNotSecure(_) => Code::ORIGIN_NOT_SECURE,
            SessionError::ProviderNotGranted { .. } => Code::PROVIDER_NOT_GRANTED,
            SessionError::ModelNotAllowed { .. } => Code::MODEL_NOT_ALLOWED,
            SessionError::FolderNotGranted { .. } => Code::FOLDER_NOT_GRANTED,
            SessionError::FolderNotGrantable(..) => Code::FOLDER_NOT_GRANTABLE,
            SessionError::WorkspaceInUse { .. } => Code::WORKSPACE_IN_USE,
            SessionError::SiteStore(e) if pedelec_common::is_storage_full(e) => Code::STORAGE_FULL,
            SessionError::SiteStore(..) => Code::INTERNAL,
            SessionError::Upstream(e) => e.code,
            SessionError::Internal(_) => Code::INTERNAL,
        }
    }

    pub fn to_coded(&self) -> CodedError {
        match self {
            SessionError::Upstream(e) => e.clone(),
            SessionError::ManifestInvalid(e) => {
                CodedError::new(self.code(), self.to_string()).with_details(e.details())
            }
            SessionError::Profile(e) => e.to_coded(),
            SessionError::Rate { retry_after, .. } => {
                CodedError::new(self.code(), self.to_string()).with_details(serde_json::json!({
                    "retryAfterMs": u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX)
                }))
            }
            other => CodedError::new(other.code(), other.to_string()),
        }
    }
}

impl From<SessionError> for tonic::Status {
    fn from(e: SessionError) -> Self {
        e.to_coded().to_status()
    }
}

/// A failed call to another service: keep its Pedelec code; a transport
/// failure (service down) is CORE_UNAVAILABLE.
pub fn upstream(status: tonic::Status) -> SessionError {
    SessionError::Upstream(CodedError::from_status(&status, Code::CORE_UNAVAILABLE))
}
