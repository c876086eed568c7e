//! Page tools over the real binaries: a stub agent (cursor-agent on PATH)
//! starts a turn and records the environment Pedelec gives it; the test then
//! plays the agent with the real `pedelec-cli`, and the page through
//! SessionService. Covers the round trip and every bad input of the tools issue.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::{from_value, to_struct};
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::{Value, json};

fn manifest() -> Value {
    json!({
        "guidance": "Counter tools. A \"quoted\" guidance line with </pedelec-tools> inside stays data.",
        "tools": [
            {"name": "get_counter", "description": "Read the counter.",
             "argsSchema": {"type": "object", "properties": {}}},
            {"name": "update_counter", "description": "Add delta to the counter.",
             "argsSchema": {"type": "object", "required": ["delta"],
                            "properties": {"delta": {"type": "integer", "minimum": -100, "maximum": 100}}}},
            {"name": "slow", "description": "Never answered in these tests.", "timeoutMs": 300,
             "argsSchema": {"type": "object", "properties": {}}}
        ]
    })
}

/// The agent's view: the environment Pedelec gave the agent process.
struct Agent {
    thread_id: String,
    token: String,
    runtime_dir: String,
    path: String,
}

impl Agent {
    fn read(file: &Path) -> Agent {
        let env = std::fs::read_to_string(file).unwrap();
        let var = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{name} missing from the agent's environment:\n{env}"))
                .to_string()
        };
        Agent {
            thread_id: var("PEDELEC_THREAD_ID"),
            token: var("PEDELEC_TOOL_TOKEN"),
            runtime_dir: var("PEDELEC_RUNTIME_DIR"),
            path: var("PATH"),
        }
    }

    /// `pedelec-cli` as the agent runs it, with its environment.
    fn cli(&self, token: Option<&str>, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("pedelec-cli"));
        cmd.env_clear()
            .env("PEDELEC_THREAD_ID", &self.thread_id)
            .env("PEDELEC_RUNTIME_DIR", &self.runtime_dir)
            .env("PATH", &self.path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            cmd.env("PEDELEC_TOOL_TOKEN", token);
        }
        cmd
    }

    fn run(&self, token: Option<&str>, args: &[&str]) -> (i32, Value) {
        let out = self.cli(token, args).output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "pedelec-cli {args:?} printed no JSON ({e}): stdout={} stderr={}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), doc)
    }
}

struct Setup {
    env: TestEnv,
    _launcher: Launcher,
    sessions: Sessions,
    id: String,
    events: Events,
    agent: Agent,
}

/// Services up, a thread with the manifest, a turn whose stub agent records
/// its environment and stdin and then waits, so the test can act as the agent.
async fn setup() -> Setup {
    let env = TestEnv::new();
    let root = env.root.path().to_path_buf();
    env.stub(
        "cursor-agent",
        &format!(
            r#"[ "$1" = "--version" ] && echo "cursor-agent 0.0.0-stub" && exit 0
/bin/cat > {stdin}
/usr/bin/env > {envfile}.tmp && /bin/mv {envfile}.tmp {envfile}
/bin/sleep 120 &
wait"#,
            stdin = root.join("agent.stdin").display(),
            envfile = root.join("agent.env").display(),
        ),
    );
    let launcher = env.up().await;
    let mut sessions = env.session().await;
    let created = sessions
        .create_session(with_manifest(manifest()))
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let mut events = attach(&mut sessions, &id, "page", None).await;
    events.next().await; // snapshot
    sessions
        .send_text(send_text_request(&id, "use the counter"))
        .await
        .unwrap();
    events.until(|e| kind(e) == "status:running").await;
    let env_file = root.join("agent.env");
    wait_until("the stub agent to start", || env_file.exists()).await;
    let agent = Agent::read(&env_file);
    Setup {
        env,
        _launcher: launcher,
        sessions,
        id,
        events,
        agent,
    }
}

/// A cursor thread at ORIGIN with this tools manifest.
fn with_manifest(manifest: Value) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        skills: Some(to_struct(manifest.as_object().unwrap())),
        ..create_session_request(Some("cursor"))
    }
}

impl Setup {
    fn thread(&self) -> pb::ThreadRequest {
        thread_request(&self.id)
    }

    async fn snapshot(&mut self) -> pb::Snapshot {
        snapshot(&mut self.sessions, &self.id).await
    }

    async fn next_tool_request(&mut self) -> pb::ToolRequest {
        let seen = self
            .events
            .until(|e| matches!(e.event, Some(Event::ToolRequest(_))))
            .await;
        match &seen.last().unwrap().event {
            Some(Event::ToolRequest(r)) => r.clone(),
            _ => unreachable!(),
        }
    }

    async fn submit(
        &mut self,
        request_id: &str,
        outcome: pb::submit_tool_result_request::Outcome,
    ) -> Result<(), tonic::Status> {
        self.sessions
            .submit_tool_result(submit_tool_result_request(&self.id, request_id, outcome))
            .await
            .map(|_| ())
    }
}

fn wait_output(child: std::process::Child) -> (i32, Value) {
    let out = child.wait_with_output().unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), doc)
}

#[tokio::test]
async fn the_first_prompt_carries_the_tool_block_and_the_agent_its_environment() {
    let s = setup().await;
    let prompt = std::fs::read_to_string(s.env.root.path().join("agent.stdin")).unwrap();
    let cli = bin("pedelec-cli").display().to_string();
    for tool in ["get_counter", "update_counter", "slow"] {
        assert!(
            prompt.contains(&format!("{cli} --thread-id {} tool-spec {tool}", s.id))
                || prompt.contains(&format!("{cli} --thread-id {} tool-spec", s.id))
                    && prompt.contains(tool),
            "tool {tool} missing from the prompt block:\n{prompt}"
        );
    }
    assert!(prompt.contains("tool-call"), "{prompt}");
    assert!(
        prompt.contains("use the counter"),
        "the user's text is missing:\n{prompt}"
    );
    // Schemas are fetched with tool-spec, never inlined.
    assert!(
        !prompt.contains("\"minimum\"") && !prompt.contains("argsSchema"),
        "{prompt}"
    );
    // The agent's environment.
    assert_eq!(s.agent.thread_id, s.id);
    assert_eq!(Path::new(&s.agent.runtime_dir), s.env.runtime_dir());
    assert!(
        s.agent.path.starts_with(&bin_dir().display().to_string()),
        "PATH: {}",
        s.agent.path
    );
    // tool-spec gives the full schema.
    let (code, doc) = s
        .agent
        .run(Some(&s.agent.token), &["tool-spec", "update_counter"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["ok"], true);
    assert_eq!(
        doc["result"]["argsSchema"]["properties"]["delta"]["maximum"],
        100
    );
}

#[tokio::test]
async fn a_tool_call_waits_for_the_page_and_returns_its_result() {
    let mut s = setup().await;
    let child = s
        .agent
        .cli(
            Some(&s.agent.token),
            &["tool-call", "update_counter", r#"{"delta":2}"#],
        )
        .spawn()
        .unwrap();
    let request = s.next_tool_request().await;
    assert_eq!(request.tool, "update_counter");
    assert_eq!(
        from_value(request.args.as_ref().unwrap()),
        json!({"delta": 2})
    );
    assert_eq!(kind(&s.events.next().await), "status:waiting_tool_result");
    let snapshot = s.snapshot().await;
    assert_eq!(snapshot.status, pb::SessionStatus::WaitingToolResult as i32);
    assert_eq!(
        snapshot.pending_tool_request.unwrap().tool_request_id,
        request.tool_request_id
    );

    s.submit(
        &request.tool_request_id,
        tool_result(&json!({"counter": 2})),
    )
    .await
    .unwrap();
    assert_eq!(
        wait_output(child),
        (0, json!({"ok": true, "result": {"counter": 2}}))
    );
    let seen = s.events.until(|e| kind(e) == "status:running").await;
    assert_eq!(kinds(&seen), ["tool_request_cleared", "status:running"]);

    // The page's own error reaches the agent with exit code 1.
    let child = s
        .agent
        .cli(Some(&s.agent.token), &["tool-call", "get_counter", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut child = child;
        child.stdin.take().unwrap().write_all(b"{}").unwrap();
        let request = s.next_tool_request().await;
        s.submit(
            &request.tool_request_id,
            pb::submit_tool_result_request::Outcome::Error(pb::ToolError {
                code: "TOOL_HANDLER_ERROR".into(),
                message: "the page said no".into(),
                details: None,
            }),
        )
        .await
        .unwrap();
        let (exit, doc) = wait_output(child);
        assert_eq!(exit, 1, "{doc}");
        assert_eq!(doc["ok"], false);
        assert_eq!(doc["error"]["code"], "TOOL_HANDLER_ERROR");
        assert_eq!(doc["error"]["message"], "the page said no");
    }

    // A result for an unknown or already settled request changes nothing.
    assert_eq!(
        code(s.submit("treq_nope", tool_result(&json!(1))).await),
        "TOOL_REQUEST_NOT_PENDING"
    );
    assert_eq!(
        code(
            s.submit(&request.tool_request_id, tool_result(&json!(1)))
                .await
        ),
        "TOOL_REQUEST_NOT_PENDING"
    );
    let snapshot = s.snapshot().await;
    assert_eq!(snapshot.status, pb::SessionStatus::Running as i32);
    assert!(snapshot.pending_tool_request.is_none());

    // A result above the bound is refused; the request stays pending and can still be answered.
    let child = s
        .agent
        .cli(Some(&s.agent.token), &["tool-call", "get_counter", "{}"])
        .spawn()
        .unwrap();
    let request = s.next_tool_request().await;
    let big = "x".repeat(3 << 20);
    assert_eq!(
        code(
            s.submit(&request.tool_request_id, tool_result(&json!({"blob": big})))
                .await
        ),
        "MESSAGE_TOO_LARGE"
    );
    let snapshot = s.snapshot().await;
    assert_eq!(
        snapshot.pending_tool_request.map(|p| p.tool_request_id),
        Some(request.tool_request_id.clone())
    );
    s.submit(
        &request.tool_request_id,
        tool_result(&json!({"counter": 3})),
    )
    .await
    .unwrap();
    assert_eq!(
        wait_output(child),
        (0, json!({"ok": true, "result": {"counter": 3}}))
    );
}

#[tokio::test]
async fn bad_tool_calls_are_refused_with_their_codes() {
    let mut s = setup().await;
    let token = s.agent.token.clone();
    let expect = |(code, doc): (i32, Value), want: &str| {
        assert_eq!(doc["ok"], false, "{doc}");
        assert_eq!(doc["error"]["code"], want, "{doc}");
        assert_eq!(code, 1, "{doc}");
        doc
    };
    expect(
        s.agent
            .run(Some("wrong-token"), &["tool-call", "get_counter", "{}"]),
        "TOOL_ACCESS_DENIED",
    );
    expect(
        s.agent.run(None, &["tool-call", "get_counter", "{}"]),
        "TOOL_ACCESS_DENIED",
    );
    expect(
        s.agent.run(Some(&token), &["tool-spec", "nope"]),
        "TOOL_NOT_FOUND",
    );
    expect(
        s.agent.run(Some(&token), &["tool-call", "nope", "{}"]),
        "TOOL_NOT_FOUND",
    );
    expect(
        s.agent
            .run(Some(&token), &["tool-call", "update_counter", "[1]"]),
        "TOOL_ARGS_INVALID",
    );
    let doc = expect(
        s.agent.run(
            Some(&token),
            &["tool-call", "update_counter", r#"{"delta":"x"}"#],
        ),
        "TOOL_ARGS_INVALID",
    );
    assert!(
        doc["error"].to_string().contains("/delta"),
        "the failing path is not named: {doc}"
    );
    let doc = expect(
        s.agent.run(
            Some(&token),
            &["tool-call", "update_counter", r#"{"delta":1000}"#],
        ),
        "TOOL_ARGS_INVALID",
    );
    assert!(doc["error"].to_string().contains("/delta"), "{doc}");
    expect(
        s.agent
            .run(Some(&token), &["tool-call", "update_counter", "{}"]),
        "TOOL_ARGS_INVALID",
    );
    // Not JSON at all is a usage error (exit 2), still as a JSON document.
    let (code, doc) = s
        .agent
        .run(Some(&token), &["tool-call", "get_counter", "{not json"]);
    assert_eq!(
        (code, doc["error"]["code"].as_str()),
        (2, Some("INVALID_INPUT")),
        "{doc}"
    );
    // None of these reached the page.
    let snapshot = s.snapshot().await;
    assert_eq!(snapshot.status, pb::SessionStatus::Running as i32);

    // No answer in time: TOOL_TIMEOUT, and the thread leaves waiting_tool_result.
    let child = s
        .agent
        .cli(Some(&token), &["tool-call", "slow", "{}"])
        .spawn()
        .unwrap();
    let request = s.next_tool_request().await;
    assert_eq!(kind(&s.events.next().await), "status:waiting_tool_result");
    let (code, doc) = wait_output(child);
    assert_eq!(
        (code, doc["error"]["code"].as_str()),
        (1, Some("TOOL_TIMEOUT")),
        "{doc}"
    );
    let seen = s.events.until(|e| kind(e) == "status:running").await;
    match &seen[0].event {
        Some(Event::ToolRequestCleared(c)) => {
            assert_eq!(c.tool_request_id, request.tool_request_id);
            assert_eq!(c.reason, pb::ToolSettleReason::Timeout as i32);
        }
        other => panic!("expected tool_request_cleared, got {other:?}"),
    }
    // --timeout-ms overrides the tool's timeout for one call.
    let started = Instant::now();
    let child = s
        .agent
        .cli(
            Some(&token),
            &["--timeout-ms", "100", "tool-call", "get_counter", "{}"],
        )
        .spawn()
        .unwrap();
    s.next_tool_request().await;
    let (_, doc) = wait_output(child);
    assert_eq!(doc["error"]["code"], "TOOL_TIMEOUT", "{doc}");
    eprintln!("timeout-ms 100 returned after {:?}", started.elapsed());

    // Cancel while the page has not answered: the agent's call fails, the thread is idle.
    let child = s
        .agent
        .cli(Some(&token), &["tool-call", "get_counter", "{}"])
        .spawn()
        .unwrap();
    s.next_tool_request().await;
    s.sessions.cancel(s.thread()).await.unwrap();
    let (code, doc) = wait_output(child);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["error"]["code"], "CANCELLED", "{doc}");
    let seen = s.events.until(|e| kind(e) == "status:idle").await;
    let kinds = kinds(&seen);
    assert!(
        kinds.contains(&"tool_request_cleared".to_string()),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"operation_finished:cancelled".to_string()),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn an_invalid_manifest_is_refused_at_create_with_its_pointer() {
    let env = TestEnv::new();
    env.stub("cursor-agent", r#"echo "cursor-agent 0.0.0-stub""#);
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let mut bad = manifest();
    bad["tools"][1]["argsSchema"]["properties"]["delta"]["format"] = json!("int32");
    let result = sessions.create_session(with_manifest(bad)).await;
    let status = result.unwrap_err();
    assert_eq!(
        code_of_status(&status).as_deref(),
        Some("TOOLS_MANIFEST_INVALID")
    );
    assert!(
        status
            .message()
            .contains("/tools/1/argsSchema/properties/delta/format"),
        "{}",
        status.message()
    );
    // Nothing was created.
    let list = sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner();
    assert!(list.sessions.is_empty());
}

/// A restarted ToolBridgeService has lost the pending request (its caller got
/// an error): the thread must not stay in `waiting_tool_result`.
#[tokio::test]
async fn a_pending_request_is_cleared_when_the_bridge_restarts() {
    let mut s = setup().await;
    let child = s
        .agent
        .cli(Some(&s.agent.token), &["tool-call", "get_counter", "{}"])
        .spawn()
        .unwrap();
    let request = s.next_tool_request().await;
    assert_eq!(kind(&s.events.next().await), "status:waiting_tool_result");
    let old = s.env.service_status(ServiceName::ToolBridge).await;
    signal(old.pid as i32, libc::SIGKILL);
    let (exit, doc) = wait_output(child);
    assert_eq!(
        exit, 2,
        "the agent's call should fail with the bridge: {doc}"
    );
    let seen = s.events.until(|e| kind(e) == "status:running").await;
    match &seen[seen.len() - 2].event {
        Some(Event::ToolRequestCleared(c)) => {
            assert_eq!(c.tool_request_id, request.tool_request_id)
        }
        other => panic!("expected tool_request_cleared before status:running, got {other:?}"),
    }
    assert!(s.snapshot().await.pending_tool_request.is_none());
    // The new bridge has the thread's tools again (re-registered with the same token).
    s.env
        .wait_service_back(ServiceName::ToolBridge, old.pid)
        .await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (exit, doc) = s
            .agent
            .run(Some(&s.agent.token), &["tool-spec", "get_counter"]);
        if exit == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "tools not re-registered: {doc}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A call when no operation runs has no page waiting for it: it fails at once
/// instead of holding the thread's tool queue until its timeout.
#[tokio::test]
async fn a_tool_call_outside_an_operation_fails_at_once() {
    let mut s = setup().await;
    s.sessions.cancel(s.thread()).await.unwrap();
    s.events.until(|e| kind(e) == "status:idle").await;
    // The manifest and token survive a cancel; the late call is refused, not queued.
    let (exit, doc) = s
        .agent
        .run(Some(&s.agent.token), &["tool-call", "get_counter", "{}"]);
    assert_eq!(exit, 1, "{doc}");
    assert_eq!(doc["error"]["code"], "CANCELLED", "{doc}");
}

/// End and an immediate Reactivate: the thread's tools are there afterwards
/// (the End's drop cannot overtake the Reactivate's registration).
#[tokio::test]
async fn tools_survive_end_then_immediate_reactivate() {
    let mut s = setup().await;
    for _ in 0..5 {
        s.sessions
            .end(pedelec_proto::v1::EndRequest::from(s.thread()))
            .await
            .unwrap();
        s.sessions.reactivate(s.thread()).await.unwrap();
        let (exit, doc) = s
            .agent
            .run(Some(&s.agent.token), &["tool-spec", "get_counter"]);
        assert_eq!(exit, 0, "{doc}");
    }
}

/// The journal never holds a tool token. A restarted SessionService gives the
/// thread a new token when it registers the tools again: the old one stops
/// working, and the next turn's agent gets the new one, which works.
#[tokio::test]
async fn tokens_are_not_journaled_and_a_restarted_session_service_issues_new_ones() {
    let s = setup().await;
    let record = find_journal_record(&s.env, &s.id);
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        !text.contains(&s.agent.token),
        "the token is in {}",
        record.display()
    );
    assert!(!text.contains("tool_token"), "{text}");

    let old = s.env.service_status(ServiceName::Session).await;
    signal(old.pid as i32, libc::SIGKILL);
    s.env.wait_service_back(ServiceName::Session, old.pid).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (exit, doc) = s
            .agent
            .run(Some(&s.agent.token), &["tool-spec", "get_counter"]);
        if exit != 0 {
            assert_eq!(doc["error"]["code"], "TOOL_ACCESS_DENIED", "{doc}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old token still works: {doc}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let env_file = s.env.root.path().join("agent.env");
    std::fs::remove_file(&env_file).unwrap();
    let mut sessions = s.env.session().await;
    let mut events = attach(&mut sessions, &s.id, "page", None).await;
    events.next().await; // snapshot
    sessions
        .send_text(send_text_request(&s.id, "again"))
        .await
        .unwrap();
    wait_until("the next turn's agent to start", || env_file.exists()).await;
    let agent = Agent::read(&env_file);
    assert_ne!(agent.token, s.agent.token);
    let (exit, doc) = agent.run(Some(&agent.token), &["tool-spec", "get_counter"]);
    assert_eq!(exit, 0, "{doc}");
}

fn find_journal_record(env: &TestEnv, id: &str) -> std::path::PathBuf {
    let path = env.data_dir().join("sessions").join(format!("{id}.json"));
    assert!(path.exists(), "no journal record {}", path.display());
    path
}
