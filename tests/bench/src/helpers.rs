//! The small programs the harness runs as separate processes (the bench
//! binary itself, picked by argv): the stub agent, a frame echo and a
//! Unix-socket echo server.

use std::io::{BufWriter, Read, Write};
use std::time::Duration;

use crate::env::mono_ns;

/// `pedelec-agent` as ProviderService runs it (the Ollama JSONL contract in
/// services/provider/src/adapters/ollama.rs). The user's text picks what it does:
/// - `@@stream N`: N chat deltas as fast as the pipe takes them;
/// - `@@paced N US`: N deltas, one every US µs, each flushed on its own;
/// - `@@chats N`: N complete messages;
/// - `@@wait FILE`: writes its environment to FILE and waits, so the harness
///   can act as the agent (tool calls) while the turn runs;
/// - `@@load N K FILE`: N deltas as fast as the pipe takes them, with K
///   `pedelec-cli tool-call`s spread among them (each timed spawn -> result,
///   appended to FILE as a line `<µs> <spawn ns> <result ns>` (CLOCK_MONOTONIC;
///   the spawn ns is also the call's `q`, so the harness can split the call
///   into hops), `ERR <output>` when the result was not the echo).
///
/// Every delta's text is `<index>:<CLOCK_MONOTONIC ns> ` so the receiver can
/// check order and compute the latency.
pub fn agent_main() -> i32 {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("pedelec-agent 0.0.0-bench");
        return 0;
    }
    let mut prompt = String::new();
    let _ = std::io::stdin().read_to_string(&mut prompt);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let _ = writeln!(out, r#"{{"type":"session","id":"bench-session"}}"#);
    let words = |tag: &str| -> Vec<String> {
        prompt
            .rfind(tag)
            .map(|i| {
                prompt[i + tag.len()..]
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let arg = |w: &[String], i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    if prompt.contains("@@stream ") {
        let n = arg(&words("@@stream "), 0);
        for i in 0..n {
            let _ = writeln!(
                out,
                r#"{{"type":"chat_delta","text":"{i}:{} "}}"#,
                mono_ns()
            );
        }
    } else if prompt.contains("@@paced ") {
        let w = words("@@paced ");
        let (n, gap) = (arg(&w, 0), arg(&w, 1));
        for i in 0..n {
            let _ = writeln!(
                out,
                r#"{{"type":"chat_delta","text":"{i}:{} "}}"#,
                mono_ns()
            );
            let _ = out.flush();
            std::thread::sleep(Duration::from_micros(gap));
        }
    } else if prompt.contains("@@load ") {
        let w = words("@@load ");
        let (n, k) = (arg(&w, 0), arg(&w, 1).max(1));
        let file = w.get(2).cloned().unwrap_or_default();
        let step = (n / k).max(1);
        let mut timings = String::new();
        for i in 0..n {
            if i % step == step / 2 && timings.lines().count() < k as usize {
                let _ = out.flush();
                timings.push_str(&load_tool_call());
            }
            let _ = writeln!(
                out,
                r#"{{"type":"chat_delta","text":"{i}:{} "}}"#,
                mono_ns()
            );
        }
        let _ = std::fs::write(&file, timings);
    } else if prompt.contains("@@chats ") {
        // N complete messages (entries of the thread's history).
        for i in 0..arg(&words("@@chats "), 0) {
            let _ = writeln!(out, r#"{{"type":"chat","text":"message {i}"}}"#);
        }
    } else if prompt.contains("@@wait ") {
        let _ = out.flush();
        if let Some(file) = words("@@wait ").first() {
            let env: String = std::env::vars()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect();
            let tmp = format!("{file}.tmp");
            if std::fs::write(&tmp, env).is_ok() {
                let _ = std::fs::rename(&tmp, file);
            }
        }
        // Ended by the session's End (process-group kill); the bound keeps a
        // lost stub from living on.
        std::thread::sleep(Duration::from_secs(600));
    }
    let _ = writeln!(out, r#"{{"type":"usage","input":10,"output":5}}"#);
    let _ = out.flush();
    0
}

/// One `pedelec-cli tool-call` of the bench tool as the stub agent runs it
/// (its own environment, the CLI beside it): a line of µs, or `ERR ...`.
fn load_tool_call() -> String {
    let cli = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("pedelec-cli")))
        .unwrap_or_default();
    let thread = std::env::var("PEDELEC_THREAD_ID").unwrap_or_default();
    let start_ns = mono_ns();
    let t = std::time::Instant::now();
    let out = std::process::Command::new(cli)
        .args([
            "--thread-id",
            &thread,
            "tool-call",
            "bench_echo",
            &format!(r#"{{"q":"{start_ns}"}}"#),
        ])
        .stdin(std::process::Stdio::null())
        .output();
    let took = t.elapsed();
    let end_ns = mono_ns();
    let echo = format!(r#""echo":"{start_ns}""#);
    match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains(&echo) => {
            format!("{} {start_ns} {end_ns}\n", took.as_micros())
        }
        Ok(o) => format!(
            "ERR {}\n",
            String::from_utf8_lossy(&o.stdout).replace('\n', " ")
        ),
        Err(e) => format!("ERR {e}\n"),
    }
}

/// Echoes native-messaging frames (4-byte LE length + body) from stdin to stdout.
pub fn frame_echo_main() -> i32 {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut body = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if input.read_exact(&mut len).is_err() {
            return 0;
        }
        body.resize(u32::from_le_bytes(len) as usize, 0);
        if input.read_exact(&mut body).is_err() {
            return 0;
        }
        // One write per frame, as the host's writer does.
        let mut frame = len.to_vec();
        frame.extend_from_slice(&body);
        if output
            .write_all(&frame)
            .and_then(|_| output.flush())
            .is_err()
        {
            return 0;
        }
    }
}

/// Accepts one connection on the socket path and echoes every read back.
pub fn uds_echo_main(path: &str) -> i32 {
    let _ = std::fs::remove_file(path);
    let Ok(listener) = std::os::unix::net::UnixListener::bind(path) else {
        return 1;
    };
    let Ok((mut conn, _)) = listener.accept() else {
        return 1;
    };
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return 0,
            Ok(n) => {
                if conn.write_all(&buf[..n]).is_err() {
                    return 0;
                }
            }
        }
    }
}
