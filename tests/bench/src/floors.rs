//! The floors the figures are compared with: spawn+exit of a trivial static
//! program, a Unix-socket echo, a frame echo through a child's stdio (one at
//! a time and streamed) and a raw gRPC unary call.

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pedelec_common::ServiceName;
use serde_json::json;

use crate::Config;
use crate::env::{BenchEnv, PATIENCE};
use crate::host::frame;
use crate::measure::{spawn_helper, timed_output, us};
use crate::report::Row;
use crate::sessions::TOOL;

/// Spawn+exit of `program`, as the CLI rows spawn `pedelec-cli`.
pub(crate) async fn spawn_floor(
    cfg: &Config,
    id: &'static str,
    program: &std::path::Path,
) -> Result<Vec<Row>, String> {
    if !program.exists() {
        return Err(format!("{} missing", program.display()));
    }
    let n = cfg.n(1000, 100);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let (d, _, _) = timed_output(tokio::process::Command::new(program)).await?;
        // The first runs warm the page cache; they are not part of the figure.
        if i >= 20 {
            samples.push(us(d));
        }
    }
    Ok(vec![Row::latency(
        id,
        format!("spawn+exit of {}", program.display()),
        samples,
    )])
}

pub(crate) fn helper(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("current exe"));
    cmd.args(args);
    cmd
}

pub(crate) async fn uds_echo_floor(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(20_000, 2000);
    let dir = tempfile::Builder::new()
        .prefix("pdle")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    let path = dir.path().join("echo.sock");
    let mut cmd = helper(&["uds-echo", &path.display().to_string()]);
    cmd.stdin(Stdio::null());
    let mut child = spawn_helper(cmd)?;
    let result = tokio::task::spawn_blocking(move || -> Result<Vec<f64>, String> {
        let deadline = Instant::now() + PATIENCE;
        let mut conn = loop {
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(c) => break c,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(format!("connect echo: {e}")),
            }
        };
        let msg = [7u8; 64];
        let mut back = [0u8; 64];
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + 100 {
            let t = Instant::now();
            conn.write_all(&msg).map_err(|e| e.to_string())?;
            conn.read_exact(&mut back).map_err(|e| e.to_string())?;
            if i >= 100 {
                samples.push(us(t.elapsed()));
            }
        }
        Ok(samples)
    })
    .await
    .map_err(|e| e.to_string())?;
    let _ = child.kill();
    let _ = child.wait();
    Ok(vec![Row::latency(
        "floor.uds_echo",
        "Unix-socket echo round trip, 64 B, to another process",
        result?,
    )])
}

pub(crate) async fn frame_echo_floor(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(20_000, 2000);
    let mut cmd = helper(&["frame-echo"]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = spawn_helper(cmd)?;
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // About the size of a tool_request event frame.
    let message = frame(
        &json!({"type": "event", "sessionId": "thr_0123456789abcdef0123456789abcdef", "seq": 12345,
        "at": 1764524403123u64, "event": {"type": "tool_request", "toolRequestId": "tr_0123456789abcdef",
        "tool": TOOL, "args": {"q": "x"}, "operationId": "op_0123456789abcdef"}}),
    );
    let stream_n = cfg.n(200_000, 20_000);
    // A chat_delta event frame as the host writes it, for the streaming floor.
    let delta = frame(
        &json!({"type": "event", "sessionId": "thr_0123456789abcdef0123456789abcdef",
        "seq": 123456, "at": 1764524403123u64,
        "event": {"type": "chat_delta", "operationId": "op_0123456789abcdef", "text": "123456:1234567890123 "}}),
    );
    let (samples, rate) =
        tokio::task::spawn_blocking(move || -> Result<(Vec<f64>, f64), String> {
            let mut back = vec![0u8; message.len()];
            let mut samples = Vec::with_capacity(n);
            for i in 0..n + 100 {
                let t = Instant::now();
                stdin.write_all(&message).map_err(|e| e.to_string())?;
                stdout.read_exact(&mut back).map_err(|e| e.to_string())?;
                if i >= 100 {
                    samples.push(us(t.elapsed()));
                }
            }
            // Streaming: one thread writes frames as fast as the pipe takes them,
            // this one reads them back, as the delta figure counts them.
            let t = Instant::now();
            let len = delta.len();
            let writer = std::thread::spawn(move || {
                for _ in 0..stream_n {
                    if stdin.write_all(&delta).is_err() {
                        return;
                    }
                }
            });
            let mut back = vec![0u8; len];
            for _ in 0..stream_n {
                stdout.read_exact(&mut back).map_err(|e| e.to_string())?;
            }
            let rate = stream_n as f64 / t.elapsed().as_secs_f64();
            let _ = writer.join();
            Ok((samples, rate))
        })
        .await
        .map_err(|e| e.to_string())??;
    let _ = child.kill();
    let _ = child.wait();
    Ok(vec![
        Row::latency(
            "floor.frame_echo",
            "native-messaging frame (≈250 B) echo through a child's stdin/stdout",
            samples,
        ),
        Row::value(
            "floor.frame_stream",
            "chat_delta-sized frames streamed through a frame-echo child (write one per syscall, read back)",
            "events/s",
            rate,
            stream_n,
        ),
    ])
}

pub(crate) async fn grpc_floor(env: &BenchEnv, n: usize) -> Result<Row, String> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let channel = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
        .await
        .map_err(|e| e.to_string())?;
    let mut client = HealthClient::new(channel);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let t = Instant::now();
        client
            .check(HealthCheckRequest {
                service: ServiceName::Session.grpc_name().into(),
            })
            .await
            .map_err(|e| e.to_string())?;
        if i >= 100 {
            samples.push(us(t.elapsed()));
        }
    }
    Ok(Row::latency(
        "floor.grpc_unary",
        "gRPC unary round trip over a Unix socket (Health/Check on session.sock)",
        samples,
    ))
}
