//! The real native host, against the real services, fed the whole request
//! catalogue of `protocol/native-messaging.schema.json`: every request kind,
//! valid and mutated (fields dropped, retyped, added; origins forged; bytes
//! flipped or cut). Every frame must get exactly one well-formed reply (the
//! schema's `OkReply` or `ErrorReply`), every message the host writes must
//! match the schema, and neither the host nor a service may crash.
//!
//! `PROPTEST_CASES` sets the number of generated frames (default 128 for CI);
//! the long run recorded in docs/reliability.md used `PROPTEST_CASES=20000`.
//! (The in-process property tests of the frame reader and parser are in
//! native-host/tests/proptest_frames.rs.)

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use pedelec_common::ServiceName;
use pedelec_tests::schema::Schema;
use pedelec_tests::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// The request kinds of the schema's `Request`, in snake case
/// (`CreateUploadTicketRequest` -> `create_upload_ticket`).
fn catalogue(schema: &Schema) -> Vec<String> {
    schema.def("Request")["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name = r["$ref"]
                .as_str()
                .unwrap()
                .trim_start_matches("#/$defs/")
                .trim_end_matches("Request");
            let mut snake = String::new();
            for (i, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            snake
        })
        .collect()
}

/// The ingredients one generated frame is made of.
#[derive(Clone, Debug)]
struct Pick {
    kind_index: usize,
    session: u8,
    text: String,
    number: u64,
    flag: bool,
    origin: u8,
    mutation: Mutation,
}

#[derive(Clone, Debug)]
enum Mutation {
    None,
    /// Removes the n-th payload field.
    DropField(usize),
    /// Replaces the n-th payload field with this JSON.
    Retype(usize, Value),
    /// Adds an unknown field to the payload.
    Extra(String, Value),
    /// Replaces the whole payload.
    Payload(Value),
    /// Removes a top-level member (id, type, origin, payload).
    DropTop(usize),
    /// Replaces the id with a JSON value of another kind.
    Id(Value),
    /// Overwrites a byte after the id.
    Byte(prop::sample::Index, u8),
    /// Cuts the frame's text after the id.
    Cut(prop::sample::Index),
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
    ]
}

fn json_any() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => Just(Mutation::None),
        1 => (0usize..6).prop_map(Mutation::DropField),
        2 => ((0usize..6), json_any()).prop_map(|(i, v)| Mutation::Retype(i, v)),
        1 => ("[a-zA-Z]{1,10}", json_any()).prop_map(|(k, v)| Mutation::Extra(k, v)),
        1 => json_any().prop_map(Mutation::Payload),
        1 => (0usize..4).prop_map(Mutation::DropTop),
        1 => prop_oneof![Just(Value::Null), Just(json!({"a": 1})), Just(json!([1])), Just(json!(true)), Just(json!(1.5))]
            .prop_map(Mutation::Id),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Cut),
    ]
}

fn pick(kinds: usize) -> impl Strategy<Value = Pick> {
    (
        0..kinds,
        any::<u8>(),
        prop_oneof![".{0,40}", "\\PC{0,10}", Just("@@two".to_string())],
        prop_oneof![0u64..4, any::<u64>(), Just(1u64 << 53)],
        any::<bool>(),
        any::<u8>(),
        mutation(),
    )
        .prop_map(
            |(kind_index, session, text, number, flag, origin, mutation)| Pick {
                kind_index,
                session,
                text,
                number,
                flag,
                origin,
                mutation,
            },
        )
}

/// What the fuzzer can name: the real session, an unknown one, arbitrary text.
struct World {
    session: String,
    protocol_version: Value,
    ext_origin: String,
}

impl World {
    fn session_id(&self, p: &Pick) -> Value {
        match p.session % 4 {
            0 | 1 => json!(self.session),
            2 => json!("thr_00000000000000000000000000000000"),
            _ => json!(p.text),
        }
    }

    fn origin(&self, p: &Pick) -> Value {
        match p.origin % 5 {
            0..=2 => json!(ORIGIN),
            3 => json!(self.ext_origin),
            _ => json!(p.text),
        }
    }

    /// The payload a page (or the extension's settings page) would send.
    fn payload(&self, kind: &str, p: &Pick) -> Value {
        let sid = self.session_id(p);
        let n = p.number;
        let s = p.text.as_str();
        match kind {
            "ping" | "list_providers" | "get_settings" | "get_full_settings" | "list_sites"
            | "list_sessions" => json!({}),
            "hello" => {
                json!({"protocolVersion": if p.flag { self.protocol_version.clone() } else { json!(n) }, "client": s})
            }
            "create_session" => json!({
                "provider": if p.flag { "ollama" } else { s },
                "effortLevel": "default",
                "skills": {"guidance": s, "tools": [
                    {"name": "get_page", "description": s, "argsSchema": {"type": "object"}}]},
                "autoEndOnDisconnect": p.flag,
            }),
            "attach" => json!({"sessionId": sid, "afterSeq": n % 1000, "routeId": s}),
            "send_text" => json!({"sessionId": sid, "text": s}),
            "get_history" => json!({"sessionId": sid, "before": n % 64, "limit": n % 1001}),
            "end" => {
                json!({"sessionId": sid, "reason": if p.flag { "requested" } else { "auto_end" }})
            }
            "submit_tool_result" => {
                if p.flag {
                    json!({"sessionId": sid, "toolRequestId": s, "result": {"v": s}})
                } else {
                    json!({"sessionId": sid, "toolRequestId": s,
                           "error": {"code": "TOOL_HANDLER_ERROR", "message": s}})
                }
            }
            "create_upload_ticket" => json!({"sessionId": sid, "name": s, "sizeBytes": n,
                                             "contentType": "text/plain", "targetPath": format!("/{s}")}),
            "create_download_ticket" => json!({"sessionId": sid, "path": format!("/{s}")}),
            "update_settings" => json!({
                "ollamaEndpoint": if p.flag { "http://127.0.0.1:11434".to_string() } else { s.to_string() },
                "tavilyApiKey": {"action": "keep"},
            }),
            // Another site than the one whose session the fuzzer uses, or
            // arbitrary text: revoking ORIGIN would end that session.
            "grant_site" => json!({"site": {
                "origin": if p.flag { "https://fuzz.example" } else { s },
                "access": (["tools", "edit", "full", s])[(n % 4) as usize],
                "providers": ["ollama"], "folders": [], "anyModel": p.flag, "embedders": [],
            }}),
            "block_site" | "revoke_site" | "end_site_sessions" => {
                json!({"origin": if p.flag { "https://fuzz.example" } else { s }})
            }
            _ => json!({"sessionId": sid}),
        }
    }

    /// The frame's bytes, and the ids its reply may carry: its own, the
    /// mutated one, or null when the mutation may have made it unreadable.
    fn frame(&self, kinds: &[String], p: &Pick, id: &str) -> (Vec<u8>, Vec<Value>) {
        let kind = kinds[p.kind_index].as_str();
        let mut payload = self.payload(kind, p);
        let fields = |payload: &Value| -> Vec<String> {
            payload
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        match &p.mutation {
            Mutation::DropField(i) => {
                let keys = fields(&payload);
                if !keys.is_empty() {
                    payload
                        .as_object_mut()
                        .unwrap()
                        .remove(&keys[i % keys.len()]);
                }
            }
            Mutation::Retype(i, v) => {
                let keys = fields(&payload);
                if !keys.is_empty() {
                    payload[&keys[i % keys.len()]] = v.clone();
                }
            }
            Mutation::Extra(k, v) => payload[k] = v.clone(),
            Mutation::Payload(v) => payload = v.clone(),
            _ => {}
        }
        // Written by hand so the id comes first: byte mutations land after it.
        let mut top: Vec<(&str, Value)> = vec![
            ("id", json!(id)),
            ("type", json!(kind)),
            ("origin", self.origin(p)),
            ("payload", payload),
        ];
        let mut reply_ids = vec![json!(id)];
        match &p.mutation {
            Mutation::DropTop(i) => {
                top.remove(*i);
                reply_ids.push(Value::Null);
            }
            Mutation::Id(v) => {
                top[0].1 = v.clone();
                reply_ids = vec![v.clone(), Value::Null];
            }
            Mutation::Byte(..) | Mutation::Cut(..) => reply_ids.push(Value::Null),
            _ => {}
        }
        let mut text = String::from("{");
        for (i, (k, v)) in top.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!("{}:{}", json!(k), v));
        }
        text.push('}');
        let mut bytes = text.into_bytes();
        let after_id = format!("{{\"id\":{}", json!(id)).len().min(bytes.len());
        match &p.mutation {
            Mutation::Byte(at, b) if bytes.len() > after_id => {
                let i = after_id + at.index(bytes.len() - after_id);
                bytes[i] = *b;
            }
            Mutation::Cut(at) => {
                let i = after_id + at.index(bytes.len() - after_id + 1);
                bytes.truncate(i);
            }
            _ => {}
        }
        (bytes, reply_ids)
    }
}

/// Per request kind: frames sent, and the replies by outcome (`ok` or a code).
type Tally = BTreeMap<String, BTreeMap<String, usize>>;

/// Sends one frame and reads up to its reply, checking every message the
/// host writes meanwhile against the schema. Returns the reply's outcome.
async fn exchange(
    host: &mut Host,
    schema: &Schema,
    bytes: &[u8],
    reply_ids: &[Value],
) -> Result<String, String> {
    host.send_raw(&frame(bytes)).await;
    loop {
        let got = host.recv().await;
        let errors = schema.errors("HostMessage", &got.value);
        if !errors.is_empty() {
            return Err(format!(
                "ill-formed message {}: {errors:?}\nfor frame {}",
                got.text,
                String::from_utf8_lossy(bytes)
            ));
        }
        let is_reply = got.value.get("ok").is_some();
        if !is_reply {
            continue;
        }
        if !reply_ids.contains(&got.value["id"]) {
            return Err(format!(
                "a reply to no frame in flight: {}\nwhile waiting for one of {reply_ids:?} (frame {})",
                got.text,
                String::from_utf8_lossy(bytes)
            ));
        }
        return Ok(if got.value["ok"] == true {
            "ok".to_string()
        } else {
            got.value["error"]["code"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        });
    }
}

#[test]
fn the_host_answers_every_request_kind_valid_or_mutated_and_never_crashes() {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = Schema::native_messaging();
    let kinds = catalogue(&schema);
    assert_eq!(kinds.len(), 26, "the catalogue changed: {kinds:?}");
    let mut env = TestEnv::new();
    let (launcher, host, session) = rt.block_on(async {
        let launcher = services(&mut env).await;
        let mut host = Host::spawn(&env, EXTENSION);
        let session = open_session(&mut host).await;
        (launcher, host, session)
    });
    let world = World {
        session,
        protocol_version: schema.def("ProtocolVersion")["const"].clone(),
        ext_origin: EXTENSION.trim_end_matches('/').to_string(),
    };
    let host = RefCell::new(host);
    let tally = RefCell::new(Tally::new());
    let next = RefCell::new(0u64);
    let started = Instant::now();

    // First each kind once as the schema describes it, so every kind is
    // exercised valid whatever the generator draws.
    for index in 0..kinds.len() {
        let p = Pick {
            kind_index: index,
            session: 0,
            text: "hello".into(),
            number: 1,
            flag: true,
            // The extension-only kinds from the extension's own origin.
            origin: if kinds[index].contains("settings")
                || kinds[index].contains("site")
                || kinds[index] == "list_sessions"
            {
                3
            } else {
                0
            },
            mutation: Mutation::None,
        };
        let id = format!("v{index}");
        let (bytes, reply_ids) = world.frame(&kinds, &p, &id);
        let request: Value = serde_json::from_slice(&bytes).unwrap();
        schema.assert_valid("Request", &request);
        let outcome = rt
            .block_on(exchange(
                &mut host.borrow_mut(),
                &schema,
                &bytes,
                &reply_ids,
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        *tally
            .borrow_mut()
            .entry(kinds[index].clone())
            .or_default()
            .entry(format!("valid:{outcome}"))
            .or_default() += 1;
    }

    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&pick(kinds.len()), |p| {
        let id = {
            let mut n = next.borrow_mut();
            *n += 1;
            format!("f{n}")
        };
        let (bytes, reply_ids) = world.frame(&kinds, &p, &id);
        let outcome = rt
            .block_on(exchange(
                &mut host.borrow_mut(),
                &schema,
                &bytes,
                &reply_ids,
            ))
            .map_err(TestCaseError::fail)?;
        let valid = serde_json::from_slice::<Value>(&bytes)
            .map(|v| schema.errors("Request", &v).is_empty())
            .unwrap_or(false);
        *tally
            .borrow_mut()
            .entry(kinds[p.kind_index].clone())
            .or_default()
            .entry(format!(
                "{}:{outcome}",
                if valid { "valid" } else { "invalid" }
            ))
            .or_default() += 1;
        Ok(())
    });
    let took = started.elapsed();
    eprintln!(
        "host fuzz: {cases} generated frames + {} valid ones in {took:?}",
        kinds.len()
    );
    for (kind, outcomes) in tally.borrow().iter() {
        eprintln!("host fuzz: {kind:<22} {outcomes:?}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    // Still alive, and still serving: nothing crashed.
    let mut host = host.into_inner();
    assert!(
        host.child.try_wait().unwrap().is_none(),
        "the host exited; stderr:\n{}",
        std::fs::read_to_string(env.root.path().join("host.stderr")).unwrap_or_default()
    );
    rt.block_on(async {
        let pong = host.call("ping", json!({})).await;
        assert_eq!(pong["ok"], true, "{pong}");
        let status = env.supervisor_status().await.unwrap();
        for s in &status.services {
            assert_eq!(s.restarts, 0, "{} restarted: {s:?}", s.name);
        }
        assert_eq!(status.services.len(), ServiceName::SUPERVISED.len());
    });
    drop(launcher);
}
