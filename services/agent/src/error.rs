//! The crate's one error enum and its one mapping to a Pedelec code, which
//! travels as the `code` of the `error` line (docs/agent.md).

use pedelec_common::Code;
use serde_json::{Value as Json, json};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A flag or the environment is unusable.
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the Ollama server at {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// The Ollama key would travel in clear text (plain http, not loopback).
    #[error("{0}")]
    KeyOverPlainHttp(String),
    #[error("the Ollama server refused the API key (HTTP {status}): {message}")]
    AuthFailed { status: u16, message: String },
    #[error("the Ollama server does not know model {model:?} (HTTP 404): {message}")]
    ModelNotFound { model: String, message: String },
    #[error("the Ollama server is rate limiting requests (HTTP 429): {message}")]
    RateLimited { message: String },
    #[error("the Ollama server sent an invalid response: {0}")]
    InvalidResponse(String),
    /// Any other failure the server reported (HTTP 400, 500, an error line mid-stream).
    #[error("the Ollama server failed{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Model {
        status: Option<u16>,
        message: String,
    },
    #[error(
        "the model kept calling tools: {limit} rounds of tool calls without an answer; stopping (raise --max-tool-rounds or PEDELEC_AGENT_MAX_TOOL_ROUNDS)"
    )]
    ToolRounds { limit: u32 },
    /// The page's tools could not be reached (ToolBridge down, token refused).
    #[error("the page's tools are unavailable: {0}")]
    ToolBridge(String),
    /// The conversation file could not be read or written.
    #[error("{0}")]
    Conversation(String),
    /// A tool call the agent refuses or that failed; its message goes back to
    /// the model, never ends the turn.
    #[error("{message}")]
    Tool { code: Code, message: String },
}

impl AgentError {
    pub fn tool(code: Code, message: impl Into<String>) -> Self {
        AgentError::Tool {
            code,
            message: message.into(),
        }
    }

    /// The Pedelec code printed on the `error` line; the ollama adapter
    /// accepts the model-server codes and turns anything else into PROVIDER_FAILED.
    pub fn code(&self) -> Code {
        match self {
            AgentError::Unreachable { .. } => Code::PROVIDER_UNREACHABLE,
            AgentError::AuthFailed { .. } | AgentError::KeyOverPlainHttp(_) => {
                Code::PROVIDER_AUTH_FAILED
            }
            AgentError::ModelNotFound { .. } => Code::PROVIDER_MODEL_NOT_FOUND,
            AgentError::RateLimited { .. } => Code::PROVIDER_RATE_LIMITED,
            AgentError::InvalidResponse(_) => Code::PROVIDER_INVALID_RESPONSE,
            AgentError::Tool { code, .. } => *code,
            AgentError::Usage(_)
            | AgentError::Model { .. }
            | AgentError::ToolRounds { .. }
            | AgentError::ToolBridge(_)
            | AgentError::Conversation(_) => Code::PROVIDER_FAILED,
        }
    }

    /// Facts for the `details` of the error line.
    pub fn details(&self) -> Option<Json> {
        match self {
            AgentError::AuthFailed { status, .. } => Some(json!({ "httpStatus": status })),
            AgentError::ModelNotFound { model, .. } => {
                Some(json!({ "httpStatus": 404, "model": model }))
            }
            AgentError::RateLimited { .. } => Some(json!({ "httpStatus": 429 })),
            AgentError::Model {
                status: Some(status),
                ..
            } => Some(json!({ "httpStatus": status })),
            AgentError::ToolRounds { limit } => Some(json!({ "maxToolRounds": limit })),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_failures_carry_their_own_codes_and_the_rest_is_provider_failed() {
        let cases = [
            (
                AgentError::Unreachable {
                    endpoint: "http://h:1".into(),
                    reason: "refused".into(),
                },
                "PROVIDER_UNREACHABLE",
            ),
            (
                AgentError::AuthFailed {
                    status: 401,
                    message: "no".into(),
                },
                "PROVIDER_AUTH_FAILED",
            ),
            (
                AgentError::ModelNotFound {
                    model: "m".into(),
                    message: "no".into(),
                },
                "PROVIDER_MODEL_NOT_FOUND",
            ),
            (
                AgentError::RateLimited {
                    message: "slow".into(),
                },
                "PROVIDER_RATE_LIMITED",
            ),
            (
                AgentError::InvalidResponse("x".into()),
                "PROVIDER_INVALID_RESPONSE",
            ),
            (
                AgentError::Model {
                    status: Some(500),
                    message: "boom".into(),
                },
                "PROVIDER_FAILED",
            ),
            (AgentError::ToolRounds { limit: 3 }, "PROVIDER_FAILED"),
        ];
        for (err, code) in cases {
            assert_eq!(err.code().as_str(), code, "{err}");
        }
    }
}
