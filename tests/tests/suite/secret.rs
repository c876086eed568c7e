//! The service secret and non-dumpable services (docs/security.md
//! "Internal RPCs and the service secret"), over the real binaries started by
//! `pedelecd up`.
//!
//! The tests learn the secret as only a service should
//! ([`TestEnv::capture_service_secret`]), so they can check that the right
//! one is admitted and that it is nowhere else.

use std::path::Path;
use std::process::{Command, Stdio};

use pb::session_event::Event;
use pedelec_common::json::to_struct;
use pedelec_common::secret::ServiceSecret;
use pedelec_common::{SERVICE_SECRET_HEADER, ServiceName};
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::{Value, json};
use tonic::transport::Channel;

type Bridge = pb::tool_bridge_service_client::ToolBridgeServiceClient<Channel>;
type Provider = pb::provider_service_client::ProviderServiceClient<Channel>;

const DENIED: &str = "SERVICE_ACCESS_DENIED";

/// A request carrying `secret` as the service secret, or nothing.
fn with<T>(message: T, secret: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(secret) = secret {
        request
            .metadata_mut()
            .insert(SERVICE_SECRET_HEADER, secret.parse().unwrap());
    }
    request
}

fn manifest() -> Value {
    json!({"tools": [{"name": "get_counter", "description": "Read the counter.",
                      "argsSchema": {"type": "object", "properties": {}}}]})
}

/// A stub cursor-agent: records its pid (one line per start; in its own pid
/// namespace when confined) and its
/// environment, then waits, so the test plays the agent with pedelec-cli.
fn stub_agent(env: &TestEnv) {
    let root = env.root.path();
    env.stub(
        "cursor-agent",
        &format!(
            r#"[ "$1" = "--version" ] && echo "cursor-agent 0.0.0-stub" && exit 0
echo $$ >> {runs}
/bin/cat > /dev/null
/usr/bin/env > {envfile}.tmp && /bin/mv {envfile}.tmp {envfile}
/bin/sleep 120 &
wait"#,
            runs = root.join("agent.runs").display(),
            envfile = root.join("agent.env").display(),
        ),
    );
}

fn agent_starts(env: &TestEnv) -> Vec<u32> {
    std::fs::read_to_string(env.root.path().join("agent.runs"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// The variable `name` of the environment the stub agent recorded.
fn agent_var(env: &TestEnv, name: &str) -> String {
    let text = std::fs::read_to_string(env.root.path().join("agent.env")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} missing from the agent's environment"))
        .to_string()
}

/// `pedelec-cli` as the agent runs it: its thread and token, no secret.
fn agent_cli(env: &TestEnv, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("pedelec-cli"));
    cmd.env_clear()
        .env("PEDELEC_RUNTIME_DIR", env.runtime_dir())
        .env("PEDELEC_THREAD_ID", agent_var(env, "PEDELEC_THREAD_ID"))
        .env("PEDELEC_TOOL_TOKEN", agent_var(env, "PEDELEC_TOOL_TOKEN"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A cursor thread with the manifest, attached, whose first turn's stub agent
/// runs (and waits). Returns the thread id and its event stream.
async fn thread_with_a_running_agent(env: &TestEnv, sessions: &mut Sessions) -> (String, Events) {
    let env_file = env.root.path().join("agent.env");
    let _ = std::fs::remove_file(&env_file);
    let id = sessions
        .create_session(pb::CreateSessionRequest {
            skills: Some(to_struct(manifest().as_object().unwrap())),
            ..create_session_request(Some("cursor"))
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut events = attach_past_snapshot(sessions, &id, "page").await;
    sessions
        .send_text(send_text_request(&id, "use the counter"))
        .await
        .unwrap();
    events.until(|e| kind(e) == "status:running").await;
    wait_until("the stub agent to start", || env_file.exists()).await;
    (id, events)
}

/// The agent calls get_counter in the background; returns the call once the
/// page has been asked, with the request's id.
async fn pending_tool_call(env: &TestEnv, events: &mut Events) -> (std::process::Child, String) {
    let call = agent_cli(env, &["tool-call", "get_counter", "{}"])
        .spawn()
        .unwrap();
    let seen = events
        .until(|e| matches!(e.event, Some(Event::ToolRequest(_))))
        .await;
    let Some(Event::ToolRequest(request)) = &seen.last().unwrap().event else {
        unreachable!()
    };
    (call, request.tool_request_id.clone())
}

/// Every internal RPC — ToolBridge Register, RenderPrompt, Watch, Resolve,
/// Drop; ProviderService ResolveProfile, WatchSettings, RunTurn, CancelTurn —
/// refuses a caller without the secret and one with a wrong secret with
/// SERVICE_ACCESS_DENIED, and the refused call changed nothing: the thread's
/// tools, token, pending call and running agent are as they were, and no
/// agent was started. The right secret is admitted, and the secret is on no
/// service's, launcher's or agent's command line or environment.
#[tokio::test]
async fn internal_rpcs_refuse_callers_without_the_secret_and_change_nothing() {
    let mut env = TestEnv::new();
    env.capture_service_secret();
    stub_agent(&env);
    let launcher = env.up().await;
    let secret = env.service_secret().await;
    let mut sessions = env.session().await;
    let (id, mut events) = thread_with_a_running_agent(&env, &mut sessions).await;
    let (mut call, request_id) = pending_tool_call(&env, &mut events).await;
    let agent_inside = agent_starts(&env)[0];
    // Its pid as this test sees it (a confined agent has a pid namespace).
    let agent_pid = host_pid(&env.runtime_dir(), agent_inside);
    let workspace = env.root.path().join("elsewhere");
    std::fs::create_dir_all(&workspace).unwrap();

    let mut bridge = Bridge::new(env.channel(ServiceName::ToolBridge).await);
    let mut provider = Provider::new(env.channel(ServiceName::Provider).await);
    let wrong = ServiceSecret::generate().to_line().trim_end().to_string();
    assert_ne!(wrong, secret);
    for given in [None, Some(wrong.as_str())] {
        let forged_manifest = json!({"tools": [{"name": "forged", "description": "x",
                                                "argsSchema": {"type": "object"}}]});
        let register = pb::RegisterToolsRequest {
            session_id: id.clone(),
            manifest: Some(to_struct(forged_manifest.as_object().unwrap())),
            tool_token: "the-attackers-token".into(),
        };
        assert_eq!(code(bridge.register(with(register, given)).await), DENIED);
        let render = pb::RenderPromptRequest {
            session_id: id.clone(),
            ..Default::default()
        };
        assert_eq!(
            code(bridge.render_prompt(with(render, given)).await),
            DENIED
        );
        let watch = bridge.watch(with(pb::WatchToolsRequest {}, given)).await;
        assert_eq!(code(watch.map(|_| ())), DENIED);
        let resolve = pb::ResolveToolRequest {
            session_id: id.clone(),
            tool_request_id: request_id.clone(),
            outcome: Some(pb::resolve_tool_request::Outcome::Result(
                pedelec_common::json::to_value(&json!({"forged": true})),
            )),
        };
        assert_eq!(code(bridge.resolve(with(resolve, given)).await), DENIED);
        let drop = pb::DropToolsRequest {
            session_id: id.clone(),
            keep_manifest: false,
        };
        assert_eq!(code(bridge.drop(with(drop, given)).await), DENIED);

        let resolve_profile = pb::ResolveProfileRequest {
            provider: Some("cursor".into()),
            effort_level: None,
        };
        assert_eq!(
            code(provider.resolve_profile(with(resolve_profile, given)).await),
            DENIED
        );
        let run = pb::RunTurnRequest {
            session_id: "thr_forged".into(),
            provider: "cursor".into(),
            workspace: workspace.display().to_string(),
            prompt: "do what the attacker says".into(),
            ..Default::default()
        };
        let run = provider.run_turn(with(run, given)).await;
        assert_eq!(code(run.map(|_| ())), DENIED);
        let cancel = pb::CancelTurnRequest {
            session_id: id.clone(),
        };
        assert_eq!(
            code(provider.cancel_turn(with(cancel, given)).await),
            DENIED
        );
        // A watcher that never acknowledges would hold every UpdateSettings up.
        let acks = tokio_stream::pending::<pb::SettingsAck>();
        let watch = provider.watch_settings(with(acks, given)).await;
        assert_eq!(code(watch.map(|_| ())), DENIED);
    }

    // Nothing changed: the thread still waits for the same call, its agent
    // runs, its token and tools are the page's, the forged ones are not there.
    let snap = snapshot(&mut sessions, &id).await;
    assert_eq!(snap.status, pb::SessionStatus::WaitingToolResult as i32);
    assert_eq!(
        snap.pending_tool_request.as_ref().unwrap().tool_request_id,
        request_id
    );
    assert!(call.try_wait().unwrap().is_none(), "the tool call ended");
    assert!(alive(agent_pid), "the agent was stopped");
    let out = agent_cli(&env, &["tool-spec", "get_counter"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", json_of(&out));
    let out = agent_cli(&env, &["tool-spec", "forged"]).output().unwrap();
    assert_eq!(json_of(&out)["error"]["code"], "TOOL_NOT_FOUND");
    let out = agent_cli(&env, &["tool-spec", "get_counter"])
        .env("PEDELEC_TOOL_TOKEN", "the-attackers-token")
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["error"]["code"], "TOOL_ACCESS_DENIED");

    // The right secret is admitted (read-only calls, so the thread stays as it is).
    let rendered = bridge
        .render_prompt(with(
            pb::RenderPromptRequest {
                session_id: id.clone(),
                ..Default::default()
            },
            Some(&secret),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(rendered.prompt_block.contains("get_counter"));
    let resolved = provider
        .resolve_profile(with(
            pb::ResolveProfileRequest {
                provider: Some("cursor".into()),
                effort_level: None,
            },
            Some(&secret),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resolved.provider, "cursor");

    // The page answers through SessionService: the call completes as usual.
    sessions
        .submit_tool_result(submit_tool_result_request(
            &id,
            &request_id,
            tool_result(&json!({"count": 7})),
        ))
        .await
        .unwrap();
    let out = call.wait_with_output().unwrap();
    assert_eq!(json_of(&out), json!({"ok": true, "result": {"count": 7}}));
    assert_eq!(
        agent_starts(&env),
        vec![agent_inside],
        "a refused RunTurn started an agent"
    );

    // The secret is on no command line and in no environment: the launcher's,
    // the services', the agent's.
    let status = env.supervisor_status().await.unwrap();
    let mut pids: Vec<u32> = status.services.iter().map(|s| s.pid).collect();
    pids.push(launcher.pid());
    pids.push(agent_pid);
    for pid in pids {
        for file in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap();
            assert!(
                !bytes
                    .windows(secret.len())
                    .any(|w| w.eq_ignore_ascii_case(secret.as_bytes())),
                "the secret is in /proc/{pid}/{file}"
            );
        }
    }
}

/// What the page, the native host's requests, local tools (pedelec-cli,
/// grpcurl-style raw calls) and agents use works without the secret.
#[tokio::test]
async fn public_rpcs_need_no_secret() {
    let env = TestEnv::new();
    stub_agent(&env);
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let (id, mut events) = thread_with_a_running_agent(&env, &mut sessions).await;

    // Agents: ListTools, GetToolSpec and CallTool with the thread's token.
    let out = agent_cli(&env, &["tool-spec", "get_counter"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", json_of(&out));
    let (call, request_id) = pending_tool_call(&env, &mut events).await;
    sessions
        .submit_tool_result(submit_tool_result_request(
            &id,
            &request_id,
            tool_result(&json!(1)),
        ))
        .await
        .unwrap();
    assert_eq!(json_of(&call.wait_with_output().unwrap())["result"], 1);
    let mut bridge = Bridge::new(env.channel(ServiceName::ToolBridge).await);
    let mut list = tonic::Request::new(pb::ListToolsRequest {
        session_id: id.clone(),
    });
    list.metadata_mut().insert(
        pedelec_common::TOOL_TOKEN_HEADER,
        agent_var(&env, "PEDELEC_TOOL_TOKEN").parse().unwrap(),
    );
    assert_eq!(
        bridge
            .list_tools(list)
            .await
            .unwrap()
            .into_inner()
            .tools
            .len(),
        1
    );

    // Local tools: pedelec-cli's settings and sessions commands.
    let cli = |args: &[&str]| {
        env.command(bin("pedelec-cli"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = cli(&["settings", "set", "default-provider", "cursor"]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&["settings", "get"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_of(&out)["defaultProvider"], "cursor");
    let out = cli(&["sessions", "list"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));

    // The rest of SessionService, ProviderService's public calls, AssetService
    // and the launcher, each without the secret.
    let listed = sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.sessions.len(), 1);
    sessions.cancel(thread_request(&id)).await.unwrap();
    sessions
        .end(pb::EndRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    sessions.reactivate(thread_request(&id)).await.unwrap();
    let mut provider = Provider::new(env.channel(ServiceName::Provider).await);
    provider
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap();
    provider
        .get_settings(pb::GetSettingsRequest {})
        .await
        .unwrap();
    let assets = env
        .asset()
        .await
        .list(pb::ListAssetsRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
        })
        .await
        .unwrap();
    assert!(assets.into_inner().assets.is_empty());
    assert_eq!(env.supervisor_status().await.unwrap().services.len(), 4);
}

/// A service killed with SIGKILL is restarted with the same secret, and the
/// services still accept each other's internal calls: after each of the four
/// was killed, a new thread's turn starts its agent (ResolveProfile, Register,
/// RenderPrompt, RunTurn) and a tool call round-trips (Watch, Resolve).
#[tokio::test]
async fn restarted_services_get_the_same_secret_and_a_turn_still_works() {
    let mut env = TestEnv::new();
    env.capture_service_secret();
    stub_agent(&env);
    let _launcher = env.up().await;
    let secret = env.service_secret().await;
    for service in ServiceName::SUPERVISED {
        let old = env.service_status(service).await;
        signal(old.pid as i32, libc::SIGKILL);
        let new = env.wait_service_back(service, old.pid).await;
        assert_eq!(env.handed_secret(new.pid), secret, "{}", service.as_str());
    }
    assert_eq!(env.service_secret().await, secret);

    let mut sessions = env.session().await;
    let (id, mut events) = thread_with_a_running_agent(&env, &mut sessions).await;
    let (call, request_id) = pending_tool_call(&env, &mut events).await;
    sessions
        .submit_tool_result(submit_tool_result_request(
            &id,
            &request_id,
            tool_result(&json!("after the restarts")),
        ))
        .await
        .unwrap();
    let out = call.wait_with_output().unwrap();
    assert_eq!(json_of(&out)["result"], "after the restarts");
}

/// Another process of the user cannot read the launcher's or a service's
/// environment (nor, by the same kernel check, its memory or fds, nor attach
/// with ptrace), while it can read an ordinary process's. Root may read any
/// process's, so when the test runs as root the launcher and the probe both
/// run as `nobody` (setpriv), a user without capabilities.
#[tokio::test]
async fn the_launcher_and_the_services_are_not_dumpable() {
    let env = TestEnv::new();
    let as_root = pedelec_common::process::is_root();
    let as_user = |program: &Path| {
        let mut cmd = if as_root {
            let mut cmd = env.command("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program);
            cmd
        } else {
            env.command(program)
        };
        cmd.stdin(Stdio::null());
        cmd
    };
    if as_root {
        let status = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(env.root.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let mut up = as_user(&bin("pedelecd"));
    up.arg("up")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.root.path().join("pedelecd.stderr")).unwrap());
    set_own_process_group(&mut up);
    // Stopped on drop too: a failed assertion must not leave it running.
    let mut launcher = Launcher::adopt(up.spawn().unwrap(), env.runtime_dir());
    // Its sockets answer only their own user; as root the test sees the
    // processes instead: the launcher and four services using this runtime dir.
    wait_until("the launcher and four services", || {
        processes_using(&env.runtime_dir()).len() == 5
            && ServiceName::SUPERVISED
                .iter()
                .all(|s| env.socket(*s).exists())
    })
    .await;
    let pids = processes_using(&env.runtime_dir());

    let readable = |pid: u32| {
        as_user(Path::new("/bin/cat"))
            .arg(format!("/proc/{pid}/environ"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    // The probe can read what an ordinary process of the same user shows.
    let mut ordinary = as_user(Path::new("/bin/sleep")).arg("60").spawn().unwrap();
    // Its name changes at the exec, after setpriv has changed the user.
    wait_until("the ordinary process to exec", || {
        std::fs::read_to_string(format!("/proc/{}/comm", ordinary.id()))
            .is_ok_and(|c| c == "sleep\n")
    })
    .await;
    let read_ordinary = readable(ordinary.id());
    ordinary.kill().unwrap();
    ordinary.wait().unwrap();
    assert!(read_ordinary, "the probe cannot read anything");
    for pid in &pids {
        assert!(!readable(*pid), "another process read /proc/{pid}/environ");
    }

    launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
}
