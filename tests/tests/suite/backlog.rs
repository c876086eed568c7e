//! A tool request behind a deep backlog of chat deltas: the stub agent
//! streams many deltas and then calls a page tool while the page (the
//! reader of the native host's stdout) is not reading. Once it reads, the
//! tool request must reach it after a few frames, not after every delta as
//! a frame of its own, and the deltas must still arrive whole, in order,
//! with every seq accounted for (merged frames, docs/native-messaging.md §4).

use std::sync::Arc;

use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

/// Deltas the agent streams before its tool call.
const DELTAS: usize = 20_000;

/// Like `read_frames`, but reads nothing while `paused` holds: the lagging page.
async fn gated_reader(
    mut stdout: tokio::process::ChildStdout,
    mut paused: watch::Receiver<bool>,
    tx: mpsc::UnboundedSender<Result<Received, String>>,
) {
    loop {
        while *paused.borrow_and_update() {
            if paused.changed().await.is_err() {
                return;
            }
        }
        let mut len = [0u8; 4];
        if stdout.read_exact(&mut len).await.is_err() {
            return;
        }
        let len = u32::from_le_bytes(len) as usize;
        assert!(len <= MAX_FRAME, "frame of {len} bytes");
        let mut body = vec![0; len];
        if stdout.read_exact(&mut body).await.is_err() {
            return;
        }
        let text = String::from_utf8(body).expect("UTF-8 frame");
        let value: Value = serde_json::from_str(&text).expect("JSON frame");
        assert_ne!(value["type"], "chunk", "no frame here is that large");
        if tx
            .send(Ok(Received {
                value,
                text,
                frames: 1,
            }))
            .is_err()
        {
            return;
        }
    }
}

fn spawn_gated(env: &TestEnv, paused: watch::Receiver<bool>) -> Host {
    Host::spawn_reading(env, &[EXTENSION], move |stdout, tx| {
        gated_reader(stdout, paused, tx)
    })
}

#[tokio::test]
async fn a_tool_request_behind_a_deep_delta_backlog_reaches_a_lagging_page_in_few_frames() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let (pause, paused) = watch::channel(false);
    let pause = Arc::new(pause);
    let mut host = spawn_gated(&env, paused);
    let id = open_session(&mut host).await;
    // As the extension attaches: merged deltas allowed.
    host.ok("attach", json!({"sessionId": id, "mergeDeltas": true}))
        .await;

    pause.send_replace(true);
    // The request goes out unread-reply: the reply waits in the pipe too.
    host.send(&json!({"id": "go", "type": "send_text", "origin": ORIGIN,
        "payload": {"sessionId": id, "text": format!("@@load {DELTAS} 1")}}))
        .await;
    // The agent has streamed every delta and waits on its tool call; the
    // page has read nothing since.
    let mut sessions = env.session().await;
    wait_for_status(
        &mut sessions,
        &id,
        pb::SessionStatus::WaitingToolResult,
        "the agent's tool call behind the backlog",
    )
    .await;
    pause.send_replace(false);

    let mut frames = 0usize;
    let mut events = Vec::new();
    let request = loop {
        let r = host.recv().await.value;
        frames += 1;
        if r["type"] != "event" {
            continue;
        }
        let is_request = r["event"]["type"] == "tool_request";
        events.push(r);
        if is_request {
            break events.last().unwrap()["event"].clone();
        }
    };
    // Before merged deltas: every one of the DELTAS deltas was a frame ahead
    // of the request. The count is a figure for docs/benchmarks.md.
    eprintln!("{frames} frames reached the page before the tool request");
    assert!(
        frames < DELTAS / 4,
        "{frames} frames reached the page before the tool request ({DELTAS} deltas ahead of it)"
    );
    host.ok(
        "submit_tool_result",
        json!({"sessionId": id, "toolRequestId": request["toolRequestId"], "result": {"ok": true}}),
    )
    .await;
    events.extend(host.events_until(&id, finished).await);
    let last = &events.last().unwrap()["event"];
    assert_eq!(last["outcome"], "completed", "{last}");
    // Every seq accounted for, in order: a merged frame stands for
    // firstSeq..=seq.
    let mut next = events[0]["firstSeq"]
        .as_u64()
        .unwrap_or_else(|| events[0]["seq"].as_u64().unwrap());
    let mut merged = 0;
    for e in &events {
        let seq = e["seq"].as_u64().unwrap();
        let first = e["firstSeq"].as_u64().unwrap_or(seq);
        assert_eq!(first, next, "seq gap or overlap before {e}");
        assert!(seq >= first);
        if seq > first {
            merged += 1;
            assert_eq!(e["event"]["type"], "chat_delta", "{e}");
        }
        next = seq + 1;
    }
    assert!(merged > 0, "no delta travelled merged");
    assert_eq!(frame_delta_text(&events), expected_deltas(DELTAS));
}

/// Memory comes back after a turn: once the thread is idle and its route has
/// taken every event, SessionService keeps only a small tail of them for a
/// re-attach (docs/native-messaging.md, `attach`). A re-attach within the
/// tail gets those events; one behind it gets the replay-gap snapshot, where
/// before the whole turn stayed held until the thread ended.
#[tokio::test]
async fn an_idle_thread_keeps_only_a_small_tail_once_its_route_took_everything() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    // Paced, so SessionService keeps up and each delta is its own event
    // (deltas that wait for it travel joined): many more than the tail.
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": "@@paced 1000 10"}),
    )
    .await;
    let turn = host.events_until(&id, finished).await;
    let first = turn[0]["seq"].as_u64().unwrap();
    // The route reads the finish and the idle status together: the thread is
    // idle and the route has everything once the status is here.
    let idle = host
        .events_until(&id, |e| e["type"] == "status" && e["status"] == "idle")
        .await;
    let last = idle.last().unwrap()["seq"].as_u64().unwrap();
    assert!(last - first > 200, "{first}..{last}");

    // Within the tail: replayed, no gap.
    host.ok("detach", json!({"sessionId": id})).await;
    let near = host
        .ok("attach", json!({"sessionId": id, "afterSeq": last - 10}))
        .await;
    assert_eq!(near["snapshot"]["replayGap"], false, "{near}");
    let replayed = host
        .events_until(&id, |e| e["type"] == "status" && e["status"] == "idle")
        .await;
    assert_eq!(replayed[0]["seq"].as_u64().unwrap(), last - 9);
    assert_eq!(replayed.last().unwrap()["seq"].as_u64().unwrap(), last);

    // The turn's start is no longer held.
    host.ok("detach", json!({"sessionId": id})).await;
    let far = host
        .ok("attach", json!({"sessionId": id, "afterSeq": first}))
        .await;
    assert_eq!(far["snapshot"]["replayGap"], true, "{far}");
    let gap = host.events_until(&id, |e| e["type"] == "snapshot").await;
    assert_eq!(gap.last().unwrap()["event"]["snapshot"]["replayGap"], true);
}

/// The same backlog one hop earlier: a route of SessionService's own whose
/// reader lags (a gRPC `Attach` with `merge_deltas`, read by nobody while the
/// agent streams and then calls a tool). Its deltas wait in the replay buffer
/// and leave merged (`first_seq`..=`seq`), so the tool request reaches the
/// reader behind a few events instead of one event per delta; every seq is
/// there once, in order, and the text is whole.
#[tokio::test]
async fn a_tool_request_behind_a_lagging_service_route_follows_few_merged_events() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    let mut s = env.session().await;
    let mut stream = s
        .attach(pb::AttachRequest {
            merge_deltas: true,
            ..attach_request(&id, "lagging", None)
        })
        .await
        .unwrap()
        .into_inner();
    let snapshot = stream.message().await.unwrap().unwrap();
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": format!("@@load {DELTAS} 1")}),
    )
    .await;
    let mut sessions = env.session().await;
    wait_for_status(
        &mut sessions,
        &id,
        pb::SessionStatus::WaitingToolResult,
        "the agent's tool call behind the backlog",
    )
    .await;

    let mut events = Vec::new();
    let request = loop {
        let e = stream.message().await.unwrap().expect("the stream goes on");
        let request = match &e.event {
            Some(pb::session_event::Event::ToolRequest(r)) => Some(r.clone()),
            _ => None,
        };
        events.push(e);
        if let Some(r) = request {
            break r;
        }
    };
    eprintln!(
        "{} events reached the lagging route before the tool request ({DELTAS} deltas ahead)",
        events.len() - 1
    );
    assert!(
        events.len() < DELTAS / 4,
        "{} events before the tool request",
        events.len() - 1
    );
    host.ok(
        "submit_tool_result",
        json!({"sessionId": id, "toolRequestId": request.tool_request_id, "result": {"ok": true}}),
    )
    .await;
    loop {
        let e = stream.message().await.unwrap().expect("the stream goes on");
        let done = matches!(
            e.event,
            Some(pb::session_event::Event::OperationFinished(_))
        );
        events.push(e);
        if done {
            break;
        }
    }
    let mut next = snapshot.seq + 1;
    let mut text = String::new();
    let mut merged = 0;
    for e in &events {
        let first = e.first_seq.unwrap_or(e.seq);
        assert_eq!(first, next, "seq gap or overlap at {e:?}");
        match &e.event {
            Some(pb::session_event::Event::ChatDelta(d)) => text.push_str(&d.text),
            other => assert!(e.first_seq.is_none(), "only deltas merge: {other:?}"),
        }
        merged += usize::from(e.first_seq.is_some());
        next = e.seq + 1;
    }
    assert!(merged > 0, "no delta travelled merged");
    assert_eq!(text, expected_deltas(DELTAS));
}

/// Two hops earlier still: the deltas that wait for SessionService leave
/// ProviderService joined (docs/native-messaging.md §4, "Joined deltas"), so
/// even a route that asked for no merging gets far fewer events than the
/// agent printed deltas: each one event with one seq (no `first_seq`), none
/// over 4 KiB of text, the text whole and in order.
#[tokio::test]
async fn deltas_that_wait_for_session_service_arrive_joined_on_every_route() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let mut host = Host::spawn(&env, EXTENSION);
    let id = open_session(&mut host).await;
    let mut s = env.session().await;
    let mut stream = s
        .attach(attach_request(&id, "plain", None))
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().expect("the snapshot");
    host.ok(
        "send_text",
        json!({"sessionId": id, "text": format!("@@stream {DELTAS}")}),
    )
    .await;
    let (mut text, mut events, mut last_seq) = (String::new(), 0, None);
    loop {
        let e = stream.message().await.unwrap().expect("the stream goes on");
        assert_eq!(
            e.first_seq, None,
            "a merged event on a route that asked for none"
        );
        if let Some(last) = last_seq {
            assert_eq!(e.seq, last + 1, "a seq skipped");
        }
        last_seq = Some(e.seq);
        match &e.event {
            Some(pb::session_event::Event::ChatDelta(d)) => {
                assert!(d.text.len() <= 4096, "{} bytes in one delta", d.text.len());
                text.push_str(&d.text);
                events += 1;
            }
            Some(pb::session_event::Event::OperationFinished(_)) => break,
            _ => {}
        }
    }
    assert_eq!(text, expected_deltas(DELTAS));
    eprintln!("{events} chat_delta events carried {DELTAS} deltas");
    assert!(events < DELTAS / 4, "{events} events for {DELTAS} deltas");
}
