//! The agent-facing commands: `tool-spec` and `tool-call` against
//! ToolBridgeService. They run once per tool call, so they do nothing but
//! connect, ask and print.

use std::io::Read;
use std::time::Duration;

use pedelec_common::clients::ToolBridgeClient;
use pedelec_common::json::{from_value, to_value};
use pedelec_common::{Clients, RuntimeDir, ServiceName, env};
use pedelec_proto::v1::call_tool_response::Outcome;
use pedelec_proto::v1::{CallToolRequest, GetToolSpecRequest};
use serde_json::Value as Json;

use crate::error::CliError;
use crate::output;

/// Extra time the client waits beyond an explicit `--timeout-ms`, so the
/// bridge's own TOOL_TIMEOUT answer arrives before our local deadline fires.
const DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// Everything a tool command needs, gathered from flags and the environment.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub thread_id: Option<String>,
    pub token: Option<String>,
    /// Where toolbridge.sock is; why there is none when the environment
    /// names no runtime dir (reported as CORE_UNAVAILABLE when a command
    /// needs it).
    pub runtime: Result<RuntimeDir, String>,
    pub timeout_ms: Option<u32>,
}

impl ToolContext {
    /// The runtime dir, or CORE_UNAVAILABLE saying why there is none.
    pub fn runtime(&self) -> Result<RuntimeDir, CliError> {
        self.runtime.clone().map_err(CliError::Unavailable)
    }

    /// `thread_id` comes from the flag (clap already fell back to
    /// `$PEDELEC_THREAD_ID`); the token is read from the environment only, so
    /// it never shows up in a process listing.
    pub fn from_env(thread_id: Option<String>, timeout_ms: Option<u32>) -> Self {
        ToolContext {
            thread_id: thread_id.filter(|t| !t.is_empty()),
            token: std::env::var(env::TOOL_TOKEN)
                .ok()
                .filter(|t| !t.is_empty()),
            runtime: RuntimeDir::from_env().map_err(|e| e.to_string()),
            timeout_ms,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolCommand {
    Spec {
        tool: String,
    },
    /// `args` is the raw JSON text, or `-` for stdin.
    Call {
        tool: String,
        args: String,
    },
}

/// Parses the tool-call argument; `-` reads all of `stdin`.
pub fn parse_args(raw: &str, stdin: impl Read) -> Result<Json, CliError> {
    let text = if raw == "-" {
        let mut buf = String::new();
        let mut stdin = stdin;
        stdin.read_to_string(&mut buf).map_err(CliError::Stdin)?;
        buf
    } else {
        raw.to_string()
    };
    serde_json::from_str(&text).map_err(|e| CliError::InvalidJson(e.to_string()))
}

/// Runs a tool command, prints its one JSON document and returns the exit code.
pub fn run(ctx: &ToolContext, command: ToolCommand) -> i32 {
    let result = execute(ctx, command);
    finish(result)
}

/// Prints the JSON document for `result` and returns the exit code.
pub fn finish(result: Result<Json, CliError>) -> i32 {
    match result {
        Ok(value) => {
            output::print_document(&output::ok_document(&value));
            crate::error::EXIT_OK
        }
        Err(e) => {
            output::print_document(&output::error_document(&e));
            e.exit_code()
        }
    }
}

fn execute(ctx: &ToolContext, command: ToolCommand) -> Result<Json, CliError> {
    // Local checks first: a usage error must not wait for a socket.
    let args = match &command {
        ToolCommand::Call { args, .. } => Some(parse_args(args, std::io::stdin().lock())?),
        ToolCommand::Spec { .. } => None,
    };
    let thread_id = ctx.thread_id.clone().ok_or(CliError::NoThreadId)?;
    let mut clients = Clients::new(ctx.runtime()?);
    if let Some(token) = &ctx.token {
        clients = clients.with_tool_token(token).map_err(|_| {
            CliError::Usage(format!("{} is not a valid metadata value", env::TOOL_TOKEN))
        })?;
    }
    let rt = crate::runtime()?;
    rt.block_on(async {
        // Connect first: no socket is CORE_UNAVAILABLE at once, not a failed call.
        clients.connect(ServiceName::ToolBridge).await?;
        let client = clients.toolbridge();
        match (command, args) {
            (ToolCommand::Spec { tool }, _) => tool_spec(client, thread_id, tool).await,
            (ToolCommand::Call { tool, .. }, Some(args)) => {
                tool_call(client, thread_id, tool, args, ctx.timeout_ms).await
            }
            (ToolCommand::Call { .. }, None) => unreachable!("arguments parsed above"),
        }
    })
}

async fn tool_spec(
    mut client: ToolBridgeClient,
    session_id: String,
    tool: String,
) -> Result<Json, CliError> {
    let spec = client
        .get_tool_spec(GetToolSpecRequest { session_id, tool })
        .await
        .map_err(|s| CliError::from_status(&s))?;
    Ok(pedelec_common::wire::tool_spec(spec.get_ref()))
}

/// One CallTool; also the MCP server's `tools/call` (module `mcp`).
pub(crate) async fn tool_call(
    mut client: ToolBridgeClient,
    session_id: String,
    tool: String,
    args: Json,
    timeout_ms: Option<u32>,
) -> Result<Json, CliError> {
    let mut req = tonic::Request::new(CallToolRequest {
        session_id,
        tool: tool.clone(),
        args: Some(to_value(&args)),
        timeout_ms,
    });
    // Only with an explicit timeout: otherwise the tool's own timeout (known
    // to the bridge, not to us) bounds the call.
    if let Some(ms) = timeout_ms {
        req.set_timeout(Duration::from_millis(ms.into()) + DEADLINE_GRACE);
    }
    let resp = client.call_tool(req).await.map_err(|s| {
        if s.code() == tonic::Code::DeadlineExceeded && pedelec_common::code_of_status(&s).is_none()
        {
            CliError::Tool {
                code: pedelec_common::Code::TOOL_TIMEOUT.as_str().to_string(),
                message: format!("tool {tool} did not answer in time"),
                details: None,
            }
        } else {
            CliError::from_status(&s)
        }
    })?;
    match resp.into_inner().outcome {
        Some(Outcome::Result(v)) => Ok(from_value(&v)),
        Some(Outcome::Error(e)) => Err(CliError::Tool {
            code: e.code,
            message: e.message,
            details: e.details.as_ref().map(from_value).filter(|d| !d.is_null()),
        }),
        // An empty oneof means the tool answered nothing: JSON null.
        None => Ok(Json::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inline_args_parse() {
        let v = parse_args(r#"{"q": "x", "n": 2}"#, std::io::empty()).unwrap();
        assert_eq!(v, json!({"q": "x", "n": 2}));
    }

    #[test]
    fn dash_reads_stdin() {
        let v = parse_args("-", &br#" {"from": "stdin"} "#[..]).unwrap();
        assert_eq!(v, json!({"from": "stdin"}));
    }

    #[test]
    fn invalid_json_is_invalid_input_exit_2() {
        let e = parse_args("{not json", std::io::empty()).unwrap_err();
        assert!(matches!(e, CliError::InvalidJson(_)));
        assert_eq!((e.code(), e.exit_code()), ("INVALID_INPUT", 2));
        let e = parse_args("-", std::io::empty()).unwrap_err();
        assert!(matches!(e, CliError::InvalidJson(_)));
    }

    #[test]
    fn missing_thread_id_fails_before_connecting() {
        let ctx = ToolContext {
            thread_id: None,
            token: None,
            runtime: Ok(RuntimeDir::at("/nonexistent")),
            timeout_ms: None,
        };
        let e = execute(&ctx, ToolCommand::Spec { tool: "t".into() }).unwrap_err();
        assert!(matches!(e, CliError::NoThreadId));
    }

    #[test]
    fn missing_socket_is_core_unavailable() {
        let ctx = ToolContext {
            thread_id: Some("thr_1".into()),
            token: None,
            runtime: Ok(RuntimeDir::at("/nonexistent")),
            timeout_ms: None,
        };
        let e = execute(&ctx, ToolCommand::Spec { tool: "t".into() }).unwrap_err();
        assert_eq!((e.code(), e.exit_code()), ("CORE_UNAVAILABLE", 2));
    }
}
