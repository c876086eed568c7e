//! What bubblewrap confinement adds to a turn's start: the same
//! stub agent's turn, `SendText` → its first `chat_delta` at a SessionService
//! Attach client, with the services confining agents (the default where bwrap
//! works) and with `PEDELEC_CONFINE=0`; and, as its breakdown, spawn+exit of
//! `bwrap <the agents' options> /bin/true` next to `/bin/true` alone.

use std::process::Stdio;
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::process::confine::{self, Verdict};
use pedelec_proto::v1 as pb;

use crate::Config;
use crate::env::{BenchEnv, ORIGIN, stop};
use crate::measure::us;
use crate::report::Row;
use crate::sessions::{Sessions, attach_request, next_event, send_text, stub_agent_settings};

pub async fn turn_start_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let bwrap = match confine::probe(std::env::var_os("PATH").as_deref()) {
        Verdict::Confined { bwrap } => bwrap,
        other => {
            return Err(format!(
                "confinement cannot be measured here: {}",
                other.describe()
            ));
        }
    };
    let n = cfg.n(100, 10);
    let plain = turns(cfg, false, n).await?;
    let confined = turns(cfg, true, n).await?;
    let (p, c) = (median(&plain), median(&confined));
    let spawn_bwrap = spawns(cfg, Some(&bwrap))?;
    let spawn_true = spawns(cfg, None)?;
    let (sb, st) = (median(&spawn_bwrap), median(&spawn_true));
    Ok(vec![
        Row::latency(
            "turn_start.plain",
            "SendText -> first chat_delta at an Attach client, stub agent, PEDELEC_CONFINE=0",
            plain,
        ),
        Row::latency(
            "turn_start.confined",
            "the same with the agent started inside bwrap (the default where it works)",
            confined,
        )
        .note(format!("confinement adds {:.0} us at p50", c - p)),
        Row::latency(
            "turn_start.bwrap_spawn",
            "spawn+exit of `bwrap <the agents' namespace options> /bin/true` (no Pedelec folders hidden)",
            spawn_bwrap,
        )
        .note(format!("/bin/true alone: p50 {st:.0} us; bwrap adds {:.0} us", sb - st)),
    ])
}

fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `n` turns after 5 warm-ups in fresh services; the time to each first delta.
async fn turns(cfg: &Config, confined: bool, n: usize) -> Result<Vec<f64>, String> {
    let env = BenchEnv::new(&cfg.release)?;
    let mut cmd = env.command("pedelecd");
    cmd.arg("up")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.root.join("launcher.log")).map_err(|e| e.to_string())?);
    if !confined {
        cmd.env(pedelec_common::env::CONFINE, "0");
    }
    let mut launcher = env.spawn_grouped(cmd)?;
    let result = turns_in(&env, confined, n).await;
    stop(&mut launcher);
    result
}

async fn turns_in(env: &BenchEnv, confined: bool, n: usize) -> Result<Vec<f64>, String> {
    env.wait_serving(Duration::from_millis(5)).await?;
    env.grant(ORIGIN).await?;
    let provider = pedelec_common::uds::connect(&env.socket(ServiceName::Provider))
        .await
        .map_err(|e| e.to_string())?;
    stub_agent_settings(provider).await?;
    let session = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
        .await
        .map_err(|e| e.to_string())?;
    let mut sessions = Sessions::new(session);
    let created = sessions
        .create_session(pb::CreateSessionRequest {
            origin: ORIGIN.into(),
            provider: Some("ollama".into()),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("CreateSession: {e}"))?
        .into_inner();
    let id = created.session_id;
    let mut stream = sessions
        .attach(attach_request(&id, "bench-turn-start"))
        .await
        .map_err(|e| format!("Attach: {e}"))?
        .into_inner();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 5 {
        let t = Instant::now();
        send_text(&mut sessions, &id, "@@stream 1".into()).await?;
        let mut first = None;
        loop {
            let ev = next_event(&mut stream).await?;
            match ev.event {
                Some(Event::ChatDelta(_)) if first.is_none() => first = Some(t.elapsed()),
                Some(Event::OperationFinished(f)) => {
                    if f.outcome != pb::OperationOutcome::Completed as i32 {
                        return Err(format!("turn ended {f:?}"));
                    }
                    break;
                }
                _ => {}
            }
        }
        let first = first.ok_or("a turn without a chat_delta")?;
        if i >= 5 {
            samples.push(us(first));
        }
    }
    // The row must measure what it names: the provider logs its verdict.
    let log = std::fs::read_to_string(env.rt().join("logs/provider.log")).unwrap_or_default();
    if log.contains("agents run confined by") != confined {
        return Err(format!(
            "the provider's confinement is not the one measured (confined: {confined}); its log:\n{log}"
        ));
    }
    Ok(samples)
}

/// Spawn+exit of `/bin/true`, inside bwrap with the agents' options when given.
fn spawns(cfg: &Config, bwrap: Option<&std::path::Path>) -> Result<Vec<f64>, String> {
    let n = cfg.n(200, 20);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let mut cmd = match bwrap {
            Some(b) => {
                let mut c = std::process::Command::new(b);
                c.args(confine::NAMESPACE_ARGS);
                c.arg("/bin/true");
                c
            }
            None => std::process::Command::new("/bin/true"),
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t = Instant::now();
        let status = cmd.status().map_err(|e| format!("spawn: {e}"))?;
        let took = t.elapsed();
        if !status.success() {
            return Err(format!("{cmd:?}: {status}"));
        }
        if i >= 10 {
            samples.push(us(took));
        }
    }
    Ok(samples)
}
