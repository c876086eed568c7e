//! The native host's first answer with the services down (it runs `pedelecd
//! start` itself).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::Config;
use crate::env::{BenchEnv, PATIENCE};
use crate::host::Host;
use crate::measure::us;
use crate::report::{Row, Target};

pub(crate) async fn autostart_phase(cfg: &Config) -> Result<Vec<Row>, String> {
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
