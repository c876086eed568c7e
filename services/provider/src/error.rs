//! The crate's one error enum and its one mapping to a gRPC status with a Pedelec code.

use std::path::PathBuf;

use pedelec_common::{Code, CodedError, CommonError};
use pedelec_settings::SettingsError;

/// How an error a page may see points at what it leaves out: an agent's
/// stderr, a `--version`'s output, local paths (docs/security.md, "What a
/// page is not shown"). They are in ProviderService's log
/// (`<runtime dir>/logs/provider.log`).
pub const SEE_THE_LOG: &str = "see the Pedelec log";

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A request field is malformed; the message names the field.
    #[error("{0}")]
    InvalidInput(String),
    #[error("no default provider is set; choose one in the settings")]
    DefaultProviderNotSet,
    #[error("the default provider {provider} is unavailable: {reason}")]
    DefaultProviderUnavailable { provider: String, reason: String },
    /// Refused by the settings rules (a settings value, an update mask, a
    /// profile): the codes and messages SessionService reports too.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot write {path}: {source}")]
    SettingsWrite {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Common(#[from] CommonError),
    /// A bug or a broken runtime (a panicked task, say).
    #[error("{0}")]
    Internal(String),
}

impl ProviderError {
    pub fn invalid(message: impl Into<String>) -> Self {
        ProviderError::InvalidInput(message.into())
    }

    pub fn code(&self) -> Code {
        match self {
            ProviderError::InvalidInput(_) => Code::INVALID_INPUT,
            ProviderError::DefaultProviderNotSet => Code::DEFAULT_PROVIDER_NOT_SET,
            ProviderError::DefaultProviderUnavailable { .. } => Code::DEFAULT_PROVIDER_UNAVAILABLE,
            ProviderError::Settings(e) => e.code(),
            ProviderError::Common(e) => e.code(),
            ProviderError::SettingsWrite { source, .. }
                if pedelec_common::is_storage_full(source) =>
            {
                Code::STORAGE_FULL
            }
            ProviderError::SettingsWrite { .. } | ProviderError::Internal(_) => Code::INTERNAL,
        }
    }

    /// The one place a ProviderService error becomes a coded error (and so a
    /// status).
    pub fn to_coded(&self) -> CodedError {
        CodedError::new(self.code(), self.to_string())
    }
}

impl From<ProviderError> for tonic::Status {
    fn from(e: ProviderError) -> tonic::Status {
        e.to_coded().to_status()
    }
}

#[cfg(test)]
mod tests {
    use pedelec_common::code_of_status;

    use super::*;

    #[test]
    fn every_error_carries_its_pedelec_code() {
        let cases = [
            (
                ProviderError::invalid("x: bad"),
                "INVALID_INPUT",
                tonic::Code::InvalidArgument,
            ),
            (
                ProviderError::Settings(SettingsError::ProviderNotFound {
                    code: "gpt".into(),
                    expected: "codex".into(),
                }),
                "PROVIDER_NOT_FOUND",
                tonic::Code::NotFound,
            ),
            (
                ProviderError::DefaultProviderNotSet,
                "DEFAULT_PROVIDER_NOT_SET",
                tonic::Code::FailedPrecondition,
            ),
            (
                ProviderError::DefaultProviderUnavailable {
                    provider: "codex".into(),
                    reason: "codex not found on PATH".into(),
                },
                "DEFAULT_PROVIDER_UNAVAILABLE",
                tonic::Code::FailedPrecondition,
            ),
            (
                ProviderError::Settings(SettingsError::ModelRequired {
                    provider: "ollama".into(),
                    level: "default".into(),
                }),
                "MODEL_REQUIRED",
                tonic::Code::FailedPrecondition,
            ),
        ];
        for (err, code, grpc) in cases {
            let message = err.to_string();
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), grpc);
            assert_eq!(code_of_status(&status).as_deref(), Some(code));
            assert_eq!(status.message(), format!("{code}: {message}"));
        }
    }
}
