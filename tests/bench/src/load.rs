//! The load group: many threads streaming at once through one native host
//! (one browser, many tabs), each agent making tool calls while the deltas
//! of every thread stream. What a busy user feels: how long a tool call and
//! a turn's start wait behind streamed text, the aggregate delta rate through
//! the one host, and what memory does during and after.
//!
//! The default size is short (CI's quick run and a plain full run stay
//! short); `--full-load` runs 50 threads × 10,000 deltas × 20 tool calls.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::Config;
use crate::deltas::DeltaCheck;
use crate::env::{BenchEnv, PATIENCE, mono_ns, stop};
use crate::host::Host;
use crate::memory::{PeakSampler, Procs};
use crate::report::{Row, Target};
use crate::sessions::{open_host_session, stub_agent_settings};

/// (threads, deltas per thread, tool calls per thread, seconds after).
fn size(cfg: &Config) -> (usize, u64, u64, u64) {
    if cfg.full_load {
        (50, 10_000, 20, 10)
    } else if cfg.quick {
        (4, 1_000, 2, 2)
    } else {
        (12, 5_000, 10, 10)
    }
}

pub(crate) async fn load_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let env = BenchEnv::new(&cfg.release)?;
    let mut launcher = env.spawn_up("launcher.log")?;
    let result = load_inner(cfg, &env, launcher.id()).await;
    stop(&mut launcher);
    result
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A process's anonymous resident memory (heap, stacks), KiB.
fn anon_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

async fn load_inner(cfg: &Config, env: &BenchEnv, launcher: u32) -> Result<Vec<Row>, String> {
    let (threads, n, k, after) = size(cfg);
    env.wait_serving(Duration::from_millis(5)).await?;
    env.grant(crate::env::ORIGIN).await?;
    let provider = pedelec_common::uds::connect(&env.socket(pedelec_common::ServiceName::Provider))
        .await
        .map_err(|e| e.to_string())?;
    stub_agent_settings(provider).await?;
    let mut host = Host::spawn(env)?;
    host.call("ping", json!({})).await?;
    let mut ids = Vec::new();
    for _ in 0..threads {
        let id = open_host_session(&mut host).await?;
        // Attached again as the extension attaches: merged deltas allowed
        // (a host without them ignores the field).
        host.call("attach", json!({"sessionId": id, "mergeDeltas": true}))
            .await?;
        ids.push(id);
    }
    // A warm-up turn each (first spawns, connections), then idle.
    host.set_auto_answer(true);
    for id in &ids {
        host.call("send_text", json!({"sessionId": id, "text": "@@stream 10"}))
            .await?;
    }
    let mut finished = 0;
    while finished < threads {
        let e = host.event().await?;
        if e.frame()?
            .event
            .is_some_and(|ev| ev.kind == "operation_finished")
        {
            finished += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let procs = Procs::of(env, launcher, host.pid).await?;
    let idle = procs.sample();
    let idle_anon: Vec<u64> = procs.list.iter().map(|(_, pid)| anon_kib(*pid)).collect();

    let sampler = PeakSampler::start(&procs.list, false);

    let files: Vec<_> = (0..threads)
        .map(|i| env.root.join(format!("load-{i}.calls")))
        .collect();
    let mut sent_ns: HashMap<String, u64> = HashMap::new();
    let mut checks: HashMap<String, DeltaCheck> = HashMap::new();
    let mut started: Vec<f64> = Vec::new();
    // A tool_request's `at` (SessionService's wall clock, ms) against its
    // arrival here: the hops from SessionService's emit to the page.
    let wall_minus_mono_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        - mono_ns() as f64 / 1e6;
    // From an event's `at` to a read here (CLOCK_MONOTONIC ns), µs.
    let since_emit_us = |at_ms: f64, read_ns: u64| {
        (read_ns as f64 / 1e6 + wall_minus_mono_ms - at_ms).max(0.0) * 1e3
    };
    let mut to_page: Vec<f64> = Vec::new();
    // Per tool call (keyed by its `q`, the agent's spawn ns): SessionService's
    // emit (its `at`, whole ms) and the harness's read, CLOCK_MONOTONIC ns,
    // and its thread's `text_age` then.
    let mut request_hops: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    // Per thread, how long its newest delta frame took from SessionService's
    // emit (its `at`) to the harness (raw arrival, µs).
    let mut text_age: HashMap<String, f64> = HashMap::new();
    let mut done = 0usize;
    let mut seen_events = 0u64;
    host.drain();
    // The turns start one after the other; the events already streaming
    // wait in the channel, read below with their arrival stamps.
    for (i, id) in ids.iter().enumerate() {
        sent_ns.insert(id.clone(), mono_ns());
        checks.insert(id.clone(), DeltaCheck::default());
        let text = format!("@@load {n} {k} {}", files[i].display());
        host.call("send_text", json!({"sessionId": id, "text": text}))
            .await?;
    }
    let deadline = tokio::time::Instant::now() + PATIENCE * 6;
    // Each frame counts as read when a real page would have read it (page_pace.rs).
    let mut pace = crate::page_pace::PagePace::default();
    while done < threads {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{done} of {threads} turns finished in time"));
        }
        let mut e = host.event().await?;
        let arrived_ns = e.at_ns;
        e.at_ns = pace.read(e.at_ns, e.body.len());
        seen_events += 1;
        let f = e.frame()?;
        let Some(check) = checks.get_mut(&*f.session_id) else {
            continue;
        };
        check.span(f.first_seq.unwrap_or(f.seq), f.seq, || {
            format!("{:.160}", e.text())
        });
        match f.event.as_ref().map(|ev| &*ev.kind) {
            Some("chat_delta") => {
                let text = f.event.as_ref().and_then(|ev| ev.text.as_deref());
                if let Some(at) = f.at {
                    let age = since_emit_us(at, arrived_ns);
                    match text_age.get_mut(&*f.session_id) {
                        Some(a) => *a = age,
                        None => {
                            text_age.insert(f.session_id.to_string(), age);
                        }
                    }
                }
                check.delta(text.unwrap_or_default(), e.at_ns)
            }
            Some("operation_started") => {
                let t0 = sent_ns.get(&*f.session_id).copied().unwrap_or(e.at_ns);
                started.push(e.at_ns.saturating_sub(t0) as f64 / 1000.0);
            }
            Some("tool_request") => {
                if let Some(at) = f.at {
                    to_page.push(since_emit_us(at, e.at_ns));
                    let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap_or_default();
                    let q = v["event"]["args"]["q"]
                        .as_str()
                        .and_then(|q| q.parse().ok());
                    if let Some(q) = q {
                        let emit_ns = ((at - wall_minus_mono_ms) * 1e6).max(0.0) as u64;
                        let age = text_age.get(&*f.session_id).copied().unwrap_or(0.0);
                        request_hops.insert(q, (emit_ns, arrived_ns, age as u64));
                    }
                }
            }
            Some("operation_finished") => {
                if f.event.as_ref().and_then(|ev| ev.outcome.as_deref()) != Some("completed") {
                    return Err(format!("turn did not complete: {}", e.text()));
                }
                done += 1;
            }
            _ => {}
        }
    }
    let peaks = sampler.stop();
    let (answered, failed_answers) = host.answers();

    let mut calls = Vec::new();
    let mut call_errors = Vec::new();
    let mut hops = CallHops::default();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        for line in text.lines() {
            let mut w = line.split(' ').map(str::parse::<u64>);
            match (w.next(), w.next(), w.next()) {
                (Some(Ok(us)), Some(Ok(spawn)), Some(Ok(end))) => {
                    calls.push(us as f64);
                    if let Some(&(emit, read, age)) = request_hops.get(&spawn) {
                        hops.add(us, [spawn, emit, read, end], age);
                    }
                }
                _ => call_errors.push(line.to_string()),
            }
        }
    }
    let mut delivered = 0;
    let mut first = u64::MAX;
    let mut last = 0;
    let mut dirty = Vec::new();
    for (id, c) in &checks {
        let r = c.finish(n);
        delivered += r.delivered;
        first = first.min(c.first_ns.unwrap_or(u64::MAX));
        last = last.max(c.last_ns);
        if !r.clean() {
            dirty.push(format!("{id}: {}", r.describe(n)));
        }
    }
    let secs = last.saturating_sub(first) as f64 / 1e9;
    let rate = if secs > 0.0 {
        delivered as f64 / secs
    } else {
        0.0
    };
    let loaded_session = procs
        .list
        .iter()
        .find(|(name, _)| name.contains("session"))
        .map(|(_, pid)| peaks.get(pid).map_or(0, |p| p.0))
        .unwrap_or(0);
    let loaded_all: String = procs
        .list
        .iter()
        .map(|(name, pid)| format!("{name} {:.1}", mib(peaks.get(pid).map_or(0, |p| p.0))))
        .collect::<Vec<_>>()
        .join(", ");

    tokio::time::sleep(Duration::from_secs(after)).await;
    let later = procs.sample();
    // VmRSS also counts the program's own code pages, read from its file and
    // shared by the six processes; the anonymous part is what the load left.
    let anon: String = procs
        .list
        .iter()
        .zip(&idle_anon)
        .map(|((name, pid), a)| format!("{name} {:.1} -> {:.1}", mib(*a), mib(anon_kib(*pid))))
        .collect::<Vec<_>>()
        .join(", ");
    let mut worst = 0.0f64;
    let growth: String = idle
        .iter()
        .zip(&later)
        .map(|(a, b)| {
            let d = mib(b.1) - mib(a.1);
            worst = worst.max(d);
            format!("{} {:.1} -> {:.1}", a.0, mib(a.1), mib(b.1))
        })
        .collect::<Vec<_>>()
        .join(", ");
    for id in &ids {
        let _ = host.call("end", json!({"sessionId": id})).await;
    }
    if let Some(e) = host.protocol_error() {
        return Err(format!("native-messaging protocol error: {e}"));
    }
    host.close().await;

    let shape = format!("{threads} threads × {n} deltas × {k} tool calls through one host");
    let total = threads as u64 * n;
    Ok(vec![
        Row::latency(
            "load.tool_call",
            format!("pedelec-cli tool-call spawn -> result, made by each stub agent while {shape} stream"),
            calls.clone(),
        )
        .target(
            Target::Latency { p50: 10_000.0, p99: Some(50_000.0) },
            "p50 ≤ 10 ms, p99 ≤ 50 ms",
        )
        .floor("floor.spawn_static")
        .broken_if(
            !call_errors.is_empty() || calls.len() as u64 != threads as u64 * k,
            format!("{} of {} calls answered; errors: {:.300}", calls.len(), threads as u64 * k, call_errors.join("; ")),
        )
        .note(format!(
            "page answers sent {answered}, failed {failed_answers}; {}",
            hops.describe()
        )),
        Row::latency(
            "load.tool_request_to_page",
            format!("a tool_request's emit in SessionService (its `at`, ms) -> its frame read by the page, while {shape} stream"),
            to_page,
        ),
        Row::latency(
            "load.operation_started",
            format!("send_text frame written -> the thread's operation_started frame read, the turns of {shape} started one after the other"),
            started,
        )
        .target(Target::Latency { p50: 50_000.0, p99: Some(50_000.0) }, "p99 ≤ 50 ms"),
        Row::value(
            "load.deltas",
            format!("chat deltas through the one host, all threads (delivered ÷ first to last read), {shape}"),
            "events/s",
            rate,
            total as usize,
        )
        .target(Target::AtLeast(250_000.0), "≥ 250,000 events/s, none lost, in order")
        .broken_if(!dirty.is_empty(), format!("{:.600}", dirty.join("; ")))
        .note(format!("{delivered} of {total} delivered in {seen_events} host frames")),
        Row::value(
            "load.rss_session_peak",
            "SessionService's VmRSS peak during the load (sampled every 50 ms)",
            "MiB",
            mib(loaded_session),
            1,
        )
        .target(Target::AtMost(64.0), "≤ 64 MiB")
        .note(loaded_all),
        Row::value(
            "load.rss_after",
            format!("largest VmRSS growth of one process, {after} s after the load against its own idle figure"),
            "MiB",
            worst,
            1,
        )
        .target(Target::AtMost(2.0), "≤ 2 MiB")
        .note(format!("{growth}; anonymous (RssAnon): {anon}")),
    ])
}

/// One tool call split where the harness can see it (CLOCK_MONOTONIC µs).
struct Call {
    whole: f64,
    /// The agent's spawn of `pedelec-cli` -> SessionService's emit of the
    /// tool_request: the CLI's start, ToolBridge, SessionService.
    spawn_to_emit: f64,
    /// The emit -> the harness's read of the frame (where the page's answer
    /// is written): SessionService's route, the host, stdout.
    emit_to_read: f64,
    /// The answer written -> the result back in the agent: the host,
    /// SessionService, ToolBridge, the CLI's exit.
    answer_to_result: f64,
    /// The same thread's last delta frame before the request: its emit -> read.
    text_emit_to_read: f64,
    spawn_ns: u64,
}

/// Where the load's tool calls spend their time: the mean of each part over
/// all calls and over the slowest 5%, and how clustered in time the slowest
/// are (a few bursts: the whole pipeline stalled; spread: a steady queue).
#[derive(Default)]
struct CallHops {
    calls: Vec<Call>,
}

impl CallHops {
    /// `at`: the agent's spawn, SessionService's emit, the harness's read and
    /// the agent's result (CLOCK_MONOTONIC ns).
    fn add(&mut self, whole_us: u64, at: [u64; 4], text_emit_to_read_us: u64) {
        let us = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e3;
        self.calls.push(Call {
            whole: whole_us as f64,
            spawn_to_emit: us(at[0], at[1]),
            emit_to_read: us(at[1], at[2]),
            answer_to_result: us(at[2], at[3]),
            text_emit_to_read: text_emit_to_read_us as f64,
            spawn_ns: at[0],
        });
    }

    fn describe(&mut self) -> String {
        if self.calls.is_empty() {
            return "no call matched its request".into();
        }
        self.calls.sort_by(|a, b| a.whole.total_cmp(&b.whole));
        let mean = |cs: &[Call]| {
            let n = cs.len() as f64 * 1e3;
            let sum = |f: fn(&Call) -> f64| cs.iter().map(f).sum::<f64>() / n;
            format!(
                "spawn->emit {:.1} ms, emit->read {:.1} ms, answer->result {:.1} ms \
                 (the thread's delta before it: emit->read {:.1} ms)",
                sum(|c| c.spawn_to_emit),
                sum(|c| c.emit_to_read),
                sum(|c| c.answer_to_result),
                sum(|c| c.text_emit_to_read),
            )
        };
        let slow = &self.calls[self.calls.len() * 95 / 100..];
        let first = self.calls.iter().map(|c| c.spawn_ns).min().unwrap_or(0);
        let last = self.calls.iter().map(|c| c.spawn_ns).max().unwrap_or(0);
        let mut windows: Vec<u64> = slow
            .iter()
            .map(|c| (c.spawn_ns - first) / 50_000_000)
            .collect();
        windows.sort_unstable();
        windows.dedup();
        format!(
            "mean of all {} calls: {}; of the slowest {}: {}; the slowest began in {} of the {} 50-ms windows the calls spanned",
            self.calls.len(),
            mean(&self.calls),
            slow.len(),
            mean(slow),
            windows.len(),
            (last - first) / 50_000_000 + 1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_calls_parts_and_their_clustering() {
        let mut hops = CallHops::default();
        let ms = 1_000_000;
        // 19 quick calls 100 ms apart, 1 ms in each part; one slow call whose
        // request waited 60 ms on its way to the page.
        for i in 0..19 {
            let t = i * 100 * ms;
            hops.add(3_000, [t, t + ms, t + 2 * ms, t + 3 * ms], 500);
        }
        let t = 5 * ms;
        hops.add(62_000, [t, t + ms, t + 61 * ms, t + 62 * ms], 59_000);
        let d = hops.describe();
        assert!(
            d.contains("mean of all 20 calls: spawn->emit 1.0 ms, emit->read 4.0 ms"),
            "{d}"
        );
        assert!(
            d.contains("of the slowest 1: spawn->emit 1.0 ms, emit->read 60.0 ms, answer->result 1.0 ms (the thread's delta before it: emit->read 59.0 ms)"),
            "{d}"
        );
        assert!(d.contains("began in 1 of the 37 50-ms windows"), "{d}");
    }
}
