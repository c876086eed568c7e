//! The measurements, in the order they run. Each phase records its rows; a
//! phase that cannot run records a failed row and the run goes on (and exits
//! non-zero at the end).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::{to_struct, to_value};
use pedelec_proto::v1 as pb;
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::Config;
use crate::env::{BenchEnv, ORIGIN, PATIENCE, memory_kib, mono_ns, stop};
use crate::host::{Host, Stamps, frame};
use crate::report::{Row, Target, print_table, to_json};

pub(crate) type Sessions = pb::session_service_client::SessionServiceClient<Channel>;
/// (process name, VmRSS KiB, PSS KiB if readable).
type MemSample = (String, u64, Option<u64>);
type Bridge = pb::tool_bridge_service_client::ToolBridgeServiceClient<Channel>;

const TOOL: &str = "bench_echo";
const ARGS: &str = r#"{"q":"x"}"#;

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn skills() -> Value {
    json!({
        "guidance": "Benchmark tools.",
        "tools": [{"name": TOOL, "description": "Echoes q.",
                   "argsSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
    })
}

pub async fn run(cfg: &Config) -> i32 {
    let started = Instant::now();
    let load_before = loadavg();
    let steal_before = steal_ms();
    let mut rows: Vec<Row> = Vec::new();
    println!(
        "pedelec-bench: {} run, binaries from {}",
        if cfg.quick { "quick" } else { "full" },
        cfg.release.display()
    );

    phase(
        cfg,
        &mut rows,
        "floor.spawn_static",
        "spawn+exit of a trivial static binary",
        spawn_floor(cfg, "floor.spawn_static", &cfg.noop),
    )
    .await;
    if let Some(bare) = &cfg.noop_bare {
        phase(
            cfg,
            &mut rows,
            "floor.spawn_bare",
            "spawn+exit of a static binary with no C library",
            spawn_floor(cfg, "floor.spawn_bare", bare),
        )
        .await;
    }
    phase(
        cfg,
        &mut rows,
        "floor.uds_echo",
        "Unix-socket echo round trip (64 B)",
        uds_echo_floor(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "floor.frame_echo",
        "native-messaging frame echo through a child's stdio",
        frame_echo_floor(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "up.all_healthy",
        "`pedelecd up` spawn -> all four serving",
        up_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "main",
        "services + native host",
        main_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "agent",
        "pedelec-agent and the stub agent against the mock Ollama server",
        crate::agent::agent_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "turn_start",
        "a stub agent's turn start, confined by bubblewrap and plain",
        crate::turn::turn_start_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "provider",
        "the real pinned codex and opencode (through their per-thread servers) and claude against the mock model",
        crate::provider::provider_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "autostart.first_answer",
        "native host's first answer with the services down",
        autostart_phase(cfg),
    )
    .await;
    // Last: its fresh-inode half deletes hundreds of files under /tmp, and on
    // this VM's journal-less ext4 every new inode of the next minutes (each
    // create's record file) scans past them (docs/benchmarks.md, "Session 14").
    phase(
        cfg,
        &mut rows,
        "breakdown.journal_write",
        "SessionService's record write, alone",
        journal_write(cfg),
    )
    .await;

    let order = [
        "tool_call.host",
        "tool_call.grpc",
        "tool_call.mcp.host",
        "tool_call.mcp.grpc",
        "tool_call.cli_help",
        "tool_call.cli_unreachable",
        "in_service.calltool.host",
        "in_service.calltool.grpc",
        "in_service.request_leg.host",
        "in_service.answer_leg.host",
        "in_service.request_leg.grpc",
        "in_service.answer_leg.grpc",
        "in_service.to_emit.grpc",
        "in_service.emit_to_client.grpc",
        "breakdown.journal_write",
        "breakdown.journal_write.fresh_inode",
        "deltas.host",
        "deltas.host.latency_paced",
        "deltas.host.latency_burst",
        "deltas.grpc",
        "agent.first_delta.real",
        "agent.first_delta.stub",
        "turn_start.plain",
        "turn_start.confined",
        "turn_start.bwrap_spawn",
        "agent.deltas.real",
        "agent.deltas.stub",
        "agent.mock_stream",
        "create_session.host",
        "attach.host",
        "end.host",
        "create_session.grpc",
        "attach.grpc",
        "end.grpc",
        "up.all_healthy",
        "up.launcher_log",
        "up.stop",
        "autostart.first_answer",
        "rss.idle",
        "pss.idle",
        "rss.loaded",
        "pss.loaded",
        "rss.after_burst",
        "pss.after_burst",
        "floor.spawn_static",
        "floor.spawn_bare",
        "floor.uds_echo",
        "floor.grpc_unary",
        "floor.frame_echo",
        "floor.frame_stream",
        "floor.host_hop",
    ];
    // Derived, not measured on its own: the least any host request costs is
    // one frame round trip through a child's stdio plus one gRPC unary call.
    let p50 = |id: &str| {
        rows.iter()
            .find(|r| r.id == id && r.error.is_none())
            .and_then(|r| r.pct(50.0))
    };
    if let (Some(f), Some(g)) = (p50("floor.frame_echo"), p50("floor.grpc_unary")) {
        rows.push(Row::value(
            "floor.host_hop",
            "floor.frame_echo p50 + floor.grpc_unary p50 (derived)",
            "us",
            f + g,
            0,
        ));
    }
    rows.sort_by_key(|r| order.iter().position(|o| *o == r.id).unwrap_or(order.len()));

    println!();
    print_table(&rows);
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.id)
        .collect();
    // Read once: the JSON and the closing line give the same figures.
    let load_after = loadavg();
    let steal = steal_before
        .zip(steal_ms())
        .map(|(before, after)| after.saturating_sub(before));
    let wall_seconds = started.elapsed().as_secs_f64();
    let meta = json!({
        "quick": cfg.quick,
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu_model(),
        "mem_total_kib": mem_total_kib(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "steal_ms": steal,
        "wall_seconds": wall_seconds,
        "failed": failed,
    });
    let doc = to_json(&rows, meta);
    if let Some(dir) = cfg.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&cfg.out, serde_json::to_string_pretty(&doc).unwrap()) {
        Ok(()) => println!("\nwrote {}", cfg.out.display()),
        Err(e) => {
            eprintln!("cannot write {}: {e}", cfg.out.display());
            return 1;
        }
    }
    println!(
        "load average before/after: {load_before} / {load_after}; steal {}; {wall_seconds:.1} s",
        steal.map_or("unknown".into(), |ms| format!("{ms} ms")),
    );
    if failed.is_empty() {
        0
    } else {
        eprintln!("measurements that did not run: {}", failed.join(", "));
        1
    }
}

async fn phase(
    cfg: &Config,
    rows: &mut Vec<Row>,
    id: &'static str,
    what: &str,
    fut: impl std::future::Future<Output = Result<Vec<Row>, String>>,
) {
    if cfg
        .only
        .as_deref()
        .is_some_and(|only| !id.starts_with(only))
    {
        return;
    }
    eprintln!("-- {what}");
    match fut.await {
        Ok(mut new) => rows.append(&mut new),
        Err(e) => {
            eprintln!("   FAILED: {e}");
            rows.push(Row::failed(id, what, e));
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Time the hypervisor ran something else while this VM's CPUs wanted to run
/// (`steal` of `/proc/stat`, all CPUs): what makes one run of this VM slower
/// than another for the same build.
fn steal_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: u64 = stat
        .lines()
        .next()?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()?;
    // SAFETY: sysconf only reads a constant.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(ticks * 1000 / per_second.max(1))
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default()
}

fn mem_total_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs a command to completion the way the agent runs `pedelec-cli`:
/// spawn, collect stdout, wait. Returns (elapsed, success, stdout).
async fn timed_output(cmd: tokio::process::Command) -> Result<(Duration, bool, Vec<u8>), String> {
    timed_run(cmd, true).await
}

async fn timed_run(
    mut cmd: tokio::process::Command,
    must_succeed: bool,
) -> Result<(Duration, bool, Vec<u8>), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = tokio::time::timeout(PATIENCE, cmd.output())
        .await
        .map_err(|_| "command did not finish within the ceiling".to_string())?
        .map_err(|e| format!("spawn: {e}"))?;
    let d = t.elapsed();
    if must_succeed && !out.status.success() {
        return Err(format!(
            "exited {:?}: {} {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((d, out.status.success(), out.stdout))
}

/// With `--profile DIR`: a system-wide `perf record` (cpu-clock, call graphs)
/// for the duration of `fut`, into DIR/<name>.data; without it, just `fut`.
async fn profiled<T>(cfg: &Config, name: &str, fut: impl std::future::Future<Output = T>) -> T {
    let Some(dir) = &cfg.profile else {
        return fut.await;
    };
    let _ = std::fs::create_dir_all(dir);
    let mut cmd = std::process::Command::new("perf");
    cmd.args([
        "record",
        "-q",
        "-a",
        "-g",
        "-e",
        "cpu-clock",
        "-F",
        "4000",
        "-o",
    ])
    .arg(dir.join(format!("{name}.data")))
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    let perf = spawn_helper(cmd);
    // perf needs a moment before it records anything.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = fut.await;
    if let Ok(mut perf) = perf {
        crate::env::signal(perf.id() as i32, libc::SIGINT);
        let _ = perf.wait();
    }
    out
}

// ---------------------------------------------------------------- floors

/// Spawn+exit of `program`, as the CLI rows spawn `pedelec-cli`.
async fn spawn_floor(
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

fn helper(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("current exe"));
    cmd.args(args);
    cmd
}

async fn uds_echo_floor(cfg: &Config) -> Result<Vec<Row>, String> {
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

fn spawn_helper(mut cmd: std::process::Command) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let child = cmd.spawn().map_err(|e| format!("spawn helper: {e}"))?;
    crate::env::register_group(child.id());
    Ok(child)
}

async fn frame_echo_floor(cfg: &Config) -> Result<Vec<Row>, String> {
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

async fn grpc_floor(env: &BenchEnv, n: usize) -> Result<Row, String> {
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

/// The session journal's write (`RecyclingWriter`, no fsync) of a
/// record-sized file in place of the previous one, on the filesystem of the temp
/// dirs: SessionService does this on every state change. Next to it, fewer
/// samples of the plain replace-by-rename, which makes and deletes an inode
/// each time (kept short: the deletions slow inode creation on this disk for
/// a while, and the phases after this one create sessions).
async fn journal_write(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(2000, 200);
    let dir = tempfile::Builder::new()
        .prefix("pdlj")
        .tempdir_in("/tmp")
        .map_err(|e| e.to_string())?;
    let name = "thr_0123456789abcdef.json";
    let file = dir.path().join(name);
    let record = vec![b'x'; 1536];
    let writer = pedelec_common::paths::RecyclingWriter::new(dir.path().into(), 0o600);
    let mut recycled = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        writer
            .replace(name, &record)
            .map_err(|e| format!("RecyclingWriter::replace: {e}"))?;
        if i >= 20 {
            recycled.push(us(t.elapsed()));
        }
    }
    let mut fresh = Vec::with_capacity(n / 10);
    for i in 0..n / 10 + 20 {
        let t = Instant::now();
        pedelec_common::paths::replace_file(&file, &record, 0o600, false)
            .map_err(|e| format!("replace_file: {e}"))?;
        if i >= 20 {
            fresh.push(us(t.elapsed()));
        }
    }
    Ok(vec![
        Row::latency(
            "breakdown.journal_write",
            "breakdown: the journal's write of 1.5 KB (a recycled temp file, its name swapped with the old one's, no fsync)",
            recycled,
        ),
        Row::latency(
            "breakdown.journal_write.fresh_inode",
            "breakdown: the same with a new temp file each time (replace_file), the inode created and the old one deleted",
            fresh,
        ),
    ])
}

// ---------------------------------------------------------------- pedelecd up

async fn up_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(100, 5);
    let env = BenchEnv::new(&cfg.release)?;
    let (mut wall, mut logged, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let t = Instant::now();
        let mut child = env.spawn_up("up.log")?;
        let waited = env.wait_serving(Duration::from_micros(500)).await;
        let d = t.elapsed();
        if let Err(e) = waited {
            stop(&mut child);
            return Err(format!(
                "{e}; launcher log: {}",
                std::fs::read_to_string(env.root.join("up.log")).unwrap_or_default()
            ));
        }
        wall.push(us(d));
        if i == 0 {
            // The user's view of the same fact.
            let out = env
                .command("pedelecd")
                .args(["status", "--json"])
                .output()
                .map_err(|e| e.to_string())?;
            let status: Value =
                serde_json::from_slice(&out.stdout).map_err(|e| format!("status --json: {e}"))?;
            let serving = status["services"]
                .as_array()
                .map(|s| s.iter().filter(|s| s["state"] == "serving").count());
            if serving != Some(4) {
                stop(&mut child);
                return Err(format!(
                    "status --json does not show four serving: {status}"
                ));
            }
        }
        // The launcher logs its line once its own wait has settled, which can
        // be a moment after Status shows all serving; a stop before that
        // would turn the line into a "not all healthy" one.
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut ms = None;
        while ms.is_none() && Instant::now() < deadline {
            ms = healthy_in_ms(
                &std::fs::read_to_string(env.root.join("up.log")).unwrap_or_default(),
            );
            if ms.is_none() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        stops.push(us(stop(&mut child)));
        if let Some(ms) = ms {
            logged.push(ms * 1000.0);
        }
    }
    let mut rows = vec![
        Row::latency("up.all_healthy", "`pedelecd up` spawn -> SupervisorService.Status shows all four serving (polled every 0.5 ms)", wall)
            .target(Target::AtMost(15_000.0), "≤ 15 ms"),
        Row::latency("up.stop", "SIGTERM to `pedelecd up` -> launcher exited (services stopped)", stops),
    ];
    if logged.len() == n {
        rows.push(
            Row::latency(
                "up.launcher_log",
                "the launcher's own \"all 4 services healthy in X ms\"",
                logged,
            )
            .target(Target::AtMost(15_000.0), "≤ 15 ms"),
        );
    } else {
        rows.push(Row::failed(
            "up.launcher_log",
            "launcher's \"healthy in X ms\" line",
            format!("found in {} of {n} logs", logged.len()),
        ));
    }
    Ok(rows)
}

fn healthy_in_ms(log: &str) -> Option<f64> {
    let rest = log.split("healthy in ").nth(1)?;
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().ok()
}

// ---------------------------------------------------------------- main phase

struct Procs {
    list: Vec<(String, u32)>,
}

impl Procs {
    async fn of(env: &BenchEnv, launcher: u32, host: u32) -> Result<Procs, String> {
        let status = env.status().await?;
        let mut list = vec![("pedelecd".to_string(), launcher)];
        list.extend(status.services.iter().map(|s| (s.name.clone(), s.pid)));
        list.push(("pedelec-native-host".into(), host));
        Ok(Procs { list })
    }

    fn sample(&self) -> Vec<MemSample> {
        self.list
            .iter()
            .map(|(n, p)| {
                let (rss, pss) = memory_kib(*p);
                (n.clone(), rss, pss)
            })
            .collect()
    }
}

fn memory_rows(kind: &'static str, sample: &[MemSample], n: usize) -> Vec<Row> {
    let (rss_id, pss_id) = match kind {
        "idle" => ("rss.idle", "pss.idle"),
        "after burst" => ("rss.after_burst", "pss.after_burst"),
        _ => ("rss.loaded", "pss.loaded"),
    };
    let rss: u64 = sample.iter().map(|s| s.1).sum();
    let detail =
        |f: &dyn Fn(&MemSample) -> String| sample.iter().map(f).collect::<Vec<_>>().join(", ");
    let mut rows = vec![{
        let row = Row::value(
            rss_id,
            format!("VmRSS summed over launcher, four services, native host ({kind})"),
            "MiB",
            rss as f64 / 1024.0,
            n,
        )
        .note(detail(&|s| format!("{} {:.1}", s.0, s.1 as f64 / 1024.0)));
        if kind == "idle" {
            row.target(Target::AtMost(28.0), "≤ 28 MiB")
        } else {
            row
        }
    }];
    if sample.iter().all(|s| s.2.is_some()) {
        let pss: u64 = sample.iter().filter_map(|s| s.2).sum();
        rows.push(
            Row::value(
                pss_id,
                format!("PSS summed (smaps_rollup, {kind})"),
                "MiB",
                pss as f64 / 1024.0,
                n,
            )
            .target(
                Target::AtMost(if kind == "idle" { 16.0 } else { 40.0 }),
                if kind == "idle" {
                    "≤ 16 MiB"
                } else {
                    "≤ 40 MiB"
                },
            )
            .note(detail(&|s| {
                format!("{} {:.1}", s.0, s.2.unwrap_or(0) as f64 / 1024.0)
            })),
        );
    }
    rows
}

/// Settings for turns of the stub agent (run as the `ollama` provider, which
/// needs a model).
pub(crate) async fn stub_agent_settings(provider: Channel) -> Result<(), String> {
    let mut settings = pb::Settings::default();
    settings.profiles.insert(
        "ollama".into(),
        pb::ProviderProfiles {
            levels: [(
                "default".to_string(),
                pb::EffortProfile {
                    model: "bench-model".into(),
                    effort: String::new(),
                },
            )]
            .into(),
        },
    );
    pb::provider_service_client::ProviderServiceClient::new(provider)
        .update_settings(pb::UpdateSettingsRequest {
            settings: Some(settings),
            update_mask: None,
        })
        .await
        .map_err(|e| format!("UpdateSettings: {e}"))?;
    Ok(())
}

async fn main_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let env = BenchEnv::new(&cfg.release)?;
    let mut launcher = env.spawn_up("launcher.log")?;
    let result = main_phase_inner(cfg, &env, launcher.id()).await;
    stop(&mut launcher);
    result
}

async fn main_phase_inner(cfg: &Config, env: &BenchEnv, launcher: u32) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    env.wait_serving(Duration::from_millis(5)).await?;
    let provider_channel = pedelec_common::uds::connect(&env.socket(ServiceName::Provider))
        .await
        .map_err(|e| e.to_string())?;
    stub_agent_settings(provider_channel).await?;
    let session_channel = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
        .await
        .map_err(|e| e.to_string())?;
    let mut sessions = Sessions::new(session_channel);

    let mut host = Host::spawn(env)?;
    let pong = host.call("ping", json!({})).await?;
    if pong["coreRunning"] != true {
        return Err(format!("host does not see the services: {pong}"));
    }
    // Idle: everything started, one session attached, nothing running.
    let idle_session = open_host_session(&mut host).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let procs = Procs::of(env, launcher, host.pid).await?;
    rows.extend(memory_rows("idle", &procs.sample(), 1));

    // A sub-phase that cannot run is recorded; the others still run.
    let record =
        |rows: &mut Vec<Row>, id: &'static str, what: &str, r: Result<Vec<Row>, String>| match r {
            Ok(new) => rows.extend(new),
            Err(e) => {
                eprintln!("   FAILED {id}: {e}");
                rows.push(Row::failed(id, what, e));
            }
        };
    let r = grpc_floor(env, cfg.n(5000, 500)).await.map(|r| vec![r]);
    record(
        &mut rows,
        "floor.grpc_unary",
        "raw gRPC unary round trip",
        r,
    );
    let r = profiled(cfg, "lifecycle_host", lifecycle_host(cfg, &mut host)).await;
    record(
        &mut rows,
        "create_session.host",
        "create/attach/end through the host",
        r,
    );
    let r = profiled(cfg, "lifecycle_grpc", lifecycle_grpc(cfg, &mut sessions)).await;
    record(
        &mut rows,
        "create_session.grpc",
        "create/attach/end over gRPC",
        r,
    );
    let r = tool_calls(cfg, env, &mut host, &mut sessions).await;
    record(&mut rows, "tool_call.host", "tool calls", r);
    let r = deltas(cfg, env, &mut host, &mut sessions, &procs).await;
    record(&mut rows, "deltas.host", "chat deltas", r);
    let _ = host.call("end", json!({"sessionId": idle_session})).await;
    if let Some(e) = host.protocol_error() {
        return Err(format!("native-messaging protocol error: {e}"));
    }
    host.close().await;
    Ok(rows)
}

async fn open_host_session(host: &mut Host) -> Result<String, String> {
    let created = host
        .call(
            "create_session",
            json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false}),
        )
        .await?;
    let id = created["sessionId"]
        .as_str()
        .ok_or("create_session without sessionId")?
        .to_string();
    host.call("attach", json!({"sessionId": id})).await?;
    Ok(id)
}

async fn lifecycle_host(cfg: &Config, host: &mut Host) -> Result<Vec<Row>, String> {
    let n = cfg.n(200, 20);
    let (mut create, mut attach, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let t = Instant::now();
        let created = host
            .call(
                "create_session",
                json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false}),
            )
            .await?;
        let c = t.elapsed();
        let id = created["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_string();
        let t = Instant::now();
        let attached = host.call("attach", json!({"sessionId": id})).await?;
        let a = t.elapsed();
        if attached["snapshot"]["status"] != "idle" {
            return Err(format!(
                "attach reply without the idle snapshot: {attached}"
            ));
        }
        let t = Instant::now();
        host.call("end", json!({"sessionId": id})).await?;
        let e = t.elapsed();
        host.call("detach", json!({"sessionId": id})).await?;
        if i >= 10 {
            create.push(us(c));
            attach.push(us(a));
            end.push(us(e));
        }
    }
    host.drain();
    Ok(vec![
        Row::latency(
            "create_session.host",
            "create_session (ollama, one tool, no provider start) through the native host",
            create,
        )
        .target(
            Target::Latency {
                p50: 400.0,
                p99: None,
            },
            "p50 ≤ 400 µs",
        )
        .floor("floor.host_hop"),
        Row::latency(
            "attach.host",
            "attach through the native host (reply carries the first snapshot)",
            attach,
        )
        .target(
            Target::Latency {
                p50: 200.0,
                p99: None,
            },
            "p50 ≤ 200 µs",
        )
        .floor("floor.host_hop"),
        Row::latency("end.host", "end through the native host", end).floor("floor.host_hop"),
    ])
}

async fn lifecycle_grpc(cfg: &Config, sessions: &mut Sessions) -> Result<Vec<Row>, String> {
    let n = cfg.n(200, 20);
    let (mut create, mut attach, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let t = Instant::now();
        let created = sessions
            .create_session(pb::CreateSessionRequest {
                origin: ORIGIN.into(),
                provider: Some("ollama".into()),
                skills: Some(to_struct(skills().as_object().unwrap())),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("CreateSession: {e}"))?
            .into_inner();
        let c = t.elapsed();
        let t = Instant::now();
        let mut stream = sessions
            .attach(attach_request(&created.session_id, "bench-lifecycle"))
            .await
            .map_err(|e| format!("Attach: {e}"))?
            .into_inner();
        let first = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .map_err(|_| "no snapshot")?
            .map_err(|e| e.to_string())?;
        let a = t.elapsed();
        if !matches!(first.and_then(|e| e.event), Some(Event::Snapshot(_))) {
            return Err("first Attach message is not a snapshot".into());
        }
        let t = Instant::now();
        sessions
            .end(pedelec_proto::v1::EndRequest::from(thread(
                &created.session_id,
            )))
            .await
            .map_err(|e| format!("End: {e}"))?;
        let e = t.elapsed();
        drop(stream);
        if i >= 10 {
            create.push(us(c));
            attach.push(us(a));
            end.push(us(e));
        }
    }
    Ok(vec![
        Row::latency(
            "create_session.grpc",
            "CreateSession straight to SessionService",
            create,
        )
        .floor("floor.grpc_unary"),
        Row::latency(
            "attach.grpc",
            "Attach straight to SessionService, until the first snapshot",
            attach,
        )
        .floor("floor.grpc_unary"),
        Row::latency("end.grpc", "End straight to SessionService", end).floor("floor.grpc_unary"),
    ])
}

pub(crate) fn attach_request(id: &str, route: &str) -> pb::AttachRequest {
    pb::AttachRequest {
        session_id: id.into(),
        origin: ORIGIN.into(),
        route_id: route.into(),
        after_seq: None,
    }
}

fn thread(id: &str) -> pb::ThreadRequest {
    pb::ThreadRequest {
        session_id: id.into(),
        origin: ORIGIN.into(),
    }
}

// ---------------------------------------------------------------- tool calls

struct AgentEnv {
    thread_id: String,
    token: String,
    runtime_dir: String,
    path: String,
}

async fn wait_agent_env(file: &Path) -> Result<AgentEnv, String> {
    let deadline = Instant::now() + PATIENCE;
    while !file.exists() {
        if Instant::now() > deadline {
            return Err("the stub agent never started".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let var = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(String::from)
            .ok_or(format!("{name} missing from the agent's environment"))
    };
    Ok(AgentEnv {
        thread_id: var("PEDELEC_THREAD_ID")?,
        token: var("PEDELEC_TOOL_TOKEN")?,
        runtime_dir: var("PEDELEC_RUNTIME_DIR")?,
        path: var("PATH")?,
    })
}

/// `pedelec-cli tool-call` as the agent runs it, timed start -> exit with the
/// result read. Checks every result.
async fn cli_calls(env: &BenchEnv, agent: &AgentEnv, n: usize) -> Result<Vec<f64>, String> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear()
            .env("PEDELEC_THREAD_ID", &agent.thread_id)
            .env("PEDELEC_TOOL_TOKEN", &agent.token)
            .env("PEDELEC_RUNTIME_DIR", &agent.runtime_dir)
            .env("PATH", &agent.path)
            .args(["--thread-id", &agent.thread_id, "tool-call", TOOL, ARGS]);
        let (d, _, stdout) = timed_output(cmd).await?;
        let doc: Value = serde_json::from_slice(&stdout)
            .map_err(|e| format!("pedelec-cli printed no JSON: {e}"))?;
        if doc != json!({"ok": true, "result": {"echo": "x"}}) {
            return Err(format!("unexpected tool-call output: {doc}"));
        }
        if i >= 10 {
            samples.push(us(d));
        }
    }
    Ok(samples)
}

/// `tools/call` over `pedelec-cli mcp`'s stdio, as an agent CLI sends it on
/// its one long-lived server process: request line written -> response line
/// read. Checks every result.
async fn mcp_calls(env: &BenchEnv, agent: &AgentEnv, n: usize) -> Result<Vec<f64>, String> {
    use pedelec_tests::mcp_client::{McpClient, McpEnv, result_text};
    let mcp_env = McpEnv {
        thread_id: agent.thread_id.clone(),
        token: agent.token.clone(),
        runtime_dir: agent.runtime_dir.clone(),
    };
    let client = McpClient::spawn_program(&env.bin.join("pedelec-cli"), &mcp_env);
    let (mut client, _) = McpClient::handshake(client).await;
    let call = json!({"name": TOOL, "arguments": {"q": "x"}});
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let start = Instant::now();
        let id = client.send_request("tools/call", call.clone()).await;
        let resp = client.response(id).await;
        let d = start.elapsed();
        let result = &resp["result"];
        if result["isError"] == true || result_text(result) != r#"{"echo":"x"}"# {
            return Err(format!("unexpected tools/call answer: {resp}"));
        }
        if i >= 10 {
            samples.push(us(d));
        }
    }
    client.close().await;
    Ok(samples)
}

/// CallTool samples: the whole call, and its two legs split at the moment the
/// answering client received the tool_request event.
#[derive(Default)]
struct CallLegs {
    total: Vec<f64>,
    request: Vec<f64>,
    answer: Vec<f64>,
    /// Request leg split at the event's `at` (when SessionService emitted it;
    /// wall clock, so only where `at` has µs precision: the gRPC stream).
    to_emit: Vec<f64>,
    emit_to_client: Vec<f64>,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// ToolBridgeService.CallTool with the thread's token, as pedelec-cli sends it,
/// over one connection: the services' share of a tool call.
async fn calltool_calls(
    env: &BenchEnv,
    agent: &AgentEnv,
    n: usize,
    stamps: &Stamps,
    emits: Option<&Stamps>,
) -> Result<CallLegs, String> {
    let channel = pedelec_common::uds::connect(&env.socket(ServiceName::ToolBridge))
        .await
        .map_err(|e| e.to_string())?;
    let mut bridge = Bridge::new(channel);
    let args = to_value(&json!({"q": "x"}));
    let token: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        agent.token.parse().map_err(|_| "bad token")?;
    let mut legs = CallLegs::default();
    for i in 0..n + 50 {
        let mut req = tonic::Request::new(pb::CallToolRequest {
            session_id: agent.thread_id.clone(),
            tool: TOOL.into(),
            args: Some(args.clone()),
            timeout_ms: None,
        });
        req.metadata_mut()
            .insert("x-pedelec-tool-token", token.clone());
        stamps.lock().unwrap().clear();
        if let Some(e) = emits {
            e.lock().unwrap().clear();
        }
        let w0 = wall_ns();
        let t0 = mono_ns();
        let out = tokio::time::timeout(PATIENCE, bridge.call_tool(req))
            .await
            .map_err(|_| "CallTool did not return within the ceiling")?
            .map_err(|e| format!("CallTool: {e}"))?;
        let t2 = mono_ns();
        if !matches!(
            out.into_inner().outcome,
            Some(pb::call_tool_response::Outcome::Result(_))
        ) {
            return Err("CallTool returned no result".into());
        }
        if i >= 50 {
            legs.total.push((t2 - t0) as f64 / 1000.0);
            if let Some(t1) = stamps.lock().unwrap().first().copied() {
                legs.request.push(t1.saturating_sub(t0) as f64 / 1000.0);
                legs.answer.push(t2.saturating_sub(t1) as f64 / 1000.0);
                if let Some(at) = emits.and_then(|e| e.lock().unwrap().first().copied()) {
                    let to_emit = at.saturating_sub(w0) as f64 / 1000.0;
                    legs.to_emit.push(to_emit);
                    legs.emit_to_client
                        .push((t1 - t0) as f64 / 1000.0 - to_emit);
                }
            }
        }
    }
    Ok(legs)
}

/// `pedelec-cli` started and ended without reaching a service: its start-up
/// cost. `--help` never builds a runtime; an unreachable runtime dir makes
/// tool-call build its runtime, fail to connect and print the error JSON.
async fn cli_startup(
    env: &BenchEnv,
    agent: &AgentEnv,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let empty = env.root.join("empty-rt");
    std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
    let (mut help, mut unreachable) = (Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear().env("PATH", &agent.path).arg("--help");
        let (d, _, _) = timed_output(cmd).await?;
        let mut cmd = tokio::process::Command::new(env.bin.join("pedelec-cli"));
        cmd.env_clear()
            .env("PEDELEC_TOOL_TOKEN", &agent.token)
            .env("PEDELEC_RUNTIME_DIR", &empty)
            .env("PATH", &agent.path)
            .args(["--thread-id", &agent.thread_id, "tool-call", TOOL, ARGS]);
        let (u, ok, _) = timed_run(cmd, false).await?;
        if ok {
            return Err("tool-call with no services succeeded".into());
        }
        if i >= 10 {
            help.push(us(d));
            unreachable.push(us(u));
        }
    }
    Ok((help, unreachable))
}

async fn tool_calls(
    cfg: &Config,
    env: &BenchEnv,
    host: &mut Host,
    sessions: &mut Sessions,
) -> Result<Vec<Row>, String> {
    let (n_cli, n_call) = (cfg.n(500, 50), cfg.n(2000, 200));
    let id = open_host_session(host).await?;
    let env_file = env.root.join("agent.env");
    host.call(
        "send_text",
        json!({"sessionId": id, "text": format!("@@wait {}", env_file.display())}),
    )
    .await?;
    let agent = wait_agent_env(&env_file).await?;
    if agent.thread_id != id {
        return Err(format!("agent runs for {} not {id}", agent.thread_id));
    }
    host.set_auto_answer(true);
    let cli_host = profiled(cfg, "tool_call_host", cli_calls(env, &agent, n_cli)).await?;
    let mcp_host = profiled(cfg, "tool_call_mcp_host", mcp_calls(env, &agent, n_call)).await?;
    let call_host = profiled(
        cfg,
        "calltool_host",
        calltool_calls(env, &agent, n_call, &host.stamps(), None),
    )
    .await?;
    if let Some(dir) = &cfg.profile {
        // Syscalls of each service process over 100 calls (strace slows them,
        // so this pass is separate from the timed one).
        let status = env.status().await?;
        for s in &status.services {
            let mut cmd = std::process::Command::new("strace");
            cmd.args(["-c", "-f", "-o"])
                .arg(dir.join(format!("calltool_{}.strace", s.name)))
                .args(["-p", &s.pid.to_string()])
                .stdin(Stdio::null())
                .stderr(Stdio::null());
            if let Ok(mut tracer) = spawn_helper(cmd) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let r = calltool_calls(env, &agent, 100, &host.stamps(), None).await;
                crate::env::signal(tracer.id() as i32, libc::SIGINT);
                let _ = tracer.wait();
                r?;
            }
        }
    }
    host.set_auto_answer(false);
    let (sent, failed) = host.answers();
    if failed > 0 {
        return Err(format!(
            "{failed} of {sent} submit_tool_result answers failed"
        ));
    }
    host.call("detach", json!({"sessionId": id})).await?;
    host.drain();

    // The same, answered by a gRPC client of SessionService instead of the host.
    let mut stream = sessions
        .attach(attach_request(&id, "bench-answer"))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let mut answerer_client = sessions.clone();
    let stamps = Stamps::default();
    let answerer_stamps = stamps.clone();
    let emits = Stamps::default();
    let answerer_emits = emits.clone();
    let answerer = tokio::spawn(async move {
        while let Ok(Some(ev)) = stream.message().await {
            if let Some(Event::ToolRequest(r)) = ev.event {
                answerer_stamps.lock().unwrap().push(mono_ns());
                if let Some(at) = &ev.at {
                    answerer_emits
                        .lock()
                        .unwrap()
                        .push(at.seconds as u64 * 1_000_000_000 + at.nanos as u64);
                }
                let _ = answerer_client
                    .submit_tool_result(pb::SubmitToolResultRequest {
                        session_id: ev.session_id,
                        origin: ORIGIN.into(),
                        tool_request_id: r.tool_request_id,
                        outcome: Some(pb::submit_tool_result_request::Outcome::Result(to_value(
                            &json!({"echo": "x"}),
                        ))),
                    })
                    .await;
            }
        }
    });
    let cli_grpc = cli_calls(env, &agent, n_cli).await;
    let mcp_grpc = mcp_calls(env, &agent, n_call).await;
    let call_grpc = calltool_calls(env, &agent, n_call, &stamps, Some(&emits)).await;
    answerer.abort();
    let startup = cli_startup(env, &agent, cfg.n(200, 20)).await;
    let _ = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread(&id)))
        .await;
    let (cli_grpc, call_grpc, (cli_help, cli_unreachable)) = (cli_grpc?, call_grpc?, startup?);
    let mcp_grpc = mcp_grpc?;
    Ok(vec![
        Row::latency("tool_call.host", "`pedelec-cli tool-call` start -> result printed, answered through the native host's stdio", cli_host)
            .target(Target::Latency { p50: 1100.0, p99: Some(1600.0) }, "p50 ≤ 1.1 ms, p99 ≤ 1.6 ms")
            .floor("floor.spawn_static"),
        Row::latency("tool_call.grpc", "`pedelec-cli tool-call` start -> result printed, answered by a SessionService gRPC client", cli_grpc)
            .floor("floor.spawn_static"),
        Row::latency("tool_call.mcp.host", "MCP tools/call line written to `pedelec-cli mcp` -> result line read, answered through the native host's stdio", mcp_host)
            .target(Target::Latency { p50: 600.0, p99: Some(1500.0) }, "p50 ≤ 0.6 ms, p99 ≤ 1.5 ms")
            .floor("floor.host_hop"),
        Row::latency("tool_call.mcp.grpc", "MCP tools/call on `pedelec-cli mcp`'s stdio -> result, answered by a SessionService gRPC client", mcp_grpc)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.calltool.host", "CallTool in -> out (one connection, token), answered through the native host", call_host.total)
            .target(Target::Latency { p50: 350.0, p99: None }, "p50 ≤ 350 µs")
            .floor("floor.grpc_unary"),
        Row::latency("in_service.calltool.grpc", "CallTool in -> out (one connection, token), answered by a SessionService gRPC client", call_grpc.total)
            .target(Target::Latency { p50: 300.0, p99: None }, "p50 ≤ 300 µs")
            .floor("floor.grpc_unary"),
        Row::latency("in_service.request_leg.host", "breakdown: CallTool sent -> tool_request frame read from the host's stdout", call_host.request)
            .floor("floor.host_hop"),
        Row::latency("in_service.answer_leg.host", "breakdown: tool_request frame read -> CallTool returned (submit frame, SubmitToolResult, Resolve)", call_host.answer)
            .floor("floor.host_hop"),
        Row::latency("in_service.request_leg.grpc", "breakdown: CallTool sent -> tool_request on the gRPC Attach stream", call_grpc.request)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.answer_leg.grpc", "breakdown: tool_request received -> CallTool returned (SubmitToolResult, Resolve)", call_grpc.answer)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.to_emit.grpc", "breakdown: CallTool sent -> SessionService stamps the tool_request event (`at`, wall clock)", call_grpc.to_emit)
            .floor("floor.grpc_unary"),
        Row::latency("in_service.emit_to_client.grpc", "breakdown: event stamped -> received on the Attach stream (journal write under the thread lock, route task, stream)", call_grpc.emit_to_client)
            .floor("floor.grpc_unary"),
        Row::latency("tool_call.cli_help", "breakdown: spawn+exit of `pedelec-cli --help` (binary start, no runtime)", cli_help)
            .floor("floor.spawn_bare"),
        Row::latency("tool_call.cli_unreachable", "breakdown: `pedelec-cli tool-call` with no service to reach (start, runtime, failed connect, error JSON)", cli_unreachable)
            .target(Target::Latency { p50: 550.0, p99: None }, "p50 ≤ 0.55 ms")
            .floor("floor.spawn_bare"),
    ])
}

// ---------------------------------------------------------------- chat deltas

/// Checks the deltas of one turn: indices in order, seqs consecutive; counts
/// what was lost instead of stopping, since loss is a result worth reporting.
/// Collects per-delta latency from the stub's timestamps.
#[derive(Default)]
struct DeltaCheck {
    next_index: u64,
    last_seq: Option<u64>,
    /// Events that carried deltas (more than one delta per event is allowed).
    events: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    latencies: Vec<f64>,
    delivered: u64,
    lost: u64,
    out_of_order: u64,
    gaps: Vec<String>,
}

struct DeltaResult {
    /// Delivered deltas per second, first to last delivered delta.
    rate: f64,
    delivered: u64,
    lost: u64,
    out_of_order: u64,
    gaps: Vec<String>,
}

impl DeltaResult {
    fn clean(&self) -> bool {
        self.lost == 0 && self.out_of_order == 0 && self.gaps.is_empty()
    }

    fn describe(&self, n: u64) -> String {
        format!(
            "{} of {n} deltas delivered, {} lost, {} out of order; seq gaps: {}",
            self.delivered,
            self.lost,
            self.out_of_order,
            if self.gaps.is_empty() {
                "none".to_string()
            } else {
                self.gaps.join("; ")
            }
        )
    }
}

impl DeltaCheck {
    /// `what` names the event, for the report when its seq is not the next one.
    fn seq(&mut self, seq: u64, what: impl FnOnce() -> String) {
        if let Some(last) = self.last_seq
            && seq != last + 1
            && self.gaps.len() < 5
        {
            self.gaps.push(format!("{last} -> {seq} ({})", what()));
        }
        self.last_seq = Some(seq);
    }

    fn delta(&mut self, text: &str, at_ns: u64) {
        self.events += 1;
        for token in text.split_whitespace() {
            let Some((i, stamp)) = token
                .split_once(':')
                .and_then(|(i, t)| Some((i.parse::<u64>().ok()?, t.parse::<u64>().ok()?)))
            else {
                self.out_of_order += 1;
                continue;
            };
            if i < self.next_index {
                self.out_of_order += 1;
                continue;
            }
            self.lost += i - self.next_index;
            self.next_index = i + 1;
            self.delivered += 1;
            self.first_ns.get_or_insert(at_ns);
            self.last_ns = at_ns;
            self.latencies
                .push(at_ns.saturating_sub(stamp) as f64 / 1000.0);
        }
    }

    fn finish(&self, n: u64) -> DeltaResult {
        let secs = (self.last_ns - self.first_ns.unwrap_or(self.last_ns)) as f64 / 1e9;
        DeltaResult {
            rate: if secs > 0.0 {
                self.delivered as f64 / secs
            } else {
                0.0
            },
            delivered: self.delivered,
            lost: self.lost + n.saturating_sub(self.next_index),
            out_of_order: self.out_of_order,
            gaps: self.gaps.clone(),
        }
    }
}

async fn host_turn(host: &mut Host, id: &str, text: String) -> Result<DeltaCheck, String> {
    host.drain();
    host.call("send_text", json!({"sessionId": id, "text": text}))
        .await?;
    let mut check = DeltaCheck::default();
    loop {
        let e = host.event().await?;
        let f = e.frame()?;
        if f.session_id != id {
            continue;
        }
        check.seq(f.seq, || format!("{:.160}", e.text()));
        match f.event.as_ref().map(|ev| &*ev.kind) {
            Some("chat_delta") => {
                let text = f.event.as_ref().and_then(|ev| ev.text.as_deref());
                check.delta(text.unwrap_or_default(), e.at_ns)
            }
            Some("operation_finished") => {
                if f.event.as_ref().and_then(|ev| ev.outcome.as_deref()) != Some("completed") {
                    return Err(format!("turn did not complete: {}", e.text()));
                }
                return Ok(check);
            }
            _ => {}
        }
    }
}

async fn deltas(
    cfg: &Config,
    env: &BenchEnv,
    host: &mut Host,
    sessions: &mut Sessions,
    procs: &Procs,
) -> Result<Vec<Row>, String> {
    let n = cfg.n(200_000, 20_000) as u64;
    let paced = cfg.n(2000, 200) as u64;
    let id = open_host_session(host).await?;
    let warm = host_turn(host, &id, "@@stream 10".into()).await?.finish(10);
    if !warm.clean() {
        return Err(format!("warm-up turn: {}", warm.describe(10)));
    }

    // RSS under load: each process's peak while the burst runs.
    let peaks: Arc<Mutex<HashMap<u32, (u64, u64)>>> = Arc::default();
    let sampler = {
        let peaks = peaks.clone();
        let list = procs.list.clone();
        tokio::spawn(async move {
            loop {
                for (_, pid) in &list {
                    let (rss, pss) = memory_kib(*pid);
                    let mut p = peaks.lock().unwrap();
                    let e = p.entry(*pid).or_default();
                    e.0 = e.0.max(rss);
                    e.1 = e.1.max(pss.unwrap_or(0));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let t = Instant::now();
    let burst = profiled(
        cfg,
        "deltas_host",
        host_turn(host, &id, format!("@@stream {n}")),
    )
    .await;
    let turn_time = t.elapsed();
    sampler.abort();
    let burst = burst?;
    let host_result = burst.finish(n);
    let loaded: Vec<MemSample> = {
        let p = peaks.lock().unwrap();
        procs
            .list
            .iter()
            .map(|(name, pid)| {
                let (rss, pss) = p.get(pid).copied().unwrap_or_default();
                (name.clone(), rss, Some(pss).filter(|v| *v > 0))
            })
            .collect()
    };
    let paced_check = host_turn(host, &id, format!("@@paced {paced} 500")).await?;
    let paced_result = paced_check.finish(paced);
    host.call("detach", json!({"sessionId": id})).await?;
    host.drain();

    // The same burst to a gRPC Attach client (no native host in the path).
    let mut stream = sessions
        .attach(attach_request(&id, "bench-deltas"))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    sessions
        .send_text(pb::SendTextRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            text: format!("@@stream {n}"),
        })
        .await
        .map_err(|e| format!("SendText: {e}"))?;
    let mut grpc = DeltaCheck::default();
    loop {
        let ev = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .map_err(|_| "no event within the ceiling")?
            .map_err(|e| e.to_string())?
            .ok_or("Attach stream ended")?;
        let at = mono_ns();
        if matches!(ev.event, Some(Event::Snapshot(_))) {
            continue;
        }
        grpc.seq(ev.seq, || format!("{:.160}", format!("{:?}", ev.event)));
        match ev.event {
            Some(Event::ChatDelta(d)) => grpc.delta(&d.text, at),
            Some(Event::OperationFinished(_)) => break,
            _ => {}
        }
    }
    drop(stream);
    let grpc_result = grpc.finish(n);
    let _ = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread(&id)))
        .await;

    let mut rows = vec![
        Row::value("deltas.host", format!("chat deltas, stub agent -> native host stdout, {n} in one turn (delivered, first to last)"), "events/s", host_result.rate, n as usize)
            .target(Target::AtLeast(300_000.0), "≥ 300,000 events/s, none lost, in order")
            .floor("floor.frame_stream")
            .broken_if(!host_result.clean(), host_result.describe(n))
            .note(format!("{}; whole turn send_text -> operation_finished {:.2} s; {} host events", host_result.describe(n), turn_time.as_secs_f64(), burst.events)),
        Row::latency("deltas.host.latency_paced", format!("per-delta latency, stub's write -> frame read from the host, one delta every 500 µs ({paced})"), paced_check.latencies)
            .floor("floor.frame_echo")
            .broken_if(!paced_result.clean(), paced_result.describe(paced)),
        Row::latency("deltas.host.latency_burst", "per-delta latency during the burst (queueing behind earlier deltas)", burst.latencies),
        Row::value("deltas.grpc", format!("chat deltas, stub agent -> SessionService Attach client, {n} in one turn (delivered, first to last)"), "events/s", grpc_result.rate, n as usize)
            .floor("floor.frame_stream")
            .broken_if(!grpc_result.clean(), grpc_result.describe(n))
            .note(grpc_result.describe(n)),
    ];
    rows.extend(memory_rows("loaded", &loaded, 1));
    // What stays once the bursts are over: the replay buffers still hold
    // their last 8 MiB of encoded events, the rest should be back with the
    // system (the trimmer looks once a second).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    rows.extend(memory_rows("after burst", &procs.sample(), 1));
    let _ = env;
    Ok(rows)
}

// ---------------------------------------------------------------- auto-start

async fn autostart_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let n = cfg.n(10, 2);
    let env = BenchEnv::new(&cfg.release)?;
    let mut samples = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let mut host = Host::spawn(&env)?;
        let reply = host.call("list_providers", json!({})).await;
        let d = t.elapsed();
        host.close().await;
        let stopped = env
            .command("pedelecd")
            .arg("stop")
            .output()
            .map_err(|e| e.to_string());
        // Nothing of this round may live on into the next.
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = crate::env::processes_using(&env.rt());
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                for pid in left {
                    crate::env::signal(pid as i32, libc::SIGKILL);
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let reply = reply?;
        if reply["providers"].as_array().map(Vec::len) != Some(6) {
            return Err(format!("list_providers: {reply}"));
        }
        let stopped = stopped?;
        if !stopped.status.success() {
            return Err(format!(
                "pedelecd stop: {}",
                String::from_utf8_lossy(&stopped.stderr)
            ));
        }
        samples.push(us(d));
    }
    Ok(vec![Row::latency(
        "autostart.first_answer",
        "host spawned with the services down -> reply to its first request (list_providers; the host runs `pedelecd start`)",
        samples,
    )
    .target(Target::AtMost(25_000.0), "≤ 25 ms")])
}
