//! `pedelec-cli mcp`: the page's tools as native MCP tools of an agent CLI.
//!
//! A stdio MCP server (the official SDK, `rmcp`) for one thread, configured
//! from the agent's environment like `tool-call`. `tools/list` is the thread's
//! manifest (ToolBridge `ListTools`), `tools/call` is ToolBridge `CallTool`
//! over one long-lived connection. Whatever the page, the bridge or the
//! connection answers comes back as a tool result: a failure is a result with
//! `isError: true` whose text starts with the Pedelec code, so the model can
//! read it and correct itself; it is never a broken call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pedelec_common::clients::ToolBridgeClient;
use pedelec_common::json::from_struct;
use pedelec_common::{Clients, env};
use pedelec_proto::v1::{ListToolsRequest, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value as Json;

use crate::error::CliError;
use crate::output;
use crate::tools::{ToolContext, tool_call};

/// How often the manifest is compared with the list the client last got.
/// ToolBridge has no manifest-change stream; a local `ListTools` is a few
/// tens of microseconds, so polling costs nothing worth a new RPC.
pub const MANIFEST_POLL: Duration = Duration::from_secs(1);

/// The server name announced in `initialize`.
const SERVER_NAME: &str = "pedelec";

/// The MCP server of one thread.
#[derive(Clone)]
pub struct PageTools {
    thread_id: String,
    client: ToolBridgeClient,
    /// The list the client got last; `None` until it asked. A manifest that
    /// differs from it is announced with `notifications/tools/list_changed`.
    listed: Arc<Mutex<Option<Vec<ToolSpec>>>>,
    poll: Duration,
}

impl PageTools {
    /// A server for `thread_id` whose ToolBridge calls present `token`.
    pub fn new(clients: &Clients, thread_id: String) -> PageTools {
        PageTools {
            thread_id,
            client: clients.toolbridge(),
            listed: Arc::new(Mutex::new(None)),
            poll: MANIFEST_POLL,
        }
    }

    /// The same server comparing the manifest every `poll` (tests).
    pub fn with_poll(mut self, poll: Duration) -> PageTools {
        self.poll = poll;
        self
    }

    async fn manifest(&self) -> Result<Vec<ToolSpec>, CliError> {
        let resp = self
            .client
            .clone()
            .list_tools(ListToolsRequest {
                session_id: self.thread_id.clone(),
            })
            .await
            .map_err(|s| CliError::from_status(&s))?;
        Ok(resp.into_inner().tools)
    }

    fn remember(&self, tools: Vec<ToolSpec>) {
        *self.listed.lock().unwrap_or_else(|e| e.into_inner()) = Some(tools);
    }

    /// Whether `tools` differs from what the client was given.
    fn changed(&self, tools: &[ToolSpec]) -> bool {
        match &*self.listed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(listed) => listed.as_slice() != tools,
            None => false,
        }
    }

    /// Announces manifest changes until the client is gone.
    async fn watch_manifest(self, peer: rmcp::Peer<RoleServer>) {
        loop {
            tokio::time::sleep(self.poll).await;
            if peer.is_transport_closed() {
                return;
            }
            // A bridge that is down or restarting says nothing about the
            // manifest: keep the last list and look again later.
            let Ok(tools) = self.manifest().await else {
                continue;
            };
            if self.changed(&tools) {
                // Remember it now so one change is announced once; the
                // client's next tools/list gets the list as it is then.
                self.remember(tools);
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// An MCP tool from a manifest entry: the page's name, description and
/// argument schema as they are.
fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema = spec
        .args_schema
        .as_ref()
        .map(from_struct)
        .unwrap_or_default();
    Tool::new(spec.name.clone(), spec.description.clone(), schema)
}

/// A failure as the model should read it: `CODE: message`, then the details.
pub fn error_result(err: &CliError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(output::human_error(err))])
}

/// The page's JSON result as the tool's text.
pub fn ok_result(result: &Json) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(result.to_string())])
}

/// A failure that is no tool result: the list itself could not be read.
fn list_error(err: &CliError) -> McpError {
    McpError::internal_error(
        output::human_error(err),
        Some(serde_json::json!({"code": err.code()})),
    )
}

impl ServerHandler for PageTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.manifest().await.map_err(|e| list_error(&e))?;
        let listed = tools.iter().map(mcp_tool).collect();
        self.remember(tools);
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = Json::Object(request.arguments.unwrap_or_default());
        let call = tool_call(
            self.client.clone(),
            self.thread_id.clone(),
            request.name.into_owned(),
            args,
            None,
        );
        tokio::select! {
            outcome = call => Ok(match outcome {
                Ok(result) => ok_result(&result),
                Err(e) => error_result(&e),
            }
            .into()),
            // Dropping the call's future ends the gRPC call, and the bridge
            // settles the page's pending request as caller_gone. The client
            // asked to forget this request, so what we answer is not read.
            () = context.ct.cancelled() => Err(McpError::internal_error("cancelled by the client", None)),
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tokio::spawn(self.clone().watch_manifest(context.peer));
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin. Returns the exit
/// code; a configuration error is printed on stderr (stdout is the protocol's).
pub fn run(ctx: &ToolContext) -> i32 {
    match serve(ctx) {
        Ok(()) => crate::error::EXIT_OK,
        Err(e) => {
            eprintln!("{}", output::human_error(&e));
            e.exit_code()
        }
    }
}

fn serve(ctx: &ToolContext) -> Result<(), CliError> {
    let thread_id = ctx.thread_id.clone().ok_or(CliError::NoThreadId)?;
    let token = ctx.token.as_deref().ok_or_else(|| {
        CliError::Usage(format!(
            "no tool token: {} must be set (Pedelec sets it for the agent)",
            env::TOOL_TOKEN
        ))
    })?;
    let clients = Clients::new(ctx.runtime()?)
        .with_tool_token(token)
        .map_err(|_| {
            CliError::Usage(format!("{} is not a valid metadata value", env::TOOL_TOKEN))
        })?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        // The channel is made inside the runtime (its connector needs one).
        let running = PageTools::new(&clients, thread_id)
            .serve((
                pedelec_common::stdio::stdin(),
                pedelec_common::stdio::stdout(),
            ))
            .await
            .map_err(|e| CliError::Usage(format!("MCP initialization failed: {e}")))?;
        let _ = running.waiting().await;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pedelec_common::RuntimeDir;

    fn text(result: &CallToolResult) -> String {
        match &result.content[..] {
            [ContentBlock::Text(t)] => t.text.clone(),
            other => panic!("one text block expected, got {other:?}"),
        }
    }

    #[test]
    fn errors_are_tool_results_led_by_the_code() {
        let e = CliError::Tool {
            code: "TOOL_ARGS_INVALID".into(),
            message: "/limit: must be at most 10".into(),
            details: Some(serde_json::json!({"pointer": "/limit"})),
        };
        let result = error_result(&e);
        assert_eq!(result.is_error, Some(true));
        let text = text(&result);
        assert!(text.starts_with("TOOL_ARGS_INVALID: /limit"), "{text}");
        assert!(text.contains(r#""pointer":"/limit""#), "{text}");
    }

    #[test]
    fn results_are_the_json_text() {
        let result = ok_result(&serde_json::json!({"rows": [1, 2]}));
        assert_ne!(result.is_error, Some(true));
        assert_eq!(text(&result), r#"{"rows":[1,2]}"#);
    }

    #[test]
    fn a_tool_is_the_manifest_entry() {
        let schema = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let spec = ToolSpec {
            name: "search_rows".into(),
            description: "Find rows".into(),
            args_schema: Some(pedelec_common::json::to_struct(schema.as_object().unwrap())),
            timeout_ms: 1000,
        };
        let tool = mcp_tool(&spec);
        assert_eq!(tool.name, "search_rows");
        assert_eq!(tool.description.as_deref(), Some("Find rows"));
        assert_eq!(Json::Object((*tool.input_schema).clone()), schema);
    }

    #[test]
    fn configuration_errors_come_before_serving() {
        let ctx = ToolContext {
            thread_id: None,
            token: Some("t".into()),
            runtime: Ok(RuntimeDir::at("/nonexistent")),
            timeout_ms: None,
        };
        assert!(matches!(serve(&ctx), Err(CliError::NoThreadId)));
        let ctx = ToolContext {
            thread_id: Some("thr_1".into()),
            token: None,
            ..ctx
        };
        let e = serve(&ctx).unwrap_err();
        assert_eq!((e.code(), e.exit_code()), ("INVALID_INPUT", 2));
    }
}
