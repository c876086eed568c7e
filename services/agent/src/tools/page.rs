//! The web page's tools, through ToolBridgeService over gRPC with the
//! thread's token: one connection for the whole turn, no process per call.

use std::path::Path;

use pb::call_tool_response::Outcome;
use pb::tool_bridge_service_client::ToolBridgeServiceClient;
use pedelec_common::json::{from_struct, from_value, to_value};
use pedelec_common::{Code, CodedError, uds};
use pedelec_proto::v1 as pb;
use serde_json::{Value as Json, json};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::error::AgentError;

/// The gRPC metadata key carrying the thread's tool token (DESIGN.md §3).
pub const TOKEN_METADATA: &str = "x-pedelec-tool-token";

pub struct PageTools {
    client: ToolBridgeServiceClient<Channel>,
    thread: String,
    token: MetadataValue<Ascii>,
    pub tools: Vec<pb::ToolSpec>,
    pub guidance: String,
}

impl PageTools {
    /// Connects to `<runtime>/toolbridge.sock` and lists the thread's tools.
    pub async fn connect(socket: &Path, thread: &str, token: &str) -> Result<Self, AgentError> {
        let token = MetadataValue::try_from(token).map_err(|_| {
            AgentError::Usage("PEDELEC_TOOL_TOKEN is not a valid metadata value".into())
        })?;
        let channel = uds::connect(socket)
            .await
            .map_err(|e| AgentError::ToolBridge(e.to_string()))?;
        let mut client = ToolBridgeServiceClient::new(channel)
            .max_decoding_message_size(pedelec_common::MAX_GRPC_MESSAGE)
            .max_encoding_message_size(pedelec_common::MAX_GRPC_MESSAGE);
        let mut req = tonic::Request::new(pb::ListToolsRequest {
            session_id: thread.to_string(),
        });
        req.metadata_mut().insert(TOKEN_METADATA, token.clone());
        let listed = client
            .list_tools(req)
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
            token,
            tools: listed.tools,
            guidance: listed.guidance,
        })
    }

    /// Calls a page tool; blocks until the page answers. The page's error,
    /// and the bridge's refusals (bad arguments, timeout), go back to the model.
    pub async fn call(&mut self, tool: &str, args: Json) -> Result<Json, AgentError> {
        let mut req = tonic::Request::new(pb::CallToolRequest {
            session_id: self.thread.clone(),
            tool: tool.to_string(),
            args: Some(to_value(&args)),
            timeout_ms: None,
        });
        req.metadata_mut()
            .insert(TOKEN_METADATA, self.token.clone());
        match self.client.call_tool(req).await {
            Ok(resp) => match resp.into_inner().outcome {
                Some(Outcome::Result(v)) => Ok(from_value(&v)),
                Some(Outcome::Error(e)) => Err(AgentError::Tool {
                    code: Code::parse(&e.code).unwrap_or(Code::TOOL_HANDLER_ERROR),
                    message: e.message,
                }),
                None => Ok(Json::Null),
            },
            Err(status) => {
                let e = CodedError::from_status(&status, Code::CORE_UNAVAILABLE);
                Err(AgentError::Tool {
                    code: Code::parse(&e.code).unwrap_or(Code::INTERNAL),
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
