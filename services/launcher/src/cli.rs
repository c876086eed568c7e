//! The `pedelecd` subcommands. Output and exit codes are stable: scripts and
//! the cross-process tests read them.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use pedelec_common::ServiceName;
use pedelec_proto::v1::{ServiceState, ServiceStatus, SupervisorStatus};
use std::os::unix::process::CommandExt;

use crate::error::{LauncherError, exit};
use crate::{Dirs, client, daemon};

const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// pedelecd: starts and supervises the Pedelec services.
#[derive(Debug, Parser)]
#[command(name = "pedelecd", version)]
pub struct Cli {
    /// Sockets folder (default: $PEDELEC_RUNTIME_DIR, else $XDG_RUNTIME_DIR/pedelec).
    #[arg(long, global = true)]
    pub runtime_dir: Option<PathBuf>,
    /// State folder (default: $PEDELEC_HOME, else the platform data dir).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the launcher in the foreground until SIGTERM or Ctrl-C.
    Up,
    /// Start the launcher in the background and wait for all services.
    Start,
    /// Stop a running launcher and its services.
    Stop,
    /// Show the supervised services.
    Status {
        /// Print the Status message as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restart one service (SIGTERM, start again) and reset its crash count.
    Restart {
        /// provider, toolbridge, asset or session
        service: String,
    },
    /// Install the user service unit (not available yet).
    Install,
    /// Remove the user service unit (not available yet).
    Uninstall,
    /// Check the installation (not available yet).
    Doctor,
}

/// Runs a subcommand and returns the process exit code; errors are printed
/// here, once, on stderr.
pub async fn run(cli: Cli) -> u8 {
    let dirs = daemon::resolve_dirs(cli.runtime_dir, cli.data_dir);
    let result = match cli.command {
        Command::Up => daemon::up(&dirs).await,
        Command::Start => start(&dirs).await,
        Command::Stop => stop(&dirs).await,
        Command::Status { json } => status(&dirs, json).await,
        Command::Restart { service } => restart(&dirs, &service).await,
        Command::Install => Err(LauncherError::NotAvailable("install")),
        Command::Uninstall => Err(LauncherError::NotAvailable("uninstall")),
        Command::Doctor => Err(LauncherError::NotAvailable("doctor")),
    };
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}

fn launcher_socket(dirs: &Dirs) -> PathBuf {
    dirs.runtime.socket(ServiceName::Launcher)
}

async fn start(dirs: &Dirs) -> Result<(), LauncherError> {
    dirs.runtime.ensure()?;
    let socket = launcher_socket(dirs);
    if let Ok(status) = client::status(&socket).await {
        return Err(LauncherError::AlreadyRunning {
            pid: status.launcher_pid,
            socket,
        });
    }
    let logs = dirs.runtime.path().join("logs");
    pedelec_common::paths::ensure_private_dir(&logs)?;
    let log_path = logs.join("pedelecd.log");
    let open_log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| LauncherError::io(&log_path, e))
    };
    let exe = std::env::current_exe().map_err(|e| LauncherError::io("current_exe", e))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("up")
        .arg("--runtime-dir")
        .arg(dirs.runtime.path())
        .arg("--data-dir")
        .arg(dirs.data.path())
        .env("PEDELEC_RUNTIME_DIR", dirs.runtime.path())
        .env("PEDELEC_HOME", dirs.data.path())
        .stdin(Stdio::null())
        .stdout(open_log()?)
        .stderr(open_log()?);
    // SAFETY: setsid is async-signal-safe; the new session detaches the launcher
    // from our terminal so it outlives this command.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| LauncherError::io(&exe, e))?;
    let pid = child.id();

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LauncherError::StartFailed(format!(
                "pedelecd up exited ({}) before its services were healthy; {}:\n{}",
                crate::supervisor::describe_exit(status),
                log_path.display(),
                log_tail(&log_path, 20)
            )));
        }
        if let Ok(status) = client::status(&socket).await
            && status.launcher_pid == pid
        {
            let settled = status
                .services
                .iter()
                .all(|s| matches!(state_of(s), ServiceState::Serving | ServiceState::Failed));
            let failed: Vec<&ServiceStatus> = status
                .services
                .iter()
                .filter(|s| state_of(s) == ServiceState::Failed)
                .collect();
            if settled && failed.is_empty() {
                println!("pedelecd started (pid {pid})");
                return Ok(());
            }
            if settled {
                let mut msg = format!("pedelecd (pid {pid}) is running but not every service is:");
                for s in failed {
                    let log = logs.join(format!("{}.log", s.name));
                    msg.push_str(&format!(
                        "\n{} failed ({}); {}:\n{}",
                        s.name,
                        s.last_exit,
                        log.display(),
                        log_tail(&log, 10)
                    ));
                }
                return Err(LauncherError::StartFailed(msg));
            }
        }
        if Instant::now() >= deadline {
            return Err(LauncherError::StartFailed(format!(
                "pedelecd (pid {pid}) services not healthy within {}s; {}:\n{}",
                START_TIMEOUT.as_secs(),
                log_path.display(),
                log_tail(&log_path, 20)
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stop(dirs: &Dirs) -> Result<(), LauncherError> {
    let socket = launcher_socket(dirs);
    let status = match client::status(&socket).await {
        Ok(status) => status,
        Err(LauncherError::NotRunning) => {
            println!("pedelecd is not running");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let pid = status.launcher_pid;
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if !process_alive(pid) && client::status(&socket).await.is_err() {
            println!("stopped");
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LauncherError::StopTimeout {
                pid,
                secs: STOP_TIMEOUT.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` is alive; a zombie (exited, not yet reaped by its parent) is not.
fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may hold spaces.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

async fn status(dirs: &Dirs, json: bool) -> Result<(), LauncherError> {
    let status = client::status(&launcher_socket(dirs)).await?;
    if json {
        println!("{}", status_json(&status));
    } else {
        print!("{}", status_table(&status));
    }
    Ok(())
}

async fn restart(dirs: &Dirs, service: &str) -> Result<(), LauncherError> {
    let s = client::restart(&launcher_socket(dirs), service).await?;
    let state = state_of(&s);
    if state != ServiceState::Serving {
        return Err(LauncherError::StartFailed(format!(
            "{} is {} after restart ({})",
            s.name,
            state_name(state),
            s.last_exit
        )));
    }
    println!("restarted {} (pid {})", s.name, s.pid);
    Ok(())
}

fn state_of(s: &ServiceStatus) -> ServiceState {
    ServiceState::try_from(s.state).unwrap_or(ServiceState::Unspecified)
}

/// The table's and the JSON's name for a state.
pub fn state_name(state: ServiceState) -> &'static str {
    match state {
        ServiceState::Unspecified => "unknown",
        ServiceState::Starting => "starting",
        ServiceState::Serving => "serving",
        ServiceState::Backoff => "backoff",
        ServiceState::Failed => "failed",
        ServiceState::Stopped => "stopped",
    }
}

/// 850ms, 3.2s, 5m10s, 2h03m.
pub fn human_uptime(ms: u64) -> String {
    if ms == 0 {
        return "-".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let secs = ms / 1000;
    if secs < 3600 {
        return format!("{}m{}s", secs / 60, secs % 60);
    }
    if secs < 86_400 {
        return format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60);
    }
    format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3600)
}

pub fn status_table(status: &SupervisorStatus) -> String {
    let header = ["SERVICE", "PID", "SOCKET", "STATE", "RESTARTS", "UPTIME"];
    let rows: Vec<[String; 6]> = status
        .services
        .iter()
        .map(|s| {
            [
                s.name.clone(),
                if s.pid == 0 {
                    "-".to_string()
                } else {
                    s.pid.to_string()
                },
                s.socket.clone(),
                state_name(state_of(s)).to_string(),
                s.restarts.to_string(),
                human_uptime(s.uptime_ms),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push('\n');
        out
    };
    let mut out = line(&header);
    for row in &rows {
        out.push_str(&line(&row.each_ref().map(String::as_str)));
    }
    out
}

/// The Status message as JSON, with the proto's field names.
pub fn status_json(status: &SupervisorStatus) -> serde_json::Value {
    let started_at = status.started_at.as_ref().map(|t| {
        rfc3339(UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32))
    });
    serde_json::json!({
        "launcher_pid": status.launcher_pid,
        "started_at": started_at,
        "runtime_dir": status.runtime_dir,
        "data_dir": status.data_dir,
        "services": status.services.iter().map(|s| serde_json::json!({
            "name": s.name,
            "pid": s.pid,
            "socket": s.socket,
            "state": state_name(state_of(s)),
            "restarts": s.restarts,
            "uptime_ms": s.uptime_ms,
            "last_exit": s.last_exit,
        })).collect::<Vec<_>>(),
    })
}

/// UTC, millisecond precision: 2025-01-31T12:00:00.123Z.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The last `lines` lines of a log file, for error messages.
fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return "(no log)".to_string();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_human() {
        assert_eq!(human_uptime(0), "-");
        assert_eq!(human_uptime(850), "850ms");
        assert_eq!(human_uptime(3_200), "3.2s");
        assert_eq!(human_uptime(310_000), "5m10s");
        assert_eq!(human_uptime(7_380_000), "2h03m");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56.789Z");
    }

    #[test]
    fn table_has_one_row_per_service() {
        let status = SupervisorStatus {
            launcher_pid: 7,
            services: vec![ServiceStatus {
                name: "provider".into(),
                pid: 42,
                socket: "/run/p/provider.sock".into(),
                state: ServiceState::Serving as i32,
                restarts: 1,
                uptime_ms: 3_200,
                last_exit: "signal 9".into(),
            }],
            ..Default::default()
        };
        let table = status_table(&status);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("SERVICE"));
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "provider",
                "42",
                "/run/p/provider.sock",
                "serving",
                "1",
                "3.2s"
            ]
        );
        let json = status_json(&status);
        assert_eq!(json["services"][0]["state"], "serving");
        assert_eq!(json["services"][0]["last_exit"], "signal 9");
        assert_eq!(json["launcher_pid"], 7);
    }
}
