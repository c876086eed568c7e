//! Chat deltas from the stub agent to the native host's stdout and to a gRPC
//! Attach client: rate, per-delta latency, loss and order, and the memory
//! peaks while they stream.

use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_proto::v1 as pb;
use serde_json::json;

use crate::Config;
use crate::env::{BenchEnv, mono_ns};
use crate::host::Host;
use crate::measure::profiled;
use crate::memory::{MemSample, PeakSampler, Procs, memory_rows};
use crate::report::{Row, Target};
use crate::sessions::{Sessions, attach_request, next_event, open_host_session, send_text, thread};

/// Checks the deltas of one turn: indices in order, seqs consecutive; counts
/// what was lost instead of stopping, since loss is a result worth reporting.
/// Collects per-delta latency from the stub's timestamps.
#[derive(Default)]
pub(crate) struct DeltaCheck {
    next_index: u64,
    last_seq: Option<u64>,
    /// Events that carried deltas (more than one delta per event is allowed).
    pub(crate) events: u64,
    pub(crate) first_ns: Option<u64>,
    pub(crate) last_ns: u64,
    latencies: Vec<f64>,
    delivered: u64,
    lost: u64,
    out_of_order: u64,
    gaps: Vec<String>,
}

pub(crate) struct DeltaResult {
    /// Delivered deltas per second, first to last delivered delta.
    rate: f64,
    pub(crate) delivered: u64,
    lost: u64,
    out_of_order: u64,
    gaps: Vec<String>,
}

impl DeltaResult {
    pub(crate) fn clean(&self) -> bool {
        self.lost == 0 && self.out_of_order == 0 && self.gaps.is_empty()
    }

    pub(crate) fn describe(&self, n: u64) -> String {
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
    pub(crate) fn seq(&mut self, seq: u64, what: impl FnOnce() -> String) {
        self.span(seq, seq, what)
    }

    /// A frame standing for seqs `first..=last` (a merged chat delta's
    /// `firstSeq`, docs/native-messaging.md §4).
    pub(crate) fn span(&mut self, first: u64, seq: u64, what: impl FnOnce() -> String) {
        if let Some(last) = self.last_seq
            && first != last + 1
            && self.gaps.len() < 5
        {
            self.gaps.push(format!("{last} -> {seq} ({})", what()));
        }
        self.last_seq = Some(seq);
    }

    pub(crate) fn delta(&mut self, text: &str, at_ns: u64) {
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

    pub(crate) fn finish(&self, n: u64) -> DeltaResult {
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

pub(crate) async fn deltas(
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
    let sampler = PeakSampler::start(&procs.list, true);
    let t = Instant::now();
    let burst = profiled(
        cfg,
        "deltas_host",
        host_turn(host, &id, format!("@@stream {n}")),
    )
    .await;
    let turn_time = t.elapsed();
    let peaks = sampler.stop();
    let burst = burst?;
    let host_result = burst.finish(n);
    let loaded: Vec<MemSample> = {
        let p = &peaks;
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
    send_text(sessions, &id, format!("@@stream {n}")).await?;
    let mut grpc = DeltaCheck::default();
    loop {
        let ev = next_event(&mut stream).await?;
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
