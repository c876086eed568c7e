//! The tonic adapter over a real Unix socket, in-process: statuses for
//! refusals, OK responses with `outcome.error` for call outcomes, the token
//! metadata, Watch, and a caller that hangs up.

#![forbid(unsafe_code)]

use std::time::Duration;

use pb::tool_bridge_service_client::ToolBridgeServiceClient;
use pedelec_common::json::{from_value, to_struct, to_value};
use pedelec_common::{DataDir, RuntimeDir, ServiceName, code_of_status, uds};
use pedelec_proto::v1 as pb;
use serde_json::json;
use tokio::sync::oneshot;
use tonic::transport::Channel;

struct Server {
    client: ToolBridgeServiceClient<Channel>,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::Builder::new()
        .prefix("tb")
        .tempdir_in("/tmp")
        .unwrap();
    let runtime = RuntimeDir::at(dir.path().join("rt"));
    let config = pedelec_toolbridge::Config {
        runtime_dir: runtime.clone(),
        data_dir: DataDir::at(dir.path().join("data")),
        service_secret: None,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(pedelec_toolbridge::run_until(config, async move {
        let _ = stopped.await;
    }));
    let socket = runtime.socket(ServiceName::ToolBridge);
    for _ in 0..200 {
        if let Ok(channel) = uds::connect(&socket).await {
            return Server {
                client: ToolBridgeServiceClient::new(channel),
                _stop: stop,
                _dir: dir,
            };
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("toolbridge did not start");
}

fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("x-pedelec-tool-token", token.parse().unwrap());
    req
}

fn call(args: serde_json::Value, timeout_ms: Option<u32>) -> pb::CallToolRequest {
    pb::CallToolRequest {
        session_id: "thr_g".into(),
        tool: "echo".into(),
        args: Some(to_value(&args)),
        timeout_ms,
    }
}

async fn register(client: &mut ToolBridgeServiceClient<Channel>) -> String {
    let manifest = json!({
        "guidance": "Say \"hi\".",
        "tools": [{"name": "echo", "description": "Echo n.", "argsSchema":
            {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}]
    });
    let resp = client
        .register(pb::RegisterToolsRequest {
            session_id: "thr_g".into(),
            manifest: Some(to_struct(manifest.as_object().unwrap())),
            tool_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.tool_count, 1);
    resp.tool_token
}

async fn next_event(stream: &mut tonic::Streaming<pb::ToolEvent>) -> pb::tool_event::Event {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("event in time")
        .unwrap()
        .unwrap()
        .event
        .unwrap()
}

#[tokio::test]
async fn register_render_spec_call_resolve() {
    let mut s = start().await;
    let token = register(&mut s.client).await;

    let block = s
        .client
        .render_prompt(pb::RenderPromptRequest {
            session_id: "thr_g".into(),
            assets_dir: "/w/assets".into(),
            native_tools: false,
        })
        .await
        .unwrap()
        .into_inner()
        .prompt_block;
    assert!(block.contains("--thread-id thr_g tool-call <tool> '<json>'"));
    assert!(block.contains("Say \"hi\"."));

    let spec = s
        .client
        .get_tool_spec(with_token(
            pb::GetToolSpecRequest {
                session_id: "thr_g".into(),
                tool: "echo".into(),
            },
            &token,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(spec.timeout_ms, 60_000);
    assert_eq!(
        spec.args_schema.unwrap().fields["type"],
        to_value(&json!("object"))
    );

    let denied = s
        .client
        .get_tool_spec(pb::GetToolSpecRequest {
            session_id: "thr_g".into(),
            tool: "echo".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        code_of_status(&denied).as_deref(),
        Some("TOOL_ACCESS_DENIED")
    );

    let bad = s
        .client
        .call_tool(with_token(call(json!({"n": "x"}), None), &token))
        .await
        .unwrap_err();
    assert_eq!(code_of_status(&bad).as_deref(), Some("TOOL_ARGS_INVALID"));
    assert!(bad.message().contains("/n"));

    let mut watch = s
        .client
        .watch(pb::WatchToolsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut caller = s.client.clone();
    let t = token.clone();
    let task = tokio::spawn(async move {
        caller
            .call_tool(with_token(call(json!({"n": 5}), None), &t))
            .await
    });
    let pb::tool_event::Event::Requested(req) = next_event(&mut watch).await else {
        panic!("expected requested");
    };
    assert_eq!(from_value(req.args.as_ref().unwrap()), json!({"n": 5}));
    s.client
        .resolve(pb::ResolveToolRequest {
            session_id: "thr_g".into(),
            tool_request_id: req.tool_request_id.clone(),
            outcome: Some(pb::resolve_tool_request::Outcome::Result(to_value(
                &json!({"got": 5}),
            ))),
        })
        .await
        .unwrap();
    let pb::tool_event::Event::Settled(settled) = next_event(&mut watch).await else {
        panic!("expected settled");
    };
    assert_eq!(settled.reason, pb::ToolSettleReason::Resolved as i32);
    let resp = task.await.unwrap().unwrap().into_inner();
    match resp.outcome.unwrap() {
        pb::call_tool_response::Outcome::Result(v) => assert_eq!(from_value(&v), json!({"got": 5})),
        other => panic!("unexpected {other:?}"),
    }

    let again = s
        .client
        .resolve(pb::ResolveToolRequest {
            session_id: "thr_g".into(),
            tool_request_id: req.tool_request_id,
            outcome: Some(pb::resolve_tool_request::Outcome::Result(to_value(&json!(
                1
            )))),
        })
        .await
        .unwrap_err();
    assert_eq!(
        code_of_status(&again).as_deref(),
        Some("TOOL_REQUEST_NOT_PENDING")
    );

    // A timeout is an outcome of a valid call: OK with outcome.error.
    let resp = s
        .client
        .call_tool(with_token(call(json!({"n": 1}), Some(30)), &token))
        .await
        .unwrap()
        .into_inner();
    match resp.outcome.unwrap() {
        pb::call_tool_response::Outcome::Error(e) => assert_eq!(e.code, "TOOL_TIMEOUT"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_caller_that_hangs_up_settles_as_caller_gone() {
    let mut s = start().await;
    let token = register(&mut s.client).await;
    let mut watch = s
        .client
        .watch(pb::WatchToolsRequest {})
        .await
        .unwrap()
        .into_inner();
    // Its own connection, so closing it looks like a pedelec-cli exiting.
    let socket_client = s.client.clone();
    let task = tokio::spawn(async move {
        let mut c = socket_client;
        c.call_tool(with_token(call(json!({"n": 1}), None), &token))
            .await
    });
    let pb::tool_event::Event::Requested(req) = next_event(&mut watch).await else {
        panic!("expected requested");
    };
    task.abort();
    let pb::tool_event::Event::Settled(settled) = next_event(&mut watch).await else {
        panic!("expected settled");
    };
    assert_eq!(settled.tool_request_id, req.tool_request_id);
    assert_eq!(settled.reason, pb::ToolSettleReason::CallerGone as i32);
}

#[tokio::test]
async fn drop_answers_callers_with_an_ok_outcome() {
    let mut s = start().await;
    let token = register(&mut s.client).await;
    let mut watch = s
        .client
        .watch(pb::WatchToolsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut caller = s.client.clone();
    let task = tokio::spawn(async move {
        caller
            .call_tool(with_token(call(json!({"n": 1}), None), &token))
            .await
    });
    next_event(&mut watch).await;
    let dropped = s
        .client
        .drop(pb::DropToolsRequest {
            session_id: "thr_g".into(),
            keep_manifest: false,
        })
        .await
        .unwrap()
        .into_inner()
        .dropped;
    assert_eq!(dropped, 1);
    let resp = task.await.unwrap().unwrap().into_inner();
    match resp.outcome.unwrap() {
        pb::call_tool_response::Outcome::Error(e) => assert_eq!(e.code, "SESSION_ENDED"),
        other => panic!("unexpected {other:?}"),
    }
}
