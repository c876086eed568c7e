//! The crate's one error enum: what the settings rules refuse, with the
//! Pedelec code both ProviderService and SessionService report it under.

use pedelec_common::{Code, CodedError};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A settings field, an update mask path or a requested effort level is
    /// malformed; the message names it.
    #[error("{0}")]
    InvalidInput(String),
    #[error("unknown provider {code:?}; expected one of {expected}")]
    ProviderNotFound { code: String, expected: String },
    #[error(
        "{provider} needs a model for effort level {level:?}; set profiles.{provider}.levels.{level}.model in the settings"
    )]
    ModelRequired { provider: String, level: String },
}

impl SettingsError {
    pub fn invalid(message: impl Into<String>) -> Self {
        SettingsError::InvalidInput(message.into())
    }

    pub fn code(&self) -> Code {
        match self {
            SettingsError::InvalidInput(_) => Code::INVALID_INPUT,
            SettingsError::ProviderNotFound { .. } => Code::PROVIDER_NOT_FOUND,
            SettingsError::ModelRequired { .. } => Code::MODEL_REQUIRED,
        }
    }

    /// The one place a settings error becomes a coded error, in either service.
    pub fn to_coded(&self) -> CodedError {
        CodedError::new(self.code(), self.to_string())
    }
}
