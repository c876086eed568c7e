//! The real `codex`, `claude` and `opencode` CLIs run by Pedelec's services
//! against a local mock model server (`tests/agents/mock-model-server.mjs`),
//! seen through SessionService as a client sees them: a first turn, a resumed
//! second turn, an effort profile, a model error and a cancelled hanging turn.
//!
//! The CLIs are the versions pinned in `tests/agents/package.json`;
//! `tests/run.sh` installs them (`npm ci`) and exports `PEDELEC_AGENTS_BIN`.
//! Each CLI gets its own test fn, so cargo runs the three in parallel.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_proto::v1 as pb;
use pedelec_tests::agents;
use pedelec_tests::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Access levels with these CLIs (a submodule, so it runs where they do).
#[path = "levels.rs"]
mod levels;

/// A ceiling for anything a real CLI does: they take seconds to start, and
/// three of them share two cores. Never a performance assertion.
const CLI_CEILING: Duration = Duration::from_secs(180);

const FIRST_TEXT: &str = "first question about ALPHA-7731";
const FIRST_REPLY: &str = "First reply from the mock about BRAVO-4410.";
const SECOND_TEXT: &str = "second question";
const SECOND_REPLY: &str = "Second reply from the mock.";
const THIRD_TEXT: &str = "third question after the reactivation";
const THIRD_REPLY: &str = "Third reply, after the end.";
const EFFORT_REPLY: &str = "Thinking hard, the mock answers.";
const MOCK_ERROR: &str = "mock: model overloaded for test";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cli {
    Codex,
    Claude,
    OpenCode,
}

impl Cli {
    fn program(self) -> &'static str {
        match self {
            Cli::Codex => "codex",
            Cli::Claude => "claude",
            Cli::OpenCode => "opencode",
        }
    }

    /// The provider code in Pedelec.
    fn provider(self) -> &'static str {
        self.program()
    }

    /// The model of the default profile (a name each CLI knows, so no
    /// warnings or catalogue look-ups).
    fn model(self) -> &'static str {
        match self {
            Cli::Codex => "gpt-5.5",
            Cli::Claude => "claude-sonnet-4-5",
            Cli::OpenCode => "mock/mock-model",
        }
    }

    /// The model of the "high" profile. Claude Code 2.1 sends `--effort`
    /// only for models that support it (`output_config.effort`); for
    /// claude-sonnet-4-5 the request is the same with or without the flag.
    fn high_model(self) -> &'static str {
        match self {
            Cli::Claude => "claude-opus-4-5",
            other => other.model(),
        }
    }

    /// The mock paths of this CLI's model requests.
    fn is_model_path(self, path: &str) -> bool {
        match self {
            Cli::Codex => path.starts_with("/v1/responses"),
            Cli::Claude => path.starts_with("/v1/messages") && !path.contains("count_tokens"),
            Cli::OpenCode => path.starts_with("/v1/chat/completions"),
        }
    }

    /// The word in the command line of the long-lived server Pedelec keeps
    /// per thread for this CLI.
    fn server_word(self) -> &'static str {
        match self {
            Cli::Codex => "app-server",
            Cli::OpenCode => "serve",
            Cli::Claude => unreachable!("claude runs one process per turn"),
        }
    }

    /// The mock's error text. opencode's server retries a model error whose
    /// text says "overloaded" (with growing pauses, as its TUI does), so its
    /// error case uses a text that is not retried.
    fn model_error_text(self) -> &'static str {
        match self {
            Cli::OpenCode => "mock: invalid request for test",
            _ => MOCK_ERROR,
        }
    }

    /// The effort the request carries, where this CLI puts it.
    fn effort_of(self, body: &Value) -> Value {
        match self {
            Cli::Codex => body["reasoning"]["effort"].clone(),
            Cli::Claude => body["output_config"]["effort"].clone(),
            Cli::OpenCode => body["reasoning_effort"].clone(),
        }
    }
}

/// The folder with the real CLIs, which must be installed.
fn installed_agents_bin() -> PathBuf {
    let dir = agents::agents_bin();
    for cli in ["codex", "claude", "opencode"] {
        assert!(
            dir.join(cli).exists(),
            "the real agent CLIs are not installed ({} is missing): `tests/setup.sh` installs them \
             (npm install in tests/agents)",
            dir.join(cli).display()
        );
    }
    dir
}

/// The mock model server, in its own process group; dropping it kills the group.
struct Mock {
    child: Child,
    port: u16,
}

impl Mock {
    fn start() -> Mock {
        let script = agents::mock_model_server();
        assert!(
            script.exists(),
            "{} is missing: tests/agents is incomplete",
            script.display()
        );
        let mut cmd = Command::new("/usr/bin/node");
        cmd.arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env_remove("PEDELEC_RUNTIME_DIR");
        set_own_process_group(&mut cmd);
        let mut child = cmd.spawn().expect("start node mock-model-server.mjs");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut mock = Mock { child, port: 0 };
        let line = rx
            .recv_timeout(PATIENCE)
            .expect("the mock printed no port line");
        let v: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("mock port line {line:?}: {e}"));
        mock.port = v["port"].as_u64().expect("port") as u16;
        mock
    }

    async fn http(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let port = self.port;
        let response = tokio::time::timeout(PATIENCE, async move {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect to the mock");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            stream.read_to_end(&mut out).await.unwrap();
            out
        })
        .await
        .expect("the mock did not answer a control request");
        let text = String::from_utf8_lossy(&response);
        let (head, payload) = text.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "{method} {path}: {head}\n{payload}"
        );
        let payload = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(payload)
        } else {
            payload.to_string()
        };
        serde_json::from_str(&payload).unwrap_or(Value::Null)
    }

    async fn script(&self, script: Value) {
        self.http("POST", "/_script", Some(&script)).await;
    }

    async fn requests(&self) -> Vec<Value> {
        match self.http("GET", "/_requests", None).await {
            Value::Array(all) => all,
            other => panic!("/_requests answered {other}"),
        }
    }

    async fn clear(&self) {
        self.http("DELETE", "/_requests", None).await;
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        signal(-(self.child.id() as i32), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The agent's main model requests: this CLI's path and a body that offers
/// tools (auxiliary requests such as opencode's title request offer none).
fn model_requests(cli: Cli, all: &[Value]) -> Vec<Value> {
    all.iter()
        .filter(|r| cli.is_model_path(r["path"].as_str().unwrap_or_default()))
        .filter(|r| {
            r["body"]["tools"]
                .as_array()
                .is_some_and(|tools| !tools.is_empty())
        })
        .map(|r| r["body"].clone())
        .collect()
}

/// Writes each CLI's config into the services' HOME and sets the env the
/// services pass on, as `tests/agents/run-cli.sh` does; links the real CLI
/// into the stubs folder (first on PATH).
fn configure(env: &mut TestEnv, cli: Cli, port: u16) {
    let bin = installed_agents_bin();
    std::os::unix::fs::symlink(bin.join(cli.program()), env.stubs().join(cli.program()))
        .expect("link the real CLI into the stubs folder");

    let home = env.home();
    let xdg = [
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_STATE_HOME", home.join(".local/state")),
        ("XDG_CACHE_HOME", home.join(".cache")),
    ];
    for (key, dir) in &xdg {
        std::fs::create_dir_all(dir).unwrap();
        env.extra_env
            .insert(key.to_string(), dir.display().to_string());
    }
    let mut set = |k: &str, v: &str| {
        env.extra_env.insert(k.into(), v.into());
    };
    match cli {
        Cli::Codex => {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            agents::write_codex_mock_config(&codex_home, port).unwrap();
            set("CODEX_HOME", &codex_home.display().to_string());
        }
        Cli::Claude => {
            set("ANTHROPIC_BASE_URL", &format!("http://127.0.0.1:{port}"));
            set("ANTHROPIC_API_KEY", "x");
            set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            set("DISABLE_AUTOUPDATER", "1");
            set("DISABLE_TELEMETRY", "1");
            // ProviderService adds IS_SANDBOX=1 itself when running as root.
        }
        Cli::OpenCode => {
            let dir = home.join(".config/opencode");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("opencode.json"),
                agents::opencode_mock_config(port).to_string(),
            )
            .unwrap();
            set("OPENCODE_DISABLE_MODELS_FETCH", "1");
            set("OPENCODE_DISABLE_AUTOUPDATE", "1");
        }
    }
}

fn settings(cli: Cli) -> pb::Settings {
    let profile = |model: &str, effort: &str| pb::EffortProfile {
        model: model.into(),
        effort: effort.into(),
    };
    let mut settings = pb::Settings::default();
    settings.profiles.insert(
        cli.provider().into(),
        pb::ProviderProfiles {
            levels: [
                ("default".to_string(), profile(cli.model(), "")),
                ("high".to_string(), profile(cli.high_model(), "high")),
            ]
            .into(),
        },
    );
    settings
}

/// Reads events with a ceiling fit for a real CLI.
async fn next_event(events: &mut Events, cli: Cli, seen: &[pb::SessionEvent]) -> pb::SessionEvent {
    match tokio::time::timeout(CLI_CEILING, events.0.message()).await {
        Ok(Ok(Some(e))) => e,
        Ok(other) => panic!("{cli:?}: attach stream ended: {other:?}"),
        Err(_) => panic!(
            "{cli:?}: no event within {CLI_CEILING:?}; seen so far: {:?}",
            kinds(seen)
        ),
    }
}

/// Reads one operation's events up to the status that follows its end.
async fn operation(events: &mut Events, cli: Cli) -> Vec<pb::SessionEvent> {
    let mut seen = Vec::new();
    loop {
        let e = next_event(events, cli, &seen).await;
        let done = is_finished(&e);
        seen.push(e);
        if done {
            break;
        }
    }
    let e = next_event(events, cli, &seen).await;
    seen.push(e);
    seen
}

/// A completed turn: started, running, chat (with or without deltas) whose
/// text is the reply, usage, completed, idle.
fn assert_completed(cli: Cli, seen: &[pb::SessionEvent], reply: &str) {
    let k = kinds(seen);
    eprintln!("{cli:?}: turn events: {k:?}");
    let n = k.len();
    assert!(n >= 5, "{cli:?}: {k:?}");
    assert_eq!(
        k[..2],
        ["operation_started", "status:running"],
        "{cli:?}: {k:?}"
    );
    assert_eq!(
        k[n - 2..],
        ["operation_finished:completed", "status:idle"],
        "{cli:?}: {k:?}"
    );
    let middle = &k[2..n - 2];
    assert!(
        middle
            .iter()
            .all(|k| k == "chat" || k == "chat_delta" || k == "usage"),
        "{cli:?}: unexpected events in a plain turn: {k:?}"
    );
    assert!(
        middle.iter().any(|k| k == "chat"),
        "{cli:?}: no chat: {k:?}"
    );
    assert!(
        middle.iter().any(|k| k == "usage"),
        "{cli:?}: no usage: {k:?}"
    );
    assert_eq!(chat_text(seen).trim(), reply, "{cli:?}: {k:?}");
    let deltas = delta_text(seen);
    if !deltas.is_empty() {
        assert_eq!(deltas.trim(), reply, "{cli:?}: deltas: {k:?}");
    }
    let usage = first_usage(seen).unwrap();
    assert!(usage.total_tokens > 0, "{cli:?}: {usage:?}");
}

struct Run {
    cli: Cli,
    env: TestEnv,
    mock: Mock,
    launcher: Launcher,
    sessions: Sessions,
}

impl Run {
    async fn start(cli: Cli) -> Run {
        Run::start_with(cli, &[]).await
    }

    /// `env`: more variables for the services (ProviderService passes them on).
    async fn start_with(cli: Cli, env_vars: &[(&str, &str)]) -> Run {
        let mut env = TestEnv::new();
        let mock = Mock::start();
        configure(&mut env, cli, mock.port);
        for (k, v) in env_vars {
            env.extra_env.insert(k.to_string(), v.to_string());
        }
        let launcher = env.up().await;
        env.update_settings(settings(cli)).await;
        let sessions = env.session().await;
        Run {
            cli,
            env,
            mock,
            launcher,
            sessions,
        }
    }

    async fn thread(&mut self, effort_level: Option<&str>) -> (String, Events) {
        self.thread_with(effort_level, None).await
    }

    async fn thread_with(
        &mut self,
        effort_level: Option<&str>,
        skills: Option<prost_types::Struct>,
    ) -> (String, Events) {
        let created = self
            .sessions
            .create_session(pb::CreateSessionRequest {
                effort_level: effort_level.map(Into::into),
                skills,
                ..create_session_request(Some(self.cli.provider()))
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(created.provider, self.cli.provider());
        assert_eq!(created.effort_level, effort_level.unwrap_or("default"));
        let id = created.session_id;
        let events = attach_past_snapshot(&mut self.sessions, &id, "route-1").await;
        (id, events)
    }

    async fn send(&mut self, id: &str, text: &str) {
        self.sessions
            .send_text(send_text_request(id, text))
            .await
            .unwrap();
    }

    /// The provider session id in the thread's journal record.
    fn journal_provider_session(&self, id: &str) -> Option<String> {
        let path = find_file(&self.env.data_dir(), &format!("{id}.json"))
            .unwrap_or_else(|| panic!("no journal record {id}.json under the data dir"));
        let record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        record["provider_session_id"].as_str().map(str::to_owned)
    }

    /// Pids of processes of this test other than the launcher and its
    /// children (the services and, in the release build, the fork server).
    async fn leftovers(&self) -> Vec<u32> {
        let status = self.env.supervisor_status().await.expect("launcher status");
        let launcher = u64::from(status.launcher_pid);
        processes_using(&self.env.runtime_dir())
            .into_iter()
            .filter(|p| *p != status.launcher_pid && *p != self.launcher.pid())
            .filter(|p| stat_field(*p, 4) != Some(launcher))
            .collect()
    }
}

/// Every process of this CLI (bwrap, which starts it, aside) is in a mount
/// and a pid namespace other than the test's.
fn assert_confined(run: &Run) {
    let ns = |pid: &str, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
    let cli: Vec<u32> = processes_using(&run.env.runtime_dir())
        .into_iter()
        .filter(|p| {
            let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let argv0 = argv.split(|b| *b == 0).next().unwrap_or_default();
            !argv0.ends_with(b"bwrap") && describe(*p).contains(run.cli.program())
        })
        .collect();
    assert!(!cli.is_empty(), "{:?}: no CLI process found", run.cli);
    for pid in cli {
        for kind in ["mnt", "pid"] {
            assert_ne!(
                ns(&pid.to_string(), kind),
                ns("self", kind),
                "{:?}: {} shares the test's {kind} namespace",
                run.cli,
                describe(pid)
            );
        }
    }
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if entry.file_name() == name {
            return Some(path);
        }
    }
    None
}

/// Whether `ancestor` is among `pid`'s parents (by /proc/<pid>/stat).
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let parent = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // The command name may hold spaces and parentheses: fields follow the last ')'.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let mut p = pid;
    while let Some(up) = parent(p) {
        if up == ancestor {
            return true;
        }
        if up <= 1 {
            return false;
        }
        p = up;
    }
    false
}

fn describe(pid: u32) -> String {
    format!("{pid}: {}", command_line(pid))
}

/// (a) a first turn and (b) a resumed second turn.
async fn first_turn_then_resume(run: &mut Run) {
    let cli = run.cli;
    run.mock
        .script(json!({"mode": "reply", "text": FIRST_REPLY}))
        .await;
    run.mock.clear().await;
    let (id, mut events) = run.thread(None).await;

    run.send(&id, FIRST_TEXT).await;
    let first = operation(&mut events, cli).await;
    assert_completed(cli, &first, FIRST_REPLY);
    let provider_session = run.journal_provider_session(&id);
    assert!(
        provider_session.as_deref().is_some_and(|s| !s.is_empty()),
        "{cli:?}: no provider session id in the journal after the first turn"
    );
    let first_requests = model_requests(cli, &run.mock.requests().await);
    assert!(
        !first_requests.is_empty(),
        "{cli:?}: the mock saw no model request"
    );
    assert!(
        first_requests[0].to_string().contains(FIRST_TEXT),
        "{cli:?}: the first request lacks the user's text"
    );
    eprintln!(
        "{cli:?}: default-profile effort in the request: {}",
        cli.effort_of(&first_requests[0])
    );

    run.mock
        .script(json!({"mode": "reply", "text": SECOND_REPLY}))
        .await;
    run.mock.clear().await;
    run.send(&id, SECOND_TEXT).await;
    let second = operation(&mut events, cli).await;
    assert_completed(cli, &second, SECOND_REPLY);
    assert_eq!(
        run.journal_provider_session(&id),
        provider_session,
        "{cli:?}: the provider session changed on resume"
    );
    let resumed = model_requests(cli, &run.mock.requests().await);
    let last = resumed
        .last()
        .unwrap_or_else(|| panic!("{cli:?}: the mock saw no second model request"))
        .to_string();
    assert!(
        last.contains(SECOND_TEXT),
        "{cli:?}: the second request lacks the new text"
    );
    assert!(
        last.contains(FIRST_TEXT) && last.contains(FIRST_REPLY),
        "{cli:?}: the second request does not carry the first turn's conversation: {}",
        &last[..last.len().min(4000)]
    );
}

/// (c) the "high" effort profile reaches the model request.
async fn effort_high(run: &mut Run) {
    let cli = run.cli;
    run.mock
        .script(json!({"mode": "reply", "text": EFFORT_REPLY}))
        .await;
    run.mock.clear().await;
    let (id, mut events) = run.thread(Some("high")).await;
    run.send(&id, "think hard").await;
    let seen = operation(&mut events, cli).await;
    assert_completed(cli, &seen, EFFORT_REPLY);
    let requests = model_requests(cli, &run.mock.requests().await);
    assert!(!requests.is_empty(), "{cli:?}: no model request");
    for body in &requests {
        eprintln!(
            "{cli:?}: high-profile request: model {} effort {}",
            body["model"],
            cli.effort_of(body)
        );
        assert_eq!(
            cli.effort_of(body),
            json!("high"),
            "{cli:?}: effort missing from the request (model {})",
            body["model"]
        );
    }
}

/// (d) a model error keeps the provider's own message.
async fn model_error(run: &mut Run) {
    let cli = run.cli;
    let mock_error = cli.model_error_text();
    run.mock
        .script(json!({"mode": "error", "message": mock_error, "status": 400}))
        .await;
    let (id, mut events) = run.thread(None).await;
    run.send(&id, "this will fail").await;
    let seen = operation(&mut events, cli).await;
    let k = kinds(&seen);
    eprintln!("{cli:?}: error turn events: {k:?}");
    let n = k.len();
    assert_eq!(
        k[..2],
        ["operation_started", "status:running"],
        "{cli:?}: {k:?}"
    );
    assert_eq!(
        k[n - 2..],
        ["operation_finished:failed", "status:error"],
        "{cli:?}: {k:?}"
    );
    let errors: Vec<&pb::PedelecError> = seen
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Error(e)) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{cli:?}: {k:?}");
    eprintln!(
        "{cli:?}: error event: code {} source {} message {:?}",
        errors[0].code, errors[0].source, errors[0].message
    );
    assert!(
        errors[0].message.contains(mock_error),
        "{cli:?}: the error does not carry the provider's message: {:?}",
        errors[0]
    );
    let snapshot = snapshot(&mut run.sessions, &id).await;
    assert_eq!(snapshot.status, pb::SessionStatus::Error as i32);
}

/// (e) cancel a turn whose model request hangs; nothing of the CLI is left.
/// (codex app-servers of the earlier cases' threads, still active, are not
/// this turn's.)
async fn cancel_hanging_turn(run: &mut Run) {
    let cli = run.cli;
    run.mock.script(json!({"mode": "hang"})).await;
    run.mock.clear().await;
    let (id, mut events) = run.thread(None).await;
    let others = run.leftovers().await;
    run.send(&id, "this will hang").await;

    let mut seen = Vec::new();
    while seen
        .last()
        .is_none_or(|e: &pb::SessionEvent| kind(e) != "status:running")
    {
        let e = next_event(&mut events, cli, &seen).await;
        seen.push(e);
    }
    let deadline = Instant::now() + CLI_CEILING;
    while model_requests(cli, &run.mock.requests().await).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{cli:?}: the mock never received the model request"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during: Vec<String> = run
        .leftovers()
        .await
        .into_iter()
        .filter(|p| !others.contains(p))
        .map(describe)
        .collect();
    assert!(!during.is_empty(), "{cli:?}: no CLI process while running");

    run.sessions.cancel(thread_request(&id)).await.unwrap();
    let rest = operation(&mut events, cli).await;
    let k = kinds(&rest);
    eprintln!("{cli:?}: cancel: {:?} then {k:?}", kinds(&seen));
    assert!(
        k.ends_with(&["operation_finished:cancelled".into(), "status:idle".into()]),
        "{cli:?}: {:?} then {k:?}",
        kinds(&seen)
    );
    assert!(
        k.iter()
            .all(|k| k.starts_with("operation_finished") || k == "status:idle"),
        "{cli:?}: {k:?}"
    );

    let deadline = Instant::now() + CLI_CEILING;
    loop {
        let mut left = run.leftovers().await;
        left.retain(|p| !others.contains(p));
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{cli:?}: processes left after cancel: {:?} (while running: {during:?})",
            left.into_iter().map(describe).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How the mock model reaches the page tool.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// `pedelec-cli tool-call` in the CLI's shell tool, with MCP turned off
    /// for the provider in the settings.
    Shell,
    /// The native tool the CLI got from `pedelec-cli mcp` (the default).
    Mcp,
}

/// The agent calls a page tool inside its turn, through the shell or as a
/// native MCP tool; the client sees the tool request and the waiting status,
/// answers, and the final chat carries the page's result.
async fn tool_call_round_trip(run: &mut Run, via: Via) {
    let cli = run.cli;
    let mut settings = settings(cli);
    if via == Via::Shell {
        settings.shell_tools_only = vec![cli.provider().into()];
    }
    run.env.update_settings(settings).await;
    let manifest = json!({
        "guidance": "Use update_counter when asked to change the counter.",
        "tools": [{
            "name": "update_counter",
            "description": "Add delta to the page's counter and return the new value.",
            "argsSchema": {
                "type": "object",
                "required": ["delta"],
                "properties": {"delta": {"type": "integer", "description": "How much to add."}}
            }
        }]
    });
    let skills = pedelec_common::json::to_struct(manifest.as_object().unwrap());
    run.mock.clear().await;
    let (id, mut events) = run.thread_with(None, Some(skills)).await;
    let cli_path = bin("pedelec-cli");
    let command = format!(
        "{} --thread-id {id} tool-call update_counter '{{\"delta\":5}}'",
        cli_path.display()
    );
    let script = match via {
        Via::Shell => json!({"mode": "tool", "command": command, "final": "Tool said: {output}"}),
        Via::Mcp => json!({"mode": "mcp", "tool": "update_counter", "tool_args": {"delta": 5},
                           "final": "Tool said: {output}"}),
    };
    run.mock.script(script).await;
    run.send(&id, "Please add 5 to the counter.").await;

    let mut seen = Vec::new();
    let request = loop {
        let e = next_event(&mut events, cli, &seen).await;
        if let Some(Event::ToolRequest(r)) = &e.event {
            let r = r.clone();
            seen.push(e);
            break r;
        }
        seen.push(e);
    };
    assert_eq!(request.tool, "update_counter");
    // The CLI waiting for the answer runs confined (bwrap works where the
    // tests run): a mount and a pid namespace of its own.
    assert_confined(run);
    assert_eq!(
        pedelec_common::json::from_value(request.args.as_ref().unwrap()),
        json!({"delta": 5})
    );
    let e = next_event(&mut events, cli, &seen).await;
    assert_eq!(kind(&e), "status:waiting_tool_result", "{cli:?}");
    let snapshot = snapshot(&mut run.sessions, &id).await;
    assert_eq!(
        snapshot.pending_tool_request.map(|p| p.tool_request_id),
        Some(request.tool_request_id.clone())
    );
    run.sessions
        .submit_tool_result(submit_tool_result_request(
            &id,
            &request.tool_request_id,
            tool_result(&json!({"counter": 47, "note": "PAGE-RESULT-9921"})),
        ))
        .await
        .unwrap();
    let rest = operation(&mut events, cli).await;
    let k = kinds(&rest);
    eprintln!("{cli:?}: tool call: {:?} then {k:?}", kinds(&seen));
    assert_eq!(k[0], "tool_request_cleared", "{cli:?}: {k:?}");
    assert_eq!(k[1], "status:running", "{cli:?}: {k:?}");
    assert!(
        k.ends_with(&["operation_finished:completed".into(), "status:idle".into()]),
        "{cli:?}: {k:?}"
    );
    let text = chat_text(&rest);
    assert!(
        text.contains("PAGE-RESULT-9921") && text.contains("47"),
        "{cli:?}: the final chat does not carry the tool's result: {text:?}"
    );
    // The first prompt carried the tool block with the absolute pedelec-cli path.
    let requests = model_requests(cli, &run.mock.requests().await);
    let first = requests.first().expect("a model request").to_string();
    assert!(
        first.contains(&format!(
            "{} --thread-id {id} tool-spec",
            cli_path.display()
        )),
        "{cli:?}: no tool block in {first}"
    );
    let native = first.contains("served by the MCP server named pedelec");
    assert_eq!(native, via == Via::Mcp, "{cli:?}: {first}");
    // The native tool was offered (codex: after its tool search) only with MCP.
    let offered = |r: &Value| {
        let text = r.to_string();
        text.contains("\"mcp__pedelec__update_counter\"")
            || text.contains("\"pedelec_update_counter\"")
            || (text.contains("\"mcp__pedelec\"") && text.contains("\"update_counter\""))
    };
    assert_eq!(
        requests.iter().any(offered),
        via == Via::Mcp,
        "{cli:?}: native tool offered?"
    );
    if cli == Cli::Codex && via == Via::Mcp {
        assert!(
            requests
                .iter()
                .any(|r| r.to_string().contains("\"tool_search_output\"")),
            "codex: the mock followed the tool_search flow"
        );
    }
}

/// codex through its app-server, opencode through `opencode serve`: a long
/// answer the mock streams in many deltas (`response.output_text.delta`,
/// chat-completions chunks) reaches the client as chat_delta events, in
/// order, that concatenate to the final chat; the second turn of the thread
/// runs in the same server process (no new process) and the model sees the
/// first turn's conversation; ending the thread stops it.
async fn streamed_turns_share_one_app_server(run: &mut Run) {
    let cli = run.cli;
    let long: String = (1..=80).map(|i| format!("piece{i} ")).collect();
    let long = long.trim_end().to_string();
    run.mock
        .script(json!({"mode": "reply", "text": long, "chunks": 80, "delay_ms": 2}))
        .await;
    run.mock.clear().await;
    let (id, mut events) = run.thread(None).await;
    assert!(
        run.leftovers().await.is_empty(),
        "{cli:?}: a process before the first turn"
    );
    run.send(&id, FIRST_TEXT).await;
    let first = operation(&mut events, cli).await;
    assert_completed(cli, &first, &long);
    let k = kinds(&first);
    let deltas = k.iter().filter(|k| *k == "chat_delta").count();
    assert!(
        deltas >= 40,
        "{cli:?}: only {deltas} chat_delta events: {k:?}"
    );
    let chat_at = k.iter().position(|k| k == "chat").unwrap();
    assert!(
        k[chat_at..].iter().all(|k| k != "chat_delta"),
        "{cli:?}: a delta after the chat: {k:?}"
    );
    assert_eq!(
        delta_text(&first),
        chat_text(&first),
        "{cli:?}: deltas vs chat"
    );
    let between: Vec<u32> = run.leftovers().await;
    assert!(
        !between.is_empty(),
        "{cli:?}: no app-server kept for the thread between turns"
    );
    let servers: Vec<u32> = between
        .iter()
        .copied()
        .filter(|p| describe(*p).contains(cli.server_word()))
        .collect();
    assert!(
        !servers.is_empty(),
        "{cli:?}: no app-server among {between:?}"
    );
    for pid in &between {
        // The server, or what it runs for the thread (codex's shell snapshot
        // `bash -lc` may still be finishing): nothing outside the server.
        assert!(
            servers.contains(pid) || servers.iter().any(|s| descends_from(*pid, *s)),
            "{cli:?}: {}",
            describe(*pid)
        );
        if cli == Cli::OpenCode {
            // Listening on loopback TCP: only with a password of its own.
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let password = environ
                .split(|b| *b == 0)
                .find_map(|v| v.strip_prefix(b"OPENCODE_SERVER_PASSWORD="));
            assert!(
                password.is_some_and(|p| p.len() == 64),
                "opencode serve runs without a password of its own"
            );
        }
    }

    run.mock
        .script(json!({"mode": "reply", "text": SECOND_REPLY}))
        .await;
    run.mock.clear().await;
    run.send(&id, SECOND_TEXT).await;
    let second = operation(&mut events, cli).await;
    assert_completed(cli, &second, SECOND_REPLY);
    assert_eq!(
        run.leftovers().await,
        between,
        "{cli:?}: the resumed turn started a new process"
    );
    let last = model_requests(cli, &run.mock.requests().await)
        .last()
        .expect("a second model request")
        .to_string();
    assert!(
        last.contains(SECOND_TEXT) && last.contains(FIRST_TEXT) && last.contains("piece80"),
        "{cli:?}: the second request lacks the conversation"
    );

    run.sessions
        .end(pb::EndRequest::from(thread_request(&id)))
        .await
        .unwrap();
    // End returns once the app-server is gone: codex holds the thread's
    // writer lock until then, and a page may resume at once.
    assert_eq!(
        run.leftovers().await,
        Vec::<u32>::new(),
        "{cli:?}: the app-server outlived its thread's End"
    );

    // The same thread reactivated right away: its next turn resumes the
    // codex thread in a new app-server and its answer reaches the client.
    run.sessions.reactivate(thread_request(&id)).await.unwrap();
    run.mock
        .script(json!({"mode": "reply", "text": THIRD_REPLY}))
        .await;
    run.mock.clear().await;
    run.send(&id, THIRD_TEXT).await;
    let mut third = operation(&mut events, cli).await;
    // The attach stream also carried the end and the reactivation.
    if let Some(start) = third.iter().position(|e| kind(e) == "operation_started") {
        third.drain(..start);
    }
    assert_completed(cli, &third, THIRD_REPLY);
    let last = model_requests(cli, &run.mock.requests().await)
        .last()
        .expect("a third model request")
        .to_string();
    assert!(
        last.contains(THIRD_TEXT) && last.contains(SECOND_TEXT),
        "{cli:?}: the reactivated thread's request lacks the conversation"
    );
    run.sessions
        .end(pb::EndRequest::from(thread_request(&id)))
        .await
        .unwrap();
}

async fn all_cases(cli: Cli) {
    all_cases_in(cli, Run::start(cli).await).await;
}

async fn all_cases_in(cli: Cli, mut run: Run) {
    assert_eq!(run.cli, cli);
    tool_call_round_trip(&mut run, Via::Mcp).await;
    tool_call_round_trip(&mut run, Via::Shell).await;
    first_turn_then_resume(&mut run).await;
    effort_high(&mut run).await;
    model_error(&mut run).await;
    cancel_hanging_turn(&mut run).await;
    run.launcher.stop();
}

/// codex 0.171 has a usable app-server, so this is the app-server path.
#[tokio::test]
async fn codex_real_cli_turns_resume_effort_error_cancel() {
    let mut run = Run::start(Cli::Codex).await;
    streamed_turns_share_one_app_server(&mut run).await;
    all_cases_in(Cli::Codex, run).await;
}

/// The `codex exec --json` fallback (an older codex, or forced with
/// PEDELEC_CODEX_APP_SERVER=0) passes the same cases.
#[tokio::test]
async fn codex_exec_fallback_turns_resume_effort_error_cancel() {
    let run = Run::start_with(Cli::Codex, &[("PEDELEC_CODEX_APP_SERVER", "0")]).await;
    all_cases_in(Cli::Codex, run).await;
}

#[tokio::test]
async fn claude_real_cli_turns_resume_effort_error_cancel() {
    all_cases(Cli::Claude).await;
}

/// opencode 1.18.33 has a usable server, so this is the `opencode serve` path.
#[tokio::test]
async fn opencode_real_cli_turns_resume_effort_error_cancel() {
    let mut run = Run::start(Cli::OpenCode).await;
    streamed_turns_share_one_app_server(&mut run).await;
    all_cases_in(Cli::OpenCode, run).await;
}

/// The `opencode run --format json` fallback (an older opencode, or forced
/// with PEDELEC_OPENCODE_SERVE=0) passes the same cases.
#[tokio::test]
async fn opencode_run_fallback_turns_resume_effort_error_cancel() {
    let run = Run::start_with(Cli::OpenCode, &[("PEDELEC_OPENCODE_SERVE", "0")]).await;
    all_cases_in(Cli::OpenCode, run).await;
}
