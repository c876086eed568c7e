//! The native host as Chrome runs it: argv[1] = the extension origin, cwd = its
//! folder, length-prefixed JSON frames on stdin/stdout, against the real
//! services on a temp runtime dir, with a stub `pedelec-agent` as the provider.

use std::time::{Duration, Instant};

use pedelec_proto::v1 as pb;
use pedelec_tests::schema::Schema;
use pedelec_tests::*;
use serde_json::{Value, json};

#[tokio::test]
async fn ping_providers_and_settings() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let pong = host.ok("ping", json!({})).await;
    assert_eq!(pong["pong"], true);
    assert_eq!(pong["coreRunning"], true);
    assert_eq!(pong["protocolVersion"], 2);
    let providers = host.ok("list_providers", json!({})).await;
    let codes: Vec<&str> = providers["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes.len(), 6, "{providers}");
    for p in providers["providers"].as_array().unwrap() {
        for key in ["name", "code", "available", "isDefault", "error"] {
            assert!(p.get(key).is_some(), "{key} missing in {p}");
        }
    }
    let settings = host.ok("get_settings", json!({})).await;
    assert_eq!(settings, json!({"defaultProvider": null}));
    let (code, _) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
    let log = std::fs::read_to_string(env.runtime_dir().join("logs/native-host.log")).unwrap();
    assert!(log.contains(EXTENSION), "the caller is recorded: {log}");
}

#[tokio::test]
async fn a_turn_streams_deltas_in_order_then_end_and_reactivate() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;

    let op = host
        .ok(
            "send_text",
            json!({"sessionId": id, "text": "@@stream 500"}),
        )
        .await;
    let op_id = op["operationId"].as_str().unwrap().to_string();
    let mut events = host.events_until(&id, finished).await;
    events.extend(host.events_until(&id, |e| e["type"] == "status").await);
    // However many chat_deltas: those that waited for SessionService travel
    // joined (docs/native-messaging.md §4); the text below is whole.
    let mut kinds = frame_kinds(&events);
    kinds.dedup_by(|a, b| a == "chat_delta" && b == "chat_delta");
    assert_eq!(
        kinds,
        [
            "operation_started",
            "status:running",
            "chat_delta",
            "usage",
            "operation_finished:completed",
            "status:idle"
        ]
    );
    assert_consecutive(&events);
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(frame_delta_text(&events), expected_deltas(500));
    assert!(
        events
            .iter()
            .all(|e| e["at"].as_i64().unwrap() > 1_700_000_000_000)
    );
    let fin = &events[events.len() - 2]["event"];
    assert_eq!(fin["operationId"], op_id.as_str());
    assert_eq!(fin["kind"], "send_text");
    assert_eq!(fin["error"], Value::Null);
    let usage = &events[events.len() - 3]["event"];
    assert_eq!(
        (usage["inputTokens"].as_u64(), usage["totalTokens"].as_u64()),
        (Some(10), Some(15))
    );

    let got = host.ok("get_session", json!({"sessionId": id})).await;
    assert_eq!(got["snapshot"]["status"], "idle");
    assert_eq!(got["snapshot"]["lastOperation"]["outcome"], "completed");
    assert_eq!(got["snapshot"]["usage"]["totalTokens"], 15);

    let ended = host.ok("end", json!({"sessionId": id})).await;
    assert_eq!(ended["snapshot"]["status"], "ended");
    let tail = host.events_until(&id, |e| e["type"] == "ended").await;
    assert!(
        frame_kinds(&tail).contains(&"status:ended".to_string()),
        "{:?}",
        frame_kinds(&tail)
    );
    assert_eq!(
        host.err("send_text", json!({"sessionId": id, "text": "x"}))
            .await,
        "SESSION_ENDED"
    );
    let back = host.ok("reactivate", json!({"sessionId": id})).await;
    assert_eq!(back["snapshot"]["status"], "idle");

    // Other origins cannot touch the thread, approved or not; unknown ids
    // are not found.
    let evil = "https://evil.example";
    let reply = host
        .call_as(evil, "get_session", json!({"sessionId": id}))
        .await;
    assert_eq!(reply["error"]["code"], "SITE_NOT_APPROVED", "{reply}");
    env.grant_site(evil, pb::AccessLevel::Full, &["ollama"], &[])
        .await;
    let reply = host
        .call_as(evil, "get_session", json!({"sessionId": id}))
        .await;
    assert_eq!(reply["error"]["code"], "THREAD_ACCESS_DENIED", "{reply}");
    // Nor read its conversation: the host asks with the page's own origin.
    let reply = host
        .call_as(evil, "get_history", json!({"sessionId": id}))
        .await;
    assert_eq!(reply["error"]["code"], "THREAD_ACCESS_DENIED", "{reply}");
    let own = host.ok("get_history", json!({"sessionId": id})).await;
    assert!(!own["entries"].as_array().unwrap().is_empty(), "{own}");
    assert_eq!(
        host.err("get_session", json!({"sessionId": "nope"})).await,
        "THREAD_NOT_FOUND"
    );

    let detached = host.ok("detach", json!({"sessionId": id})).await;
    assert_eq!(detached["detached"], true);
    let again = host.ok("detach", json!({"sessionId": id})).await;
    assert_eq!(again["detached"], false);
}

#[tokio::test]
async fn a_tool_call_is_answered_through_submit_tool_result() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": "@@tool please"}),
    )
    .await;
    let seen = host
        .events_until(&id, |e| e["type"] == "tool_request")
        .await;
    let request = seen.last().unwrap()["event"].clone();
    assert_eq!(request["tool"], "get_page");
    assert_eq!(request["args"], json!({"q": "title"}));
    let waiting = host.ok("get_session", json!({"sessionId": id})).await;
    assert_eq!(waiting["snapshot"]["status"], "waiting_tool_result");
    assert_eq!(
        waiting["snapshot"]["pendingToolRequest"]["toolRequestId"],
        request["toolRequestId"]
    );

    let result = json!({"title": "Pedelec ✓", "url": "https://app.example/x"});
    let submitted = host
        .ok(
            "submit_tool_result",
            json!({"sessionId": id, "toolRequestId": request["toolRequestId"], "result": result}),
        )
        .await;
    assert_eq!(submitted, json!({}));
    let rest = host.events_until(&id, finished).await;
    assert_eq!(
        rest.last().unwrap()["event"]["outcome"],
        "completed",
        "{:?}",
        frame_kinds(&rest)
    );
    let chat = rest
        .iter()
        .find(|e| e["event"]["type"] == "chat")
        .expect("the agent reports the tool's output");
    let printed: Value = serde_json::from_str(chat["event"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(printed, json!({"ok": true, "result": result}));
    assert!(
        frame_kinds(&rest).contains(&"tool_request_cleared".to_string()),
        "{:?}",
        frame_kinds(&rest)
    );
}

#[tokio::test]
async fn several_sessions_interleave_without_loss() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(open_session(&mut host).await);
    }
    // All three turns run at once; their events arrive mixed on one stdout.
    for (i, id) in ids.iter().enumerate() {
        host.ok(
            "send_text",
            json!({"sessionId": id, "text": format!("@@stream {}", 300 + i)}),
        )
        .await;
    }
    let mut interleaved = false;
    let mut last_session = String::new();
    let mut switches = 0;
    let mut per_session: Vec<Vec<Value>> = vec![Vec::new(); 3];
    let mut done = 0;
    while done < 3 {
        let e = host.event().await.value;
        let sid = e["sessionId"].as_str().unwrap().to_string();
        if sid != last_session {
            switches += 1;
            last_session = sid.clone();
        }
        let i = ids.iter().position(|x| *x == sid).unwrap();
        if finished(&e["event"]) {
            done += 1;
        }
        per_session[i].push(e);
    }
    if switches > 3 {
        interleaved = true;
    }
    for (i, events) in per_session.iter().enumerate() {
        assert_consecutive(events);
        assert_eq!(frame_delta_text(events), expected_deltas(300 + i));
        let fin = events.iter().find(|e| finished(&e["event"])).unwrap();
        assert_eq!(fin["event"]["outcome"], "completed");
    }
    eprintln!("session switches on stdout: {switches} (interleaved: {interleaved})");
}

#[tokio::test]
async fn a_three_mib_tool_request_arrives_in_chunks_byte_exact() {
    let mut env = TestEnv::new();
    // Escapes and multi-byte characters make the chunk boundaries interesting.
    let blob: String = "ab\"c\\d é✓𝄞\n\u{1}".repeat(3 * 1024 * 1024 / 20 + 1);
    let args = json!({"blob": blob});
    std::fs::write(env.root.path().join("big.json"), args.to_string()).unwrap();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    host.ok("send_text", json!({"sessionId": id, "text": "@@big"}))
        .await;

    let big = loop {
        let r = host.event().await;
        if r.value["event"]["type"] == "tool_request" {
            break r;
        }
    };
    assert!(big.text.len() >= 3 << 20, "{} bytes", big.text.len());
    assert!(big.frames >= 3, "{} frames", big.frames);
    assert_eq!(big.value["event"]["args"], args);
    // Byte-exact: the reassembly is the host's serialization, unchanged.
    assert_eq!(serde_json::to_string(&big.value).unwrap(), big.text);

    // The snapshot with the pending request is just as large: a chunked reply.
    host.next_id += 1;
    host.send(&json!({"id": "snap", "type": "get_session", "origin": ORIGIN, "payload": {"sessionId": id}}))
        .await;
    let snap = host.reply_to(&json!("snap")).await;
    assert!(snap.frames >= 3);
    assert_eq!(
        snap.value["result"]["snapshot"]["pendingToolRequest"]["args"],
        args
    );

    let tr = big.value["event"]["toolRequestId"].clone();
    host.ok(
        "submit_tool_result",
        json!({"sessionId": id, "toolRequestId": tr, "result": {"size": blob.len()}}),
    )
    .await;
    let rest = host.events_until(&id, finished).await;
    assert_eq!(rest.last().unwrap()["event"]["outcome"], "completed");
}

#[tokio::test]
async fn auto_starts_pedelecd_when_it_is_not_running() {
    let env = TestEnv::new();
    let mut host = Host::spawn(&env, EXTENSION);
    let pong = host.ok("ping", json!({})).await;
    assert_eq!(pong["coreRunning"], false, "ping does not start anything");

    let started = Instant::now();
    let providers = host.ok("list_providers", json!({})).await;
    let took = started.elapsed();
    assert_eq!(providers["providers"].as_array().unwrap().len(), 6);
    let status = env.supervisor_status().await.expect("pedelecd runs");
    assert_eq!(status.services.len(), 4);
    // The page was approved before (the grant outlives pedelecd: sites.json).
    env.grant_test_origin().await;
    let created = host
        .ok("create_session", json!({"provider": "cursor"}))
        .await;
    assert_eq!(created["snapshot"]["status"], "idle");

    // Stopped under a running host: the next request starts it again (the
    // call never reached a service, so even a mutation is retried safely).
    let out = env.pedelecd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    let again = host
        .ok("create_session", json!({"provider": "cursor"}))
        .await;
    assert_eq!(again["snapshot"]["status"], "idle");

    // pedelecd outlives the host (its own session).
    let (code, _) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
    assert!(
        env.supervisor_status().await.is_ok(),
        "pedelecd died with the host"
    );
    let out = env.pedelecd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    eprintln!("first answer with auto-start: {took:?}");
}

#[tokio::test]
async fn bad_frames_get_error_replies_and_the_host_keeps_serving() {
    let env = TestEnv::new();
    let mut host = Host::spawn(&env, EXTENSION);
    let cases: Vec<(Vec<u8>, Value, &str)> = vec![
        (frame(b""), Value::Null, "INVALID_INPUT"),
        (frame(b"{\"id\":\"u\",\"type\":\"ping\",\"x\":\"\xff\xfe\"}"), json!("u"), "INVALID_INPUT"),
        (frame(b"{\"id\":"), Value::Null, "INVALID_INPUT"),
        (frame(br#"{"id":"t","type":"teleport"}"#), json!("t"), "INVALID_INPUT"),
        (frame(br#"{"id":"m","type":"send_text","origin":"https://a.example","payload":{"sessionId":"s"}}"#), json!("m"), "INVALID_INPUT"),
        (frame(br#"{"id":"o","type":"end","payload":{"sessionId":"s"}}"#), json!("o"), "INVALID_INPUT"),
        (frame(br#"{"id":5,"type":"attach","origin":"https://a.example","payload":{"sessionId":7}}"#), json!(5), "INVALID_INPUT"),
    ];
    for (bytes, id, code) in cases {
        host.send_raw(&bytes).await;
        let r = host.recv().await.value;
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["error"]["code"], code, "{r}");
        assert!(!r["error"]["message"].as_str().unwrap().is_empty());
    }
    // Over 64 MiB: refused and its bytes skipped, so the stream stays in step.
    let len: u32 = (64 << 20) + 1;
    let mut big = len.to_le_bytes().to_vec();
    big.resize(4 + len as usize, b'x');
    host.send_raw(&big).await;
    let r = host.recv().await.value;
    assert_eq!(r["error"]["code"], "MESSAGE_TOO_LARGE", "{r}");
    assert_eq!(r["error"]["details"]["length"], len);

    let pong = host.ok("ping", json!({})).await;
    assert_eq!(pong["pong"], true);
    let (code, took) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(3), "exit took {took:?}");
}

#[tokio::test]
async fn stdin_eof_detaches_everything_and_exits_promptly() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let a = open_session(&mut host).await;
    let b = open_session(&mut host).await;
    let (code, took) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(3), "exit took {took:?}");
    eprintln!("exit after stdin EOF with 2 attached sessions: {took:?}");
    // The streams are gone: the service counts no route for either session.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let list = env
            .session()
            .await
            .list(pb::ListRequest {
                origin: Some(ORIGIN.into()),
            })
            .await
            .unwrap()
            .into_inner();
        let routes: u32 = list
            .sessions
            .iter()
            .filter(|s| s.session_id == a || s.session_id == b)
            .map(|s| s.attached_routes)
            .sum();
        if routes == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "routes still attached: {list:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Firefox starts the host with the manifest's path and the add-on id: only
/// Pedelec's add-on is served, and its own pages (`moz-extension://<uuid>`)
/// may send the extension-only requests a web page may not.
#[tokio::test]
async fn firefox_is_served_for_pedelecs_add_on_only() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let manifest = "/home/u/.mozilla/native-messaging-hosts/dev.pedelec.host.json";
    let addon = pedelec_common::extension::PEDELEC_FIREFOX_ADDON_ID;
    let mut host = Host::spawn_with_args(&env, &[manifest, addon]);
    assert_eq!(host.ok("ping", json!({})).await["pong"], true);
    let own = "moz-extension://5e1f0c3a-7d2b-4c6e-9a81-0f2d3b4c5d6e";
    let sites = host.call_as(own, "list_sites", json!({})).await;
    assert_eq!(sites["ok"], true, "{sites}");
    let page = host.call("list_sites", json!({})).await;
    assert_eq!(page["error"]["code"], "SETTINGS_ACCESS_DENIED", "{page}");
    let chrome_page = host
        .call_as(EXTENSION.trim_end_matches('/'), "list_sites", json!({}))
        .await;
    assert_eq!(
        chrome_page["ok"], false,
        "Chrome's extension origin is not Firefox's own: {chrome_page}"
    );

    let mut other = Host::spawn_with_args(&env, &[manifest, "someone@else.example"]);
    let reply = other.call("ping", json!({})).await;
    assert_eq!(reply["error"]["code"], "NATIVE_HOST_UNAVAILABLE", "{reply}");
}

#[tokio::test]
async fn an_extension_it_was_not_installed_for_is_refused() {
    let env = TestEnv::new();
    let mut host = Host::spawn(&env, "chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/");
    let reply = host.call("ping", json!({})).await;
    assert_eq!(reply["ok"], false);
    assert_eq!(reply["error"]["code"], "NATIVE_HOST_UNAVAILABLE");
    let status = tokio::time::timeout(PATIENCE, host.child.wait())
        .await
        .expect("refusing host exits")
        .unwrap();
    assert_eq!(status.code(), Some(0));

    // The same id becomes allowed through $PEDELEC_ALLOWED_EXTENSIONS.
    let mut env = env;
    env.extra_env.insert(
        "PEDELEC_ALLOWED_EXTENSIONS".into(),
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
    );
    let mut host = Host::spawn(&env, "chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/");
    assert_eq!(host.ok("ping", json!({})).await["pong"], true);
}

/// A burst of chat deltas from the stub agent through ProviderService and
/// SessionService reaches the host's stdout whole and in order (SessionService
/// holds the agent back while a route lags). The rate and the host's RSS are
/// printed, never asserted; `DELTAS` and `PACE` vary the run by hand, and
/// tests/bench measures the figure properly.
#[tokio::test]
async fn a_burst_of_chat_deltas_reaches_stdout_whole_and_in_order() {
    let n: usize = std::env::var("DELTAS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000);
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let pid = host.child.id().unwrap();
    let id = open_session(&mut host).await;
    eprintln!("host RSS idle, one session attached: {} KiB", rss_kib(pid));
    // Warm-up turn so process start-up costs are not in the figure.
    host.ok("send_text", json!({"sessionId": id, "text": "@@stream 10"}))
        .await;
    host.events_until(&id, finished).await;

    // PACE = lines per 10 ms (0: all at once).
    let pace: usize = std::env::var("PACE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let text = if pace == 0 {
        format!("@@stream {n}")
    } else {
        format!("@@paced {n} {pace}")
    };
    host.ok("send_text", json!({"sessionId": id, "text": text}))
        .await;
    let mut first: Option<Instant> = None;
    let mut count = 0usize;
    let mut last_seq = 0u64;
    let mut expected_i = 0usize;
    let mut peak = 0;
    loop {
        let e = host.event().await.value;
        let seq = e["seq"].as_u64().unwrap();
        assert!(
            last_seq == 0 || seq == last_seq + 1,
            "gap: {last_seq} -> {seq} ({}) after {count} deltas in {:?}",
            e["event"]["type"],
            first.map(|f| f.elapsed())
        );
        last_seq = seq;
        let ev = &e["event"];
        if ev["type"] == "chat_delta" {
            first.get_or_insert_with(Instant::now);
            // Deltas that waited for SessionService travel joined.
            let text = ev["text"].as_str().unwrap();
            for word in text.split_inclusive(' ') {
                assert_eq!(word, format!("d{expected_i} "), "in {text:.200}");
                expected_i += 1;
                count += 1;
                if count.is_multiple_of(20_000) {
                    peak = peak.max(rss_kib(pid));
                }
            }
        }
        if finished(ev) {
            break;
        }
    }
    let secs = first.unwrap().elapsed().as_secs_f64();
    assert_eq!(count, n);
    eprintln!(
        "{n} deltas in {secs:.3} s = {:.0} deltas/s; host RSS peak during the stream {} KiB, after {} KiB",
        n as f64 / secs,
        peak,
        rss_kib(pid)
    );
}

/// A detach sent right after an attach (before its stream opened) still finds
/// and ends that stream: each pair detaches, and no event of the session
/// follows its detach reply.
#[tokio::test]
async fn back_to_back_attach_and_detach_leave_no_stream() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let created = host
        .ok(
            "create_session",
            json!({"provider": "ollama", "autoEndOnDisconnect": false}),
        )
        .await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    for i in 0..20 {
        let (a, d) = (json!(format!("a{i}")), json!(format!("d{i}")));
        let mut pair = frame(
            json!({"id": a, "type": "attach", "origin": ORIGIN, "payload": {"sessionId": id}})
                .to_string()
                .as_bytes(),
        );
        pair.extend(frame(
            json!({"id": d, "type": "detach", "origin": ORIGIN, "payload": {"sessionId": id}})
                .to_string()
                .as_bytes(),
        ));
        host.send_raw(&pair).await;
        let detached = host.reply_to(&d).await.value;
        assert_eq!(detached["result"]["detached"], true, "pair {i}: {detached}");
        let attached = host.reply_to(&a).await.value;
        assert!(
            attached["ok"] == true || attached["error"]["code"] == "CANCELLED",
            "pair {i}: {attached}"
        );
        // Whatever came after the detach reply: never an event of the session.
        assert!(
            !host.stash.iter().any(|r| r.value["type"] == "event"),
            "pair {i}: an event after detach"
        );
    }
    // A turn now would stream to any stream left behind.
    host.ok("send_text", json!({"sessionId": id, "text": "@@stream 20"}))
        .await;
    let deadline = Instant::now() + Duration::from_millis(1500);
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline.into(), host.incoming.recv()).await {
        let r = r.expect("good output");
        assert_ne!(r.value["type"], "event", "event after detach: {}", r.text);
        assert_ne!(r.value["type"], "detached", "{}", r.text);
    }
    let list = env
        .session()
        .await
        .list(pb::ListRequest {
            origin: Some(ORIGIN.into()),
        })
        .await
        .unwrap()
        .into_inner();
    let routes: u32 = list
        .sessions
        .iter()
        .filter(|s| s.session_id == id)
        .map(|s| s.attached_routes)
        .sum();
    assert_eq!(routes, 0, "{list:?}");
}

/// Another origin may neither detach (and so auto-end) nor
/// take over a session attached through this host.
#[tokio::test]
async fn another_origin_cannot_detach_or_take_over_an_attached_session() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    for kind in ["detach", "attach"] {
        host.next_id += 1;
        let rid = json!(format!("x{}", host.next_id));
        host.send(&json!({"id": rid, "type": kind, "origin": "https://evil.example", "payload": {"sessionId": id}}))
            .await;
        let reply = host.reply_to(&rid).await.value;
        assert_eq!(reply["ok"], false, "{reply}");
        assert_eq!(reply["error"]["code"], "THREAD_ACCESS_DENIED", "{reply}");
    }
    // The owner's stream still runs.
    host.ok("send_text", json!({"sessionId": id, "text": "hello"}))
        .await;
    let events = host.events_until(&id, finished).await;
    assert_eq!(events.last().unwrap()["event"]["outcome"], "completed");
    assert_eq!(
        host.ok("detach", json!({"sessionId": id})).await["detached"],
        true
    );
}

fn nested(levels: usize) -> Value {
    let mut v = json!("leaf");
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

/// Deep JSON is INVALID_INPUT naming the limit, before any
/// gRPC call; a payload larger than a gRPC message may be is MESSAGE_TOO_LARGE.
/// Neither is a core outage.
#[tokio::test]
async fn deep_or_oversized_payloads_are_not_core_unavailable() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;

    let deep = host
        .call(
            "submit_tool_result",
            json!({"sessionId": id, "toolRequestId": "tr_1", "result": nested(40)}),
        )
        .await;
    assert_eq!(deep["error"]["code"], "INVALID_INPUT", "{deep}");
    let message = deep["error"]["message"].as_str().unwrap();
    assert!(message.contains("deeper than 32 levels"), "{message}");
    let skills = json!({"tools": [{"name": "t", "description": "d", "argsSchema": nested(40)}]});
    let deep = host
        .call(
            "create_session",
            json!({"provider": "ollama", "skills": skills}),
        )
        .await;
    assert_eq!(deep["error"]["code"], "INVALID_INPUT", "{deep}");
    assert!(
        deep["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deeper than 32 levels"),
        "{deep}"
    );

    // ~12 MiB of JSON zeros is ~70 MiB as google.protobuf.Value: above the
    // 64 MiB any gRPC message may have.
    let zeros = 6_200_000;
    let mut body = String::with_capacity(zeros * 2 + 200);
    body.push_str(&format!(
        r#"{{"id":"big","type":"submit_tool_result","origin":"{ORIGIN}","payload":{{"sessionId":"{id}","toolRequestId":"tr_1","result":["#
    ));
    for i in 0..zeros {
        body.push_str(if i == 0 { "0" } else { ",0" });
    }
    body.push_str("]}}");
    host.send_raw(&frame(body.as_bytes())).await;
    drop(body);
    let big = host.reply_to(&json!("big")).await.value;
    assert_eq!(big["error"]["code"], "MESSAGE_TOO_LARGE", "{big}");

    // The services are still known up: the next call just works.
    let snap = host.ok("get_session", json!({"sessionId": id})).await;
    assert_eq!(snap["snapshot"]["status"], "idle");
    let pong = host.ok("ping", json!({})).await;
    assert_eq!(pong["coreRunning"], true);
}

/// With no pedelecd to start, concurrent requests all fail
/// at once with CORE_UNAVAILABLE and the reason, instead of 10 s each.
#[tokio::test]
async fn without_pedelecd_concurrent_requests_fail_fast_with_the_reason() {
    let mut env = TestEnv::new();
    let lonely = env.root.path().join("bin-without-pedelecd");
    std::fs::create_dir_all(&lonely).unwrap();
    std::os::unix::fs::symlink(
        bin_dir().join("pedelec-native-host"),
        lonely.join("pedelec-native-host"),
    )
    .unwrap();
    env.extra_env
        .insert("PEDELEC_BIN_DIR".into(), lonely.display().to_string());
    let mut host = Host::spawn(&env, EXTENSION);
    let requests = [
        ("list_providers", json!({})),
        ("get_settings", json!({})),
        ("create_session", json!({"provider": "ollama"})),
        ("get_session", json!({"sessionId": "thr_x"})),
        ("send_text", json!({"sessionId": "thr_x", "text": "hi"})),
        ("list_assets", json!({"sessionId": "thr_x"})),
        ("attach", json!({"sessionId": "thr_x"})),
        ("end", json!({"sessionId": "thr_x"})),
    ];
    let started = Instant::now();
    let mut bytes = Vec::new();
    for (i, (kind, payload)) in requests.iter().enumerate() {
        let msg = json!({"id": i, "type": kind, "origin": ORIGIN, "payload": payload});
        bytes.extend(frame(msg.to_string().as_bytes()));
    }
    host.send_raw(&bytes).await;
    for i in 0..requests.len() {
        let reply = host.reply_to(&json!(i)).await.value;
        assert_eq!(reply["error"]["code"], "CORE_UNAVAILABLE", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("pedelecd not found"),
            "the reason is given: {message}"
        );
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let (code, _) = host.close_and_wait().await;
    assert_eq!(code, Some(0));
}

// ---- Sites: the grants behind every web origin's request ----

/// The extension's own pages' origin: argv[1] without its trailing slash.
fn own() -> &'static str {
    EXTENSION.trim_end_matches('/')
}

/// A request from `origin`, request and reply checked against the schema
/// (a successful reply's result as the type's result).
async fn checked(
    host: &mut Host,
    schema: &Schema,
    origin: &str,
    kind: &str,
    payload: Value,
) -> Value {
    let request = json!({"id": "x", "type": kind, "origin": origin, "payload": payload});
    schema.assert_valid("Request", &request);
    let reply = host.call_as(origin, kind, payload).await;
    if reply["ok"] == true {
        schema.assert_valid("OkReply", &reply);
        let name = schema.def("ResultByType")["properties"][kind]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("no result schema for {kind}"))
            .trim_start_matches("#/$defs/")
            .to_string();
        schema.assert_valid(&name, &reply["result"]);
    } else {
        schema.assert_valid("ErrorReply", &reply);
    }
    reply
}

async fn site_ok(host: &mut Host, schema: &Schema, kind: &str, payload: Value) -> Value {
    let reply = checked(host, schema, own(), kind, payload).await;
    assert_eq!(reply["ok"], true, "{kind}: {reply}");
    reply["result"].clone()
}

fn code_of(reply: &Value) -> &str {
    assert_eq!(reply["ok"], false, "should fail: {reply}");
    reply["error"]["code"].as_str().unwrap()
}

/// create_session (ollama, kept on disconnect) + attach as `origin`.
async fn open_as(host: &mut Host, origin: &str) -> String {
    let created = host
        .call_as(
            origin,
            "create_session",
            json!({"provider": "ollama", "autoEndOnDisconnect": false}),
        )
        .await;
    assert_eq!(created["ok"], true, "{created}");
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    let attached = host
        .call_as(origin, "attach", json!({"sessionId": id}))
        .await;
    assert_eq!(attached["ok"], true, "{attached}");
    id
}

fn grant_input(origin: &str, access: &str) -> Value {
    json!({"site": {"origin": origin, "access": access, "providers": ["ollama"], "folders": [],
                    "anyModel": false, "embedders": []}})
}

/// A page the user never approved gets SITE_NOT_APPROVED through the host,
/// for creating a session and for naming another page's session, and
/// nothing is made.
#[tokio::test]
async fn a_web_origin_without_a_grant_gets_site_not_approved() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let theirs = open_session(&mut host).await;
    let stranger = "https://stranger.example";
    let reply = host
        .call_as(stranger, "create_session", json!({"provider": "ollama"}))
        .await;
    assert_eq!(code_of(&reply), "SITE_NOT_APPROVED", "{reply}");
    for (kind, payload) in [
        ("get_session", json!({"sessionId": theirs})),
        ("get_history", json!({"sessionId": theirs})),
        ("send_text", json!({"sessionId": theirs, "text": "hi"})),
        ("list_assets", json!({"sessionId": theirs})),
    ] {
        let reply = host.call_as(stranger, kind, payload).await;
        assert_eq!(code_of(&reply), "SITE_NOT_APPROVED", "{kind}: {reply}");
    }
    let all = env
        .session()
        .await
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(all.len(), 1, "only the approved page's session: {all:?}");
    assert_eq!(all[0].origin, ORIGIN);
}

/// The site requests are the extension's own: a page (even an approved one),
/// another extension or a look-alike gets SETTINGS_ACCESS_DENIED and
/// nothing changes, its sessions included.
#[tokio::test]
async fn site_requests_from_anything_but_the_extension_are_denied() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let schema = Schema::native_messaging();
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    let before = site_ok(&mut host, &schema, "list_sites", json!({})).await;

    for origin in [
        ORIGIN,
        "https://evil.example",
        "chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "https://ekeclpceddngodnkncegoclkkeknaacb",
    ] {
        for (kind, payload) in [
            ("list_sites", json!({})),
            ("grant_site", grant_input("https://evil.example", "full")),
            ("block_site", json!({"origin": ORIGIN})),
            ("revoke_site", json!({"origin": ORIGIN})),
            ("end_site_sessions", json!({"origin": ORIGIN})),
            ("list_sessions", json!({})),
        ] {
            let reply = checked(&mut host, &schema, origin, kind, payload).await;
            assert_eq!(
                code_of(&reply),
                "SETTINGS_ACCESS_DENIED",
                "{kind} from {origin}"
            );
            assert_eq!(reply["error"]["details"]["origin"], origin);
        }
    }
    let after = site_ok(&mut host, &schema, "list_sites", json!({})).await;
    assert_eq!(after, before, "no grant changed");
    let snapshot = host.ok("get_session", json!({"sessionId": id})).await;
    assert_eq!(
        snapshot["snapshot"]["status"], "idle",
        "the session lives on"
    );
}

/// From the extension's own pages: list, grant, end, revoke and block, each
/// as the services keep it; revoking and ending end the origin's sessions
/// (the attached host sees `ended`, a running turn is cancelled); the
/// services' codes pass through.
#[tokio::test]
async fn the_extension_grants_ends_revokes_and_blocks_sites() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let schema = Schema::native_messaging();
    let mut host = Host::spawn(&env, EXTENSION);
    let b = "https://b.example";

    // The test page's grant, as the harness made it.
    let listed = site_ok(&mut host, &schema, "list_sites", json!({})).await;
    let sites = listed["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{listed}");
    assert_eq!(sites[0]["origin"], ORIGIN);
    assert_eq!(sites[0]["access"], "full");

    // Not approved yet; then granted.
    let reply = host
        .call_as(b, "create_session", json!({"provider": "ollama"}))
        .await;
    assert_eq!(code_of(&reply), "SITE_NOT_APPROVED");
    let granted =
        site_ok(&mut host, &schema, "grant_site", grant_input(b, "edit")).await["site"].clone();
    assert_eq!(granted["origin"], b);
    assert_eq!(granted["access"], "edit");
    assert_eq!(granted["providers"], json!(["ollama"]));
    assert_eq!(granted["blocked"], false);
    assert!(granted["grantedAt"].as_u64().unwrap() > 0, "{granted}");
    let stored = env
        .session()
        .await
        .list_sites(pb::ListSitesRequest {})
        .await
        .unwrap()
        .into_inner()
        .sites;
    let stored_b = stored.iter().find(|s| s.origin == b).expect("b is stored");
    assert_eq!(stored_b.access, pb::AccessLevel::Edit as i32);
    // A provider outside the grant is the services' refusal, passed on.
    let reply = host
        .call_as(b, "create_session", json!({"provider": "codex"}))
        .await;
    assert_eq!(code_of(&reply), "PROVIDER_NOT_GRANTED", "{reply}");

    // list_sessions: every origin's threads, no workspace path.
    let mine = open_session(&mut host).await;
    let first = open_as(&mut host, b).await;
    let sessions = site_ok(&mut host, &schema, "list_sessions", json!({})).await;
    let sessions = sessions["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let of_b = sessions
        .iter()
        .find(|s| s["sessionId"] == first.as_str())
        .unwrap();
    assert_eq!(of_b["origin"], b);
    assert_eq!(of_b["provider"], "ollama");
    assert_eq!(of_b["status"], "idle");
    assert_eq!(of_b["attachedRoutes"], 1);
    assert!(of_b.get("workspacePath").is_none(), "{of_b}");

    // End: b's session ends (the host sees it), its grant stays.
    let ended = site_ok(
        &mut host,
        &schema,
        "end_site_sessions",
        json!({"origin": b}),
    )
    .await;
    assert_eq!(ended["endedSessionIds"], json!([first]));
    let events = host.events_until(&first, |e| e["type"] == "ended").await;
    assert_eq!(events.last().unwrap()["event"]["reason"], "requested");
    let second = open_as(&mut host, b).await;

    // Revoke with a turn running: the turn is cancelled, the session ends,
    // the grant is gone and b is refused again. (Full access, which replaces
    // the grant, so the stub agent may write its marker outside the
    // workspace.)
    let full = site_ok(&mut host, &schema, "grant_site", grant_input(b, "full")).await;
    assert_eq!(full["site"]["access"], "full");
    let marker = env.root.path().join("turn-started");
    let sent = host
        .call_as(
            b,
            "send_text",
            json!({"sessionId": second, "text": format!("@@wait {}", marker.display())}),
        )
        .await;
    assert_eq!(sent["ok"], true, "{sent}");
    wait_until("the turn runs", || marker.exists()).await;
    let revoked = site_ok(&mut host, &schema, "revoke_site", json!({"origin": b})).await;
    assert_eq!(revoked["endedSessionIds"], json!([second]));
    let events = host.events_until(&second, |e| e["type"] == "ended").await;
    let outcomes: Vec<&Value> = events
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e["type"] == "operation_finished")
        .map(|e| &e["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("cancelled")], "{events:?}");
    assert_eq!(events.last().unwrap()["event"]["reason"], "requested");
    let listed = site_ok(&mut host, &schema, "list_sites", json!({})).await;
    assert!(
        listed["sites"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["origin"] != b),
        "{listed}"
    );
    let reply = host
        .call_as(b, "get_session", json!({"sessionId": second}))
        .await;
    assert_eq!(code_of(&reply), "SITE_NOT_APPROVED");
    // Idempotent: nothing left to end.
    let again = site_ok(&mut host, &schema, "revoke_site", json!({"origin": b})).await;
    assert_eq!(again["endedSessionIds"], json!([]));

    // Block: remembered, no access, refused.
    let c = "https://c.example";
    let blocked =
        site_ok(&mut host, &schema, "block_site", json!({"origin": c})).await["site"].clone();
    assert_eq!(blocked["blocked"], true);
    assert_eq!(blocked["access"], Value::Null);
    let reply = host
        .call_as(c, "create_session", json!({"provider": "ollama"}))
        .await;
    assert_eq!(code_of(&reply), "SITE_NOT_APPROVED");

    // The services' own refusals pass through; the host's is INVALID_INPUT.
    let reply = checked(
        &mut host,
        &schema,
        own(),
        "grant_site",
        grant_input("http://plain.example", "edit"),
    )
    .await;
    assert_eq!(code_of(&reply), "ORIGIN_NOT_SECURE", "{reply}");
    let mut root = grant_input("https://d.example", "edit");
    root["site"]["folders"] = json!([{"path": "/", "once": false}]);
    let reply = checked(&mut host, &schema, own(), "grant_site", root).await;
    assert_eq!(code_of(&reply), "FOLDER_NOT_GRANTABLE", "{reply}");
    let reply = host
        .call_as(
            own(),
            "grant_site",
            grant_input("https://d.example", "admin"),
        )
        .await;
    assert_eq!(code_of(&reply), "INVALID_INPUT", "{reply}");

    // The test page was never touched.
    let snapshot = host.ok("get_session", json!({"sessionId": mine})).await;
    assert_eq!(snapshot["snapshot"]["status"], "idle");
}
