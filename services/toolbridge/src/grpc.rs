//! The thin tonic adapter over [`ToolBridge`]: proto <-> plain types, and the
//! tool token read from the request metadata.

use std::pin::Pin;
use std::sync::Arc;

use pedelec_common::json::{from_struct, from_value, to_struct, to_value};
use pedelec_common::secret::InternalGate;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;
use pedelec_proto::v1::tool_bridge_service_server::ToolBridgeService;
use serde_json::Value as Json;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::{Request, Response, Status};

use crate::bridge::{BridgeEvent, CallRequest, DropReason, ToolBridge};
use crate::error::ToolBridgeError;

type Result<T> = std::result::Result<Response<T>, Status>;

pub struct ToolBridgeGrpc {
    bridge: Arc<ToolBridge>,
    /// Register, RenderPrompt, Watch, Resolve and Drop are SessionService's
    /// alone: agents reach this socket (docs/security.md).
    internal: InternalGate,
}

impl ToolBridgeGrpc {
    pub fn new(bridge: Arc<ToolBridge>, internal: InternalGate) -> Self {
        ToolBridgeGrpc { bridge, internal }
    }
}

fn token<T>(req: &Request<T>) -> Option<String> {
    req.metadata()
        .get(pedelec_common::TOOL_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn to_tool_error(e: CodedError) -> pb::ToolError {
    pb::ToolError {
        code: e.wire_code().to_string(),
        message: e.message,
        details: e.details.as_ref().map(to_value),
    }
}

fn to_event(event: &BridgeEvent) -> pb::ToolEvent {
    use pb::tool_event::Event;
    let event = match event {
        BridgeEvent::Requested {
            session_id,
            tool_request_id,
            tool,
            args,
            timeout_ms,
            deadline,
        } => Event::Requested(pb::ToolRequested {
            session_id: session_id.clone(),
            tool_request_id: tool_request_id.clone(),
            tool: tool.clone(),
            args: Some(to_value(args)),
            timeout_ms: *timeout_ms,
            deadline_at: Some(pedelec_common::to_timestamp(*deadline)),
        }),
        BridgeEvent::Settled {
            session_id,
            tool_request_id,
            reason,
        } => Event::Settled(pb::ToolSettled {
            session_id: session_id.clone(),
            tool_request_id: tool_request_id.clone(),
            reason: reason.to_pb() as i32,
        }),
    };
    pb::ToolEvent { event: Some(event) }
}

#[tonic::async_trait]
impl ToolBridgeService for ToolBridgeGrpc {
    async fn register(
        &self,
        req: Request<pb::RegisterToolsRequest>,
    ) -> Result<pb::RegisterToolsResponse> {
        self.internal.check(&req, "Register")?;
        let req = req.into_inner();
        // No manifest is an app without skills: an empty registry.
        let manifest = req.manifest.as_ref().map(from_struct).unwrap_or_default();
        let patterns = crate::manifest::has_patterns(&manifest);
        let bridge = self.bridge.clone();
        let register = move || bridge.register(&req.session_id, &manifest, &req.tool_token);
        // Compiling the schemas' patterns is CPU work kept off the one runtime
        // thread that serves every thread's tool calls. Without patterns,
        // validation takes microseconds: inline, it saves create_session a
        // thread hand-off (and the pool thread's memory).
        let reg = if patterns {
            tokio::task::spawn_blocking(register)
                .await
                .map_err(|e| Status::internal(format!("manifest validation failed: {e}")))??
        } else {
            register()?
        };
        Ok(Response::new(pb::RegisterToolsResponse {
            tool_token: reg.tool_token.into_inner(),
            tool_count: reg.tool_count,
        }))
    }

    async fn render_prompt(
        &self,
        req: Request<pb::RenderPromptRequest>,
    ) -> Result<pb::RenderPromptResponse> {
        self.internal.check(&req, "RenderPrompt")?;
        let req = req.into_inner();
        let via = if req.native_tools {
            crate::prompt::Via::Mcp
        } else {
            crate::prompt::Via::Shell
        };
        let prompt_block = self
            .bridge
            .render_prompt(&req.session_id, &req.assets_dir, via)?;
        Ok(Response::new(pb::RenderPromptResponse { prompt_block }))
    }

    async fn get_tool_spec(&self, req: Request<pb::GetToolSpecRequest>) -> Result<pb::ToolSpec> {
        let token = token(&req);
        let req = req.into_inner();
        let spec = self
            .bridge
            .tool_spec(token.as_deref(), &req.session_id, &req.tool)?;
        Ok(Response::new(pb::ToolSpec {
            name: spec.name,
            description: spec.description,
            args_schema: Some(to_struct(&spec.args_schema)),
            timeout_ms: spec.timeout_ms,
        }))
    }

    async fn list_tools(
        &self,
        req: Request<pb::ListToolsRequest>,
    ) -> Result<pb::ListToolsResponse> {
        let token = token(&req);
        let req = req.into_inner();
        let (tools, guidance) = self.bridge.list_tools(token.as_deref(), &req.session_id)?;
        Ok(Response::new(pb::ListToolsResponse {
            tools: tools
                .into_iter()
                .map(|spec| pb::ToolSpec {
                    name: spec.name,
                    description: spec.description,
                    args_schema: Some(to_struct(&spec.args_schema)),
                    timeout_ms: spec.timeout_ms,
                })
                .collect(),
            guidance,
        }))
    }

    async fn call_tool(&self, req: Request<pb::CallToolRequest>) -> Result<pb::CallToolResponse> {
        use pb::call_tool_response::Outcome;
        let token = token(&req);
        let req = req.into_inner();
        let call = CallRequest {
            session_id: req.session_id,
            tool: req.tool,
            args: req.args.as_ref().map_or(Json::Null, from_value),
            timeout_ms: req.timeout_ms,
        };
        // If the client goes away tonic drops this future, which settles the
        // request as caller_gone.
        let outcome = self.bridge.call_tool(token.as_deref(), call).await?;
        let outcome = match outcome {
            Ok(result) => Outcome::Result(to_value(&result)),
            Err(e) => Outcome::Error(to_tool_error(e)),
        };
        Ok(Response::new(pb::CallToolResponse {
            outcome: Some(outcome),
        }))
    }

    type WatchStream = Pin<
        Box<dyn tokio_stream::Stream<Item = std::result::Result<pb::ToolEvent, Status>> + Send>,
    >;

    async fn watch(&self, req: Request<pb::WatchToolsRequest>) -> Result<Self::WatchStream> {
        self.internal.check(&req, "Watch")?;
        let (current, rx) = self.bridge.subscribe();
        let live = BroadcastStream::new(rx).filter_map(|item| match item {
            Ok(event) => Some(Ok(to_event(&event))),
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "a Watch subscriber fell behind and lost tool events"
                );
                None
            }
        });
        let stream = tokio_stream::iter(current.into_iter().map(|e| Ok(to_event(&e)))).chain(live);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn resolve(
        &self,
        req: Request<pb::ResolveToolRequest>,
    ) -> Result<pb::ResolveToolResponse> {
        self.internal.check(&req, "Resolve")?;
        use pb::resolve_tool_request::Outcome;
        let req = req.into_inner();
        let outcome = match req.outcome {
            Some(Outcome::Result(v)) => Ok(from_value(&v)),
            // The page's code passes on as it came; one it left empty is
            // TOOL_HANDLER_ERROR.
            Some(Outcome::Error(e)) => Err(CodedError::from_wire(
                &e.code,
                Code::TOOL_HANDLER_ERROR,
                e.message,
                e.details.as_ref().map(from_value),
            )),
            None => {
                return Err(ToolBridgeError::InvalidInput(
                    "Resolve needs a result or an error".into(),
                )
                .into());
            }
        };
        self.bridge
            .resolve(&req.session_id, &req.tool_request_id, outcome)?;
        // The waiting CallTool was just woken. Let it run first, so its answer
        // (what the agent waits for) is written before this reply and the
        // Settled event, which only SessionService waits for.
        tokio::task::yield_now().await;
        Ok(Response::new(pb::ResolveToolResponse {}))
    }

    async fn drop(&self, req: Request<pb::DropToolsRequest>) -> Result<pb::DropToolsResponse> {
        self.internal.check(&req, "Drop")?;
        let req = req.into_inner();
        let why = if req.keep_manifest {
            DropReason::Cancelled
        } else {
            DropReason::Ended
        };
        let dropped = self.bridge.drop_thread(&req.session_id, why);
        Ok(Response::new(pb::DropToolsResponse { dropped }))
    }
}
