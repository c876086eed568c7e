//! One run of the harness: the measurement groups in the order they run, then
//! the table, the JSON file and the machine's figures (load, steal) around the
//! run. A group that cannot run records a failed row and the run goes on (and
//! exits non-zero at the end).

use std::time::Instant;

use serde_json::json;

use crate::report::{Row, print_table, to_json};
use crate::{
    Config, agent, autostart, floors, history, journal, load, main_phase, provider, turn, up,
};

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
        floors::spawn_floor(cfg, "floor.spawn_static", &cfg.noop),
    )
    .await;
    if let Some(bare) = &cfg.noop_bare {
        phase(
            cfg,
            &mut rows,
            "floor.spawn_bare",
            "spawn+exit of a static binary with no C library",
            floors::spawn_floor(cfg, "floor.spawn_bare", bare),
        )
        .await;
    }
    phase(
        cfg,
        &mut rows,
        "floor.uds_echo",
        "Unix-socket echo round trip (64 B)",
        floors::uds_echo_floor(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "floor.frame_echo",
        "native-messaging frame echo through a child's stdio",
        floors::frame_echo_floor(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "up.all_healthy",
        "`pedelecd up` spawn -> all four serving",
        up::up_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "main",
        "services + native host",
        main_phase::main_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "history.read_1000",
        "a page of a thread's conversation history",
        history::history_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "agent",
        "pedelec-agent and the stub agent against the mock Ollama server",
        agent::agent_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "turn_start",
        "a stub agent's turn start, confined by bubblewrap and plain",
        turn::turn_start_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "provider",
        "the real pinned codex and opencode (through their per-thread servers) and claude against the mock model",
        provider::provider_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "load.tool_call",
        "tool calls and deltas of many threads through one host",
        load::load_phase(cfg),
    )
    .await;
    phase(
        cfg,
        &mut rows,
        "autostart.first_answer",
        "native host's first answer with the services down",
        autostart::autostart_phase(cfg),
    )
    .await;
    // Last: its fresh-inode half deletes hundreds of files under /tmp, and on
    // this VM's journal-less ext4 every new inode of the next minutes (each
    // create's record file) scans past them.
    phase(
        cfg,
        &mut rows,
        "breakdown.journal_write",
        "SessionService's record write, alone",
        journal::journal_write(cfg),
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
        "history.read_1000",
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
