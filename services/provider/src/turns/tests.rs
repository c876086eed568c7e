//! The process runner against tiny shell-script stand-ins for the CLIs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pb::provider_event::Event as Out;
use pedelec_common::json;
use pedelec_proto::v1 as pb;
use serde_json::Value as Json;
use tokio::sync::mpsc;

use super::*;
use crate::adapters::MAX_LINE;
use crate::testutil::Bin;

const CEILING: Duration = Duration::from_secs(20);

/// Three lines of a real codex run (tests/fixtures/provider-transcripts/codex_run1.jsonl).
const CODEX_LINES: &str = r#"{"type":"thread.started","thread_id":"01a22d56-6dbd-7423-8b44-de8c18989886"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"MOCK_DONE: the command ran."}}
{"type":"turn.completed","usage":{"input_tokens":246,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":90,"reasoning_output_tokens":0}}"#;

struct Fixture {
    bin: Bin,
    work: tempfile::TempDir,
    turns: Turns,
}

fn fixture() -> Fixture {
    let bin = Bin::new();
    // The stand-in codex and opencode scripts speak `codex exec --json` and
    // `opencode run --format json`.
    let turns = Turns::new(bin.env())
        .with_grace(Duration::from_millis(500))
        .with_codex_app_server(false)
        .with_opencode_serve(false);
    Fixture {
        bin,
        work: tempfile::tempdir().unwrap(),
        turns,
    }
}

impl Fixture {
    fn request(&self, session: &str, provider: &str) -> pb::RunTurnRequest {
        pb::RunTurnRequest {
            session_id: session.into(),
            provider: provider.into(),
            profile: None,
            workspace: self.work.path().display().to_string(),
            prompt: "hello agent".into(),
            provider_session_id: None,
            tool_env: HashMap::new(),
            access: pb::AccessLevel::Full as i32,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    async fn run(&self, req: pb::RunTurnRequest) -> Vec<Out> {
        collect(self.turns.run(req).unwrap()).await
    }
}

async fn collect(mut rx: mpsc::Receiver<pb::ProviderEvent>) -> Vec<Out> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(CEILING, rx.recv()).await {
            Ok(Some(e)) => out.push(e.event.unwrap()),
            Ok(None) => return out,
            Err(_) => panic!("turn did not end; so far: {out:?}"),
        }
    }
}

async fn next(rx: &mut mpsc::Receiver<pb::ProviderEvent>) -> Out {
    tokio::time::timeout(CEILING, rx.recv())
        .await
        .expect("an event in time")
        .expect("stream open")
        .event
        .unwrap()
}

fn exited_code(code: i32) -> Out {
    Out::Exited(pb::TurnExited {
        code: Some(code),
        signal: None,
    })
}

fn error_of(events: &[Out]) -> &pb::PedelecError {
    events
        .iter()
        .find_map(|e| match e {
            Out::Error(e) => Some(e),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error in {events:?}"))
}

fn details(e: &pb::PedelecError) -> Json {
    e.details
        .as_ref()
        .map(json::from_value)
        .unwrap_or(Json::Null)
}

/// Gone, or a zombie waiting for its reaper.
fn dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

async fn wait_dead(pid: &str) -> bool {
    for _ in 0..100 {
        if dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn read_when_written(path: &Path) -> String {
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} was never written", path.display());
}

#[tokio::test]
async fn codex_lines_become_events_in_order_then_exited_zero() {
    let f = fixture();
    f.bin
        .script("codex", &format!("/bin/cat <<'EOF'\n{CODEX_LINES}\nEOF"));
    let events = f.run(f.request("thr_1", "codex")).await;
    assert!(matches!(events[0], Out::Started(pb::TurnStarted { pid }) if pid > 0));
    assert_eq!(
        events[1..],
        [
            Out::ProviderSessionId(pb::ProviderSessionId {
                id: "01a22d56-6dbd-7423-8b44-de8c18989886".into()
            }),
            Out::Chat("MOCK_DONE: the command ran.".into()),
            Out::Usage(pb::Usage {
                total_tokens: 336,
                input_tokens: 246,
                output_tokens: 90,
                cumulative: true,
            }),
            exited_code(0),
        ]
    );
    assert!(!f.turns.is_running("thr_1"));
}

#[tokio::test]
async fn non_zero_exit_is_provider_failed_with_the_stderr_tail() {
    let f = fixture();
    f.bin.script(
        "codex",
        "echo 'starting' >&2; echo 'error: not logged in' >&2; exit 3",
    );
    let events = f.run(f.request("thr_1", "codex")).await;
    assert_eq!(events.len(), 3, "{events:?}");
    let error = error_of(&events);
    assert_eq!(error.code, "PROVIDER_FAILED");
    assert_eq!(error.source, pb::ErrorSource::Provider as i32);
    // Fixed words: what stderr said stays in the log and in `stderrTail`
    // (for local callers; page messages leave it out).
    assert_eq!(
        error.message,
        "codex exited with code 3; see the Pedelec log"
    );
    assert_eq!(
        details(error),
        serde_json::json!({"exitCode": 3, "stderrTail": "starting\nerror: not logged in\n"})
    );
    assert_eq!(events[2], exited_code(3));
}

#[tokio::test]
async fn the_providers_own_error_keeps_its_message() {
    let f = fixture();
    f.bin.script(
        "codex",
        r#"echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"turn.failed","error":{"message":"model overloaded"}}'
echo 'trace' >&2
exit 1"#,
    );
    let events = f.run(f.request("thr_1", "codex")).await;
    let error = error_of(&events);
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        ("PROVIDER_FAILED", "model overloaded")
    );
    assert_eq!(details(error)["exitCode"], 1);
    assert_eq!(details(error)["stderrTail"], "trace\n");
    // One error only, then exited last.
    assert_eq!(
        events.iter().filter(|e| matches!(e, Out::Error(_))).count(),
        1
    );
    assert_eq!(events.last(), Some(&exited_code(1)));
}

#[tokio::test]
async fn prompt_arrives_on_stdin_and_args_carry_model_and_resume() {
    let f = fixture();
    let prompt = f.file("prompt");
    let argv = f.file("argv");
    f.bin.script(
        "codex",
        &format!(
            "/bin/cat > {}\nfor a in \"$@\"; do echo \"$a\"; done > {}",
            prompt.display(),
            argv.display()
        ),
    );
    let mut req = f.request("thr_1", "codex");
    req.prompt = "line one\nline two — ünïcode".into();
    req.profile = Some(pb::ResolvedProfile {
        model: "gpt-5.5".into(),
        effort: "high".into(),
        ..Default::default()
    });
    req.provider_session_id = Some("prev-thread".into());
    let events = f.run(req).await;
    assert_eq!(events.last(), Some(&exited_code(0)));
    assert_eq!(
        std::fs::read_to_string(&prompt).unwrap(),
        "line one\nline two — ünïcode"
    );
    let args = std::fs::read_to_string(&argv).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert!(
        args.windows(2).any(|w| w == ["resume", "prev-thread"]),
        "{args:?}"
    );
    assert!(args.contains(&"--model=gpt-5.5"), "{args:?}");
    assert!(args.iter().any(|a| a.contains("high")), "{args:?}");
}

#[tokio::test]
async fn agy_gets_the_prompt_in_argv_and_dev_null_on_stdin() {
    let f = fixture();
    let out = f.file("out");
    f.bin.script(
        "agy",
        &format!(
            "echo \"$1\" > {out}\n/bin/cat >> {out}\necho end >> {out}",
            out = out.display()
        ),
    );
    let events = f.run(f.request("thr_1", "antigravity")).await;
    assert_eq!(events.last(), Some(&exited_code(0)));
    // `cat` read EOF at once: stdin was /dev/null, not a pipe left open.
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "-p=hello agent\nend\n"
    );
}

#[tokio::test]
async fn environment_has_tool_env_and_cli_folder_first_on_path() {
    let bin = Bin::new();
    let exe = tempfile::tempdir().unwrap();
    let mut programs = bin.env();
    programs.exe_dir = Some(exe.path().to_path_buf());
    let work = tempfile::tempdir().unwrap();
    let dump = work.path().join("env");
    bin.script("claude", &format!("/usr/bin/env > {}", dump.display()));
    let turns = Turns::new(programs);
    let tool_env: HashMap<String, String> = [
        ("PEDELEC_THREAD_ID", "thr_env"),
        ("PEDELEC_TOOL_TOKEN", "tok-123"),
        ("PEDELEC_RUNTIME_DIR", "/tmp/rt-x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let req = pb::RunTurnRequest {
        session_id: "thr_env".into(),
        provider: "claude".into(),
        workspace: work.path().display().to_string(),
        prompt: "p".into(),
        tool_env,
        access: pb::AccessLevel::Full as i32,
        ..Default::default()
    };
    let events = collect(turns.run(req).unwrap()).await;
    assert_eq!(events.last(), Some(&exited_code(0)));
    let dump = std::fs::read_to_string(&dump).unwrap();
    let vars: HashMap<&str, &str> = dump.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(vars["PEDELEC_THREAD_ID"], "thr_env");
    assert_eq!(vars["PEDELEC_TOOL_TOKEN"], "tok-123");
    assert_eq!(vars["PEDELEC_RUNTIME_DIR"], "/tmp/rt-x");
    assert_eq!(
        vars["PATH"],
        format!("{}:{}", exe.path().display(), bin.dir.path().display())
    );
    assert_eq!(vars["PWD"], work.path().display().to_string());
    assert_eq!(
        vars.get("IS_SANDBOX").copied(),
        pedelec_common::process::is_root().then_some("1")
    );
}

#[tokio::test]
async fn missing_program_is_provider_not_found_then_exited_without_code() {
    let f = fixture();
    let events = f.run(f.request("thr_1", "codex")).await;
    let error = error_of(&events);
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        ("PROVIDER_NOT_FOUND", "codex not found on PATH")
    );
    assert_eq!(events.last(), Some(&Out::Exited(pb::TurnExited::default())));
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn ollama_without_a_model_is_model_required() {
    let f = fixture();
    f.bin.script("pedelec-agent", "exit 0");
    let events = f.run(f.request("thr_1", "ollama")).await;
    assert_eq!(error_of(&events).code, "MODEL_REQUIRED");
    assert_eq!(events.last(), Some(&Out::Exited(pb::TurnExited::default())));
}

#[tokio::test]
async fn a_workspace_that_does_not_exist_fails_to_start() {
    let f = fixture();
    f.bin.script("codex", "exit 0");
    let mut req = f.request("thr_1", "codex");
    req.workspace = f.file("missing").display().to_string();
    let events = f.run(req).await;
    let error = error_of(&events);
    assert_eq!(error.code, "PROVIDER_FAILED");
    // What failed, not where: the workspace's path goes to the log only.
    assert_eq!(
        error.message,
        "could not start codex: No such file or directory (os error 2); see the Pedelec log"
    );
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn bad_requests_are_refused_before_anything_runs() {
    let f = fixture();
    let code = |r: Result<mpsc::Receiver<pb::ProviderEvent>, ProviderError>| {
        r.map(|_| ()).unwrap_err().code().as_str()
    };
    let mut req = f.request("", "codex");
    assert_eq!(code(f.turns.run(req.clone())), "INVALID_INPUT");
    req.session_id = "thr_1".into();
    req.provider = "gemini".into();
    assert_eq!(code(f.turns.run(req.clone())), "PROVIDER_NOT_FOUND");
    req.provider = "codex".into();
    req.workspace = "relative".into();
    assert_eq!(code(f.turns.run(req.clone())), "INVALID_INPUT");
    req.workspace = f.work.path().display().to_string();
    req.access = pb::AccessLevel::Unspecified as i32;
    assert_eq!(code(f.turns.run(req.clone())), "INVALID_INPUT");
    req.access = pb::AccessLevel::Full as i32;
    req.tool_env.insert("A=B".into(), "x".into());
    assert_eq!(code(f.turns.run(req)), "INVALID_INPUT");
}

#[tokio::test]
async fn antigravity_below_full_access_is_refused_before_it_starts() {
    let f = fixture();
    let ran = f.file("ran");
    f.bin.script("agy", &format!("touch {}", ran.display()));
    for level in [pb::AccessLevel::Tools, pb::AccessLevel::Edit] {
        let mut req = f.request("thr_1", "antigravity");
        req.access = level as i32;
        let events = f.run(req).await;
        assert_eq!(error_of(&events).code, "PROVIDER_NOT_GRANTED", "{level:?}");
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(!ran.exists(), "agy ran at {level:?}");
    }
}

#[tokio::test]
async fn the_level_reaches_the_cli_as_its_own_flags() {
    let f = fixture();
    let argv = f.file("argv");
    f.bin.script(
        "claude",
        &format!("for a in \"$@\"; do echo \"$a\"; done > {}", argv.display()),
    );
    for (level, expected) in [
        (pb::AccessLevel::Tools, "--permission-mode=default"),
        (pb::AccessLevel::Edit, "--permission-mode=acceptEdits"),
        (pb::AccessLevel::Full, "--dangerously-skip-permissions"),
    ] {
        let mut req = f.request("thr_1", "claude");
        req.access = level as i32;
        let events = f.run(req).await;
        assert_eq!(events.last(), Some(&exited_code(0)), "{level:?}");
        let args = std::fs::read_to_string(&argv).unwrap();
        assert!(args.lines().any(|a| a == expected), "{level:?}: {args}");
    }
}

/// A CLI that hangs with a child of its own; writes both pids.
fn hanging(f: &Fixture, name: &str) -> (PathBuf, PathBuf) {
    let (me, child) = (f.file("self.pid"), f.file("child.pid"));
    f.bin.script(
        name,
        &format!(
            "echo $$ > {me}\n/bin/sleep 60 &\necho $! > {child}\necho '{{\"type\":\"thread.started\",\"thread_id\":\"t1\"}}'\nwait",
            me = me.display(),
            child = child.display()
        ),
    );
    (me, child)
}

#[tokio::test]
async fn cancel_kills_the_whole_group_and_ends_with_exited() {
    let f = fixture();
    let (me, child) = hanging(&f, "codex");
    let mut rx = f.turns.run(f.request("thr_1", "codex")).unwrap();
    let Out::Started(started) = next(&mut rx).await else {
        panic!("started first")
    };
    assert_eq!(
        next(&mut rx).await,
        Out::ProviderSessionId(pb::ProviderSessionId { id: "t1".into() })
    );
    let me = read_when_written(&me).await;
    let child = read_when_written(&child).await;
    assert_eq!(me.trim(), started.pid.to_string());
    assert!(f.turns.is_running("thr_1"));

    assert!(f.turns.cancel("thr_1").await);
    assert!(wait_dead(&me).await, "the CLI survived");
    assert!(wait_dead(&child).await, "its child survived");
    let rest = collect(rx).await;
    assert_eq!(
        rest,
        [Out::Exited(pb::TurnExited {
            code: None,
            signal: Some(libc::SIGTERM)
        })]
    );
    assert!(!f.turns.is_running("thr_1"));
    assert!(!f.turns.cancel("thr_1").await);
}

#[tokio::test]
async fn a_cli_ignoring_sigterm_is_killed_after_the_grace() {
    let f = fixture();
    let me = f.file("self.pid");
    f.bin.script(
        "cursor-agent",
        &format!(
            "trap '' TERM\necho $$ > {}\nwhile :; do /bin/sleep 1; done",
            me.display()
        ),
    );
    let mut rx = f.turns.run(f.request("thr_1", "cursor")).unwrap();
    assert!(matches!(next(&mut rx).await, Out::Started(_)));
    let me = read_when_written(&me).await;
    assert!(f.turns.cancel("thr_1").await);
    assert!(dead(&me));
    assert_eq!(
        collect(rx).await,
        [Out::Exited(pb::TurnExited {
            code: None,
            signal: Some(libc::SIGKILL)
        })]
    );
}

#[tokio::test]
async fn dropping_the_stream_kills_the_group() {
    let f = fixture();
    let (me, child) = hanging(&f, "codex");
    let mut rx = f.turns.run(f.request("thr_1", "codex")).unwrap();
    assert!(matches!(next(&mut rx).await, Out::Started(_)));
    let me = read_when_written(&me).await;
    let child = read_when_written(&child).await;
    drop(rx);
    assert!(wait_dead(&me).await, "the CLI survived");
    assert!(wait_dead(&child).await, "its child survived");
    for _ in 0..100 {
        if !f.turns.is_running("thr_1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!f.turns.is_running("thr_1"));
}

#[tokio::test]
async fn a_new_turn_of_the_same_thread_replaces_the_old_one() {
    let f = fixture();
    let (me, child) = hanging(&f, "codex");
    let mut first = f.turns.run(f.request("thr_1", "codex")).unwrap();
    assert!(matches!(next(&mut first).await, Out::Started(_)));
    let me = read_when_written(&me).await;
    let child = read_when_written(&child).await;

    f.bin
        .script("codex", &format!("/bin/cat <<'EOF'\n{CODEX_LINES}\nEOF"));
    let second = f.run(f.request("thr_1", "codex")).await;
    assert!(dead(&me) && dead(&child), "the old turn's group survived");
    assert_eq!(second.last(), Some(&exited_code(0)));
    assert!(matches!(collect(first).await.last(), Some(Out::Exited(_))));
    // Other threads are independent.
    assert!(!f.turns.cancel("thr_2").await);
}

#[tokio::test]
async fn leftover_children_are_ended_when_the_cli_exits() {
    let f = fixture();
    let (quiet, holder) = (f.file("quiet.pid"), f.file("holder.pid"));
    // One leftover detached from the pipes, one still holding stdout open.
    f.bin.script(
        "codex",
        &format!(
            "/bin/sleep 60 >/dev/null 2>&1 </dev/null &\necho $! > {}\n/bin/sleep 60 &\necho $! > {}\n{}\nexit 0",
            quiet.display(),
            holder.display(),
            r#"echo '{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"hi"}}'"#
        ),
    );
    let events = f.run(f.request("thr_1", "codex")).await;
    assert_eq!(events[1..], [Out::Chat("hi".into()), exited_code(0)]);
    assert!(wait_dead(&std::fs::read_to_string(&quiet).unwrap()).await);
    assert!(wait_dead(&std::fs::read_to_string(&holder).unwrap()).await);
}

#[tokio::test]
async fn an_over_long_line_without_any_answer_fails_the_turn() {
    let f = fixture();
    let long = MAX_LINE + 10;
    f.bin.script(
        "codex",
        &format!("/usr/bin/head -c {long} /dev/zero | /usr/bin/tr '\\0' a\necho"),
    );
    let events = f.run(f.request("thr_1", "codex")).await;
    let error = error_of(&events);
    assert_eq!(error.code, "PROVIDER_FAILED");
    assert!(error.message.contains("discarded"), "{}", error.message);
    assert_eq!(details(error)["droppedLines"], 1);
    assert_eq!(events.last(), Some(&exited_code(0)));

    // With an answer beside it, the long line is a warning and the turn goes on.
    f.bin.script(
        "codex",
        &format!(
            "/usr/bin/head -c {long} /dev/zero | /usr/bin/tr '\\0' a\necho\n{}",
            r#"echo '{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"ok"}}'"#
        ),
    );
    let events = f.run(f.request("thr_1", "codex")).await;
    match &events[1] {
        Out::Warning(w) => {
            assert_eq!(w.code, "MESSAGE_TOO_LARGE");
            assert_eq!(details(w)["droppedLines"], 1);
        }
        other => panic!("expected a warning, got {other:?}"),
    }
    assert_eq!(events[2..], [Out::Chat("ok".into()), exited_code(0)]);
}

#[tokio::test]
async fn a_prompt_with_nul_is_invalid_input() {
    let f = fixture();
    f.bin.script("codex", "echo ran");
    let mut req = f.request("thr_1", "codex");
    req.prompt = "a\0b".into();
    let events = f.run(req).await;
    assert_eq!(error_of(&events).code, "INVALID_INPUT");
    assert_eq!(events.last(), Some(&Out::Exited(pb::TurnExited::default())));
}

#[tokio::test]
async fn an_argv_prompt_over_the_cap_is_limit_exceeded() {
    let f = fixture();
    let ran = f.file("ran");
    f.bin
        .script("agy", &format!("echo yes > {}", ran.display()));
    let mut req = f.request("thr_1", "antigravity");
    req.prompt = "x".repeat(crate::adapters::MAX_ARGV_PROMPT + 1);
    let events = f.run(req).await;
    let error = error_of(&events);
    assert_eq!(error.code, "LIMIT_EXCEEDED");
    assert!(
        error.message.contains("at most 102400 bytes"),
        "{}",
        error.message
    );
    assert_eq!(events.last(), Some(&Out::Exited(pb::TurnExited::default())));
    assert!(!ran.exists(), "agy must not have run");
    // At the cap it runs.
    let mut req = f.request("thr_2", "antigravity");
    req.prompt = "x".repeat(crate::adapters::MAX_ARGV_PROMPT);
    let events = f.run(req).await;
    assert_eq!(events.last(), Some(&exited_code(0)));
    assert!(ran.exists());
    // A CLI that reads stdin has no such cap.
    f.bin.script("codex", "/bin/cat > /dev/null");
    let mut req = f.request("thr_3", "codex");
    req.prompt = "x".repeat(MAX_ARG_BYTES * 2);
    let events = f.run(req).await;
    assert_eq!(events.last(), Some(&exited_code(0)), "{events:?}");
}

/// A model, an effort or a session id that could read as an option (or
/// split into more arguments) is refused before anything runs.
#[tokio::test]
async fn values_that_could_read_as_options_are_invalid_input() {
    let f = fixture();
    let ran = f.file("ran");
    f.bin
        .script("claude", &format!("echo yes > {}", ran.display()));
    let profile = |model: &str, effort: &str| pb::ResolvedProfile {
        model: model.into(),
        effort: effort.into(),
        ..Default::default()
    };
    let cases = [
        (Some(profile("--dangerously-skip-permissions", "")), None),
        (Some(profile("gpt 5", "")), None),
        (Some(profile("m", "-x")), None),
        (None, Some("--resume")),
        (None, Some("a b")),
    ];
    for (profile, resume) in cases {
        let mut req = f.request("thr_1", "claude");
        req.profile = profile.clone();
        req.provider_session_id = resume.map(str::to_string);
        let status = f.turns.run(req).expect_err("refused");
        assert_eq!(
            pedelec_common::code_of_status(&tonic::Status::from(status)).as_deref(),
            Some("INVALID_INPUT"),
            "{profile:?} {resume:?}"
        );
    }
    assert!(!ran.exists(), "claude must not have run");
}

#[tokio::test]
async fn a_running_turn_is_recorded_and_the_record_goes_when_it_ends() {
    let runtime = tempfile::tempdir().unwrap();
    let mut f = fixture();
    f.turns = Turns::new(f.bin.env())
        .with_grace(Duration::from_millis(500))
        .with_records(runtime.path(), super::RecordKey::new(None));
    let env = f.file("env");
    f.bin.script(
        "cursor-agent",
        &format!("/usr/bin/env > {}\n/bin/sleep 60", env.display()),
    );
    let mut rx = f.turns.run(f.request("thr_1", "cursor")).unwrap();
    let Out::Started(started) = next(&mut rx).await else {
        panic!("started first")
    };
    let record = runtime
        .path()
        .join(TURN_RECORDS)
        .join(started.pid.to_string());
    assert!(record.exists(), "record of the running turn");
    let env = read_when_written(&env).await;
    let marker = format!("PEDELEC_RUNTIME_DIR={}", runtime.path().display());
    assert!(env.lines().any(|l| l == marker), "{env}");
    assert!(f.turns.cancel("thr_1").await);
    assert!(!record.exists(), "record removed when the turn ended");
}

#[tokio::test]
async fn stop_all_ends_every_turn() {
    let f = fixture();
    let (me, child) = hanging(&f, "codex");
    let mut rx = f.turns.run(f.request("thr_1", "codex")).unwrap();
    assert!(matches!(next(&mut rx).await, Out::Started(_)));
    let me = read_when_written(&me).await;
    let child = read_when_written(&child).await;
    f.turns.stop_all(Duration::from_secs(5)).await;
    assert!(dead(&me), "the CLI survived");
    assert!(wait_dead(&child).await, "its child survived");
    assert!(!f.turns.is_running("thr_1"));
}

#[tokio::test]
async fn the_agent_dies_with_the_thread_that_spawned_it() {
    // PR_SET_PDEATHSIG: a runtime on its own thread spawns the turn, then the
    // thread ends (as the whole service would on kill -9).
    let f = std::sync::Arc::new(fixture());
    let me = f.file("self.pid");
    f.bin.script(
        "cursor-agent",
        &format!("echo $$ > {}\nexec /bin/sleep 60", me.display()),
    );
    let turns_f = std::sync::Arc::clone(&f);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut rx = turns_f
                .turns
                .run(turns_f.request("thr_1", "cursor"))
                .unwrap();
            assert!(matches!(next(&mut rx).await, Out::Started(_)));
            read_when_written(&turns_f.file("self.pid")).await;
            // Leak the receiver and the task: only the thread's exit may kill it.
            std::mem::forget(rx);
        });
        std::mem::forget(rt);
    })
    .join()
    .unwrap();
    let pid = std::fs::read_to_string(&me).unwrap();
    assert!(
        wait_dead(&pid).await,
        "the agent outlived its spawning thread"
    );
}

/// A codex new enough by its version whose app-server does not start: the
/// turn runs `codex exec --json` at once, and later turns skip the attempt.
#[tokio::test]
async fn codex_without_a_usable_app_server_falls_back_to_exec() {
    let bin = Bin::new();
    let work = tempfile::tempdir().unwrap();
    let tried = work.path().join("app-server-tried");
    bin.script(
        "codex",
        &format!(
            "case \"$1\" in\n--version) echo 'codex-cli 0.171.0';;\napp-server) echo x >> {tried}; echo \"error: unrecognized subcommand 'app-server'\" >&2; exit 2;;\n*) /bin/cat <<'EOF'\n{CODEX_LINES}\nEOF\nesac",
            tried = tried.display()
        ),
    );
    let turns = Turns::new(bin.env()).with_grace(Duration::from_millis(500));
    let f = Fixture { bin, work, turns };
    for _ in 0..2 {
        let events = f.run(f.request("thr_1", "codex")).await;
        assert!(
            events.contains(&Out::Chat("MOCK_DONE: the command ran.".into())),
            "{events:?}"
        );
        assert_eq!(events.last(), Some(&exited_code(0)));
    }
    assert_eq!(
        std::fs::read_to_string(&tried).unwrap(),
        "x\n",
        "tried once"
    );
    assert_eq!(f.turns.codex_app_servers().running(), 0);
}

/// A codex older than the app-server protocol Pedelec speaks runs exec
/// without trying its app-server.
#[tokio::test]
async fn an_older_codex_runs_exec() {
    let bin = Bin::new();
    let work = tempfile::tempdir().unwrap();
    let tried = work.path().join("app-server-tried");
    bin.script(
        "codex",
        &format!(
            "case \"$1\" in\n--version) echo 'codex-cli 0.170.2';;\napp-server) touch {tried}; exit 2;;\n*) /bin/cat <<'EOF'\n{CODEX_LINES}\nEOF\nesac",
            tried = tried.display()
        ),
    );
    let turns = Turns::new(bin.env()).with_grace(Duration::from_millis(500));
    let f = Fixture { bin, work, turns };
    let events = f.run(f.request("thr_1", "codex")).await;
    assert!(events.contains(&Out::Chat("MOCK_DONE: the command ran.".into())));
    assert!(!tried.exists());
}

/// Two lines of a real `opencode run --format json` (opencode_run2.jsonl).
const OPENCODE_LINES: &str = r#"{"type":"text","timestamp":1796057125236,"sessionID":"ses_dd2a7897fffeDHAglomGSUFLvm","part":{"id":"prt_1","messageID":"msg_1","sessionID":"ses_dd2a7897fffeDHAglomGSUFLvm","type":"text","text":"MOCK_DONE: the command ran.","time":{"start":1,"end":2}}}
{"type":"step_finish","timestamp":1796057125240,"sessionID":"ses_dd2a7897fffeDHAglomGSUFLvm","part":{"id":"prt_2","messageID":"msg_1","sessionID":"ses_dd2a7897fffeDHAglomGSUFLvm","type":"step-finish","tokens":{"input":100,"output":20,"cache":{"read":0,"write":0}}}}"#;

/// An opencode new enough by its version whose server says where it
/// listens but serves no event stream there: the turn runs `opencode run`
/// at once, later turns skip the attempt, and the server is gone.
#[tokio::test]
async fn opencode_without_a_usable_server_falls_back_to_run() {
    let bin = Bin::new();
    let work = tempfile::tempdir().unwrap();
    let tried = work.path().join("serve-tried");
    bin.script(
        "opencode",
        &format!(
            "case \"$1\" in\n--version) echo '1.18.33';;\nserve) echo $$ >> {tried}; echo 'opencode server listening on http://127.0.0.1:1'; exec /bin/sleep 60;;\n*) /bin/cat <<'EOF'\n{OPENCODE_LINES}\nEOF\nesac",
            tried = tried.display()
        ),
    );
    let turns = Turns::new(bin.env()).with_grace(Duration::from_millis(500));
    let f = Fixture { bin, work, turns };
    for _ in 0..2 {
        let events = f.run(f.request("thr_1", "opencode")).await;
        assert!(
            events.contains(&Out::Chat("MOCK_DONE: the command ran.".into())),
            "{events:?}"
        );
        assert!(!events.iter().any(|e| matches!(e, Out::ChatDelta(_))));
        assert_eq!(events.last(), Some(&exited_code(0)));
    }
    let pids = std::fs::read_to_string(&tried).unwrap();
    assert_eq!(pids.lines().count(), 1, "tried once: {pids:?}");
    assert!(
        wait_dead(pids.trim()).await,
        "the failed server was left running"
    );
    assert_eq!(f.turns.opencode_servers().running(), 0);
}

/// An opencode older than the server interface Pedelec was verified
/// against runs `opencode run` without trying its server.
#[tokio::test]
async fn an_older_opencode_runs_run() {
    let bin = Bin::new();
    let work = tempfile::tempdir().unwrap();
    let tried = work.path().join("serve-tried");
    bin.script(
        "opencode",
        &format!(
            "case \"$1\" in\n--version) echo '1.14.48';;\nserve) touch {tried}; exit 2;;\n*) /bin/cat <<'EOF'\n{OPENCODE_LINES}\nEOF\nesac",
            tried = tried.display()
        ),
    );
    let turns = Turns::new(bin.env()).with_grace(Duration::from_millis(500));
    let f = Fixture { bin, work, turns };
    let events = f.run(f.request("thr_1", "opencode")).await;
    assert!(events.contains(&Out::Chat("MOCK_DONE: the command ran.".into())));
    assert!(!tried.exists());
}
