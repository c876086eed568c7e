//! Load as the extension will make it: one native host, 50 sessions streaming
//! at once, each with page tool calls answered the moment they arrive, through
//! the real services. Short by default (CI); `PEDELEC_LOAD=full` runs the full
//! size (50 sessions x 10,000 deltas x 20 tool calls).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pedelec_common::ServiceName;
use pedelec_tests::*;
use serde_json::{Value, json};

struct Size {
    sessions: usize,
    deltas: usize,
    tool_calls: usize,
}

fn size() -> Size {
    if std::env::var("PEDELEC_LOAD").as_deref() == Ok("full") {
        Size {
            sessions: 50,
            deltas: 10_000,
            tool_calls: 20,
        }
    } else {
        Size {
            sessions: 50,
            deltas: 1_000,
            tool_calls: 5,
        }
    }
}

async fn pids(env: &TestEnv, launcher: &Launcher, host: &Host) -> Vec<(String, u32)> {
    let mut out = vec![("pedelecd".to_string(), launcher.pid())];
    for service in ServiceName::SUPERVISED {
        out.push((
            service.as_str().to_string(),
            env.service_status(service).await.pid,
        ));
    }
    out.push(("native-host".into(), host.child.id().unwrap()));
    out
}

/// The last lines of every log of the run (services, launcher, host), for a failure.
fn log_tails(env: &TestEnv) -> String {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(env.runtime_dir().join("logs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.push(env.root.path().join("pedelecd.stderr"));
    files.push(env.root.path().join("host.stderr"));
    let mut out = String::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {} (last 30 lines)\n", file.display()));
        for line in &lines[lines.len().saturating_sub(30)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// What one session's route saw.
#[derive(Default)]
struct Seen {
    events: Vec<Value>,
    finished: Option<Value>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_stream_and_call_tools_without_loss() {
    let size = size();
    let mut env = TestEnv::new();
    // Fifty turns of one origin at once: more than a page may run.
    env.lift_session_limits();
    let launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);

    let mut sessions = Vec::new();
    for _ in 0..size.sessions {
        sessions.push(open_session(&mut host).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let processes = pids(&env, &launcher, &host).await;
    let idle: Vec<u64> = processes.iter().map(|(_, pid)| rss_kib(*pid)).collect();

    // Every turn starts at once; replies and events are read as they come,
    // and each tool request is answered the moment it arrives.
    let text = format!("@@load {} {}", size.deltas, size.tool_calls);
    for (i, id) in sessions.iter().enumerate() {
        host.send(
            &json!({"id": format!("send-{i}"), "type": "send_text", "origin": ORIGIN,
                          "payload": {"sessionId": id, "text": text}}),
        )
        .await;
    }
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut peak = vec![0u64; processes.len()];
    let mut answered = 0;
    let started = Instant::now();
    let mut last_sample = Instant::now();
    while seen.values().filter(|s| s.finished.is_some()).count() < size.sessions {
        let r = host.recv().await;
        let v = r.value;
        if v.get("ok").is_some() {
            if v["ok"] != true {
                panic!(
                    "a request failed under load: {v}\nservices: {:?}\n{}",
                    env.supervisor_status().await,
                    log_tails(&env)
                );
            }
            continue;
        }
        assert_eq!(v["type"], "event", "unexpected message {v}");
        let session = v["sessionId"].as_str().unwrap().to_string();
        let event = &v["event"];
        if event["type"] == "tool_request" {
            answered += 1;
            host.send(&json!({"id": format!("tool-{answered}"), "type": "submit_tool_result",
                              "origin": ORIGIN, "payload": {"sessionId": session,
                              "toolRequestId": event["toolRequestId"], "result": {"ok": answered}}}))
                .await;
        }
        let entry = seen.entry(session).or_default();
        if event["type"] == "operation_finished" {
            entry.finished = Some(event.clone());
        }
        entry.events.push(v);
        if last_sample.elapsed() > Duration::from_millis(200) {
            last_sample = Instant::now();
            for (p, (_, pid)) in peak.iter_mut().zip(&processes) {
                *p = (*p).max(rss_kib(*pid));
            }
        }
    }
    let took = started.elapsed();

    let want_text = expected_deltas(size.deltas);
    for (id, s) in &seen {
        let events = &s.events;
        assert_consecutive(events);
        assert_eq!(
            frame_delta_text(events),
            want_text,
            "{id}: deltas lost, doubled or out of order"
        );
        let finished = s.finished.as_ref().unwrap();
        assert_eq!(finished["outcome"], "completed", "{id}: {finished}");
        // Every request the page answered is cleared `resolved` before any
        // output the agent printed after the answer: delta `d<j>` comes after
        // tool call j / per returned (output printed before a call may still
        // show after its request, which travels another way).
        let per = size.deltas / size.tool_calls;
        let (mut requests, mut cleared) = (0, 0);
        for e in events.iter().map(|e| &e["event"]) {
            match e["type"].as_str().unwrap() {
                "tool_request" => requests += 1,
                "tool_request_cleared" => {
                    assert_eq!(e["reason"], "resolved", "{id}: {e}");
                    cleared += 1;
                }
                "chat_delta" => {
                    // Deltas that waited for SessionService travel joined.
                    for word in e["text"].as_str().unwrap().split_whitespace() {
                        let j: usize = word[1..].parse().unwrap();
                        assert!(
                            cleared >= j / per,
                            "{id}: d{j} shown while an answered request still shows pending"
                        );
                    }
                }
                "usage" | "operation_finished" => assert_eq!(cleared, requests, "{id}: {e}"),
                _ => {}
            }
        }
        assert_eq!(requests, size.tool_calls, "{id}");
    }
    for id in &sessions {
        let snapshot = host.ok("get_session", json!({"sessionId": id})).await;
        assert_eq!(snapshot["snapshot"]["status"], "idle", "{id}");
        assert_eq!(snapshot["snapshot"]["pendingToolRequest"], Value::Null);
    }

    // Memory after the sessions end: back near idle within a few seconds.
    for id in &sessions {
        host.ok("end", json!({"sessionId": id})).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<u64> = processes.iter().map(|(_, pid)| rss_kib(*pid)).collect();
    let mib = |kib: u64| kib as f64 / 1024.0;
    eprintln!(
        "load: {} sessions x {} deltas x {} tool calls in {took:?}",
        size.sessions, size.deltas, size.tool_calls
    );
    for (i, (name, _)) in processes.iter().enumerate() {
        eprintln!(
            "load: {name:<12} idle {:6.1} MiB  peak {:6.1} MiB  3 s after {:6.1} MiB",
            mib(idle[i]),
            mib(peak[i]),
            mib(after[i])
        );
    }
    for (i, (name, _)) in processes.iter().enumerate() {
        // 1.5x idle, plus 2 MiB for pages the allocator keeps in use
        // (thread stacks touched, the ended threads' last events).
        assert!(
            after[i] <= idle[i] * 3 / 2 + 2048,
            "{name} kept its memory: idle {} KiB, after {} KiB",
            idle[i],
            after[i]
        );
    }
}
