//! Pedelec error codes (the one list of them in Rust) and their gRPC form:
//! the code is the status message prefix `CODE: message` and
//! `google.rpc.ErrorInfo.reason`; JSON details travel in the ErrorInfo
//! metadata under `details`.

use std::collections::HashMap;
use std::fmt;

use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

/// The ErrorInfo domain of every Pedelec status.
pub const ERROR_DOMAIN: &str = "pedelec.dev";

macro_rules! codes {
    ($($name:ident => $grpc:ident),* $(,)?) => {
        /// Every Pedelec error code.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code { $($name),* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$name),*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$name => stringify!($name)),* }
            }

            /// The gRPC status code a Pedelec code travels with.
            pub fn grpc(self) -> tonic::Code {
                match self { $(Code::$name => tonic::Code::$grpc),* }
            }
        }
    };
}

codes! {
    INVALID_INPUT => InvalidArgument,
    EXTENSION_UNAVAILABLE => Unavailable,
    EXTENSION_DISCONNECTED => Unavailable,
    SDK_BRIDGE_TIMEOUT => DeadlineExceeded,
    SDK_PROTOCOL_ERROR => InvalidArgument,
    APPROVAL_REJECTED => PermissionDenied,
    APPROVAL_TIMEOUT => DeadlineExceeded,
    OPEN_POPUP_FAILED => Unavailable,
    SESSION_BUSY => FailedPrecondition,
    SESSION_ENDED => FailedPrecondition,
    TOOL_HANDLER_NOT_FOUND => NotFound,
    TOOL_HANDLER_ERROR => Aborted,
    ASSET_TEXT_DECODE_FAILED => InvalidArgument,
    ASSET_INVALID_JSON => InvalidArgument,
    // The extension: a request from a frame whose embedding site the user did not allow.
    FRAME_NOT_ALLOWED => PermissionDenied,
    NATIVE_HOST_UNAVAILABLE => Unavailable,
    MESSAGE_TOO_LARGE => ResourceExhausted,
    CORE_UNAVAILABLE => Unavailable,
    PROTOCOL_MISMATCH => FailedPrecondition,
    DEFAULT_PROVIDER_NOT_SET => FailedPrecondition,
    DEFAULT_PROVIDER_UNAVAILABLE => FailedPrecondition,
    PROVIDER_NOT_FOUND => NotFound,
    PROVIDER_FAILED => Internal,
    // pedelec-agent's model server (docs/agent.md): PROVIDER_FAILED stays the
    // fallback for anything these do not name.
    PROVIDER_UNREACHABLE => Unavailable,
    PROVIDER_AUTH_FAILED => Unauthenticated,
    PROVIDER_MODEL_NOT_FOUND => NotFound,
    PROVIDER_RATE_LIMITED => ResourceExhausted,
    PROVIDER_INVALID_RESPONSE => Internal,
    MODEL_REQUIRED => FailedPrecondition,
    THREAD_NOT_FOUND => NotFound,
    THREAD_ACCESS_DENIED => PermissionDenied,
    // The native host's settings requests from anything but the extension's own pages.
    SETTINGS_ACCESS_DENIED => PermissionDenied,
    WORKSPACE_OPEN_FAILED => FailedPrecondition,
    // Site grants (docs/security.md, "Site grants"): a web origin the user
    // did not approve (or blocked, or whose grant expired or was revoked).
    SITE_NOT_APPROVED => PermissionDenied,
    // A plain http:// origin other than loopback: never approvable.
    ORIGIN_NOT_SECURE => PermissionDenied,
    // A provider, model or folder outside the site's grant.
    PROVIDER_NOT_GRANTED => PermissionDenied,
    MODEL_NOT_ALLOWED => PermissionDenied,
    FOLDER_NOT_GRANTED => PermissionDenied,
    // A folder no grant may name: Pedelec's own dirs, home, /, credentials.
    FOLDER_NOT_GRANTABLE => PermissionDenied,
    // The folder is another origin's workspace.
    WORKSPACE_IN_USE => FailedPrecondition,
    TOOLS_MANIFEST_INVALID => InvalidArgument,
    TOOL_NOT_FOUND => NotFound,
    TOOL_ARGS_INVALID => InvalidArgument,
    TOOL_TIMEOUT => DeadlineExceeded,
    TOOL_ACCESS_DENIED => Unauthenticated,
    TOOL_REQUEST_NOT_PENDING => FailedPrecondition,
    // An internal RPC (one only Pedelec's services call, docs/security.md)
    // without the launcher's service secret, or with a wrong one.
    SERVICE_ACCESS_DENIED => Unauthenticated,
    ASSET_NOT_FOUND => NotFound,
    ASSET_TOO_LARGE => ResourceExhausted,
    ASSET_PATH_INVALID => InvalidArgument,
    ASSET_TICKET_INVALID => Unauthenticated,
    // The disk is full (or the user's quota spent): an asset or the settings
    // were not written, and what was stored before is kept.
    STORAGE_FULL => ResourceExhausted,
    // SessionService could not write a thread's journal record; the request's
    // change was not kept.
    JOURNAL_WRITE_FAILED => Unavailable,
    // A bound that protects the user's machine or the user's budget: open
    // sessions and transfer tickets per origin, queued tool calls per thread,
    // an argv prompt's size, asset disk quotas (docs/security.md lists them).
    LIMIT_EXCEEDED => ResourceExhausted,
    CORE_RESTARTED => Aborted,
    CANCELLED => Cancelled,
    INTERNAL => Internal,
}

impl Code {
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error with its Pedelec code, as it crosses process boundaries.
///
/// The code is a [`Code`], so decisions are made on the type, never on text.
/// A code's text arriving from outside this build (a page's tool error
/// relayed through the extension, a service of a newer version, a journal
/// record) may name no [`Code`]: it is then represented by the `fallback` the
/// receiver chose ([`CodedError::from_wire`]) for its decisions, and its text
/// is kept, unchanged, only to be forwarded ([`CodedError::wire_code`]), so
/// what reaches the next hop is what arrived. The enum has no variant holding
/// arbitrary text: every decision in this code base sees a known code.
#[derive(Clone, Debug, PartialEq)]
pub struct CodedError {
    pub code: Code,
    pub message: String,
    pub details: Option<serde_json::Value>,
    /// The code's text as it arrived, when it named no [`Code`] of this build.
    unrecognised: Option<Box<str>>,
}

impl CodedError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        CodedError {
            code,
            message: message.into(),
            details: None,
            unrecognised: None,
        }
    }

    /// An error whose code arrived as text (a protobuf `code` field, a JSON
    /// `code`, a journal record): a known code becomes its [`Code`]; an
    /// empty one is `fallback`; any other is represented by `fallback` and
    /// forwarded as it came ([`CodedError::wire_code`]).
    pub fn from_wire(
        code: &str,
        fallback: Code,
        message: impl Into<String>,
        details: Option<serde_json::Value>,
    ) -> Self {
        let (code, unrecognised) = match Code::parse(code) {
            Some(known) => (known, None),
            None if code.is_empty() => (fallback, None),
            None => (fallback, Some(code.into())),
        };
        CodedError {
            code,
            message: message.into(),
            details,
            unrecognised,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The code as it goes on the wire: the text it arrived with when it
    /// named no [`Code`], else [`Code::as_str`].
    pub fn wire_code(&self) -> &str {
        self.unrecognised
            .as_deref()
            .unwrap_or_else(|| self.code.as_str())
    }

    pub fn to_status(&self) -> Status {
        // An unrecognised code travels on with gRPC's UNKNOWN, as it must:
        // this build does not know what it means.
        let grpc = match self.unrecognised {
            Some(_) => tonic::Code::Unknown,
            None => self.code.grpc(),
        };
        status_from_parts(grpc, self.wire_code(), &self.message, self.details.as_ref())
    }

    /// Reads the Pedelec code back from any status; one without a Pedelec code
    /// (a transport failure, say) becomes `fallback` with the status message.
    /// A code this build does not know is INTERNAL for its decisions, not
    /// `fallback` (which may say "the services are down"), and is forwarded
    /// as it came ([`CodedError::from_wire`]).
    pub fn from_status(status: &Status, fallback: Code) -> Self {
        let info = status.get_error_details().error_info().cloned();
        let (code, details) = match info {
            Some(info) if !info.reason.is_empty() => {
                let details = info
                    .metadata
                    .get("details")
                    .and_then(|d| serde_json::from_str(d).ok());
                (info.reason, details)
            }
            _ => match code_prefix(status.message()) {
                Some(code) => (code.to_string(), None),
                None => (fallback.as_str().to_string(), None),
            },
        };
        let message = strip_prefix(status.message(), &code).to_string();
        CodedError::from_wire(&code, Code::INTERNAL, message, details)
    }

    pub fn to_proto(&self, source: i32) -> pedelec_proto::v1::PedelecError {
        pedelec_proto::v1::PedelecError {
            code: self.wire_code().to_string(),
            message: self.message.clone(),
            details: self.details.as_ref().map(crate::json::to_value),
            source,
            operation_id: String::new(),
        }
    }
}

impl fmt::Display for CodedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.wire_code(), self.message)
    }
}

impl std::error::Error for CodedError {}

impl From<CodedError> for Status {
    fn from(e: CodedError) -> Status {
        e.to_status()
    }
}

/// A status carrying `code` in the message prefix and in ErrorInfo.
pub fn status_with_code(code: Code, message: impl AsRef<str>) -> Status {
    status_from_parts(code.grpc(), code.as_str(), message.as_ref(), None)
}

fn status_from_parts(
    grpc: tonic::Code,
    code: &str,
    message: &str,
    details: Option<&serde_json::Value>,
) -> Status {
    let mut metadata = HashMap::new();
    if let Some(details) = details {
        metadata.insert("details".to_string(), details.to_string());
    }
    let info = ErrorDetails::with_error_info(code, ERROR_DOMAIN, metadata);
    Status::with_error_details(grpc, format!("{code}: {message}"), info)
}

/// Whether a failed write means the disk is full or the user's quota spent:
/// the failure the user can fix, reported as [`Code::STORAGE_FULL`].
pub fn is_storage_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// The Pedelec code of a status, if it carries one.
pub fn code_of_status(status: &Status) -> Option<String> {
    if let Some(info) = status.get_error_details().error_info()
        && !info.reason.is_empty()
    {
        return Some(info.reason.clone());
    }
    code_prefix(status.message()).map(str::to_string)
}

fn code_prefix(message: &str) -> Option<&str> {
    let (head, _) = message.split_once(": ")?;
    Code::parse(head).map(Code::as_str)
}

fn strip_prefix<'a>(message: &'a str, code: &str) -> &'a str {
    message
        .strip_prefix(code)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
}

/// The Pedelec code of a status that carries none (tonic made it, on either
/// side of the socket):
/// - a size limit (`OutOfRange` "decoded/encoded message length too large", or
///   `ResourceExhausted`) is MESSAGE_TOO_LARGE;
/// - a message that does not decode (`InvalidArgument`, or `Internal` "failed to
///   decode Protobuf message", e.g. prost's 100-level recursion limit) is
///   INVALID_INPUT;
/// - a transport failure (`Unavailable`: connect refused, no socket; a status
///   made from a local transport error; `Unknown`/`Cancelled`: the connection
///   broke mid-call) is CORE_UNAVAILABLE, the only one that says the services
///   are down;
/// - anything else is INTERNAL.
pub fn classify_codeless(status: &tonic::Status) -> Code {
    use tonic::Code as G;
    let message = status.message().to_ascii_lowercase();
    let decode = message.contains("decode") || message.contains("recursion limit");
    match status.code() {
        G::ResourceExhausted | G::OutOfRange => Code::MESSAGE_TOO_LARGE,
        G::InvalidArgument => Code::INVALID_INPUT,
        G::Internal if decode => Code::INVALID_INPUT,
        G::Unavailable | G::Unknown | G::Cancelled => Code::CORE_UNAVAILABLE,
        // h2 reports a broken connection as Internal too; only a locally made
        // status carries the transport error as its source.
        G::Internal if std::error::Error::source(status).is_some() => Code::CORE_UNAVAILABLE,
        _ => Code::INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_code_in_prefix_and_error_info() {
        let err = CodedError::new(Code::THREAD_NOT_FOUND, "no thread thr_1")
            .with_details(serde_json::json!({"sessionId": "thr_1"}));
        let status = err.to_status();
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "THREAD_NOT_FOUND: no thread thr_1");
        assert_eq!(code_of_status(&status).as_deref(), Some("THREAD_NOT_FOUND"));
        assert_eq!(CodedError::from_status(&status, Code::INTERNAL), err);
    }

    #[test]
    fn plain_status_falls_back() {
        let status = Status::unavailable("connection refused");
        let err = CodedError::from_status(&status, Code::CORE_UNAVAILABLE);
        assert_eq!(err.code, Code::CORE_UNAVAILABLE);
        assert_eq!(err.message, "connection refused");
    }

    /// A code this build does not know is decided on as the fallback and
    /// forwarded as it came, on every form it travels in.
    #[test]
    fn an_unrecognised_code_is_forwarded_as_it_came() {
        let err = CodedError::from_wire("APP_SPECIFIC", Code::TOOL_HANDLER_ERROR, "m", None);
        assert_eq!(err.code, Code::TOOL_HANDLER_ERROR);
        assert_eq!(err.wire_code(), "APP_SPECIFIC");
        assert_eq!(err.to_string(), "APP_SPECIFIC: m");
        assert_eq!(err.to_proto(0).code, "APP_SPECIFIC");
        let status = err.to_status();
        assert_eq!(status.code(), tonic::Code::Unknown);
        assert_eq!(status.message(), "APP_SPECIFIC: m");
        assert_eq!(code_of_status(&status).as_deref(), Some("APP_SPECIFIC"));
        let back = CodedError::from_status(&status, Code::INTERNAL);
        assert_eq!(
            (back.code, back.wire_code()),
            (Code::INTERNAL, "APP_SPECIFIC")
        );
        assert_eq!(back.message, "m");

        let known = CodedError::from_wire("TOOL_TIMEOUT", Code::INTERNAL, "m", None);
        assert_eq!(known, CodedError::new(Code::TOOL_TIMEOUT, "m"));
        let empty = CodedError::from_wire("", Code::TOOL_HANDLER_ERROR, "m", None);
        assert_eq!(empty, CodedError::new(Code::TOOL_HANDLER_ERROR, "m"));
    }
}
