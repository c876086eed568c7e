//! Hostile input over the real processes: every
//! thread-scoped RPC from another origin, a wrong tool token on every tool RPC,
//! a runtime dir someone else made or left open to every user.
//! `docs/reliability.md` lists each case with the test that checks it.

use std::os::unix::fs::PermissionsExt;

use pb::submit_tool_result_request::Outcome;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::json;

const EVIL: &str = "https://evil.example";

/// Everything a page of the owning origin can observe of a thread.
#[derive(Debug, PartialEq)]
struct Observed {
    status: i32,
    last_seq: u64,
    pending: Option<String>,
    active: Option<String>,
    /// The assets, or the code that refuses them (an ended thread's).
    assets: Result<Vec<(String, u64)>, String>,
}

async fn observe(env: &TestEnv, id: &str) -> Observed {
    let snap = snapshot(&mut env.session().await, id).await;
    let assets = env
        .asset()
        .await
        .list(pb::ListAssetsRequest {
            session_id: id.into(),
            origin: ORIGIN.into(),
        })
        .await
        .map(|r| {
            r.into_inner()
                .assets
                .into_iter()
                .map(|a| (a.path, a.size_bytes))
                .collect()
        })
        .map_err(|s| code::<()>(Err(s)));
    Observed {
        status: snap.status,
        last_seq: snap.last_seq,
        pending: snap.pending_tool_request.map(|p| p.tool_request_id),
        active: snap.active_operation.map(|o| o.operation_id),
        assets,
    }
}

fn upload(id: &str, origin: &str, path: &str, data: &[u8]) -> Vec<pb::UploadChunk> {
    vec![
        pb::UploadChunk {
            chunk: Some(pb::upload_chunk::Chunk::Header(pb::UploadHeader {
                session_id: id.into(),
                origin: origin.into(),
                path: path.into(),
                size_bytes: data.len() as u64,
            })),
        },
        pb::UploadChunk {
            chunk: Some(pb::upload_chunk::Chunk::Data(data.to_vec())),
        },
    ]
}

/// Every SessionService and AssetService RPC that names a thread, sent by
/// another origin: each is THREAD_ACCESS_DENIED, and the owner sees nothing
/// changed (status, seq, the pending tool call, the running operation, the
/// assets). Checked twice: with a turn waiting for a tool result, and ended.
#[tokio::test]
async fn every_thread_scoped_rpc_from_another_origin_is_denied_and_changes_nothing() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    // An approved site: what it is refused here is another origin's thread
    // (an unapproved one is refused before that: sites::).
    env.grant_site(EVIL, pb::AccessLevel::Full, &["ollama"], &[])
        .await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    let mut assets = env.asset().await;
    assets
        .upload(tokio_stream::iter(upload(
            &id,
            ORIGIN,
            "/kept.txt",
            b"kept",
        )))
        .await
        .unwrap();
    // A turn waiting for the page's answer to a tool call.
    host.ok("send_text", json!({"sessionId": id, "text": "@@tool"}))
        .await;
    let request = host
        .events_until(&id, |e| e["type"] == "tool_request")
        .await
        .pop()
        .unwrap();
    let request_id = request["event"]["toolRequestId"]
        .as_str()
        .unwrap()
        .to_string();

    for phase in ["waiting for a tool result", "ended"] {
        let before = observe(&env, &id).await;
        let mut sessions = env.session().await;
        let thread = thread_request_from(&id, EVIL);
        let mut denied: Vec<(&str, String)> = vec![
            ("Get", code(sessions.get(thread.clone()).await)),
            (
                "OpenWorkspace",
                code(sessions.open_workspace(thread.clone()).await),
            ),
            (
                "Attach",
                code(
                    sessions
                        .attach(pb::AttachRequest {
                            origin: EVIL.into(),
                            ..attach_request(&id, "evil-route", Some(0))
                        })
                        .await,
                ),
            ),
            (
                "SendText",
                code(
                    sessions
                        .send_text(pb::SendTextRequest {
                            origin: EVIL.into(),
                            ..send_text_request(&id, "hi")
                        })
                        .await,
                ),
            ),
            (
                "Prepare",
                code(
                    sessions
                        .prepare(pb::PrepareRequest {
                            session_id: id.clone(),
                            origin: EVIL.into(),
                        })
                        .await,
                ),
            ),
            ("Cancel", code(sessions.cancel(thread.clone()).await)),
            (
                "End",
                code(sessions.end(pb::EndRequest::from(thread.clone())).await),
            ),
            (
                "Reactivate",
                code(sessions.reactivate(thread.clone()).await),
            ),
            (
                "SubmitToolResult",
                code(
                    sessions
                        .submit_tool_result(pb::SubmitToolResultRequest {
                            origin: EVIL.into(),
                            ..submit_tool_result_request(
                                &id,
                                &request_id,
                                tool_result(&json!("forged")),
                            )
                        })
                        .await,
                ),
            ),
            (
                "SubmitToolResult(error)",
                code(
                    sessions
                        .submit_tool_result(pb::SubmitToolResultRequest {
                            origin: EVIL.into(),
                            ..submit_tool_result_request(
                                &id,
                                &request_id,
                                Outcome::Error(pb::ToolError {
                                    code: "X".into(),
                                    message: "forged".into(),
                                    details: None,
                                }),
                            )
                        })
                        .await,
                ),
            ),
            (
                "Asset.CreateUploadTicket",
                code(
                    assets
                        .create_upload_ticket(pb::CreateUploadTicketRequest {
                            session_id: id.clone(),
                            origin: EVIL.into(),
                            target_path: Some("/kept.txt".into()),
                            name: "kept.txt".into(),
                            size_bytes: 1,
                            content_type: "text/plain".into(),
                        })
                        .await,
                ),
            ),
            (
                "Asset.CreateDownloadTicket",
                code(
                    assets
                        .create_download_ticket(pb::CreateDownloadTicketRequest {
                            session_id: id.clone(),
                            origin: EVIL.into(),
                            path: "/kept.txt".into(),
                        })
                        .await,
                ),
            ),
            (
                "Asset.List",
                code(
                    assets
                        .list(pb::ListAssetsRequest {
                            session_id: id.clone(),
                            origin: EVIL.into(),
                        })
                        .await,
                ),
            ),
            (
                "Asset.Upload",
                code(
                    assets
                        .upload(tokio_stream::iter(upload(
                            &id,
                            EVIL,
                            "/kept.txt",
                            b"overwritten",
                        )))
                        .await,
                ),
            ),
        ];
        // Read is a server stream: refused either at once or as its first item.
        let read = match assets
            .read(pb::ReadAssetRequest {
                session_id: id.clone(),
                origin: EVIL.into(),
                path: "/kept.txt".into(),
            })
            .await
        {
            Err(status) => code::<()>(Err(status)),
            Ok(stream) => code(stream.into_inner().message().await),
        };
        denied.push(("Asset.Read", read));
        for (rpc, got) in &denied {
            assert_eq!(got, "THREAD_ACCESS_DENIED", "{rpc} while {phase}");
        }
        // List with another origin's filter shows none of this origin's threads.
        let theirs = sessions
            .list(pb::ListRequest {
                origin: Some(EVIL.into()),
            })
            .await
            .unwrap()
            .into_inner()
            .sessions;
        assert!(theirs.is_empty(), "{theirs:?}");
        assert_eq!(
            observe(&env, &id).await,
            before,
            "another origin changed the thread while {phase}"
        );
        if phase == "ended" {
            break;
        }
        // The owner's own answer still lands: the forged ones did not.
        let answered = host
            .ok(
                "submit_tool_result",
                json!({"sessionId": id, "toolRequestId": request_id, "result": {"title": "mine"}}),
            )
            .await;
        assert_eq!(answered, json!({}), "{answered}");
        let turn = host.events_until(&id, finished).await;
        let finished_event = &turn.last().unwrap()["event"];
        assert_eq!(finished_event["outcome"], "completed", "{finished_event}");
        let chat = turn
            .iter()
            .find(|e| e["event"]["type"] == "chat")
            .unwrap_or_else(|| panic!("no chat in {turn:?}"));
        assert!(
            chat["event"]["text"].as_str().unwrap().contains("mine"),
            "{chat}"
        );
        host.ok("end", json!({"sessionId": id})).await;
    }
}

/// A ToolBridge client of this environment presenting `token` (none: no header).
async fn toolbridge(
    env: &TestEnv,
    token: Option<&str>,
) -> pedelec_common::clients::ToolBridgeClient {
    let clients = env.clients();
    clients.connect(ServiceName::ToolBridge).await.unwrap();
    match token {
        Some(t) => clients.with_tool_token(t).unwrap().toolbridge(),
        None => clients.toolbridge(),
    }
}

/// The three RPCs an agent's `pedelec-cli` makes, for thread `id`, with the
/// given token: the code of each (or "ok").
async fn tool_rpcs(env: &TestEnv, id: &str, token: Option<&str>) -> Vec<(&'static str, String)> {
    let mut bridge = toolbridge(env, token).await;
    let outcome = |r: Result<(), tonic::Status>| match r {
        Ok(()) => "ok".to_string(),
        Err(s) => code::<()>(Err(s)),
    };
    let spec = bridge
        .get_tool_spec(pb::GetToolSpecRequest {
            session_id: id.into(),
            tool: "get_page".into(),
        })
        .await
        .map(drop);
    let list = bridge
        .list_tools(pb::ListToolsRequest {
            session_id: id.into(),
        })
        .await
        .map(drop);
    let call = bridge
        .call_tool(pb::CallToolRequest {
            session_id: id.into(),
            tool: "get_page".into(),
            args: Some(pedelec_common::json::to_value(&json!({"q": "x"}))),
            timeout_ms: Some(1),
        })
        .await
        .map(|r| r.into_inner().outcome);
    // A call that got through carries the tool's outcome in its reply.
    let call = match call {
        Ok(Some(pb::call_tool_response::Outcome::Error(e))) => Ok(e.code),
        Ok(_) => Ok("ok".to_string()),
        Err(s) => Err(s),
    };
    vec![
        ("GetToolSpec", outcome(spec)),
        ("ListTools", outcome(list)),
        ("CallTool", call.unwrap_or_else(|s| code::<()>(Err(s)))),
    ]
}

/// GetToolSpec, ListTools and CallTool with no token, a made-up one, one of
/// the right length, and another thread's real token: TOOL_ACCESS_DENIED each
/// time, and no tool request reaches the page. The other thread's token works
/// on its own thread (the control that shows the token read is real).
#[tokio::test]
async fn a_wrong_token_is_denied_on_every_tool_rpc() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let victim = open_session(&mut host).await;
    let other = open_session(&mut host).await;
    // The other thread's agent dumps its environment (its token) and waits.
    let dump = env.root.path().join("agent.env");
    host.ok(
        "send_text",
        json!({"sessionId": other, "text": format!("@@wait {}", dump.display())}),
    )
    .await;
    wait_until("the agent's environment", || dump.exists()).await;
    let other_token = std::fs::read_to_string(&dump)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PEDELEC_TOOL_TOKEN=").map(String::from))
        .expect("the agent has a token");
    let before = observe(&env, &victim).await;

    let forged = "0".repeat(other_token.len());
    for token in [
        None,
        Some("wrong"),
        Some(forged.as_str()),
        Some(other_token.as_str()),
    ] {
        for (rpc, got) in tool_rpcs(&env, &victim, token).await {
            assert_eq!(got, "TOOL_ACCESS_DENIED", "{rpc} with {token:?}");
        }
    }
    // An unknown thread is refused the same way, so ids cannot be probed.
    for (rpc, got) in tool_rpcs(
        &env,
        "thr_0123456789abcdef0123456789abcdef",
        Some(&other_token),
    )
    .await
    {
        assert_eq!(got, "TOOL_ACCESS_DENIED", "{rpc} on an unknown thread");
    }
    assert_eq!(observe(&env, &victim).await, before);

    // The token is real: on its own thread GetToolSpec and ListTools work
    // (CallTool would wait for the page; its 1 ms timeout ends it).
    let own = tool_rpcs(&env, &other, Some(&other_token)).await;
    assert_eq!(
        own,
        [
            ("GetToolSpec", "ok".to_string()),
            ("ListTools", "ok".to_string()),
            ("CallTool", "TOOL_TIMEOUT".to_string())
        ]
    );
    host.ok("cancel", json!({"sessionId": other})).await;
}

/// `pedelecd up` on a runtime dir it must not trust: owned by another user,
/// or writable by every user. It refuses at once (exit 1) naming the folder and
/// the reason, starts no service, and leaves the folder as it was.
#[tokio::test]
async fn a_runtime_dir_of_another_user_or_open_to_all_is_refused_at_start() {
    if pedelec_common::process::uid() != 0 {
        panic!(
            "this test must run as root (CI and the dev machines do) to chown a folder to another uid"
        );
    }
    let cases: [(&str, u32, Option<u32>, &str); 3] = [
        ("another owner", 0o700, Some(65534), "owned by uid 65534"),
        (
            "world-writable",
            0o777,
            None,
            "writable by every user (mode 0777)",
        ),
        (
            "world-writable, sticky",
            0o1777,
            None,
            "writable by every user (mode 1777)",
        ),
    ];
    for (what, mode, owner, reason) in cases {
        let env = TestEnv::with_codex_stub();
        let rt = env.runtime_dir();
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&rt, Some(uid), Some(uid)).unwrap();
        }
        // `start` first: it must refuse too, not start an `up` that never returns.
        for args in [&["start"][..], &["up"][..]] {
            let out = env.pedelecd(args);
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what}, {args:?}: {out:?}");
            assert!(
                said.contains(&rt.display().to_string()) && said.contains(reason),
                "{what}, {args:?}: {said}"
            );
        }
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&rt).unwrap();
        assert_eq!(meta.mode() & 0o7777, mode, "{what}: the folder was changed");
        assert_eq!(
            std::fs::read_dir(&rt).unwrap().count(),
            0,
            "{what}: something was created in it"
        );
        assert!(
            processes_using(&rt).is_empty(),
            "{what}: a process was left"
        );
        // The native host, which starts pedelecd itself, answers with the reason.
        let mut host = Host::spawn(&env, EXTENSION);
        let reply = host.call("list_providers", json!({})).await;
        assert_eq!(
            reply["error"]["code"], "CORE_UNAVAILABLE",
            "{what}: {reply}"
        );
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(reason),
            "{what}: {reply}"
        );
        drop(host);
        // Restore ownership so the temp dir can be removed.
        std::os::unix::fs::chown(&rt, Some(0), Some(0)).unwrap();
    }
}

/// The largest manifest the caps allow (128 tools, each argsSchema just under
/// 64 KiB, 256 distinct patterns: about 8 MiB) is accepted through the host,
/// its tools work, and they work for the very next turn after ToolBridge is
/// killed (the turn registers the manifest again itself rather than waiting
/// for SessionService's Watch to notice the restart, so its tool calls are
/// not refused TOOL_ACCESS_DENIED); one byte more in one schema is refused
/// with its pointer.
/// (Every unsupported keyword, and depth: toolbridge's manifest unit tests
/// and native_host.rs deep_or_oversized_payloads_are_not_core_unavailable.)
#[tokio::test]
async fn the_largest_manifest_the_caps_allow_registers_and_survives_a_toolbridge_restart() {
    const MAX_SCHEMA_BYTES: usize = 64 * 1024;
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let tool = |i: usize, extra: usize| {
        let name = if i == 0 {
            "get_page".to_string()
        } else {
            format!("t{i}")
        };
        let mut schema = json!({"type": "object", "description": "", "properties": {
            "q": {"type": "string", "pattern": format!("^a{{0,{}}}", 2 * i)},
            "r": {"type": "string", "pattern": format!("^b{{0,{}}}", 2 * i + 1)}}});
        let pad = MAX_SCHEMA_BYTES - schema.to_string().len() + extra;
        schema["description"] = json!("x".repeat(pad));
        json!({"name": name, "description": "d", "argsSchema": schema})
    };
    let tools: Vec<_> = (0..128).map(|i| tool(i, 0)).collect();
    let mut too_big = tools.clone();
    too_big[77] = tool(77, 1);
    let refused = host
        .call(
            "create_session",
            json!({"provider": "ollama", "skills": {"tools": too_big}}),
        )
        .await;
    assert_eq!(
        refused["error"]["code"], "TOOLS_MANIFEST_INVALID",
        "{refused:.300}"
    );
    assert_eq!(refused["error"]["details"]["path"], "/tools/77/argsSchema");

    let created = host
        .ok(
            "create_session",
            json!({"provider": "ollama", "skills": {"tools": tools}}),
        )
        .await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    host.ok("attach", json!({"sessionId": id})).await;
    for round in ["registered", "registered again after kill -9 of ToolBridge"] {
        if round != "registered" {
            let old = env.service_status(ServiceName::ToolBridge).await;
            signal(old.pid as i32, libc::SIGKILL);
            env.wait_service_back(ServiceName::ToolBridge, old.pid)
                .await;
        }
        // The agent calls get_page ('{"q":"title"}' fits its pattern ^a{0,0}
        // as a search) and the page answers; right after the restart too (the
        // turn's start registers its thread's tools when the new bridge lacks
        // them).
        host.ok("send_text", json!({"sessionId": id, "text": "@@tool"}))
            .await;
        let upto = host
            .events_until(&id, |e| e["type"] == "tool_request" || finished(e))
            .await;
        let request = upto.last().unwrap().clone();
        assert_eq!(
            request["event"]["type"],
            "tool_request",
            "{round}: the turn ended without calling the tool: {:?}",
            upto.iter()
                .filter(|e| e["event"]["type"] == "chat")
                .map(|e| e["event"]["text"].to_string())
                .collect::<Vec<_>>()
        );
        host.ok(
            "submit_tool_result",
            json!({"sessionId": id, "toolRequestId": request["event"]["toolRequestId"], "result": {"round": round}}),
        )
        .await;
        let turn = host.events_until(&id, finished).await;
        let last = &turn.last().unwrap()["event"];
        assert_eq!(last["outcome"], "completed", "{round}: {last}");
        let chat: String = turn
            .iter()
            .filter(|e| e["event"]["type"] == "chat")
            .map(|e| e["event"]["text"].as_str().unwrap().to_string())
            .collect();
        assert!(chat.contains(round), "{round}: {chat:.300}");
    }
}
