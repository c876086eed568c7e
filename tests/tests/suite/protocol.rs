//! The native-messaging contract over the real host binary: every message the
//! host writes conforms to `protocol/native-messaging.schema.json` (the file
//! the SDK and the extension are generated from), and each protocol-2
//! addition behaves as docs/native-messaging.md says.

use std::collections::BTreeSet;

use pedelec_proto::v1 as pb;
use pedelec_tests::schema::Schema;
use pedelec_tests::*;
use serde_json::{Value, json};

/// A host whose every request and reply is checked against the schema.
struct Checked {
    host: Host,
    schema: Schema,
}

impl Checked {
    async fn new(env: &TestEnv) -> Checked {
        Checked {
            host: Host::spawn(env, EXTENSION),
            schema: Schema::native_messaging(),
        }
    }

    /// Sends a request (checked as a `Request`) and returns the whole reply,
    /// checked as an `OkReply` with the type's result or an `ErrorReply`.
    async fn call(&mut self, kind: &str, payload: Value) -> Value {
        self.host.next_id += 1;
        let id = json!(format!("p{}", self.host.next_id));
        let request = json!({"id": id, "type": kind, "origin": ORIGIN, "payload": payload});
        self.schema.assert_valid("Request", &request);
        self.host.send(&request).await;
        let reply = self.host.reply_to(&id).await.value;
        if reply["ok"] == true {
            self.schema.assert_valid("OkReply", &reply);
            let result_schema = &self.schema.def("ResultByType")["properties"][kind];
            assert!(result_schema.is_object(), "no result schema for {kind}");
            let name = result_schema["$ref"]
                .as_str()
                .unwrap()
                .trim_start_matches("#/$defs/");
            self.schema.assert_valid(name, &reply["result"]);
        } else {
            self.schema.assert_valid("ErrorReply", &reply);
        }
        reply
    }

    /// A request the schema refuses too: the host answers it with an error.
    async fn refused(&mut self, kind: &str, payload: Value) -> Value {
        self.host.next_id += 1;
        let id = json!(format!("p{}", self.host.next_id));
        let request = json!({"id": id, "type": kind, "origin": ORIGIN, "payload": payload});
        assert!(
            !self.schema.errors("Request", &request).is_empty(),
            "the schema accepts {request}"
        );
        self.host.send(&request).await;
        let reply = self.host.reply_to(&id).await.value;
        self.schema.assert_valid("ErrorReply", &reply);
        reply["error"].clone()
    }

    async fn ok(&mut self, kind: &str, payload: Value) -> Value {
        let reply = self.call(kind, payload).await;
        assert_eq!(reply["ok"], true, "{kind} failed: {reply}");
        reply["result"].clone()
    }

    async fn err(&mut self, kind: &str, payload: Value) -> Value {
        let reply = self.call(kind, payload).await;
        assert_eq!(reply["ok"], false, "{kind} should fail: {reply}");
        reply["error"].clone()
    }

    /// Events of `session` until one `done` accepts, each checked as an
    /// `EventFrame`.
    async fn events_until(&mut self, session: &str, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let events = self.host.events_until(session, done).await;
        for e in &events {
            self.schema.assert_valid("EventFrame", e);
        }
        events
    }

    async fn turn(&mut self, session: &str, text: &str) -> (String, Vec<Value>) {
        let op = self
            .ok("send_text", json!({"sessionId": session, "text": text}))
            .await["operationId"]
            .as_str()
            .unwrap()
            .to_string();
        let events = self.events_until(session, finished).await;
        (op, events)
    }
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e["type"] == kind)
        .collect()
}

async fn create(c: &mut Checked, extra: Value) -> String {
    let mut payload =
        json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false});
    for (k, v) in extra.as_object().unwrap() {
        payload[k] = v.clone();
    }
    let created = c.ok("create_session", payload).await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    c.ok("attach", json!({"sessionId": id})).await;
    id
}

/// Every request type, reply and event kind the host produces, checked against
/// the schema, with the protocol-2 additions' semantics along the way.
#[tokio::test]
async fn every_host_message_matches_the_schema() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut c = Checked::new(&env).await;

    let hello = c
        .ok(
            "hello",
            json!({"protocolVersion": 2, "client": "protocol-test"}),
        )
        .await;
    assert_eq!(hello["protocolVersion"], 2);
    // The account the agents run as, for the approval prompt's full-access line.
    assert_eq!(hello["userName"], whoami(), "{hello}");
    assert!(
        hello["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("recent_operations"))
    );
    c.ok("ping", json!({})).await;
    c.ok("list_providers", json!({})).await;
    c.ok("get_settings", json!({})).await;

    let id = create(&mut c, json!({})).await;
    // More events than an ended thread keeps, for the replay gap at the end.
    // Paced, so each delta is its own event (deltas that wait for
    // SessionService travel joined).
    let (_, mut seen) = c.turn(&id, "@@paced 200 10").await;

    // Two messages in one turn: their deltas and chats pair up by messageId.
    let (op, events) = c.turn(&id, "@@two").await;
    let deltas = of_kind(&events, "chat_delta");
    let chats = of_kind(&events, "chat");
    assert_eq!(deltas.len(), 3);
    assert_eq!(chats.len(), 2);
    assert_eq!(deltas[0]["messageId"], deltas[1]["messageId"]);
    assert_eq!(deltas[0]["messageId"], chats[0]["messageId"]);
    assert_eq!(deltas[2]["messageId"], chats[1]["messageId"]);
    assert_ne!(chats[0]["messageId"], chats[1]["messageId"]);
    assert!(deltas.iter().all(|d| d["operationId"] == op.as_str()));
    seen.extend(events);

    // A tool call: the request says how long the agent waits.
    let send = c
        .ok("send_text", json!({"sessionId": id, "text": "@@tool"}))
        .await;
    let waiting = c.events_until(&id, |e| e["type"] == "tool_request").await;
    let request = waiting.last().unwrap().clone();
    let at = request["at"].as_u64().unwrap();
    let body = &request["event"];
    assert_eq!(body["operationId"], send["operationId"]);
    assert_eq!(body["timeoutMs"], 60_000, "the default tool timeout");
    let deadline = body["deadlineAt"].as_u64().unwrap();
    assert!(
        deadline > at && deadline <= at + 60_000,
        "deadline {deadline} vs at {at}"
    );
    let snapshot = c.ok("get_session", json!({"sessionId": id})).await["snapshot"].clone();
    assert_eq!(snapshot["pendingToolRequest"]["deadlineAt"], deadline);
    let tool_request_id = body["toolRequestId"].as_str().unwrap().to_string();
    c.ok(
        "submit_tool_result",
        json!({"sessionId": id, "toolRequestId": tool_request_id, "result": {"title": "Home"}}),
    )
    .await;
    let error = c
        .err(
            "submit_tool_result",
            json!({"sessionId": id, "toolRequestId": tool_request_id, "result": 1}),
        )
        .await;
    assert_eq!(error["code"], "TOOL_REQUEST_NOT_PENDING");
    let rest = c.events_until(&id, finished).await;
    let cleared = of_kind(&rest, "tool_request_cleared");
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0]["reason"], "resolved");
    // The history of the talk so far: every entry kind of a turn with a tool
    // call (checked against the schema by `ok`), the page's result kept.
    let history = c.ok("get_history", json!({"sessionId": id})).await;
    let entries = history["entries"].as_array().unwrap();
    let kinds: BTreeSet<&str> = entries
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for kind in [
        "operation_started",
        "user_text",
        "agent_message",
        "tool_request",
        "tool_outcome",
        "operation_finished",
    ] {
        assert!(kinds.contains(kind), "no {kind} entry in {history}");
    }
    let outcome = entries
        .iter()
        .rfind(|e| e["type"] == "tool_outcome")
        .unwrap();
    assert_eq!(outcome["toolRequestId"], tool_request_id.as_str());
    assert_eq!(outcome["result"], json!({"title": "Home"}));
    // Every event so far is covered (a status may follow operation_finished).
    assert!(history["coveredSeq"].as_u64() >= rest.last().unwrap()["seq"].as_u64());
    let page = c
        .ok(
            "get_history",
            json!({"sessionId": id, "before": entries.last().unwrap()["id"], "limit": 2}),
        )
        .await;
    assert_eq!(page["hasMore"], true);
    assert_eq!(page["entries"].as_array().unwrap().len(), 2);
    let over = c
        .err("get_history", json!({"sessionId": id, "limit": 1001}))
        .await;
    assert_eq!(over["code"], "INVALID_INPUT");

    seen.extend(waiting);
    seen.extend(rest);

    // A failed turn: its error event names the operation.
    let (op, events) = c.turn(&id, "@@fail").await;
    let errors = of_kind(&events, "error");
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(errors[0]["operationId"], op.as_str());
    assert_eq!(errors[0]["source"], "provider");
    seen.extend(events);

    let prepared = c.ok("prepare", json!({"sessionId": id})).await;
    seen.extend(c.events_until(&id, finished).await);
    let cancelled = c.ok("cancel", json!({"sessionId": id})).await;
    assert_eq!(cancelled["operationId"], Value::Null);

    // Recent operations: every finished one, oldest first, the last = lastOperation.
    let snapshot = c.ok("get_session", json!({"sessionId": id})).await["snapshot"].clone();
    let recent = snapshot["recentOperations"].as_array().unwrap();
    assert_eq!(recent.len(), 5);
    assert_eq!(recent[3]["outcome"], "failed");
    assert_eq!(recent[4]["operationId"], prepared["operationId"]);
    assert_eq!(recent[4], snapshot["lastOperation"]);
    assert_eq!(
        snapshot["workspacePath"],
        Value::Null,
        "a managed workspace's path is not shown to the page"
    );

    // Assets: a ticket, a listing, and a coded error reply.
    c.ok(
        "create_upload_ticket",
        json!({"sessionId": id, "name": "a.txt", "sizeBytes": 3}),
    )
    .await;
    c.ok("list_assets", json!({"sessionId": id})).await;
    let missing = c
        .err(
            "create_download_ticket",
            json!({"sessionId": id, "path": "/missing.txt"}),
        )
        .await;
    assert_eq!(missing["code"], "ASSET_NOT_FOUND");

    // End with a reason, reactivate, end again.
    c.ok("end", json!({"sessionId": id, "reason": "auto_end"}))
        .await;
    let ended = c.events_until(&id, |e| e["type"] == "ended").await;
    assert_eq!(of_kind(&ended, "ended")[0]["reason"], "auto_end");
    seen.extend(ended);
    c.ok("reactivate", json!({"sessionId": id})).await;
    c.ok("end", json!({"sessionId": id})).await;
    let ended = c.events_until(&id, |e| e["type"] == "ended").await;
    assert_eq!(of_kind(&ended, "ended")[0]["reason"], "requested");
    seen.extend(ended);
    let bad = c
        .refused("end", json!({"sessionId": id, "reason": "bored"}))
        .await;
    assert_eq!(bad["code"], "INVALID_INPUT");

    // A re-attach behind what is held: the reply and a snapshot event say so.
    c.ok("detach", json!({"sessionId": id})).await;
    let reattached = c
        .ok("attach", json!({"sessionId": id, "afterSeq": 1}))
        .await;
    assert_eq!(reattached["snapshot"]["replayGap"], true);
    let gap = c.events_until(&id, |e| e["type"] == "snapshot").await;
    let gap = gap.last().unwrap();
    assert_eq!(gap["event"]["snapshot"]["replayGap"], true);
    assert_eq!(gap["seq"], gap["event"]["snapshot"]["lastSeq"]);
    seen.push(gap.clone());

    let kinds: BTreeSet<&str> = seen
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap())
        .collect();
    let all = [
        "snapshot",
        "status",
        "chat_delta",
        "chat",
        "tool_request",
        "tool_request_cleared",
        "usage",
        "operation_started",
        "operation_finished",
        "error",
        "ended",
    ];
    assert_eq!(kinds, all.into_iter().collect::<BTreeSet<_>>());
}

#[tokio::test]
async fn hello_refuses_another_protocol_version() {
    let env = TestEnv::new();
    let mut c = Checked::new(&env).await;
    let error = c.refused("hello", json!({"protocolVersion": 1})).await;
    assert_eq!(error["code"], "PROTOCOL_MISMATCH");
    assert_eq!(
        error["details"],
        json!({"hostProtocolVersion": 2, "clientProtocolVersion": 1})
    );
    assert!(error["message"].as_str().unwrap().contains("protocol 1"));
    let missing = c.refused("hello", json!({})).await;
    assert_eq!(missing["code"], "INVALID_INPUT");
}

/// The page sees an explicit workspace's path (it chose it), not a managed one.
#[tokio::test]
async fn only_an_explicit_workspace_path_is_shown() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut c = Checked::new(&env).await;
    let folder = env.root.path().join("app-workspace");
    std::fs::create_dir(&folder).unwrap();
    let folder = folder.canonicalize().unwrap();
    // A folder outside the page's grant is refused, the services' code
    // passed on; once the user granted it, the page may use it.
    let refused = c
        .err(
            "create_session",
            json!({"provider": "ollama", "workspace": {"path": folder.display().to_string()}}),
        )
        .await;
    assert_eq!(refused["code"], "FOLDER_NOT_GRANTED", "{refused}");
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["ollama"], &[&folder])
        .await;
    let explicit = create(
        &mut c,
        json!({"workspace": {"path": folder.display().to_string()}}),
    )
    .await;
    let managed = create(&mut c, json!({})).await;
    let explicit = c.ok("get_session", json!({"sessionId": explicit})).await;
    assert_eq!(
        explicit["snapshot"]["workspacePath"],
        json!(folder.display().to_string())
    );
    let managed = c.ok("get_session", json!({"sessionId": managed})).await;
    assert_eq!(managed["snapshot"]["workspacePath"], Value::Null);
}

/// `pedelec-cli sessions show` prints the snapshot exactly as the host sends it.
#[tokio::test]
async fn the_host_and_pedelec_cli_print_identical_snapshots() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut c = Checked::new(&env).await;
    let id = create(&mut c, json!({})).await;
    c.turn(&id, "@@two").await;
    let from_host = c.ok("get_session", json!({"sessionId": id})).await["snapshot"].clone();
    let out = env
        .command(bin_dir().join("pedelec-cli"))
        .args(["sessions", "show", &id, "--origin", ORIGIN])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let from_cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_cli, from_host);
    assert!(from_host["recentOperations"].as_array().unwrap().len() == 1);
}

/// SessionService killed mid-turn: the host says the stream failed, the
/// re-attached route learns that the interrupted operation failed with
/// CORE_RESTARTED (from the replay-gap snapshot's recent operations), and the
/// next turn works.
#[tokio::test]
async fn after_a_session_service_kill_the_reattached_route_learns_the_outcome() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut c = Checked::new(&env).await;
    let id = create(&mut c, json!({})).await;
    let op = c
        .ok(
            "send_text",
            json!({"sessionId": id, "text": "@@paced 100000 50"}),
        )
        .await["operationId"]
        .clone();
    let streaming = c.events_until(&id, |e| e["type"] == "chat_delta").await;
    let last_seq = streaming.last().unwrap()["seq"].as_u64().unwrap();

    let old = env
        .service_status(pedelec_common::ServiceName::Session)
        .await;
    signal(old.pid as i32, libc::SIGKILL);
    // The host tells the extension the stream broke (events before it are
    // still in flight and are skipped here).
    let detached = loop {
        let r = c.host.recv().await.value;
        if r["type"] == "detached" {
            break r;
        }
    };
    c.schema.assert_valid("DetachedFrame", &detached);
    assert_eq!(detached["sessionId"], id.as_str());
    assert_eq!(detached["reason"], "stream_failed");
    env.wait_service_back(pedelec_common::ServiceName::Session, old.pid)
        .await;

    let reattached = c
        .ok("attach", json!({"sessionId": id, "afterSeq": last_seq}))
        .await;
    let snapshot = &reattached["snapshot"];
    assert_eq!(snapshot["replayGap"], true, "{snapshot}");
    let gap = c.events_until(&id, |e| e["type"] == "snapshot").await;
    let from_event = &gap.last().unwrap()["event"]["snapshot"];
    for s in [snapshot, from_event] {
        let outcome = s["recentOperations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["operationId"] == op)
            .unwrap_or_else(|| panic!("{op} not in {s}"));
        assert_eq!(outcome["outcome"], "failed");
        assert_eq!(outcome["error"]["code"], "CORE_RESTARTED");
        assert_eq!(s["status"], "error");
    }
    let (_, events) = c.turn(&id, "hello").await;
    assert_eq!(
        of_kind(&events, "operation_finished")[0]["outcome"],
        "completed"
    );
}

/// `pedelec-cli settings get` masks the keys unless asked, in the same form
/// the extension's settings page gets them from the host.
#[tokio::test]
async fn pedelec_cli_masks_keys_unless_asked() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut settings = settings_with_default_models(&[("ollama", "llama3.2")]);
    settings.ollama_api_key = "ollama-secret-key-1234".into();
    settings.tavily_api_key = "tvly-secret-key-5678".into();
    env.update_settings(settings).await;
    let get = |extra: &[&str]| {
        let out = env
            .command(bin_dir().join("pedelec-cli"))
            .args(["settings", "get"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let masked = get(&[]);
    assert!(!masked.contains("secret-key"), "{masked}");
    let doc: Value = serde_json::from_str(&masked).unwrap();
    assert_eq!(
        doc["ollamaApiKey"],
        json!({"set": true, "masked": "••••1234"})
    );
    assert_eq!(
        doc["profiles"]["ollama"]["levels"]["default"]["model"],
        "llama3.2"
    );
    let shown: Value = serde_json::from_str(&get(&["--show-secrets"])).unwrap();
    assert_eq!(shown["tavilyApiKey"], "tvly-secret-key-5678");
}

/// The SDK's one list of error codes (`sdk/src/protocol/codes.ts`) names every
/// code the services and the host can send, so a page's `PedelecError.code`
/// is always a known one.
#[test]
fn the_sdk_knows_every_service_code() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/src/protocol/codes.ts");
    let ts = std::fs::read_to_string(&path).unwrap();
    let missing: Vec<&str> = pedelec_common::Code::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !ts.contains(&format!("\"{c}\"")))
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", path.display());
}

/// The login name of the account running the tests, as `id -un` says.
fn whoami() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
