//! A thread's conversation history over the real processes (docs/history.md):
//! what GetHistory gives after turns with a stub agent — in order, with the
//! seqs of the events a route saw — paging at the bound, kill -9 of
//! SessionService and of the launcher between turns, who may read it, and
//! pedelec-cli's transcript and JSON.

use pb::history_entry::Entry;
use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::json;

/// The stub `pedelec-agent`: `@@tool` calls get_page and then says so,
/// `@@many N` says N complete messages, anything else streams "hello".
fn agent_script() -> String {
    let cli = bin_dir().join("pedelec-cli").display().to_string();
    format!(
        r#"[ "$1" = "--version" ] && echo "pedelec-agent 0.0.0-stub" && exit 0
prompt=$(/bin/cat)
echo '{{"type":"session","id":"stub-session"}}'
case "$prompt" in
  *"@@tool"*)
    {cli} --thread-id "$PEDELEC_THREAD_ID" tool-call get_page '{{"q":"x"}}' > /dev/null
    echo '{{"type":"chat","text":"after the tool"}}'
    ;;
  *"@@many "*)
    n=$(printf '%s' "$prompt" | /bin/sed -n 's/.*@@many \([0-9]*\).*/\1/p' | /usr/bin/tail -n 1)
    /usr/bin/awk -v n="$n" 'BEGIN {{ for (i = 0; i < n; i++) printf "{{\"type\":\"chat\",\"text\":\"m%d\"}}\n", i }}'
    ;;
  *)
    echo '{{"type":"chat_delta","text":"hel"}}'
    echo '{{"type":"chat","text":"hello"}}'
    echo '{{"type":"usage","input":10,"output":5}}'
    ;;
esac"#
    )
}

/// Services up with the stub agent as the Ollama provider.
async fn start(env: &mut TestEnv) -> Launcher {
    env.install_stub_agent(&agent_script());
    let launcher = env.up().await;
    env.update_settings(settings_with_default_models(&[("ollama", "llama3.2")]))
        .await;
    launcher
}

async fn new_thread(sessions: &mut Sessions) -> String {
    sessions
        .create_session(pb::CreateSessionRequest {
            skills: Some(pedelec_common::json::to_struct(
                skills().as_object().unwrap(),
            )),
            ..create_session_request(Some("ollama"))
        })
        .await
        .unwrap()
        .into_inner()
        .session_id
}

fn history_request(id: &str, origin: &str, before: u64, limit: u32) -> pb::GetHistoryRequest {
    pb::GetHistoryRequest {
        session_id: id.into(),
        origin: origin.into(),
        before,
        limit,
    }
}

/// Every entry, oldest first, read in pages of `limit` from the newest;
/// asserts the pages join without a gap.
async fn whole(sessions: &mut Sessions, id: &str, limit: u32) -> Vec<pb::HistoryEntry> {
    let mut all: Vec<pb::HistoryEntry> = Vec::new();
    let mut before = 0;
    loop {
        let page = sessions
            .get_history(history_request(id, ORIGIN, before, limit))
            .await
            .unwrap()
            .into_inner();
        assert!(page.entries.len() <= limit as usize);
        if let (Some(last), Some(next)) = (page.entries.last(), all.first()) {
            assert_eq!(last.id + 1, next.id, "pages do not join");
        }
        before = page.entries.first().map_or(0, |e| e.id);
        let newer = std::mem::replace(&mut all, page.entries);
        all.extend(newer);
        if !page.has_more {
            return all;
        }
    }
}

/// What an event adds to the history: (kind, seq, operation id) per entry.
fn expected(events: &[pb::SessionEvent], operation_of_tool: &str) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    for e in events {
        let mut push = |kind: &str, op: &str| out.push((kind.to_string(), e.seq, op.to_string()));
        match &e.event {
            Some(Event::OperationStarted(o)) => {
                push("operation_started", &o.operation_id);
                if o.kind == pb::OperationKind::SendText as i32 {
                    push("user_text", &o.operation_id);
                }
            }
            Some(Event::Chat(c)) => push("agent_message", &c.operation_id),
            Some(Event::ToolRequest(t)) => push("tool_request", &t.operation_id),
            Some(Event::ToolRequestCleared(_)) => push("tool_outcome", operation_of_tool),
            Some(Event::OperationFinished(f)) => push("operation_finished", &f.operation_id),
            Some(Event::Error(err)) => push("error", &err.operation_id),
            _ => {}
        }
    }
    out
}

fn entry_kind(e: &pb::HistoryEntry) -> &'static str {
    match &e.entry {
        Some(Entry::UserText(_)) => "user_text",
        Some(Entry::AgentMessage(_)) => "agent_message",
        Some(Entry::ToolRequest(_)) => "tool_request",
        Some(Entry::ToolOutcome(_)) => "tool_outcome",
        Some(Entry::OperationStarted(_)) => "operation_started",
        Some(Entry::OperationFinished(_)) => "operation_finished",
        Some(Entry::Error(_)) => "error",
        Some(Entry::Dropped(_)) => "dropped",
        None => "none",
    }
}

fn shape(entries: &[pb::HistoryEntry]) -> Vec<(String, u64, String)> {
    entries
        .iter()
        .map(|e| (entry_kind(e).to_string(), e.seq, e.operation_id.clone()))
        .collect()
}

/// Sends `text` and reads the operation to its end; with `@@tool` in it,
/// answers the tool request with `result`.
async fn turn(
    sessions: &mut Sessions,
    events: &mut Events,
    id: &str,
    text: &str,
    result: &serde_json::Value,
) -> (String, Vec<pb::SessionEvent>) {
    let op = sessions
        .send_text(send_text_request(id, text))
        .await
        .unwrap()
        .into_inner()
        .operation_id;
    let mut seen = Vec::new();
    if text.contains("@@tool") {
        seen = events
            .until(|e| matches!(e.event, Some(Event::ToolRequest(_))))
            .await;
        let Some(Event::ToolRequest(r)) = &seen.last().unwrap().event else {
            unreachable!()
        };
        sessions
            .submit_tool_result(submit_tool_result_request(
                id,
                &r.tool_request_id,
                tool_result(result),
            ))
            .await
            .unwrap();
    }
    seen.extend(events.until(is_finished).await);
    (op, seen)
}

fn outcome_of(entries: &[pb::HistoryEntry]) -> Vec<&pb::ToolOutcome> {
    entries
        .iter()
        .filter_map(|e| match &e.entry {
            Some(Entry::ToolOutcome(o)) => Some(o),
            _ => None,
        })
        .collect()
}

/// Two turns, one with a tool call the page answers, then one whose answer is
/// larger than the per-entry bound: the history holds an entry for each
/// event that belongs there, in order, with the seqs the route saw; only
/// the thread's origin reads it; pedelec-cli prints it.
#[tokio::test]
async fn turns_with_a_tool_call_are_recorded_in_order_with_their_events_seqs() {
    let mut env = TestEnv::new();
    let _launcher = start(&mut env).await;
    let mut sessions = env.session().await;
    let id = new_thread(&mut sessions).await;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;

    let (op1, seen1) = turn(&mut sessions, &mut events, &id, "hi there", &json!(null)).await;
    let (op2, seen2) = turn(
        &mut sessions,
        &mut events,
        &id,
        "@@tool please",
        &json!({"title": "the page"}),
    )
    .await;
    let big = "y".repeat(40_000);
    let (op3, seen3) = turn(
        &mut sessions,
        &mut events,
        &id,
        "@@tool again",
        &json!({ "text": big }),
    )
    .await;

    let entries = whole(&mut sessions, &id, 100).await;
    let mut want = expected(&seen1, &op1);
    want.extend(expected(&seen2, &op2));
    want.extend(expected(&seen3, &op3));
    assert_eq!(shape(&entries), want);
    let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=entries.len() as u64).collect::<Vec<_>>());

    // What the entries hold.
    let texts: Vec<(&str, &str)> = entries
        .iter()
        .filter_map(|e| match &e.entry {
            Some(Entry::UserText(t)) => Some(("you", t.text.as_str())),
            Some(Entry::AgentMessage(c)) => Some(("agent", c.text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [
            ("you", "hi there"),
            ("agent", "hello"),
            ("you", "@@tool please"),
            ("agent", "after the tool"),
            ("you", "@@tool again"),
            ("agent", "after the tool"),
        ]
    );
    let outcomes = outcome_of(&entries);
    assert_eq!(outcomes.len(), 2);
    assert_eq!(outcomes[0].reason, pb::ToolSettleReason::Resolved as i32);
    match &outcomes[0].outcome {
        Some(pb::tool_outcome::Outcome::Result(v)) => {
            assert_eq!(
                pedelec_common::json::from_value(v),
                json!({"title": "the page"})
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(!outcomes[0].truncated);
    // The large one: a preview of its JSON, marked.
    assert!(outcomes[1].truncated && outcomes[1].outcome.is_none());
    assert_eq!(outcomes[1].result_preview.len(), 2048);
    assert!(outcomes[1].result_preview.starts_with(r#"{"text":"yyy"#));
    let finished = entries.iter().find_map(|e| match &e.entry {
        Some(Entry::OperationFinished(f)) => Some(f),
        _ => None,
    });
    assert_eq!(finished.unwrap().usage.unwrap().total_tokens, 15);
    let requests: Vec<_> = entries
        .iter()
        .filter_map(|e| match &e.entry {
            Some(Entry::ToolRequest(r)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(requests[0].tool, "get_page");
    assert_eq!(
        pedelec_common::json::from_value(requests[0].args.as_ref().unwrap()),
        json!({"q": "x"})
    );

    // covered_seq: every event up to the thread's last seq is in.
    let page = sessions
        .get_history(history_request(&id, ORIGIN, 0, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        page.covered_seq,
        snapshot(&mut sessions, &id).await.last_seq
    );
    assert_eq!(page.entries, entries, "limit 0 reads 100, here all");

    // Another (approved) origin reads nothing: the answer Get gives it.
    let other = "https://other.example";
    env.grant_site(other, pb::AccessLevel::Full, &["ollama"], &[])
        .await;
    let got = code(
        sessions
            .get_history(history_request(&id, other, 0, 0))
            .await,
    );
    let get = code(sessions.get(thread_request_from(&id, other)).await);
    assert_eq!(got, get);
    assert_eq!(got, "THREAD_ACCESS_DENIED");
    // One never approved is refused before the thread is looked up.
    assert_eq!(
        code(
            sessions
                .get_history(history_request(&id, "https://never.example", 0, 0))
                .await
        ),
        "SITE_NOT_APPROVED"
    );

    // pedelec-cli: a transcript, and the entries as JSON.
    let cli = |args: &[&str]| {
        let out = env.command(bin("pedelec-cli")).args(args).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let transcript = cli(&["sessions", "history", &id]);
    let lines: Vec<&str> = transcript.lines().collect();
    assert_eq!(
        &lines[..7],
        [
            "you: hi there",
            "agent: hello",
            "· send_text completed, 15 tokens so far",
            "you: @@tool please",
            r#"tool get_page {"q":"x"}"#,
            r#"tool get_page → {"title":"the page"}"#,
            "agent: after the tool",
        ],
        "{transcript}"
    );
    assert!(
        lines[10].starts_with(r#"tool get_page → {"text":"yyy"#) && lines[10].ends_with("[…]"),
        "{transcript}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&cli(&["sessions", "history", &id, "--json"])).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), entries.len());
    for (json, entry) in listed.iter().zip(&entries) {
        assert_eq!(json["id"], entry.id, "{json}");
        assert_eq!(json["seq"], entry.seq, "{json}");
    }
}

/// Past the bound the oldest entries are dropped, one marker counting them;
/// pages of at most 1,000 entries, 1,001 refused; `before` and `has_more`
/// walk the rest without a gap.
#[tokio::test]
async fn paging_at_the_bound() {
    let mut env = TestEnv::new();
    let _launcher = start(&mut env).await;
    let mut sessions = env.session().await;
    let id = new_thread(&mut sessions).await;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    let (_, seen) = turn(&mut sessions, &mut events, &id, "@@many 2100", &json!(null)).await;
    let last_seq = seen.last().unwrap().seq;
    // operation_started, user_text, 2,100 messages, operation_finished.
    let newest_id = 2_103;

    assert_eq!(
        code(
            sessions
                .get_history(history_request(&id, ORIGIN, 0, 1_001))
                .await
        ),
        "INVALID_INPUT"
    );
    let page = sessions
        .get_history(history_request(&id, ORIGIN, 0, 1_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.entries.len(), 1_000);
    assert!(page.has_more);
    let newest = page.entries.last().unwrap();
    assert_eq!((newest.id, newest.seq), (newest_id, last_seq));
    assert_eq!(entry_kind(newest), "operation_finished");
    let default = sessions
        .get_history(history_request(&id, ORIGIN, 0, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(default.entries[..], page.entries[900..]);
    // From an entry id backwards.
    let before = sessions
        .get_history(history_request(&id, ORIGIN, 2_000, 3))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<u64> = before.entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, [1_997, 1_998, 1_999]);

    let all = whole(&mut sessions, &id, 1_000).await;
    assert!(all.len() <= 2_000, "{} entries", all.len());
    let marker = &all[0];
    let Some(Entry::Dropped(dropped)) = &marker.entry else {
        panic!("the oldest entry is not the marker: {marker:?}");
    };
    assert_eq!(dropped.count, marker.id, "every id up to the marker's");
    assert_eq!(marker.id + all.len() as u64 - 1, newest_id);
    // The start of the turn went first; the newest messages are all there.
    assert!(
        all[1..]
            .iter()
            .all(|e| entry_kind(e) == "agent_message" || e.id == newest_id)
    );
    match &all[all.len() - 2].entry {
        Some(Entry::AgentMessage(c)) => assert_eq!(c.text, "m2099"),
        other => panic!("{other:?}"),
    }
    // Below the marker there is nothing.
    let below = sessions
        .get_history(history_request(&id, ORIGIN, marker.id, 10))
        .await
        .unwrap()
        .into_inner();
    assert!(below.entries.is_empty() && !below.has_more);
}

/// kill -9 of SessionService, then of the launcher (the services come back),
/// each between turns: the history is what it was, and the next turn's
/// entries follow with the next ids.
#[tokio::test]
async fn kill_9_of_session_service_or_the_launcher_between_turns_loses_no_entry() {
    let mut env = TestEnv::new();
    let mut launcher = start(&mut env).await;
    let mut sessions = env.session().await;
    let id = new_thread(&mut sessions).await;
    let mut events = attach_past_snapshot(&mut sessions, &id, "r1").await;
    turn(&mut sessions, &mut events, &id, "first", &json!(null)).await;
    turn(
        &mut sessions,
        &mut events,
        &id,
        "@@tool first",
        &json!({"n": 1}),
    )
    .await;
    let before = whole(&mut sessions, &id, 1_000).await;
    assert!(before.len() >= 10, "{:?}", shape(&before));

    let old = env.service_status(ServiceName::Session).await;
    signal(old.pid as i32, libc::SIGKILL);
    env.wait_service_back(ServiceName::Session, old.pid).await;
    let mut sessions = env.session().await;
    assert_eq!(whole(&mut sessions, &id, 1_000).await, before);
    let mut events = attach_past_snapshot(&mut sessions, &id, "r2").await;
    let (_, seen) = turn(
        &mut sessions,
        &mut events,
        &id,
        "@@tool second",
        &json!({"n": 2}),
    )
    .await;
    let after = whole(&mut sessions, &id, 1_000).await;
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after[before.len()..].len(), expected(&seen, "").len());
    assert_eq!(after.last().unwrap().seq, seen.last().unwrap().seq);

    signal(launcher.pid() as i32, libc::SIGKILL);
    let _ = launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
    launcher = env.up().await;
    let mut sessions = env.session().await;
    assert_eq!(whole(&mut sessions, &id, 1_000).await, after);
    let mut events = attach_past_snapshot(&mut sessions, &id, "r3").await;
    turn(&mut sessions, &mut events, &id, "third", &json!(null)).await;
    let third = whole(&mut sessions, &id, 1_000).await;
    assert_eq!(third[..after.len()], after[..]);
    assert_eq!(third[after.len()].id, after.last().unwrap().id + 1);
    match &third[after.len() + 1].entry {
        Some(Entry::UserText(t)) => assert_eq!(t.text, "third"),
        other => panic!("{other:?}"),
    }
    drop(launcher);
}
