//! The real pinned codex and opencode (tests/agents, `PEDELEC_AGENTS_BIN`)
//! through the services against the mock model server
//! (tests/agents/mock-model-server.mjs) streaming its answer in 20 deltas:
//! per turn, `send_text` → first `chat_delta` and → `operation_finished`, for
//! a thread's first turn (the per-thread server starts) and its resumed
//! second turn (the same server); the mock's first token → the client's
//! first `chat_delta`; and each CLI's own start-up measured alone (spawn
//! `codex app-server` → `initialize` answered; spawn `opencode serve` → its
//! "listening" line).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::{agents, attach_past_snapshot, create_session_request, send_text_request};
use serde_json::{Value, json};

use crate::Config;
use crate::env::{BenchEnv, stop};

/// How long a turn may go without an event: a real CLI's first turn starts
/// its server (opencode took 11 s on a loaded 2-core machine) before any
/// text. A ceiling, not a measurement.
const CLI_PATIENCE: Duration = Duration::from_secs(120);
use crate::report::{Row, Target};

/// The mock, started with a script; killed on drop.
struct Mock {
    child: std::process::Child,
    port: u16,
}

impl Mock {
    fn start(script: &Value, dir: &std::path::Path) -> Result<Mock, String> {
        let file = dir.join("mock-script.json");
        std::fs::write(&file, script.to_string()).map_err(|e| e.to_string())?;
        let mut child = Command::new("node")
            .arg(agents::mock_model_server())
            .arg("--script")
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start the mock (node): {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let port = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["port"].as_u64())
            .ok_or_else(|| format!("mock said {line:?}"))? as u16;
        Ok(Mock { child, port })
    }

    /// `GET /_requests`: the receipt time of the last model request of `cli`.
    fn last_request_at(&self, cli: Cli) -> Result<SystemTime, String> {
        let mut s =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        write!(
            s,
            "GET /_requests HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut body = String::new();
        s.read_to_string(&mut body).map_err(|e| e.to_string())?;
        let json = body
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let all: Value = serde_json::from_str(json).map_err(|e| format!("requests: {e}"))?;
        let time = all
            .as_array()
            .and_then(|a| a.iter().rev().find(|r| cli.is_model_request(r)))
            .and_then(|r| r["time"].as_str())
            .ok_or("no model request")?;
        parse_iso_ms(time).ok_or_else(|| format!("time {time:?}"))
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CLIs measured: codex and opencode through their per-thread servers,
/// claude through its one process per turn (it has no server mode).
#[derive(Clone, Copy)]
enum Cli {
    Codex,
    Opencode,
    Claude,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Codex => "codex",
            Cli::Opencode => "opencode",
            Cli::Claude => "claude",
        }
    }

    /// What its agent process's command line contains.
    fn server_word(self) -> &'static str {
        match self {
            Cli::Codex => "app-server",
            Cli::Opencode => "serve",
            Cli::Claude => "claude",
        }
    }

    /// An agent turn's request (opencode's title request offers no tools).
    fn is_model_request(self, r: &Value) -> bool {
        match self {
            Cli::Codex => r["path"] == "/v1/responses",
            Cli::Opencode => {
                r["path"] == "/v1/chat/completions"
                    && r["body"]["tools"].as_array().is_some_and(|t| !t.is_empty())
            }
            Cli::Claude => {
                r["path"] == "/v1/messages"
                    && r["body"]["tools"].as_array().is_some_and(|t| !t.is_empty())
            }
        }
    }
}

/// "2026-12-01T13:20:01.123Z" → SystemTime (UTC, ms).
fn parse_iso_ms(t: &str) -> Option<SystemTime> {
    let (date, time) = t.trim_end_matches('Z').split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, ms) = time.split_once('.').unwrap_or((time, "0"));
    let h: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86400 + h[0] * 3600 + h[1] * 60 + h[2];
    let ms: u64 = ms.parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_millis(ms))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One turn: (send → first delta, send → finished, mock first token → first delta).
struct Turn {
    first_delta: Duration,
    finished: Duration,
    from_token: Option<f64>,
}

async fn turn(
    sessions: &mut crate::sessions::Sessions,
    events: &mut pedelec_tests::Events,
    mock: &Mock,
    cli: Cli,
    id: &str,
    text: &str,
) -> Result<Turn, String> {
    let t0 = Instant::now();
    sessions
        .send_text(send_text_request(id, text))
        .await
        .map_err(|e| format!("SendText: {e}"))?;
    let (mut first, mut first_wall) = (None, None);
    let finished = loop {
        let e = tokio::time::timeout(CLI_PATIENCE, events.0.message())
            .await
            .map_err(|_| format!("{}: no event within {CLI_PATIENCE:?}", cli.name()))?
            .map_err(|e| e.to_string())?
            .ok_or("stream ended")?;
        match e.event {
            Some(Event::ChatDelta(_)) if first.is_none() => {
                first = Some(t0.elapsed());
                first_wall = Some(SystemTime::now());
            }
            Some(Event::OperationFinished(f)) => {
                if f.outcome != pb::OperationOutcome::Completed as i32 {
                    return Err(format!("turn ended {f:?}"));
                }
                break t0.elapsed();
            }
            _ => {}
        }
    };
    let first_delta = first.ok_or("no chat_delta")?;
    let from_token = match (first_wall, mock.last_request_at(cli)) {
        (Some(w), Ok(at)) => Some(match w.duration_since(at) {
            Ok(d) => us(d),
            Err(e) => -us(e.duration()),
        }),
        _ => None,
    };
    Ok(Turn {
        first_delta,
        finished,
        from_token,
    })
}

pub async fn provider_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let (codex, opencode, claude) = (
        agents::agents_bin().join("codex"),
        agents::agents_bin().join("opencode"),
        agents::agents_bin().join("claude"),
    );
    for cli in [&codex, &opencode, &claude] {
        if !cli.exists() {
            return Err(format!(
                "{} missing: tests/setup.sh installs the agent CLIs",
                cli.display()
            ));
        }
    }
    let env = BenchEnv::new(&cfg.release)?;
    let text: String = (1..=20).map(|i| format!("w{i} ")).collect();
    let script = json!({"mode": "reply", "text": text.trim_end(), "chunks": 20, "delay_ms": 5});
    let mock = Mock::start(&script, &env.rt())?;
    let home = env.root.join("home");
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).map_err(|e| e.to_string())?;
    agents::write_codex_mock_config(&codex_home, mock.port).map_err(|e| e.to_string())?;
    // opencode reads $HOME/.config/opencode (tests/agents/README.md).
    let opencode_config = home.join(".config/opencode");
    std::fs::create_dir_all(&opencode_config).map_err(|e| e.to_string())?;
    std::fs::write(
        opencode_config.join("opencode.json"),
        agents::opencode_mock_config(mock.port).to_string(),
    )
    .map_err(|e| e.to_string())?;
    let bin = env.root.join("bin");
    for (cli, name) in [
        (&codex, "codex"),
        (&opencode, "opencode"),
        (&claude, "claude"),
    ] {
        std::os::unix::fs::symlink(cli, bin.join(name)).map_err(|e| e.to_string())?;
    }
    let codex_startup = codex_startup(cfg, &env, &home)?;
    let opencode_startup = opencode_startup(cfg, &env, &home)?;
    let claude_startup = claude_startup(cfg, &env, &home, mock.port)?;

    let mut cmd = env.command("pedelecd");
    let log = std::fs::File::create(env.root.join("launcher.log")).map_err(|e| e.to_string())?;
    // opencode offline: no models.dev catalogue fetch (as the tests run it).
    cmd.env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .envs(claude_env(mock.port))
        .arg("up")
        .stdout(Stdio::null())
        .stderr(log);
    let mut launcher = env.spawn_grouped(cmd)?;
    let result = async {
        env.wait_serving(Duration::from_millis(5)).await?;
        env.grant(pedelec_tests::ORIGIN).await?;
        let channel = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
            .await
            .map_err(|e| e.to_string())?;
        let mut sessions = crate::sessions::Sessions::new(channel);
        let codex = threads(cfg, &env, &mut sessions, &mock, Cli::Codex).await?;
        let opencode = threads(cfg, &env, &mut sessions, &mock, Cli::Opencode).await?;
        let claude = threads(cfg, &env, &mut sessions, &mock, Cli::Claude).await?;
        Ok::<_, String>((codex, opencode, claude))
    }
    .await;
    stop(&mut launcher);
    let (codex, opencode, claude) = result?;
    let mut rows = vec![Row::latency(
        "provider.codex.startup",
        "codex app-server alone: spawn (npm wrapper) -> initialize answered",
        codex_startup,
    )];
    rows.extend(turn_rows(Cli::Codex, codex));
    rows.push(Row::latency(
        "provider.opencode.startup",
        "opencode serve alone: spawn -> its \"listening on\" line (port 0)",
        opencode_startup,
    ));
    rows.extend(turn_rows(Cli::Opencode, opencode));
    rows.push(Row::latency(
        "provider.claude.startup",
        "claude -p alone: spawn (npm wrapper) -> its stream-json init line",
        claude_startup,
    ));
    rows.extend(turn_rows(Cli::Claude, claude));
    Ok(rows)
}

/// claude pointed at the mock, as the tests run it (tests/agents/README.md).
fn claude_env(port: u16) -> [(&'static str, String); 5] {
    [
        ("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
        ("ANTHROPIC_API_KEY", "x".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
    ]
}

/// The CLI alone: spawn `claude -p` (stream-json, as ProviderService runs
/// it) → its first line, the init event it prints before any model request.
fn claude_startup(
    cfg: &Config,
    env: &BenchEnv,
    home: &std::path::Path,
    port: u16,
) -> Result<Vec<f64>, String> {
    let mut startup = Vec::new();
    for _ in 0..cfg.n(10, 3) {
        let mut cmd = env.command("claude");
        cmd.args(["-p", "--output-format", "stream-json", "--verbose", "hi"])
            .envs(claude_env(port))
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if pedelec_common::process::is_root() {
            cmd.env("IS_SANDBOX", "1");
        }
        let t0 = Instant::now();
        let mut child = env.spawn_grouped(cmd)?;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("claude -p exited before its init line".into());
        }
        startup.push(us(t0.elapsed()));
        crate::env::signal(-(child.id() as i32), libc::SIGKILL);
        let _ = child.wait();
    }
    Ok(startup)
}

/// The CLI alone: spawn `codex app-server` → initialize answered.
fn codex_startup(cfg: &Config, env: &BenchEnv, home: &std::path::Path) -> Result<Vec<f64>, String> {
    let mut startup = Vec::new();
    for _ in 0..cfg.n(10, 3) {
        let mut cmd = env.command("codex");
        cmd.arg("app-server")
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let t0 = Instant::now();
        let mut child = env.spawn_grouped(cmd)?;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(
            stdin,
            r#"{{"id":1,"method":"initialize","params":{{"clientInfo":{{"name":"bench","version":"0"}}}}}}"#
        )
        .map_err(|e| e.to_string())?;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("codex app-server exited before answering initialize".into());
            }
            if line.contains(r#""id":1"#) {
                break;
            }
        }
        startup.push(us(t0.elapsed()));
        drop(stdin);
        let _ = child.wait();
    }
    Ok(startup)
}

/// The CLI alone: spawn `opencode serve --port 0` → its "listening on" line.
fn opencode_startup(
    cfg: &Config,
    env: &BenchEnv,
    home: &std::path::Path,
) -> Result<Vec<f64>, String> {
    let mut startup = Vec::new();
    for _ in 0..cfg.n(10, 3) {
        let mut cmd = env.command("opencode");
        cmd.args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_SERVER_PASSWORD", "bench")
            .current_dir(home)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let t0 = Instant::now();
        let mut child = env.spawn_grouped(cmd)?;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("opencode serve exited before it listened".into());
            }
            if line.contains("listening on") {
                break;
            }
        }
        startup.push(us(t0.elapsed()));
        crate::env::signal(-(child.id() as i32), libc::SIGKILL);
        let _ = child.wait();
    }
    Ok(startup)
}

/// Each thread: a first turn and a resumed second turn, then End.
struct Threads {
    first: Vec<Turn>,
    resumed: Vec<Turn>,
    /// Processes started by resumed turns (the server should be reused).
    new_on_resume: usize,
}

async fn threads(
    cfg: &Config,
    env: &BenchEnv,
    sessions: &mut crate::sessions::Sessions,
    mock: &Mock,
    cli: Cli,
) -> Result<Threads, String> {
    let (mut first, mut resumed) = (Vec::new(), Vec::new());
    let mut new_on_resume = 0usize;
    let servers = || -> Vec<u32> {
        crate::env::processes_using(&env.rt())
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(cli.server_word()))
            })
            .collect()
    };
    for _ in 0..cfg.n(8, 2) {
        let id = sessions
            .create_session(create_session_request(Some(cli.name())))
            .await
            .map_err(|e| format!("CreateSession: {e}"))?
            .into_inner()
            .session_id;
        let mut events = attach_past_snapshot(sessions, &id, "bench").await;
        first.push(turn(sessions, &mut events, mock, cli, &id, "first").await?);
        let before = servers();
        resumed.push(turn(sessions, &mut events, mock, cli, &id, "second").await?);
        new_on_resume += servers().iter().filter(|p| !before.contains(p)).count();
        sessions
            .end(pb::EndRequest::from(pedelec_tests::thread_request(&id)))
            .await
            .map_err(|e| format!("End: {e}"))?;
    }
    Ok(Threads {
        first,
        resumed,
        new_on_resume,
    })
}

fn turn_rows(cli: Cli, t: Threads) -> Vec<Row> {
    let name = cli.name();
    // Row ids are static: [first delta, first finished, resumed delta,
    // resumed finished, new processes, token to delta].
    let (server, id) = match cli {
        Cli::Codex => (
            "app-server",
            [
                "provider.codex.first.first_delta",
                "provider.codex.first.finished",
                "provider.codex.resumed.first_delta",
                "provider.codex.resumed.finished",
                "provider.codex.resumed.new_processes",
                "provider.codex.token_to_delta",
            ],
        ),
        Cli::Opencode => (
            "opencode serve",
            [
                "provider.opencode.first.first_delta",
                "provider.opencode.first.finished",
                "provider.opencode.resumed.first_delta",
                "provider.opencode.resumed.finished",
                "provider.opencode.resumed.new_processes",
                "provider.opencode.token_to_delta",
            ],
        ),
        Cli::Claude => (
            "claude -p",
            [
                "provider.claude.first.first_delta",
                "provider.claude.first.finished",
                "provider.claude.resumed.first_delta",
                "provider.claude.resumed.finished",
                "provider.claude.resumed.new_processes",
                "provider.claude.token_to_delta",
            ],
        ),
    };
    let col = |turns: &[Turn], f: fn(&Turn) -> Option<f64>| {
        turns.iter().filter_map(f).collect::<Vec<_>>()
    };
    let token_to_delta = Row::latency(
        id[5],
        "mock received the model request (its first token goes out at once) -> client's first chat_delta, all turns (ms clock)",
        col(&t.first, |t| t.from_token)
            .into_iter()
            .chain(col(&t.resumed, |t| t.from_token))
            .collect(),
    );
    let mut rows = vec![
        Row::latency(
            id[0],
            format!(
                "{name} via {server}, a thread's first turn: send_text -> first chat_delta ({server} starts)"
            ),
            col(&t.first, |t| Some(us(t.first_delta))),
        ),
        Row::latency(
            id[1],
            "same turn: send_text -> operation_finished (20 deltas, 5 ms apart)",
            col(&t.first, |t| Some(us(t.finished))),
        ),
        Row::latency(
            id[2],
            format!(
                "{name} via {server}, the resumed second turn (same process; claude: a new one): send_text -> first chat_delta"
            ),
            col(&t.resumed, |t| Some(us(t.first_delta))),
        ),
        Row::latency(
            id[3],
            "same turn: send_text -> operation_finished",
            col(&t.resumed, |t| Some(us(t.finished))),
        ),
        match cli {
            // The issue's target is codex's.
            Cli::Codex => token_to_delta.target(
                Target::Latency {
                    p50: 150_000.0,
                    p99: None,
                },
                "p50 <= 150 ms",
            ),
            Cli::Opencode | Cli::Claude => token_to_delta,
        },
    ];
    // A claude turn is its own process by design: nothing to reuse.
    if !matches!(cli, Cli::Claude) {
        rows.push(
            Row::value(
                id[4],
                format!("processes started by resumed {name} turns, all threads"),
                "",
                t.new_on_resume as f64,
                t.resumed.len(),
            )
            .target(Target::AtMost(0.0), "0"),
        );
    }
    rows
}
