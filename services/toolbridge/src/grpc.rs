//! The thin tonic adapter over [`ToolBridge`].

use std::pin::Pin;
use std::sync::Arc;

use pedelec_proto::v1::tool_bridge_service_server::ToolBridgeService;
use pedelec_proto::v1::{
    CallToolRequest, CallToolResponse, DropToolsRequest, DropToolsResponse, GetToolSpecRequest,
    RegisterToolsRequest, RegisterToolsResponse, RenderPromptRequest, RenderPromptResponse,
    ResolveToolRequest, ResolveToolResponse, ToolEvent, ToolSpec, WatchToolsRequest,
};
use tonic::{Request, Response, Status};

use crate::ToolBridge;

type Result<T> = std::result::Result<Response<T>, Status>;

pub struct ToolBridgeGrpc {
    bridge: Arc<ToolBridge>,
}

impl ToolBridgeGrpc {
    pub fn new(bridge: Arc<ToolBridge>) -> Self {
        ToolBridgeGrpc { bridge }
    }

    fn not_yet<T>(&self, what: &'static str) -> Result<T> {
        Err(self.bridge.not_yet(what).into())
    }
}

#[tonic::async_trait]
impl ToolBridgeService for ToolBridgeGrpc {
    async fn register(&self, _: Request<RegisterToolsRequest>) -> Result<RegisterToolsResponse> {
        self.not_yet("Register")
    }

    async fn render_prompt(&self, _: Request<RenderPromptRequest>) -> Result<RenderPromptResponse> {
        self.not_yet("RenderPrompt")
    }

    async fn get_tool_spec(&self, _: Request<GetToolSpecRequest>) -> Result<ToolSpec> {
        self.not_yet("GetToolSpec")
    }

    async fn call_tool(&self, _: Request<CallToolRequest>) -> Result<CallToolResponse> {
        self.not_yet("CallTool")
    }

    type WatchStream =
        Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<ToolEvent, Status>> + Send>>;

    async fn watch(&self, _: Request<WatchToolsRequest>) -> Result<Self::WatchStream> {
        self.not_yet("Watch")
    }

    async fn resolve(&self, _: Request<ResolveToolRequest>) -> Result<ResolveToolResponse> {
        self.not_yet("Resolve")
    }

    async fn drop(&self, _: Request<DropToolsRequest>) -> Result<DropToolsResponse> {
        self.not_yet("Drop")
    }
}
