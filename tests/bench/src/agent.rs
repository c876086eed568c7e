//! pedelec-agent (the real release binary) against the mock Ollama server of
//! tests/src/mock_ollama.rs, next to the stub agent: time from spawn to the
//! first `chat_delta` line on the agent's stdout (what ProviderService reads),
//! and deltas per second through the agent. The stub agent is this binary
//! linked as `pedelec-agent` (helpers.rs), which prints its deltas without a
//! model server, so the difference is the agent's own cost: HTTP to the
//! model server, NDJSON parsing, conversation file, one flushed line per delta.
//! For reference, `agent.mock_stream`: a bare TCP client in the harness reading
//! the same mock stream (it shares the harness's runtime with the mock, so it
//! is not a floor: the agent, reading from another process, can go faster).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pedelec_tests::mock_ollama::{MockOllama, Reply, done};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::Config;
use crate::env::PATIENCE;
use crate::measure::us;
use crate::report::Row;

/// N one-token chunks, each its own write, then `done` (as Ollama streams).
fn stream(n: usize) -> Reply {
    let mut lines: Vec<_> = (0..n)
        .map(|i| json!({"model": "m", "message": {"role": "assistant", "content": format!("t{i} ")}, "done": false}))
        .collect();
    lines.push(done(10, n as u64));
    Reply::Stream(lines)
}

/// What one run of an agent showed on its stdout.
struct Seen {
    first_delta: Duration,
    deltas: usize,
    first_to_last: Duration,
}

async fn run_agent(mut cmd: tokio::process::Command, prompt: &str) -> Result<Seen, String> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawn agent: {e}"))?;
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(prompt.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    drop(stdin);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut first, mut last, mut deltas) = (None, None, 0usize);
    let read = async {
        while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
            if line.contains(r#""type":"chat_delta""#) {
                let now = t0.elapsed();
                first.get_or_insert(now);
                last = Some(now);
                deltas += 1;
            } else if line.contains(r#""type":"error""#) {
                return Err(format!("the agent failed: {line}"));
            }
        }
        Ok::<(), String>(())
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .map_err(|_| "agent hung".to_string())??;
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("agent exited with {status}"));
    }
    let first = first.ok_or("no chat_delta")?;
    Ok(Seen {
        first_delta: first,
        deltas,
        first_to_last: last.unwrap_or(first) - first,
    })
}

/// A plain TCP client POSTing /api/chat and reading the NDJSON body to its
/// end, counting lines; returns lines per second.
async fn bare_client(url: &str, n: usize) -> Result<f64, String> {
    let addr = url.trim_start_matches("http://");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": format!("@@stream {n}")}], "stream": true}).to_string();
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let req = format!(
        "POST /api/chat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut newlines, mut first, mut last) = (0usize, None, Instant::now());
    loop {
        let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if k == 0 {
            break;
        }
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        newlines += buf[..k].iter().filter(|b| **b == b'\n').count();
    }
    let span = last - first.ok_or("empty answer")?;
    Ok(newlines as f64 / span.as_secs_f64().max(1e-9))
}

pub async fn agent_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let real = cfg
        .agent
        .clone()
        .unwrap_or_else(|| cfg.release.join("pedelec-agent"));
    if !real.exists() {
        return Err(format!("{} missing", real.display()));
    }
    let dir = tempfile::Builder::new()
        .prefix("pdla")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    // The stub: this binary under the name pedelec-agent.
    let stub = dir.path().join("pedelec-agent");
    std::os::unix::fs::symlink(std::env::current_exe().map_err(|e| e.to_string())?, &stub)
        .map_err(|e| e.to_string())?;
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    let mock = MockOllama::start(|req| {
        let n = req
            .last_content()
            .strip_prefix("@@stream ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(1);
        stream(n)
    })
    .await;
    let command = |program: &Path| {
        let mut cmd = tokio::process::Command::new(program);
        cmd.env_clear()
            .env("HOME", dir.path())
            .env("PATH", "/usr/bin:/bin")
            .env("PEDELEC_RUNTIME_DIR", dir.path().join("rt"))
            .env("PEDELEC_OLLAMA_ENDPOINT", &mock.url)
            .args(["--model", "bench", "--workspace"])
            .arg(&ws)
            .current_dir(&ws);
        cmd
    };
    let agents: [(&str, PathBuf); 2] = [("real", real.clone()), ("stub", stub.clone())];

    let n_first = cfg.n(200, 20);
    let mut rows = Vec::new();
    for (name, program) in &agents {
        let mut samples = Vec::with_capacity(n_first);
        for i in 0..n_first + 5 {
            let seen = run_agent(command(program), "@@stream 1").await?;
            if i >= 5 {
                samples.push(us(seen.first_delta));
            }
        }
        let (id, what) = if *name == "real" {
            (
                "agent.first_delta.real",
                "pedelec-agent spawn -> first chat_delta on its stdout (mock Ollama answering at once)",
            )
        } else {
            (
                "agent.first_delta.stub",
                "stub agent spawn -> first chat_delta on its stdout (no model server)",
            )
        };
        rows.push(Row::latency(id, what, samples));
    }

    let n = cfg.n(50_000, 5_000);
    for (name, program) in &agents {
        let rounds = cfg.n(3, 1);
        let mut best = 0f64;
        let mut lost = false;
        for _ in 0..rounds {
            let seen = run_agent(command(program), &format!("@@stream {n}")).await?;
            lost |= seen.deltas != n;
            let rate = seen.deltas as f64 / seen.first_to_last.as_secs_f64().max(1e-9);
            best = best.max(rate);
        }
        let (id, what) = if *name == "real" {
            (
                "agent.deltas.real",
                format!(
                    "pedelec-agent: {n} one-token chunks from the mock -> chat_delta lines read from its stdout (best of {rounds})"
                ),
            )
        } else {
            (
                "agent.deltas.stub",
                format!("stub agent: {n} chat_delta lines read from its stdout (best of {rounds})"),
            )
        };
        rows.push(
            Row::value(id, what, "deltas/s", best, n).broken_if(lost, "a delta was lost".into()),
        );
    }
    let mut reference = 0f64;
    for _ in 0..cfg.n(3, 1) {
        reference = reference.max(bare_client(&mock.url, n).await?);
    }
    rows.push(Row::value(
        "agent.mock_stream",
        format!("the mock's {n}-chunk NDJSON stream read by a bare TCP client in the harness (reference)"),
        "lines/s",
        reference,
        n,
    ));
    Ok(rows)
}
