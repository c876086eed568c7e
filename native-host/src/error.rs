//! The host's one error type and the one place it becomes a Pedelec error code.

use pedelec_common::{Code, CodedError};
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A frame or request the host cannot act on (bad UTF-8, bad JSON, unknown
    /// type, missing or mistyped fields).
    #[error("{message}")]
    InvalidInput {
        message: String,
        details: Option<Value>,
    },
    /// A browser -> host frame above 64 MiB, or of length 0.
    #[error("frame of {len} bytes is outside 1..={limit}")]
    MessageTooLarge { len: u64, limit: u64 },
    /// The services do not answer and could not be started.
    #[error("{0}")]
    CoreUnavailable(String),
    /// The calling extension is not one this host was installed for.
    #[error("extension origin {origin:?} is not allowed to use this host")]
    NotAllowed { origin: String },
    /// `hello` from an extension that speaks another protocol version.
    #[error(
        "the extension speaks native-messaging protocol {client}, this host speaks {host}: update the one that is older"
    )]
    ProtocolMismatch { host: u32, client: u32 },
    /// An extension-only request (settings, site grants, every origin's
    /// sessions) that did not come from the extension's own pages.
    #[error(
        "{request} is only accepted from the Pedelec extension's own pages ({extension}), not from {origin:?}"
    )]
    ExtensionOnly {
        request: &'static str,
        origin: String,
        extension: String,
    },
    /// A service answered with a Pedelec error; passed on unchanged.
    #[error("{0}")]
    Service(CodedError),
    #[error("{0}")]
    Internal(String),
}

impl HostError {
    pub fn invalid(message: impl Into<String>) -> Self {
        HostError::InvalidInput {
            message: message.into(),
            details: None,
        }
    }

    /// The Pedelec code of this error: the only mapping in the crate.
    pub fn code(&self) -> String {
        match self {
            HostError::InvalidInput { .. } => Code::INVALID_INPUT.to_string(),
            HostError::MessageTooLarge { .. } => Code::MESSAGE_TOO_LARGE.to_string(),
            HostError::CoreUnavailable(_) => Code::CORE_UNAVAILABLE.to_string(),
            HostError::NotAllowed { .. } => Code::NATIVE_HOST_UNAVAILABLE.to_string(),
            HostError::ProtocolMismatch { .. } => Code::PROTOCOL_MISMATCH.to_string(),
            HostError::ExtensionOnly { .. } => Code::SETTINGS_ACCESS_DENIED.to_string(),
            HostError::Service(e) => e.wire_code().to_string(),
            HostError::Internal(_) => Code::INTERNAL.to_string(),
        }
    }

    fn details(&self) -> Value {
        match self {
            HostError::InvalidInput { details, .. } => details.clone().unwrap_or(Value::Null),
            HostError::MessageTooLarge { len, limit } => json!({"length": len, "limit": limit}),
            HostError::NotAllowed { origin } => json!({"extensionOrigin": origin}),
            HostError::ExtensionOnly { origin, .. } => json!({"origin": origin}),
            HostError::ProtocolMismatch { host, client } => {
                json!({"hostProtocolVersion": host, "clientProtocolVersion": client})
            }
            HostError::Service(e) => e.details.clone().unwrap_or(Value::Null),
            HostError::CoreUnavailable(_) | HostError::Internal(_) => Value::Null,
        }
    }

    fn message(&self) -> String {
        match self {
            HostError::Service(e) => e.message.clone(),
            other => other.to_string(),
        }
    }

    /// The `error` member of a failed reply: `{code, message, details}`.
    pub fn to_json(&self) -> Value {
        json!({
            "code": self.code(),
            "message": self.message(),
            "details": self.details(),
        })
    }

    /// A failed gRPC call. A status with a Pedelec code is the service's
    /// answer and passes unchanged; a codeless one is classified by
    /// [`pedelec_common::codes::classify_codeless`]: only a transport failure is CORE_UNAVAILABLE.
    pub fn from_status(status: &tonic::Status) -> Self {
        let coded =
            CodedError::from_status(status, pedelec_common::codes::classify_codeless(status));
        if coded.code == Code::CORE_UNAVAILABLE {
            return HostError::CoreUnavailable(coded.message);
        }
        HostError::Service(coded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_keep_their_code_and_details() {
        let status = CodedError::new(Code::THREAD_NOT_FOUND, "no thread t1")
            .with_details(json!({"sessionId": "t1"}))
            .to_status();
        let e = HostError::from_status(&status);
        assert_eq!(
            e.to_json(),
            json!({"code": "THREAD_NOT_FOUND", "message": "no thread t1", "details": {"sessionId": "t1"}})
        );
    }

    #[test]
    fn transport_failures_are_core_unavailable() {
        let e = HostError::from_status(&tonic::Status::unavailable("connection refused"));
        assert_eq!(e.code(), "CORE_UNAVAILABLE");
        assert_eq!(e.to_json()["message"], "connection refused");
    }

    #[test]
    fn codeless_size_and_decode_failures_are_not_core_outages() {
        let cases = [
            (
                tonic::Status::out_of_range(
                    "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
                ),
                "MESSAGE_TOO_LARGE",
            ),
            (
                tonic::Status::out_of_range(
                    "Error, encoded message length too large: found 70000000 bytes, the limit is: 67108864 bytes",
                ),
                "MESSAGE_TOO_LARGE",
            ),
            (
                tonic::Status::resource_exhausted("message length too large"),
                "MESSAGE_TOO_LARGE",
            ),
            (
                tonic::Status::internal(
                    "failed to decode Protobuf message: Value.kind: recursion limit reached",
                ),
                "INVALID_INPUT",
            ),
            (tonic::Status::invalid_argument("bad"), "INVALID_INPUT"),
            (
                tonic::Status::unknown("h2 protocol error: broken pipe"),
                "CORE_UNAVAILABLE",
            ),
            (tonic::Status::internal("something odd"), "INTERNAL"),
        ];
        for (status, code) in cases {
            let e = HostError::from_status(&status);
            assert_eq!(e.code(), code, "{status:?}");
            assert_eq!(
                matches!(e, HostError::CoreUnavailable(_)),
                code == "CORE_UNAVAILABLE"
            );
            assert_eq!(e.to_json()["message"], status.message());
        }
    }
}
