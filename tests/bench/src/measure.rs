//! What every measurement group uses: microseconds from a duration, a command
//! run to completion and timed, helper processes in a group of their own, and
//! optional perf profiles of a hot loop.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::Config;
use crate::env::PATIENCE;

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs a command to completion the way the agent runs `pedelec-cli`:
/// spawn, collect stdout, wait. Returns (elapsed, success, stdout).
pub(crate) async fn timed_output(
    cmd: tokio::process::Command,
) -> Result<(Duration, bool, Vec<u8>), String> {
    timed_run(cmd, true).await
}

pub(crate) async fn timed_run(
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
pub(crate) async fn profiled<T>(
    cfg: &Config,
    name: &str,
    fut: impl std::future::Future<Output = T>,
) -> T {
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

pub(crate) fn spawn_helper(mut cmd: std::process::Command) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let child = cmd.spawn().map_err(|e| format!("spawn helper: {e}"))?;
    crate::env::register_group(child.id());
    Ok(child)
}
