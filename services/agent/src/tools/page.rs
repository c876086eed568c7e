//! The web page's tools, through ToolBridgeService over gRPC with the
//! thread's token: one connection for the whole turn, no process per call.

use pb::call_tool_response::Outcome;
use pedelec_common::clients::ToolBridgeClient;
use pedelec_common::json::{from_struct, from_value, to_value};
use pedelec_common::{Clients, Code, CodedError, RuntimeDir, ServiceName, env};
use pedelec_proto::v1 as pb;
use serde_json::{Value as Json, json};

use crate::error::AgentError;

pub struct PageTools {
    client: ToolBridgeClient,
    thread: String,
    pub tools: Vec<pb::ToolSpec>,
    pub guidance: String,
}

impl PageTools {
    /// Connects to ToolBridgeService under `runtime` (failing at once when
    /// nothing serves it) and lists the thread's tools. Every call presents
    /// `token` (the client hub attaches it).
    pub async fn connect(
        runtime: &RuntimeDir,
        thread: &str,
        token: &str,
    ) -> Result<Self, AgentError> {
        let clients = Clients::new(runtime.clone())
            .with_tool_token(token)
            .map_err(|_| {
                AgentError::Usage(format!("{} is not a valid metadata value", env::TOOL_TOKEN))
            })?;
        clients
            .connect(ServiceName::ToolBridge)
            .await
            .map_err(|e| AgentError::ToolBridge(e.to_string()))?;
        let mut client = clients.toolbridge();
        let listed = client
            .list_tools(pb::ListToolsRequest {
                session_id: thread.to_string(),
            })
            .await
            .map_err(|s| {
                AgentError::ToolBridge(
                    CodedError::from_status(&s, Code::CORE_UNAVAILABLE).to_string(),
                )
            })?
            .into_inner();
        Ok(PageTools {
            client,
            thread: thread.to_string(),
            tools: listed.tools,
            guidance: listed.guidance,
        })
    }

    /// Calls a page tool; blocks until the page answers. The page's error,
    /// and the bridge's refusals (bad arguments, timeout), go back to the model.
    pub async fn call(&mut self, tool: &str, args: Json) -> Result<Json, AgentError> {
        let req = pb::CallToolRequest {
            session_id: self.thread.clone(),
            tool: tool.to_string(),
            args: Some(to_value(&args)),
            timeout_ms: None,
        };
        match self.client.call_tool(req).await {
            Ok(resp) => match resp.into_inner().outcome {
                Some(Outcome::Result(v)) => Ok(from_value(&v)),
                Some(Outcome::Error(e)) => {
                    // What the model reads is a code of this build: a page's
                    // own or empty code is TOOL_HANDLER_ERROR.
                    let e =
                        CodedError::from_wire(&e.code, Code::TOOL_HANDLER_ERROR, e.message, None);
                    Err(AgentError::Tool {
                        code: e.code,
                        message: e.message,
                    })
                }
                None => Ok(Json::Null),
            },
            Err(status) => {
                let e = CodedError::from_status(&status, Code::CORE_UNAVAILABLE);
                Err(AgentError::Tool {
                    code: e.code,
                    message: e.message,
                })
            }
        }
    }
}

/// The Ollama tool definition of a page tool, offered under `name`.
pub fn definition(spec: &pb::ToolSpec, name: &str) -> Json {
    let schema = spec
        .args_schema
        .as_ref()
        .map(|s| Json::Object(from_struct(s)))
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": format!("A tool of the web page the user is working in. {}", spec.description),
            "parameters": schema,
        }
    })
}
