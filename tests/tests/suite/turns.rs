//! Provider turns over real processes: `pedelecd up`, SessionService driving
//! ProviderService's RunTurn/CancelTurn, with stub agent CLIs on PATH that print
//! the documented stream formats and record their argv, stdin and pids.

use std::path::{Path, PathBuf};

use pb::session_event::Event;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

/// A stub CLI: answers `--version`, records each call's argv (one line per
/// call), its stdin and its pid under `<root>/<name>.*`, then runs `body`.
fn stub_script(root: &Path, name: &str, body: &str) -> String {
    let at = |ext: &str| root.join(format!("{name}.{ext}")).display().to_string();
    format!(
        r#"[ "$1" = "--version" ] && echo "{name} 0.0.0-stub" && exit 0
echo "$*" >> {calls}
echo $$ > {pid}
/bin/cat >> {stdin}
{body}"#,
        calls = at("calls"),
        pid = at("pid"),
        stdin = at("stdin"),
    )
}

/// Hangs with a child of its own, whose pid goes to `<name>.child`.
fn hang(root: &Path, name: &str) -> String {
    let child = root.join(format!("{name}.child"));
    format!("/bin/sleep 60 &\necho $! > {}\nwait", child.display())
}

const CURSOR_SESSION: &str = "5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c";

/// A successful cursor-agent run in the documented stream-json format; with
/// `--stream-partial-output` the text first arrives in chunks (`assistant`
/// lines with `timestamp_ms`, one repeated with a `model_call_id`), then the
/// complete message, as cursor.com/docs/cli/reference/output-format and
/// Cursor's forum (thread 156289) describe it.
fn cursor_ok() -> String {
    let s = CURSOR_SESSION;
    let chunk = |text: &str, extra: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"role":"assistant","content":[{{"type":"text","text":"{text}"}}]}},"session_id":"{s}"{extra}}}"#
        )
    };
    let partial = [
        chunk("CURSOR_", r#","timestamp_ms":1774846267524"#),
        chunk(
            "CURSOR_",
            r#","model_call_id":"m1","timestamp_ms":1774846267693"#,
        ),
        chunk("DONE", r#","timestamp_ms":1774846267711"#),
    ]
    .join("\n");
    format!(
        r#"/bin/cat <<'EOF'
{{"type":"system","subtype":"init","apiKeySource":"login","cwd":"/w","session_id":"{s}","model":"m","permissionMode":"default"}}
{{"type":"user","message":{{"role":"user","content":[{{"type":"text","text":"echo"}}]}},"session_id":"{s}"}}
EOF
case " $* " in *" --stream-partial-output "*) /bin/cat <<'EOF'
{partial}
EOF
esac
/bin/cat <<'EOF'
{complete}
{{"type":"result","subtype":"success","duration_ms":5,"is_error":false,"result":"CURSOR_DONE","session_id":"{s}"}}
EOF"#,
        complete = chunk("CURSOR_DONE", ""),
    )
}

fn cursor_init_line() -> String {
    format!(
        r#"echo '{{"type":"system","subtype":"init","cwd":"/w","session_id":"{CURSOR_SESSION}","model":"m"}}'"#
    )
}

struct Turns {
    env: TestEnv,
    _launcher: Launcher,
    sessions: Sessions,
}

impl Turns {
    /// Services up with `stubs` on PATH and the given settings.
    async fn start(env: TestEnv, stubs: &[(&str, String)], settings: pb::Settings) -> Turns {
        for (name, body) in stubs {
            env.stub(name, &stub_script(&env.stubs(), name, body));
        }
        let launcher = env.up().await;
        env.update_settings(settings).await;
        let sessions = env.session().await;
        Turns {
            env,
            _launcher: launcher,
            sessions,
        }
    }

    /// Creates a thread for `provider` and attaches; the snapshot is read.
    async fn thread(&mut self, provider: &str) -> (String, Events) {
        let created = self
            .sessions
            .create_session(create_session_request(Some(provider)))
            .await
            .unwrap()
            .into_inner();
        let id = created.session_id;
        let events = attach_past_snapshot(&mut self.sessions, &id, "route-1").await;
        (id, events)
    }

    async fn send(&mut self, id: &str, text: &str) -> Result<String, tonic::Status> {
        self.sessions
            .send_text(send_text_request(id, text))
            .await
            .map(|r| r.into_inner().operation_id)
    }

    /// Sends `text` (must be accepted) and reads the operation it starts.
    async fn send_and_read(
        &mut self,
        id: &str,
        text: &str,
        events: &mut Events,
    ) -> Vec<pb::SessionEvent> {
        self.send(id, text).await.unwrap();
        operation(events).await
    }

    fn file(&self, name: &str) -> PathBuf {
        self.env.stubs().join(name)
    }

    /// The argv of each call of a stub, one string per call.
    fn calls(&self, stub: &str) -> Vec<String> {
        std::fs::read_to_string(self.file(&format!("{stub}.calls")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The events of a turn that completes with one chat.
/// A cursor turn with `--stream-partial-output`: two chunks, then the message.
const COMPLETED_WITH_DELTAS_AND_CHAT: [&str; 7] = [
    "operation_started",
    "status:running",
    "chat_delta",
    "chat_delta",
    "chat",
    "operation_finished:completed",
    "status:idle",
];

const COMPLETED_WITH_CHAT: [&str; 5] = [
    "operation_started",
    "status:running",
    "chat",
    "operation_finished:completed",
    "status:idle",
];

/// Reads one operation's events up to the status that follows its end.
async fn operation(events: &mut Events) -> Vec<pb::SessionEvent> {
    let mut seen = events.until(is_finished).await;
    seen.push(events.next().await);
    seen
}

fn assert_seqs_increase(events: &[pb::SessionEvent], after: u64) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (after + 1..=after + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "{:?}", kinds(events));
}

fn error_message(events: &[pb::SessionEvent]) -> (String, String) {
    events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Error(e)) => Some((e.code.clone(), e.message.clone())),
            _ => None,
        })
        .expect("an error event")
}

async fn assert_gone(pid: u32, what: &str) {
    wait_until(&format!("{what} (pid {pid}) to exit"), || !alive(pid)).await;
}

#[tokio::test]
async fn cursor_turn_then_resume_with_model_and_prompt() {
    let env = TestEnv::new();
    let mut t = Turns::start(
        env,
        &[("cursor-agent", cursor_ok())],
        settings_with_default_models(&[("cursor", "cur-model")]),
    )
    .await;
    let (id, mut events) = t.thread("cursor").await;

    let first = t.send_and_read(&id, "first question", &mut events).await;
    assert_eq!(kinds(&first), COMPLETED_WITH_DELTAS_AND_CHAT);
    assert_seqs_increase(&first, 0);
    assert_eq!(chat_text(&first), "CURSOR_DONE");
    assert_eq!(delta_text(&first), "CURSOR_DONE");

    let second = t.send_and_read(&id, "second question", &mut events).await;
    assert_eq!(kinds(&second), kinds(&first));
    assert_seqs_increase(&second, first.last().unwrap().seq);

    let calls = t.calls("cursor-agent");
    assert_eq!(calls.len(), 2, "{calls:?}");
    let workspace = snapshot(&mut t.sessions, &id).await.workspace_path;
    assert_eq!(
        calls[0],
        format!(
            "-p --workspace {workspace} --output-format stream-json --stream-partial-output --force --model=cur-model"
        )
    );
    assert!(!calls[0].contains("--resume"));
    assert!(
        calls[1].ends_with(&format!("--model=cur-model --resume {CURSOR_SESSION}")),
        "{}",
        calls[1]
    );
    // The prompt went to stdin (no tool manifest: the user's text alone).
    let stdin = std::fs::read_to_string(t.file("cursor-agent.stdin")).unwrap();
    assert_eq!(stdin, "first questionsecond question");
}

#[tokio::test]
async fn antigravity_turn_then_resume_its_conversation() {
    let env = TestEnv::new();
    let agy = r#"/bin/cat <<'EOF'
{"event":"init","conversation_id":"agy-conv-1","init":{"model":"gemini-3-flash","cwd":"/w"}}
{"event":"step_update","step_update":{"conversation_id":"agy-conv-1","step_index":1,"state":"ACTIVE","step_type":"agent_response","text_delta":"AGY_"}}
{"event":"result","result":{"conversation_id":"agy-conv-1","status":"SUCCESS","response":"AGY_DONE","num_turns":1}}
EOF"#;
    let mut t = Turns::start(
        env,
        &[("agy", agy.to_string())],
        settings_with_default_models(&[("antigravity", "gemini-3-flash")]),
    )
    .await;
    let (id, mut events) = t.thread("antigravity").await;

    let first = t.send_and_read(&id, "hello agy", &mut events).await;
    assert_eq!(kinds(&first), COMPLETED_WITH_CHAT);
    assert_seqs_increase(&first, 0);
    assert_eq!(chat_text(&first), "AGY_DONE");

    let second = t.send_and_read(&id, "again", &mut events).await;
    assert_eq!(kinds(&second), kinds(&first));

    let calls = t.calls("agy");
    assert_eq!(
        calls,
        [
            "-p=hello agy --output-format stream-json --model=gemini-3-flash",
            "-p=again --output-format stream-json --model=gemini-3-flash --conversation agy-conv-1"
        ]
    );
    // The prompt travels in argv; stdin was empty.
    assert_eq!(std::fs::read_to_string(t.file("agy.stdin")).unwrap(), "");
}

#[tokio::test]
async fn ollama_agent_streams_deltas_and_usage_then_resumes() {
    let mut env = TestEnv::new();
    let body = r#"/bin/cat <<'EOF'
{"type":"session","id":"ol-sess-1"}
{"type":"chat_delta","text":"Hel"}
{"type":"chat_delta","text":"lo"}
{"type":"chat","text":"Hello"}
{"type":"usage","input":120,"output":2}
EOF"#;
    let script = stub_script(&env.stubs(), "pedelec-agent", body);
    env.install_stub_agent(&script);
    let mut t = Turns::start(
        env,
        &[],
        settings_with_default_models(&[("ollama", "llama3.2")]),
    )
    .await;
    let (id, mut events) = t.thread("ollama").await;

    let first = t.send_and_read(&id, "hi", &mut events).await;
    assert_eq!(
        kinds(&first),
        [
            "operation_started",
            "status:running",
            "chat_delta",
            "chat_delta",
            "chat",
            "usage",
            "operation_finished:completed",
            "status:idle"
        ]
    );
    assert_seqs_increase(&first, 0);
    // Deltas are the live view; the completed message still comes as chat.
    assert_eq!(delta_text(&first), "Hello");
    assert_eq!(chat_text(&first), "Hello");
    let usage = first_usage(&first).unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (120, 2, 122)
    );

    let second = t.send_and_read(&id, "more", &mut events).await;
    assert_eq!(kinds(&second), kinds(&first));
    // Usage increments add up over the thread.
    let total = first_usage(&second).unwrap().total_tokens;
    assert_eq!(total, 244);

    let calls = t.calls("pedelec-agent");
    assert_eq!(calls.len(), 2);
    assert!(calls[0].starts_with("--model=llama3.2 --workspace "));
    assert!(!calls[0].contains("--session-id"));
    assert!(calls[1].ends_with("--session-id ol-sess-1"), "{}", calls[1]);
}

/// A running cursor turn whose stub hangs with a child of its own.
struct HangingTurn {
    t: Turns,
    id: String,
    events: Events,
    pid: u32,
    child: u32,
}

/// Starts a cursor thread and a turn whose stub hangs; waits for its pids.
async fn hanging_cursor_turn() -> HangingTurn {
    let env = TestEnv::new();
    let body = format!(
        "{}\n{}",
        cursor_init_line(),
        hang(&env.stubs(), "cursor-agent")
    );
    let mut t = Turns::start(env, &[("cursor-agent", body)], pb::Settings::default()).await;
    let (id, events) = t.thread("cursor").await;

    t.send(&id, "work").await.unwrap();
    // The stub writes the pids it sees (in its own pid namespace when confined).
    let pid = host_pid(
        &t.env.runtime_dir(),
        read_pid(&t.file("cursor-agent.pid")).await,
    );
    let child = host_pid(
        &t.env.runtime_dir(),
        read_pid(&t.file("cursor-agent.child")).await,
    );
    HangingTurn {
        t,
        id,
        events,
        pid,
        child,
    }
}

#[tokio::test]
async fn busy_while_running_and_cancel_kills_the_stub() {
    let HangingTurn {
        mut t,
        id,
        mut events,
        pid,
        child,
    } = hanging_cursor_turn().await;
    assert_eq!(code(t.send(&id, "more").await), "SESSION_BUSY");

    t.sessions.cancel(thread_request(&id)).await.unwrap();
    let seen = operation(&mut events).await;
    assert_eq!(
        kinds(&seen),
        [
            "operation_started",
            "status:running",
            "operation_finished:cancelled",
            "status:idle"
        ]
    );
    assert_seqs_increase(&seen, 0);
    assert_gone(pid, "the stub").await;
    assert_gone(child, "the stub's child").await;
    let snapshot = snapshot(&mut t.sessions, &id).await;
    assert_eq!(snapshot.status, pb::SessionStatus::Idle as i32);
}

#[tokio::test]
async fn end_kills_a_running_turn() {
    let HangingTurn {
        mut t,
        id,
        mut events,
        pid,
        child,
    } = hanging_cursor_turn().await;
    t.sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&id)))
        .await
        .unwrap();
    let seen = events
        .until(|e| matches!(e.event, Some(Event::Ended(_))))
        .await;
    assert_eq!(
        kinds(&seen),
        [
            "operation_started",
            "status:running",
            "operation_finished:cancelled",
            "status:ended",
            "ended"
        ]
    );
    assert_gone(pid, "the stub").await;
    assert_gone(child, "the stub's child").await;
}

#[tokio::test]
async fn a_failing_stub_reports_its_own_error_and_the_next_send_runs() {
    let env = TestEnv::new();
    let calls = env.stubs().join("cursor-agent.calls");
    // Fails on the first call only.
    let body = format!(
        r#"if [ "$(/usr/bin/wc -l < {calls})" -eq 1 ]; then
echo '{{"type":"result","subtype":"error","is_error":true,"result":"mock model error 400","session_id":"{CURSOR_SESSION}"}}'
echo 'stub: giving up' >&2
exit 1
fi
{ok}"#,
        calls = calls.display(),
        ok = cursor_ok()
    );
    let mut t = Turns::start(env, &[("cursor-agent", body)], pb::Settings::default()).await;
    let (id, mut events) = t.thread("cursor").await;

    let failed = t.send_and_read(&id, "try", &mut events).await;
    assert_eq!(
        kinds(&failed),
        [
            "operation_started",
            "status:running",
            "error:PROVIDER_FAILED",
            "operation_finished:failed",
            "status:error"
        ]
    );
    assert_eq!(error_message(&failed).1, "mock model error 400");
    let details = failed
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Error(e)) => e.details.clone(),
            _ => None,
        })
        .map(|d| pedelec_common::json::from_value(&d))
        .unwrap_or_default();
    assert_eq!(details["exitCode"], 1, "{details}");
    assert_eq!(details["stderrTail"], "stub: giving up\n", "{details}");
    // A client reconciling from a snapshot sees whose error it was.
    let last = snapshot(&mut t.sessions, &id).await.last_operation.unwrap();
    let error = last.error.unwrap();
    assert_eq!(error.code, "PROVIDER_FAILED");
    assert_eq!(error.source, pb::ErrorSource::Provider as i32);

    let ok = t.send_and_read(&id, "again", &mut events).await;
    assert_eq!(kinds(&ok), COMPLETED_WITH_DELTAS_AND_CHAT);
}

/// Its stderr stays in the log (docs/security.md, "What a page is not
/// shown"): the error says how it ended.
#[tokio::test]
async fn a_stub_failing_without_an_error_line_says_how_it_ended() {
    let env = TestEnv::new();
    let body = "echo 'cursor-agent: not logged in' >&2; exit 2".to_string();
    let mut t = Turns::start(env, &[("cursor-agent", body)], pb::Settings::default()).await;
    let (id, mut events) = t.thread("cursor").await;
    let failed = t.send_and_read(&id, "try", &mut events).await;
    assert_eq!(
        error_message(&failed),
        (
            "PROVIDER_FAILED".to_string(),
            "cursor-agent exited with code 2; see the Pedelec log".to_string()
        )
    );
    assert_eq!(kind(failed.last().unwrap()), "status:error");
}

#[tokio::test]
async fn prepare_obtains_a_session_and_the_next_send_resumes_it() {
    let env = TestEnv::new();
    let mut t = Turns::start(
        env,
        &[("cursor-agent", cursor_ok())],
        pb::Settings::default(),
    )
    .await;
    let (id, mut events) = t.thread("cursor").await;

    t.sessions
        .prepare(pb::PrepareRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
        })
        .await
        .unwrap();
    let prepared = operation(&mut events).await;
    assert_eq!(
        kinds(&prepared),
        [
            "operation_started",
            "status:running",
            "operation_finished:completed",
            "status:idle"
        ]
    );

    let sent = t.send_and_read(&id, "now the task", &mut events).await;
    assert_eq!(chat_text(&sent), "CURSOR_DONE");
    let calls = t.calls("cursor-agent");
    assert_eq!(calls.len(), 2);
    assert!(!calls[0].contains("--resume"));
    assert!(
        calls[1].ends_with(&format!("--resume {CURSOR_SESSION}")),
        "{}",
        calls[1]
    );
}

#[tokio::test]
async fn a_missing_program_fails_with_provider_not_found() {
    let env = TestEnv::new();
    let mut t = Turns::start(env, &[], pb::Settings::default()).await;
    let (id, mut events) = t.thread("codex").await;
    let failed = t.send_and_read(&id, "hello", &mut events).await;
    assert_eq!(
        kinds(&failed),
        [
            "operation_started",
            "status:running",
            "error:PROVIDER_NOT_FOUND",
            "operation_finished:failed",
            "status:error"
        ]
    );
    assert_eq!(error_message(&failed).1, "codex not found on PATH");
}
