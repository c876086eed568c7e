//! The real pinned codex (tests/agents, `PEDELEC_AGENTS_BIN`) through the
//! services against the mock model server (tests/agents/mock-model-server.mjs)
//! streaming its answer in 20 deltas: per turn, `send_text` → first
//! `chat_delta` and → `operation_finished`, for a thread's first turn (the
//! app-server starts) and its resumed second turn (the same app-server); the
//! mock's first token → the client's first `chat_delta`; and the CLI's own
//! start-up measured alone (spawn `codex app-server` → `initialize` answered).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::{attach_past_snapshot, create_session_request, send_text_request};
use serde_json::{Value, json};

use crate::Config;
use crate::env::{BenchEnv, PATIENCE, stop};
use crate::report::{Row, Target};

fn agents_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agents")
}

fn agents_bin() -> PathBuf {
    std::env::var_os("PEDELEC_AGENTS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| agents_dir().join("node_modules/.bin"))
}

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
            .arg(agents_dir().join("mock-model-server.mjs"))
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

    /// `GET /_requests`: the receipt time of the last model request.
    fn last_request_at(&self) -> Result<SystemTime, String> {
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
            .and_then(|a| a.iter().rev().find(|r| r["path"] == "/v1/responses"))
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
    sessions: &mut crate::bench::Sessions,
    events: &mut pedelec_tests::Events,
    mock: &Mock,
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
        let e = tokio::time::timeout(PATIENCE, events.0.message())
            .await
            .map_err(|_| "no event in time".to_string())?
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
    let from_token = match (first_wall, mock.last_request_at()) {
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
    let codex = agents_bin().join("codex");
    if !codex.exists() {
        return Err(format!(
            "{} missing: npm ci in tests/agents",
            codex.display()
        ));
    }
    let env = BenchEnv::new(&cfg.release)?;
    let text: String = (1..=20).map(|i| format!("w{i} ")).collect();
    let script = json!({"mode": "reply", "text": text.trim_end(), "chunks": 20, "delay_ms": 5});
    let mock = Mock::start(&script, &env.rt())?;
    let home = env.rt().parent().unwrap().join("home");
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).map_err(|e| e.to_string())?;
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\n[analytics]\nenabled = false\n\n[features]\nplugins = false\napps = false\n",
            mock.port
        ),
    )
    .map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(&codex, env.rt().parent().unwrap().join("bin/codex"))
        .map_err(|e| e.to_string())?;

    // The CLI alone: spawn `codex app-server` → initialize answered.
    let mut startup = Vec::new();
    for _ in 0..cfg.n(10, 3) {
        let mut cmd = env.command("codex");
        cmd.arg("app-server")
            .current_dir(&home)
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

    let mut launcher = env.spawn_up("launcher.log")?;
    let result = async {
        env.wait_serving(Duration::from_millis(5)).await?;
        let channel = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
            .await
            .map_err(|e| e.to_string())?;
        let mut sessions = crate::bench::Sessions::new(channel);
        let (mut first, mut resumed) = (Vec::new(), Vec::new());
        // Processes started for resumed turns (the app-server should be reused).
        let mut new_on_resume = 0usize;
        let app_servers = || -> Vec<u32> {
            crate::env::processes_using(&env.rt())
                .into_iter()
                .filter(|p| {
                    std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("app-server"))
                })
                .collect()
        };
        for _ in 0..cfg.n(8, 2) {
            let id = sessions
                .create_session(create_session_request(Some("codex")))
                .await
                .map_err(|e| format!("CreateSession: {e}"))?
                .into_inner()
                .session_id;
            let mut events = attach_past_snapshot(&mut sessions, &id, "bench").await;
            first.push(turn(&mut sessions, &mut events, &mock, &id, "first").await?);
            let before = app_servers();
            resumed.push(turn(&mut sessions, &mut events, &mock, &id, "second").await?);
            new_on_resume += app_servers().iter().filter(|p| !before.contains(p)).count();
            sessions
                .end(pb::EndRequest::from(pedelec_tests::thread_request(&id)))
                .await
                .map_err(|e| format!("End: {e}"))?;
        }
        Ok::<_, String>((first, resumed, new_on_resume))
    }
    .await;
    stop(&mut launcher);
    let (first, resumed, new_on_resume) = result?;
    let turns = resumed.len();
    let col = |turns: &[Turn], f: fn(&Turn) -> Option<f64>| {
        turns.iter().filter_map(f).collect::<Vec<_>>()
    };
    Ok(vec![
        Row::latency(
            "provider.codex.startup",
            "codex app-server alone: spawn (npm wrapper) -> initialize answered",
            startup,
        ),
        Row::latency(
            "provider.codex.first.first_delta",
            "codex via app-server, a thread's first turn: send_text -> first chat_delta (app-server starts)",
            col(&first, |t| Some(us(t.first_delta))),
        ),
        Row::latency(
            "provider.codex.first.finished",
            "same turn: send_text -> operation_finished (20 deltas, 5 ms apart)",
            col(&first, |t| Some(us(t.finished))),
        ),
        Row::latency(
            "provider.codex.resumed.first_delta",
            "codex via app-server, the resumed second turn (same process): send_text -> first chat_delta",
            col(&resumed, |t| Some(us(t.first_delta))),
        ),
        Row::latency(
            "provider.codex.resumed.finished",
            "same turn: send_text -> operation_finished",
            col(&resumed, |t| Some(us(t.finished))),
        ),
        Row::value(
            "provider.codex.resumed.new_processes",
            "processes started by resumed codex turns, all threads",
            "",
            new_on_resume as f64,
            turns,
        )
        .target(Target::AtMost(0.0), "0"),
        Row::latency(
            "provider.codex.token_to_delta",
            "mock received the model request (its first token goes out at once) -> client's first chat_delta, all turns (ms clock)",
            col(&first, |t| t.from_token)
                .into_iter()
                .chain(col(&resumed, |t| t.from_token))
                .collect(),
        )
        .target(
            Target::Latency {
                p50: 150_000.0,
                p99: None,
            },
            "p50 <= 150 ms",
        ),
    ])
}
