//! The built pedelec-cli binary against a tiny fake ToolBridgeService on a temp
//! Unix socket: token metadata, output documents, exit codes, stdin input.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pedelec_common::json::{from_value, to_struct, to_value};
use pedelec_common::{Code, CodedError, ServiceName, env, uds};
use pedelec_proto::v1::tool_bridge_service_server::{ToolBridgeService, ToolBridgeServiceServer};
use pedelec_proto::v1::*;
use serde_json::{Value as Json, json};
use tonic::service::Routes;
use tonic::{Request, Response, Status};

const TOKEN: &str = "tok-secret";
const THREAD: &str = "thr_test";

#[derive(Default)]
struct Fake {
    /// Every token the bridge saw, to prove the metadata arrives.
    tokens: Arc<Mutex<Vec<Option<String>>>>,
}

impl Fake {
    fn check<T>(&self, req: &Request<T>, session_id: &str) -> Result<(), Status> {
        let token = req
            .metadata()
            .get("x-pedelec-tool-token")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        self.tokens.lock().unwrap().push(token.clone());
        if token.as_deref() != Some(TOKEN) || session_id != THREAD {
            return Err(CodedError::new(Code::TOOL_ACCESS_DENIED, "bad tool token").to_status());
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl ToolBridgeService for Fake {
    async fn register(
        &self,
        _: Request<RegisterToolsRequest>,
    ) -> Result<Response<RegisterToolsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn render_prompt(
        &self,
        _: Request<RenderPromptRequest>,
    ) -> Result<Response<RenderPromptResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_tools(
        &self,
        _: Request<pedelec_proto::v1::ListToolsRequest>,
    ) -> Result<Response<pedelec_proto::v1::ListToolsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_tool_spec(
        &self,
        req: Request<GetToolSpecRequest>,
    ) -> Result<Response<ToolSpec>, Status> {
        self.check(&req, &req.get_ref().session_id)?;
        if req.get_ref().tool != "echo" {
            return Err(CodedError::new(Code::TOOL_NOT_FOUND, "no tool named that").to_status());
        }
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        Ok(Response::new(ToolSpec {
            name: "echo".into(),
            description: "Echoes its arguments".into(),
            args_schema: Some(to_struct(schema.as_object().unwrap())),
            timeout_ms: 60_000,
        }))
    }
    async fn call_tool(
        &self,
        req: Request<CallToolRequest>,
    ) -> Result<Response<CallToolResponse>, Status> {
        self.check(&req, &req.get_ref().session_id)?;
        let r = req.into_inner();
        let args = r.args.as_ref().map(from_value).unwrap_or(Json::Null);
        let outcome = match r.tool.as_str() {
            "echo" => call_tool_response::Outcome::Result(to_value(
                &json!({"args": args, "timeoutMs": r.timeout_ms}),
            )),
            "fail" => call_tool_response::Outcome::Error(ToolError {
                code: "TOOL_HANDLER_ERROR".into(),
                message: "the page said no".into(),
                details: Some(to_value(&json!({"why": "testing"}))),
            }),
            _ => {
                return Err(CodedError::new(Code::TOOL_NOT_FOUND, "no tool named that").to_status());
            }
        };
        Ok(Response::new(CallToolResponse {
            outcome: Some(outcome),
        }))
    }
    type WatchStream = tokio_stream::Empty<Result<ToolEvent, Status>>;
    async fn watch(
        &self,
        _: Request<WatchToolsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn resolve(
        &self,
        _: Request<ResolveToolRequest>,
    ) -> Result<Response<ResolveToolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn drop(
        &self,
        _: Request<DropToolsRequest>,
    ) -> Result<Response<DropToolsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

fn cli(runtime_dir: &Path, token: Option<&str>, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pedelec-cli"));
    cmd.args(args)
        .env(env::RUNTIME_DIR, runtime_dir)
        .env(env::THREAD_ID, THREAD)
        .env_remove(env::TOOL_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env(env::TOOL_TOKEN, t);
    }
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

/// Exactly one JSON document on stdout, and the exit code.
fn doc(out: &Output) -> (Json, i32) {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "one line on stdout: {text:?}");
    assert!(text.starts_with(r#"{"ok":"#), "ok comes first: {text}");
    (
        serde_json::from_str(&text).unwrap(),
        out.status.code().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_against_a_fake_bridge() {
    let dir = tempfile::tempdir().unwrap();
    let runtime_dir = dir.path().to_path_buf();
    let fake = Fake::default();
    let tokens = fake.tokens.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let socket = runtime_dir.join(ServiceName::ToolBridge.socket_file());
    let server = tokio::spawn({
        let socket = socket.clone();
        async move {
            let routes = Routes::new(ToolBridgeServiceServer::new(fake));
            uds::serve(&socket, ServiceName::ToolBridge, routes, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let rd = runtime_dir.clone();
    tokio::task::spawn_blocking(move || {
        let rd = rd.as_path();
        let tok = Some(TOKEN);

        // tool-spec: ok, camelCase result.
        let (d, code) = doc(&cli(rd, tok, &["tool-spec", "echo"], None));
        assert_eq!(code, 0, "{d}");
        assert_eq!(
            d,
            json!({"ok": true, "result": {
                "name": "echo",
                "description": "Echoes its arguments",
                "argsSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "timeoutMs": 60000,
            }})
        );

        // tool-call inline with --timeout-ms.
        let out = cli(
            rd,
            tok,
            &["--timeout-ms", "1500", "tool-call", "echo", r#"{"text":"hi"}"#],
            None,
        );
        let (d, code) = doc(&out);
        assert_eq!(code, 0, "{d}");
        assert_eq!(
            d,
            json!({"ok": true, "result": {"args": {"text": "hi"}, "timeoutMs": 1500}})
        );

        // tool-call from stdin.
        let (d, code) = doc(&cli(
            rd,
            tok,
            &["tool-call", "echo", "-"],
            Some("{\"text\": \"from stdin\"}\n"),
        ));
        assert_eq!(code, 0, "{d}");
        assert_eq!(d["result"]["args"], json!({"text": "from stdin"}));
        assert_eq!(d["result"]["timeoutMs"], Json::Null);

        // The page's error: exit 1, details kept.
        let (d, code) = doc(&cli(rd, tok, &["tool-call", "fail", "{}"], None));
        assert_eq!(code, 1);
        assert_eq!(
            d,
            json!({"ok": false, "error": {"code": "TOOL_HANDLER_ERROR", "message": "the page said no", "details": {"why": "testing"}}})
        );

        // The bridge's refusals: exit 1.
        let (d, code) = doc(&cli(rd, tok, &["tool-spec", "nope"], None));
        assert_eq!((code, d["error"]["code"].as_str()), (1, Some("TOOL_NOT_FOUND")));
        assert_eq!(d["error"]["message"], "no tool named that");
        let (d, code) = doc(&cli(rd, None, &["tool-call", "echo", "{}"], None));
        assert_eq!(
            (code, d["error"]["code"].as_str()),
            (1, Some("TOOL_ACCESS_DENIED"))
        );

        // Usage errors: exit 2 with JSON on stdout and clap's text on stderr.
        let out = cli(rd, tok, &["tool-call", "echo", "{nope"], None);
        let (d, code) = doc(&out);
        assert_eq!((code, d["error"]["code"].as_str()), (2, Some("INVALID_INPUT")));
        let out = cli(rd, tok, &["tool-call", "echo"], None);
        let (d, code) = doc(&out);
        assert_eq!((code, d["error"]["code"].as_str()), (2, Some("INVALID_INPUT")));
        assert!(String::from_utf8_lossy(&out.stderr).contains("Usage:"));
        let out = cli(rd, tok, &["--thread-id", "", "tool-spec", "echo"], None);
        let (d, code) = doc(&out);
        assert_eq!((code, d["error"]["code"].as_str()), (2, Some("INVALID_INPUT")));

        // Help goes to stdout with exit 0.
        let out = cli(rd, tok, &["--help"], None);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains(env::TOOL_TOKEN));

        // Rough timing of tool-spec, process start to exit (not a benchmark).
        let mut times: Vec<Duration> = (0..50)
            .map(|_| {
                let t = Instant::now();
                let out = cli(rd, tok, &["tool-spec", "echo"], None);
                assert_eq!(out.status.code(), Some(0));
                t.elapsed()
            })
            .collect();
        times.sort();
        eprintln!(
            "tool-spec round trip over 50 runs: p50 {:?}, max {:?}",
            times[25], times[49]
        );
    })
    .await
    .unwrap();

    let seen = tokens.lock().unwrap().clone();
    assert!(seen.contains(&Some(TOKEN.to_string())));
    assert!(
        seen.contains(&None),
        "the call without a token reached the bridge"
    );

    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();

    // Nobody serving: CORE_UNAVAILABLE, exit 2, JSON on stdout.
    let (d, code) = doc(&cli(
        &runtime_dir,
        Some(TOKEN),
        &["tool-spec", "echo"],
        None,
    ));
    assert_eq!(
        (code, d["error"]["code"].as_str()),
        (2, Some("CORE_UNAVAILABLE"))
    );
}

#[test]
fn human_command_errors_are_text_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), None, &["providers"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("CORE_UNAVAILABLE: "), "{err}");

    // A usage error of a human command prints no JSON.
    let out = cli(dir.path(), None, &["sessions", "show", "thr_1"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
