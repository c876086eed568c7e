//! A page tool's call as an agent makes it: `pedelec-cli tool-call`, MCP
//! `tools/call` on `pedelec-cli mcp`, CallTool alone and its legs, and the
//! CLI's own start-up; answered through the native host and by a gRPC client.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::to_value;
use pedelec_proto::v1 as pb;
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::Config;
use crate::env::{BenchEnv, ORIGIN, PATIENCE, mono_ns};
use crate::host::{Host, Stamps};
use crate::measure::{profiled, spawn_helper, timed_output, timed_run, us};
use crate::report::{Row, Target};
use crate::sessions::{ARGS, Sessions, TOOL, attach_request, open_host_session, thread};

type Bridge = pb::tool_bridge_service_client::ToolBridgeServiceClient<Channel>;

struct AgentEnv {
    thread_id: String,
    token: String,
    runtime_dir: String,
    path: String,
}

async fn wait_agent_env(file: &Path) -> Result<AgentEnv, String> {
    let deadline = Instant::now() + PATIENCE;
    while !file.exists() {
        if Instant::now() > deadline {
            return Err("the stub agent never started".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let var = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(String::from)
            .ok_or(format!("{name} missing from the agent's environment"))
    };
    Ok(AgentEnv {
        thread_id: var("PEDELEC_THREAD_ID")?,
        token: var("PEDELEC_TOOL_TOKEN")?,
        runtime_dir: var("PEDELEC_RUNTIME_DIR")?,
        path: var("PATH")?,
    })
}

/// `pedelec-cli tool-call` as the agent runs it, timed start -> exit with the
/// result read. Checks every result.
async fn cli_calls(env: &BenchEnv, agent: &AgentEnv, n: usize) -> Result<Vec<f64>, String> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear()
            .env("PEDELEC_THREAD_ID", &agent.thread_id)
            .env("PEDELEC_TOOL_TOKEN", &agent.token)
            .env("PEDELEC_RUNTIME_DIR", &agent.runtime_dir)
            .env("PATH", &agent.path)
            .args(["--thread-id", &agent.thread_id, "tool-call", TOOL, ARGS]);
        let (d, _, stdout) = timed_output(cmd).await?;
        let doc: Value = serde_json::from_slice(&stdout)
            .map_err(|e| format!("pedelec-cli printed no JSON: {e}"))?;
        if doc != json!({"ok": true, "result": {"echo": "x"}}) {
            return Err(format!("unexpected tool-call output: {doc}"));
        }
        if i >= 10 {
            samples.push(us(d));
        }
    }
    Ok(samples)
}

/// `tools/call` over `pedelec-cli mcp`'s stdio, as an agent CLI sends it on
/// its one long-lived server process: request line written -> response line
/// read. Checks every result.
async fn mcp_calls(env: &BenchEnv, agent: &AgentEnv, n: usize) -> Result<Vec<f64>, String> {
    use pedelec_tests::mcp_client::{McpClient, McpEnv, result_text};
    let mcp_env = McpEnv {
        thread_id: agent.thread_id.clone(),
        token: agent.token.clone(),
        runtime_dir: agent.runtime_dir.clone(),
    };
    let client = McpClient::spawn_program(&env.bin.join("pedelec-cli"), &mcp_env);
    let (mut client, _) = McpClient::handshake(client).await;
    let call = json!({"name": TOOL, "arguments": {"q": "x"}});
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let start = Instant::now();
        let id = client.send_request("tools/call", call.clone()).await;
        let resp = client.response(id).await;
        let d = start.elapsed();
        let result = &resp["result"];
        if result["isError"] == true || result_text(result) != r#"{"echo":"x"}"# {
            return Err(format!("unexpected tools/call answer: {resp}"));
        }
        if i >= 10 {
            samples.push(us(d));
        }
    }
    client.close().await;
    Ok(samples)
}

/// CallTool samples: the whole call, and its two legs split at the moment the
/// answering client received the tool_request event.
#[derive(Default)]
struct CallLegs {
    total: Vec<f64>,
    request: Vec<f64>,
    answer: Vec<f64>,
    /// Request leg split at the event's `at` (when SessionService emitted it;
    /// wall clock, so only where `at` has µs precision: the gRPC stream).
    to_emit: Vec<f64>,
    emit_to_client: Vec<f64>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// ToolBridgeService.CallTool with the thread's token, as pedelec-cli sends it,
/// over one connection: the services' share of a tool call.
async fn calltool_calls(
    env: &BenchEnv,
    agent: &AgentEnv,
    n: usize,
    stamps: &Stamps,
    emits: Option<&Stamps>,
) -> Result<CallLegs, String> {
    let channel = pedelec_common::uds::connect(&env.socket(ServiceName::ToolBridge))
        .await
        .map_err(|e| e.to_string())?;
    let mut bridge = Bridge::new(channel);
    let args = to_value(&json!({"q": "x"}));
    let token: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        agent.token.parse().map_err(|_| "bad token")?;
    let mut legs = CallLegs::default();
    for i in 0..n + 50 {
        let mut req = tonic::Request::new(pb::CallToolRequest {
            session_id: agent.thread_id.clone(),
            tool: TOOL.into(),
            args: Some(args.clone()),
            timeout_ms: None,
        });
        req.metadata_mut()
            .insert("x-pedelec-tool-token", token.clone());
        stamps.lock().unwrap().clear();
        if let Some(e) = emits {
            e.lock().unwrap().clear();
        }
        let w0 = wall_ns();
        let t0 = mono_ns();
        let out = tokio::time::timeout(PATIENCE, bridge.call_tool(req))
            .await
            .map_err(|_| "CallTool did not return within the ceiling")?
            .map_err(|e| format!("CallTool: {e}"))?;
        let t2 = mono_ns();
        if !matches!(
            out.into_inner().outcome,
            Some(pb::call_tool_response::Outcome::Result(_))
        ) {
            return Err("CallTool returned no result".into());
        }
        if i >= 50 {
            legs.total.push((t2 - t0) as f64 / 1000.0);
            if let Some(t1) = stamps.lock().unwrap().first().copied() {
                legs.request.push(t1.saturating_sub(t0) as f64 / 1000.0);
                legs.answer.push(t2.saturating_sub(t1) as f64 / 1000.0);
                if let Some(at) = emits.and_then(|e| e.lock().unwrap().first().copied()) {
                    let to_emit = at.saturating_sub(w0) as f64 / 1000.0;
                    legs.to_emit.push(to_emit);
                    legs.emit_to_client
                        .push((t1 - t0) as f64 / 1000.0 - to_emit);
                }
            }
        }
    }
    Ok(legs)
}

/// `pedelec-cli` started and ended without reaching a service: its start-up
/// cost. `--help` never builds a runtime; an unreachable runtime dir makes
/// tool-call build its runtime, fail to connect and print the error JSON.
async fn cli_startup(
    env: &BenchEnv,
    agent: &AgentEnv,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let empty = env.root.join("empty-rt");
    std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
    let (mut help, mut unreachable) = (Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear().env("PATH", &agent.path).arg("--help");
        let (d, _, _) = timed_output(cmd).await?;
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear()
            .env("PEDELEC_TOOL_TOKEN", &agent.token)
            .env("PEDELEC_RUNTIME_DIR", &empty)
            .env("PATH", &agent.path)
            .args(["--thread-id", &agent.thread_id, "tool-call", TOOL, ARGS]);
        let (u, ok, _) = timed_run(cmd, false).await?;
        if ok {
            return Err("tool-call with no services succeeded".into());
        }
        if i >= 10 {
            help.push(us(d));
            unreachable.push(us(u));
        }
    }
    Ok((help, unreachable))
}

pub(crate) async fn tool_calls(
    cfg: &Config,
    env: &BenchEnv,
    host: &mut Host,
    sessions: &mut Sessions,
) -> Result<Vec<Row>, String> {
    let (n_cli, n_call) = (cfg.n(500, 50), cfg.n(2000, 200));
    let id = open_host_session(host).await?;
    let env_file = env.root.join("agent.env");
    host.call(
        "send_text",
        json!({"sessionId": id, "text": format!("@@wait {}", env_file.display())}),
    )
    .await?;
    let agent = wait_agent_env(&env_file).await?;
    if agent.thread_id != id {
        return Err(format!("agent runs for {} not {id}", agent.thread_id));
    }
    host.set_auto_answer(true);
    let cli_host = profiled(cfg, "tool_call_host", cli_calls(env, &agent, n_cli)).await?;
    let mcp_host = profiled(cfg, "tool_call_mcp_host", mcp_calls(env, &agent, n_call)).await?;
    let call_host = profiled(
        cfg,
        "calltool_host",
        calltool_calls(env, &agent, n_call, &host.stamps(), None),
    )
    .await?;
    if let Some(dir) = &cfg.profile {
        // Syscalls of each service process over 100 calls (strace slows them,
        // so this pass is separate from the timed one).
        let status = env.status().await?;
        for s in &status.services {
            let mut cmd = std::process::Command::new("strace");
            cmd.args(["-c", "-f", "-o"])
                .arg(dir.join(format!("calltool_{}.strace", s.name)))
                .args(["-p", &s.pid.to_string()])
                .stdin(Stdio::null())
                .stderr(Stdio::null());
            if let Ok(mut tracer) = spawn_helper(cmd) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let r = calltool_calls(env, &agent, 100, &host.stamps(), None).await;
                crate::env::signal(tracer.id() as i32, libc::SIGINT);
                let _ = tracer.wait();
                r?;
            }
        }
    }
    host.set_auto_answer(false);
    let (sent, failed) = host.answers();
    if failed > 0 {
        return Err(format!(
            "{failed} of {sent} submit_tool_result answers failed"
        ));
    }
    host.call("detach", json!({"sessionId": id})).await?;
    host.drain();

    // The same, answered by a gRPC client of SessionService instead of the host.
    let mut stream = sessions
        .attach(attach_request(&id, "bench-answer"))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let mut answerer_client = sessions.clone();
    let stamps = Stamps::default();
    let answerer_stamps = stamps.clone();
    let emits = Stamps::default();
    let answerer_emits = emits.clone();
    let answerer = tokio::spawn(async move {
        while let Ok(Some(ev)) = stream.message().await {
            if let Some(Event::ToolRequest(r)) = ev.event {
                answerer_stamps.lock().unwrap().push(mono_ns());
                if let Some(at) = &ev.at {
                    answerer_emits
                        .lock()
                        .unwrap()
                        .push(at.seconds as u64 * 1_000_000_000 + at.nanos as u64);
                }
                let _ = answerer_client
                    .submit_tool_result(pb::SubmitToolResultRequest {
                        session_id: ev.session_id,
                        origin: ORIGIN.into(),
                        tool_request_id: r.tool_request_id,
                        outcome: Some(pb::submit_tool_result_request::Outcome::Result(to_value(
                            &json!({"echo": "x"}),
                        ))),
                    })
                    .await;
            }
        }
    });
    let cli_grpc = cli_calls(env, &agent, n_cli).await;
    let mcp_grpc = mcp_calls(env, &agent, n_call).await;
    let call_grpc = calltool_calls(env, &agent, n_call, &stamps, Some(&emits)).await;
    answerer.abort();
    let startup = cli_startup(env, &agent, cfg.n(200, 20)).await;
    let _ = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread(&id)))
        .await;
    let (cli_grpc, call_grpc, (cli_help, cli_unreachable)) = (cli_grpc?, call_grpc?, startup?);
    let mcp_grpc = mcp_grpc?;
    Ok(vec![
        Row::latency("tool_call.host", "`pedelec-cli tool-call` start -> result printed, answered through the native host's stdio", cli_host)
            .target(Target::Latency { p50: 1100.0, p99: Some(1600.0) }, "p50 ≤ 1.1 ms, p99 ≤ 1.6 ms")
            .floor("floor.spawn_static"),
        Row::latency("tool_call.grpc", "`pedelec-cli tool-call` start -> result printed, answered by a SessionService gRPC client", cli_grpc)
            .floor("floor.spawn_static"),
        Row::latency("tool_call.mcp.host", "MCP tools/call line written to `pedelec-cli mcp` -> result line read, answered through the native host's stdio", mcp_host)
            .target(Target::Latency { p50: 600.0, p99: Some(1500.0) }, "p50 ≤ 0.6 ms, p99 ≤ 1.5 ms")
            .floor("floor.host_hop"),
        Row::latency("tool_call.mcp.grpc", "MCP tools/call on `pedelec-cli mcp`'s stdio -> result, answered by a SessionService gRPC client", mcp_grpc)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.calltool.host", "CallTool in -> out (one connection, token), answered through the native host", call_host.total)
            .target(Target::Latency { p50: 350.0, p99: None }, "p50 ≤ 350 µs")
            .floor("floor.grpc_unary"),
        Row::latency("in_service.calltool.grpc", "CallTool in -> out (one connection, token), answered by a SessionService gRPC client", call_grpc.total)
            .target(Target::Latency { p50: 300.0, p99: None }, "p50 ≤ 300 µs")
            .floor("floor.grpc_unary"),
        Row::latency("in_service.request_leg.host", "breakdown: CallTool sent -> tool_request frame read from the host's stdout", call_host.request)
            .floor("floor.host_hop"),
        Row::latency("in_service.answer_leg.host", "breakdown: tool_request frame read -> CallTool returned (submit frame, SubmitToolResult, Resolve)", call_host.answer)
            .floor("floor.host_hop"),
        Row::latency("in_service.request_leg.grpc", "breakdown: CallTool sent -> tool_request on the gRPC Attach stream", call_grpc.request)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.answer_leg.grpc", "breakdown: tool_request received -> CallTool returned (SubmitToolResult, Resolve)", call_grpc.answer)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.to_emit.grpc", "breakdown: CallTool sent -> SessionService stamps the tool_request event (`at`, wall clock)", call_grpc.to_emit)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.emit_to_client.grpc", "breakdown: event stamped -> received on the Attach stream (journal write under the thread lock, route task, stream)", call_grpc.emit_to_client)
            .floor("floor.grpc_unary"),
        Row::latency("tool_call.cli_help", "breakdown: spawn+exit of `pedelec-cli --help` (binary start, no runtime)", cli_help)
            .floor("floor.spawn_bare"),
        Row::latency("tool_call.cli_unreachable", "breakdown: `pedelec-cli tool-call` with no service to reach (start, runtime, failed connect, error JSON)", cli_unreachable)
            .target(Target::Latency { p50: 550.0, p99: None }, "p50 ≤ 0.55 ms")
            .floor("floor.spawn_bare"),
    ])
}
