//! The main group: one `pedelecd up` and one native host, on which the
//! memory rows, the gRPC floor, the lifecycle, tool-call and delta groups run
//! one after the other (a sub-group that cannot run is recorded, the others
//! still run).

use std::time::Duration;

use pedelec_common::ServiceName;
use serde_json::json;

use crate::Config;
use crate::deltas::deltas;
use crate::env::{BenchEnv, stop};
use crate::floors::grpc_floor;
use crate::host::Host;
use crate::lifecycle::{lifecycle_grpc, lifecycle_host};
use crate::measure::profiled;
use crate::memory::{Procs, memory_rows};
use crate::report::Row;
use crate::sessions::{Sessions, open_host_session, stub_agent_settings};
use crate::tool_calls::tool_calls;

/// Creates `mark` and waits until someone removes it (`--pause-at-idle`).
async fn pause_at(mark: &std::path::Path) -> Result<(), String> {
    std::fs::write(mark, b"").map_err(|e| format!("{}: {e}", mark.display()))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while mark.exists() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{} was not removed within 120 s", mark.display()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

pub(crate) async fn main_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let env = BenchEnv::new(&cfg.release)?;
    let mut launcher = env.spawn_up("launcher.log")?;
    let result = main_phase_inner(cfg, &env, launcher.id()).await;
    stop(&mut launcher);
    result
}

async fn main_phase_inner(cfg: &Config, env: &BenchEnv, launcher: u32) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    env.wait_serving(Duration::from_millis(5)).await?;
    env.grant(crate::env::ORIGIN).await?;
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
    if let Some(mark) = &cfg.pause_at_idle {
        pause_at(mark).await?;
    }

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

#[cfg(test)]
mod tests {
    use super::pause_at;
    use std::time::Duration;

    #[tokio::test]
    async fn pause_at_idle_holds_until_the_mark_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("idle");
        let paused = tokio::spawn({
            let mark = mark.clone();
            async move { pause_at(&mark).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !mark.exists() {
            assert!(tokio::time::Instant::now() < deadline, "no mark created");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!paused.is_finished(), "went on while the mark was there");
        std::fs::remove_file(&mark).unwrap();
        tokio::time::timeout(Duration::from_secs(5), paused)
            .await
            .expect("still paused after the mark was removed")
            .unwrap()
            .unwrap();
    }
}
