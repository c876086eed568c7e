//! The error enum of pedelec-toolbridge, mapped in one place to a Pedelec code.

use pedelec_common::{Code, CodedError, CommonError};
use serde_json::json;

use crate::manifest::ManifestError;
use crate::validate::ArgsError;

#[derive(Debug, thiserror::Error)]
pub enum ToolBridgeError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    ManifestInvalid(ManifestError),
    /// Deliberately vague: a wrong token must not reveal whether the thread exists.
    #[error("missing or wrong tool token for this thread")]
    AccessDenied,
    #[error("thread has no tool named \"{0}\"")]
    ToolNotFound(String),
    #[error("invalid arguments at {}: {}", path_label(&.0.path), .0.message)]
    ArgsInvalid(ArgsError),
    #[error("no pending tool request {0} on this thread")]
    NoPendingRequest(String),
    #[error("{0} tool calls of this thread already wait for the page; wait for one to finish")]
    QueueFull(usize),
    #[error("the tool outcome is {size} bytes of JSON; the limit is {limit}")]
    TooLarge { size: usize, limit: usize },
}

fn path_label(path: &str) -> &str {
    if path.is_empty() { "the root" } else { path }
}

impl From<ManifestError> for ToolBridgeError {
    fn from(e: ManifestError) -> Self {
        ToolBridgeError::ManifestInvalid(e)
    }
}

impl From<ArgsError> for ToolBridgeError {
    fn from(e: ArgsError) -> Self {
        ToolBridgeError::ArgsInvalid(e)
    }
}

impl ToolBridgeError {
    pub fn code(&self) -> Code {
        match self {
            ToolBridgeError::Common(e) => e.code(),
            ToolBridgeError::InvalidInput(_) => Code::INVALID_INPUT,
            ToolBridgeError::NoPendingRequest(_) => Code::TOOL_REQUEST_NOT_PENDING,
            ToolBridgeError::ManifestInvalid(_) => Code::TOOLS_MANIFEST_INVALID,
            ToolBridgeError::AccessDenied => Code::TOOL_ACCESS_DENIED,
            ToolBridgeError::ToolNotFound(_) => Code::TOOL_NOT_FOUND,
            ToolBridgeError::ArgsInvalid(_) => Code::TOOL_ARGS_INVALID,
            ToolBridgeError::TooLarge { .. } => Code::MESSAGE_TOO_LARGE,
            ToolBridgeError::QueueFull(_) => Code::LIMIT_EXCEEDED,
        }
    }

    /// The one place a ToolBridge error becomes a coded error (and so a status).
    pub fn to_coded(&self) -> CodedError {
        let err = CodedError::new(self.code(), self.to_string());
        match self {
            ToolBridgeError::ManifestInvalid(e) => err.with_details(e.details()),
            ToolBridgeError::ArgsInvalid(e) => err.with_details(json!({"path": e.path})),
            ToolBridgeError::ToolNotFound(tool) => err.with_details(json!({"tool": tool})),
            ToolBridgeError::NoPendingRequest(id) => err.with_details(json!({"toolRequestId": id})),
            ToolBridgeError::TooLarge { size, limit } => {
                err.with_details(json!({"size": size, "limit": limit}))
            }
            _ => err,
        }
    }

    pub fn to_status(&self) -> tonic::Status {
        self.to_coded().to_status()
    }
}

impl From<ToolBridgeError> for tonic::Status {
    fn from(e: ToolBridgeError) -> Self {
        e.to_status()
    }
}
