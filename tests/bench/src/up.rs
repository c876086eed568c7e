//! `pedelecd up`: spawn -> all four services serving, its own log line, and
//! the stop.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Config;
use crate::env::{BenchEnv, stop};
use crate::measure::us;
use crate::report::{Row, Target};

pub(crate) async fn up_phase(cfg: &Config) -> Result<Vec<Row>, String> {
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
