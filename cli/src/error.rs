//! The one error enum of pedelec-cli and its single mapping to an exit code
//! and a Pedelec code.

use pedelec_common::{Code, CodedError};
use serde_json::Value as Json;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the tool (or the service) answered with an error.
pub const EXIT_TOOL_ERROR: i32 = 1;
/// Exit code: bad usage, or nothing answered on the socket.
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or arguments (clap's message, or one of our own checks).
    #[error("{0}")]
    Usage(String),
    /// The JSON argument of tool-call does not parse.
    #[error("the tool arguments are not valid JSON: {0}")]
    InvalidJson(String),
    /// Neither --thread-id nor $PEDELEC_THREAD_ID was given.
    #[error("no thread id: pass --thread-id ID or set PEDELEC_THREAD_ID")]
    NoThreadId,
    /// Reading the arguments from stdin failed.
    #[error("cannot read the tool arguments from stdin: {0}")]
    Stdin(#[source] std::io::Error),
    /// The service's socket does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// A failed RPC; the service's Pedelec code travels in the status.
    #[error("{}", .0.message)]
    Service(CodedError),
    /// The tool call ran and its outcome is an error (from the page or the bridge).
    #[error("{message}")]
    Tool {
        code: String,
        message: String,
        details: Option<Json>,
    },
}

impl CliError {
    pub fn from_status(status: &tonic::Status) -> Self {
        CliError::Service(CodedError::from_status(
            status,
            pedelec_common::codes::classify_codeless(status),
        ))
    }

    /// The Pedelec code reported for this error.
    pub fn code(&self) -> &str {
        match self {
            CliError::Usage(_)
            | CliError::InvalidJson(_)
            | CliError::NoThreadId
            | CliError::Stdin(_) => Code::INVALID_INPUT.as_str(),
            CliError::Unavailable(_) => Code::CORE_UNAVAILABLE.as_str(),
            CliError::Service(e) => e.wire_code(),
            CliError::Tool { code, .. } => code,
        }
    }

    /// 1 for anything the bridge, the service or the page decided; 2 when the
    /// command never got a real answer (usage, or no service to ask).
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_)
            | CliError::InvalidJson(_)
            | CliError::NoThreadId
            | CliError::Stdin(_)
            | CliError::Unavailable(_) => EXIT_USAGE,
            CliError::Service(e) if e.code == Code::CORE_UNAVAILABLE => EXIT_USAGE,
            CliError::Service(_) | CliError::Tool { .. } => EXIT_TOOL_ERROR,
        }
    }

    pub fn details(&self) -> Option<&Json> {
        match self {
            CliError::Service(e) => e.details.as_ref(),
            CliError::Tool { details, .. } => details.as_ref(),
            _ => None,
        }
    }
}

impl From<pedelec_common::CommonError> for CliError {
    fn from(e: pedelec_common::CommonError) -> Self {
        match e.code() {
            Code::CORE_UNAVAILABLE => CliError::Unavailable(e.to_string()),
            _ => CliError::Service(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_and_connection_errors_exit_2() {
        for e in [
            CliError::Usage("bad flag".into()),
            CliError::InvalidJson("eof".into()),
            CliError::NoThreadId,
            CliError::Stdin(std::io::Error::other("closed")),
        ] {
            assert_eq!(e.exit_code(), 2, "{e:?}");
            assert_eq!(e.code(), "INVALID_INPUT");
        }
        let e = CliError::Unavailable("no socket".into());
        assert_eq!((e.exit_code(), e.code()), (2, "CORE_UNAVAILABLE"));
    }

    #[test]
    fn tool_and_service_errors_exit_1() {
        let e = CliError::Tool {
            code: "TOOL_HANDLER_ERROR".into(),
            message: "boom".into(),
            details: None,
        };
        assert_eq!((e.exit_code(), e.code()), (1, "TOOL_HANDLER_ERROR"));
        for code in [
            Code::TOOL_NOT_FOUND,
            Code::TOOL_ARGS_INVALID,
            Code::TOOL_ACCESS_DENIED,
            Code::TOOL_TIMEOUT,
            Code::THREAD_NOT_FOUND,
        ] {
            let status = CodedError::new(code, "no").to_status();
            let e = CliError::from_status(&status);
            assert_eq!((e.exit_code(), e.code()), (1, code.as_str()));
        }
    }

    #[test]
    fn status_without_code_is_core_unavailable() {
        let e = CliError::from_status(&tonic::Status::unavailable("connection reset"));
        assert_eq!((e.exit_code(), e.code()), (2, "CORE_UNAVAILABLE"));
        assert_eq!(e.to_string(), "connection reset");
    }

    #[test]
    fn codeless_size_and_decode_failures_are_not_core_unavailable() {
        for (status, code, exit) in [
            (
                tonic::Status::out_of_range(
                    "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
                ),
                "MESSAGE_TOO_LARGE",
                1,
            ),
            (
                tonic::Status::resource_exhausted("message length too large"),
                "MESSAGE_TOO_LARGE",
                1,
            ),
            (
                tonic::Status::internal(
                    "failed to decode Protobuf message: Struct.fields: recursion limit reached",
                ),
                "INVALID_INPUT",
                1,
            ),
            (tonic::Status::internal("odd"), "INTERNAL", 1),
            (
                tonic::Status::unknown("connection reset"),
                "CORE_UNAVAILABLE",
                2,
            ),
        ] {
            let e = CliError::from_status(&status);
            assert_eq!((e.exit_code(), e.code()), (exit, code), "{status:?}");
        }
    }

    #[test]
    fn service_details_are_kept() {
        let status = CodedError::new(Code::TOOL_ARGS_INVALID, "bad")
            .with_details(serde_json::json!({"pointer": "/x"}))
            .to_status();
        let e = CliError::from_status(&status);
        assert_eq!(e.details(), Some(&serde_json::json!({"pointer": "/x"})));
        assert_eq!(e.to_string(), "bad");
    }
}
