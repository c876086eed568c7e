//! `pedelec-cli mcp` over the real binaries: a scripted MCP client plays the
//! agent CLI on its stdio, the page answers through the real native host, and
//! everything between is the real services.

use std::time::{Duration, Instant};

use pedelec_common::ServiceName;
use pedelec_common::json::to_struct;
use pedelec_proto::v1 as pb;
use pedelec_tests::mcp_client::{McpClient, McpEnv, result_text};
use pedelec_tests::*;
use serde_json::{Value, json};

struct Setup {
    env: TestEnv,
    _launcher: Launcher,
    host: Host,
    id: String,
    agent: McpEnv,
}

/// Services up, a thread with the tools through the host, and a turn whose
/// stub agent wrote its environment and waits: the test is the agent CLI.
async fn setup() -> Setup {
    let mut env = TestEnv::new();
    // As services(), with the service secret known: Register is internal
    // (docs/security.md), and a test below registers as SessionService does.
    env.install_stub_agent(&agent_script(&env));
    env.capture_service_secret();
    let launcher = env.up().await;
    env.update_settings(settings_with_default_models(&[("ollama", "llama3.2")]))
        .await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    let env_file = env.root.path().join("agent.env");
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": format!("@@wait {}", env_file.display())}),
    )
    .await;
    wait_until("the stub agent to start", || env_file.exists()).await;
    let text = std::fs::read_to_string(&env_file).unwrap();
    let var = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing from the agent's environment"))
            .to_string()
    };
    let agent = McpEnv {
        thread_id: var("PEDELEC_THREAD_ID"),
        token: var("PEDELEC_TOOL_TOKEN"),
        runtime_dir: var("PEDELEC_RUNTIME_DIR"),
    };
    assert_eq!(agent.thread_id, id);
    Setup {
        env,
        _launcher: launcher,
        host,
        id,
        agent,
    }
}

impl Setup {
    /// The next tool_request frame of the thread, read from the host.
    async fn tool_request(&mut self) -> Value {
        let seen = self
            .host
            .events_until(&self.id, |e| e["type"] == "tool_request")
            .await;
        seen.last().unwrap()["event"].clone()
    }

    /// `tools/call get_page {q}`: checks that the page got `q`, answers
    /// with `result`, and returns the MCP response.
    async fn call_answered(&mut self, mcp: &mut McpClient, q: &str, result: Value) -> Value {
        let call = mcp
            .send_request(
                "tools/call",
                json!({"name": "get_page", "arguments": {"q": q}}),
            )
            .await;
        let request = self.tool_request().await;
        assert_eq!(request["args"], json!({"q": q}));
        self.answer(&request, json!({"result": result})).await;
        mcp.response(call).await
    }

    async fn answer(&mut self, request: &Value, outcome: Value) {
        let mut payload = json!({"sessionId": self.id, "toolRequestId": request["toolRequestId"]});
        for (k, v) in outcome.as_object().unwrap() {
            payload[k] = v.clone();
        }
        self.host.ok("submit_tool_result", payload).await;
    }
}

#[tokio::test]
async fn initialize_list_and_a_call_answered_by_the_page() {
    let mut s = setup().await;
    let (mut mcp, init) = McpClient::start(&s.agent).await;
    let info = &init["result"];
    assert_eq!(info["serverInfo"]["name"], "pedelec", "{init}");
    assert_eq!(info["capabilities"]["tools"]["listChanged"], true, "{init}");

    let listed = mcp.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["get_page", "big_tool"]);
    assert_eq!(tools[0]["description"], "Read the page.");
    assert_eq!(
        tools[0]["inputSchema"],
        skills()["tools"][0]["argsSchema"],
        "the schema is the manifest's"
    );

    let call = mcp
        .send_request(
            "tools/call",
            json!({"name": "get_page", "arguments": {"q": "title"}}),
        )
        .await;
    let request = s.tool_request().await;
    assert_eq!(request["tool"], "get_page");
    assert_eq!(request["args"], json!({"q": "title"}));
    let page = json!({"title": "Pedelec ✓", "n": 3});
    s.answer(&request, json!({"result": page})).await;
    let resp = mcp.response(call).await;
    let result = &resp["result"];
    assert_ne!(result["isError"], true, "{resp}");
    let text: Value = serde_json::from_str(result_text(result)).unwrap();
    assert_eq!(text, page);

    // The page's own error is a tool result the model can read, code first.
    let call = mcp
        .send_request(
            "tools/call",
            json!({"name": "get_page", "arguments": {"q": "x"}}),
        )
        .await;
    let request = s.tool_request().await;
    s.answer(
        &request,
        json!({"error": {"code": "TOOL_HANDLER_ERROR", "message": "the page said no"}}),
    )
    .await;
    let resp = mcp.response(call).await;
    assert_eq!(resp["result"]["isError"], true, "{resp}");
    assert_eq!(
        result_text(&resp["result"]),
        "TOOL_HANDLER_ERROR: the page said no"
    );

    assert!(mcp.close().await.success());
}

/// Node's child processes (claude runs its MCP servers from Node) get a Unix
/// socket pair as stdin and stdout, not pipes; the server reads and writes
/// them through its reactor too (`pedelec_common::stdio`).
#[tokio::test]
async fn a_call_over_a_socket_pair_as_node_gives_the_server() {
    let mut s = setup().await;
    let (mut mcp, init) = McpClient::handshake(McpClient::spawn_over_socket(&s.agent)).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "pedelec", "{init}");
    let resp = s
        .call_answered(&mut mcp, "socket", json!({"via": "socket"}))
        .await;
    assert_ne!(resp["result"]["isError"], true, "{resp}");
    let text: Value = serde_json::from_str(result_text(&resp["result"])).unwrap();
    assert_eq!(text, json!({"via": "socket"}));
    assert!(mcp.close().await.success());
}

#[tokio::test]
async fn invalid_arguments_and_unknown_tools_are_error_results() {
    let s = setup().await;
    let (mut mcp, _) = McpClient::start(&s.agent).await;
    let result = mcp.call("get_page", json!({"q": 5})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result_text(&result).starts_with("TOOL_ARGS_INVALID: "),
        "{result}"
    );
    // Missing arguments are an empty object, which the schema refuses.
    let resp = mcp.request("tools/call", json!({"name": "get_page"})).await;
    assert!(
        result_text(&resp["result"]).starts_with("TOOL_ARGS_INVALID: "),
        "{resp}"
    );
    let result = mcp.call("no_such_tool", json!({})).await;
    assert_eq!(result["isError"], true);
    assert!(
        result_text(&result).starts_with("TOOL_NOT_FOUND: "),
        "{result}"
    );
}

#[tokio::test]
async fn a_cancelled_call_clears_the_pages_request() {
    let mut s = setup().await;
    let (mut mcp, _) = McpClient::start(&s.agent).await;
    let call = mcp
        .send_request(
            "tools/call",
            json!({"name": "get_page", "arguments": {"q": "slow"}}),
        )
        .await;
    let request = s.tool_request().await;
    mcp.notify(
        "notifications/cancelled",
        json!({"requestId": call, "reason": "the user stopped it"}),
    )
    .await;
    let seen = s
        .host
        .events_until(&s.id, |e| e["type"] == "tool_request_cleared")
        .await;
    assert_eq!(
        seen.last().unwrap()["event"]["toolRequestId"],
        request["toolRequestId"]
    );
    // The server goes on: the next call works.
    let resp = s.call_answered(&mut mcp, "again", json!({"ok": 1})).await;
    assert_eq!(result_text(&resp["result"]), r#"{"ok":1}"#, "{resp}");
}

#[tokio::test]
async fn a_wrong_token_gets_access_denied_and_no_tools() {
    let s = setup().await;
    let wrong = McpEnv {
        token: "not-the-token".into(),
        ..s.agent.clone()
    };
    let (mut mcp, init) = McpClient::start(&wrong).await;
    assert!(init.get("result").is_some(), "{init}");
    let listed = mcp.request("tools/list", json!({})).await;
    let message = listed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("TOOL_ACCESS_DENIED: "), "{listed}");
    let result = mcp.call("get_page", json!({"q": "x"})).await;
    assert_eq!(result["isError"], true);
    assert!(
        result_text(&result).starts_with("TOOL_ACCESS_DENIED: "),
        "{result}"
    );
}

#[tokio::test]
async fn without_a_token_it_exits_2_before_serving() {
    let s = setup().await;
    let out = std::process::Command::new(bin("pedelec-cli"))
        .env_clear()
        .env("PEDELEC_THREAD_ID", &s.agent.thread_id)
        .env("PEDELEC_RUNTIME_DIR", &s.agent.runtime_dir)
        .arg("mcp")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "stdout is the protocol's");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("INVALID_INPUT: "), "{stderr}");
}

#[tokio::test]
async fn the_same_server_works_again_after_toolbridge_restarts() {
    let mut s = setup().await;
    let (mut mcp, _) = McpClient::start(&s.agent).await;
    let old = s.env.service_status(ServiceName::ToolBridge).await;
    signal(old.pid as i32, libc::SIGKILL);
    s.env
        .wait_service_back(ServiceName::ToolBridge, old.pid)
        .await;
    // Until SessionService has registered the thread again a call fails as a
    // readable result; then the same server process calls the page again.
    let deadline = Instant::now() + PATIENCE;
    let call = loop {
        let resp = mcp.request("tools/list", json!({})).await;
        if resp.get("result").is_some() {
            break mcp
                .send_request(
                    "tools/call",
                    json!({"name": "get_page", "arguments": {"q": "back"}}),
                )
                .await;
        }
        assert!(Instant::now() < deadline, "tools never came back: {resp}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let request = s.tool_request().await;
    assert_eq!(request["args"], json!({"q": "back"}));
    s.answer(&request, json!({"result": "fine"})).await;
    let resp = mcp.response(call).await;
    assert_eq!(result_text(&resp["result"]), r#""fine""#, "{resp}");
}

#[tokio::test]
async fn a_changed_manifest_is_announced() {
    let s = setup().await;
    let (mut mcp, _) = McpClient::start(&s.agent).await;
    mcp.request("tools/list", json!({})).await;
    // A new manifest for the thread, as SessionService registers one.
    let manifest = json!({"tools": [{"name": "fresh_tool", "description": "New.",
        "argsSchema": {"type": "object", "properties": {}}}]});
    s.env
        .service_clients()
        .await
        .toolbridge()
        .register(pb::RegisterToolsRequest {
            session_id: s.id.clone(),
            manifest: Some(to_struct(manifest.as_object().unwrap())),
            tool_token: s.agent.token.clone(),
        })
        .await
        .unwrap();
    let note = loop {
        let msg = match mcp.notifications.pop_front() {
            Some(m) => m,
            None => mcp.read().await,
        };
        if msg.get("method").is_some() {
            break msg;
        }
    };
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let listed = mcp.request("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"][0]["name"], "fresh_tool");
}

/// An agent CLI that ends (stdin closed) while a call is pending: the server
/// exits and the page's request is cleared, nothing is left waiting.
#[tokio::test]
async fn stdin_eof_during_a_call_ends_the_server_and_the_call() {
    let mut s = setup().await;
    let (mut mcp, _) = McpClient::start(&s.agent).await;
    mcp.send_request(
        "tools/call",
        json!({"name": "get_page", "arguments": {"q": "pending"}}),
    )
    .await;
    let request = s.tool_request().await;
    assert!(mcp.close().await.success());
    let seen = s
        .host
        .events_until(&s.id, |e| e["type"] == "tool_request_cleared")
        .await;
    assert_eq!(
        seen.last().unwrap()["event"]["toolRequestId"],
        request["toolRequestId"]
    );
}
