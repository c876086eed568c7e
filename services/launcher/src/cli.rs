//! The `pedelecd` subcommands. Output and exit codes are stable: scripts and
//! the cross-process tests read them.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use pedelec_common::args::DirArgs;
use pedelec_common::process::fork_server::ForkServer;
use pedelec_common::{ServiceName, env, process};
use pedelec_proto::v1::{ServiceState, ServiceStatus, SupervisorStatus};

use crate::error::{LauncherError, exit};
use crate::install::{self, Layout};
use crate::{Dirs, client, daemon, doctor};

const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `start` asks the new launcher whether its services serve: the
/// native host's auto-start waits on this (`autostart.first_answer`).
const START_POLL: Duration = Duration::from_millis(1);

/// Shown under `pedelecd --help`.
const AFTER_HELP: &str = "\
WHERE THINGS ARE
  Sockets and logs: --runtime-dir, else $PEDELEC_RUNTIME_DIR, else
  $XDG_RUNTIME_DIR/pedelec, else $XDG_STATE_HOME/pedelec/run, else
  ~/.local/state/pedelec/run (never a shared temporary folder).
  State: --data-dir, else $PEDELEC_HOME, else $XDG_DATA_HOME/pedelec, else
  ~/.local/share/pedelec. `pedelecd paths` prints them all, e.g.
  RT=$(pedelecd paths runtime-dir).

EXIT CODES
  0 ok, 1 failure, 2 usage, 3 not running (status, restart),
  4 already running (start, up).";

/// pedelecd: starts and supervises the Pedelec services.
#[derive(Debug, Parser)]
#[command(name = ServiceName::Launcher.binary(), version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub dirs: DirArgs,
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
    /// Show the runtime dir and the supervised services.
    Status {
        /// Print the Status message as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print where the sockets, logs and state are (needs no running pedelecd).
    Paths {
        /// Print only this one path, e.g. `pedelecd paths runtime-dir`.
        which: Option<PathName>,
        /// Print JSON.
        #[arg(long, conflicts_with = "which")]
        json: bool,
    },
    /// Restart one service (SIGTERM, start again) and reset its crash count.
    Restart {
        /// provider, toolbridge, asset or session
        service: String,
    },
    /// Install for this user: copy the binaries, register the native host
    /// with every present browser, start pedelecd at login (docs/install.md).
    Install {
        /// Allow this extension id too (repeatable), besides Pedelec's own.
        #[arg(long = "extension-id", value_name = "ID")]
        extension_ids: Vec<String>,
        /// Also register the host in this Chromium --user-data-dir (repeatable).
        #[arg(long = "user-data-dir", value_name = "DIR")]
        user_data_dirs: Vec<PathBuf>,
        /// Print every file it would write and every command it would run; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not install the systemd unit / launchd agent (the native host
        /// then starts pedelecd when the browser asks).
        #[arg(long)]
        no_login_start: bool,
    },
    /// Stop the service and remove exactly what install wrote.
    Uninstall {
        /// Also remove the data dir (settings, sessions, workspaces) and the runtime dir.
        #[arg(long)]
        purge: bool,
    },
    /// Check the installation and the running services; each problem with its fix.
    Doctor {
        /// Print JSON (secrets redacted), e.g. for a bug report.
        #[arg(long)]
        json: bool,
    },
}

/// One path `pedelecd paths` can print alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PathName {
    RuntimeDir,
    DataDir,
    LogDir,
    Session,
    Toolbridge,
    Provider,
    Asset,
    Launcher,
    /// Where `pedelecd install` puts the binaries.
    InstallBinDir,
}

/// Runs a subcommand and returns the process exit code; errors are printed
/// here, once, on stderr. `forks`: the fork server `up` starts its services
/// from, if any (program.rs).
pub async fn run(cli: Cli, forks: Option<Arc<ForkServer>>) -> u8 {
    let dirs = match (cli.dirs.runtime(), cli.dirs.data()) {
        (Ok(runtime), Ok(data)) => Dirs { runtime, data },
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return exit::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Up => daemon::up(&dirs, forks).await,
        Command::Start => start(&dirs).await,
        Command::Stop => client::stop(&dirs.runtime).await,
        Command::Status { json } => status(&dirs, json).await,
        Command::Paths { which, json } => {
            print!("{}", paths(&dirs, &Layout::from_env(), which, json));
            Ok(())
        }
        Command::Restart { service } => match crate::supervisor::supervised(&service) {
            Ok(service) => restart(&dirs, service).await,
            Err(e) => Err(e),
        },
        Command::Install {
            extension_ids,
            user_data_dirs,
            dry_run,
            no_login_start,
        } => match daemon::bin_dir() {
            Ok(from) => {
                let opts = install::InstallOptions {
                    extension_ids,
                    user_data_dirs,
                    dry_run,
                    no_login_start,
                    from,
                };
                install::install(&Layout::from_env(), &dirs, &opts, &mut std::io::stdout())
            }
            Err(e) => Err(e),
        },
        Command::Uninstall { purge } => {
            install::uninstall(&Layout::from_env(), &dirs, purge, &mut std::io::stdout()).await
        }
        Command::Doctor { json } => {
            let layout = Layout::from_env();
            let checks = doctor::run(&layout, &dirs).await;
            if json {
                print!("{}", doctor::json(&checks, &layout));
            } else {
                print!("{}", doctor::text(&checks));
            }
            if doctor::broken(&checks) {
                // The report said it all; only the exit code is left.
                return exit::FAILURE;
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}

/// Every path, one `name  path` line each, or JSON, or the one asked for.
pub fn paths(dirs: &Dirs, layout: &Layout, which: Option<PathName>, json: bool) -> String {
    let socket = |s: ServiceName| dirs.runtime.socket(s).display().to_string();
    let rows = [
        (
            PathName::RuntimeDir,
            "runtime_dir",
            dirs.runtime.path().display().to_string(),
        ),
        (
            PathName::DataDir,
            "data_dir",
            dirs.data.path().display().to_string(),
        ),
        (
            PathName::LogDir,
            "log_dir",
            dirs.runtime.logs().display().to_string(),
        ),
        (PathName::Session, "session", socket(ServiceName::Session)),
        (
            PathName::Toolbridge,
            "toolbridge",
            socket(ServiceName::ToolBridge),
        ),
        (
            PathName::Provider,
            "provider",
            socket(ServiceName::Provider),
        ),
        (PathName::Asset, "asset", socket(ServiceName::Asset)),
        (
            PathName::Launcher,
            "launcher",
            socket(ServiceName::Launcher),
        ),
        (
            PathName::InstallBinDir,
            "install_bin_dir",
            layout.bin.display().to_string(),
        ),
    ];
    if let Some(which) = which {
        let (_, _, path) = rows
            .iter()
            .find(|(n, ..)| *n == which)
            .expect("every name has a row");
        return format!("{path}\n");
    }
    if json {
        let sockets: serde_json::Map<String, serde_json::Value> = rows[3..8]
            .iter()
            .map(|(_, k, v)| (k.to_string(), v.clone().into()))
            .collect();
        let doc = serde_json::json!({
            "runtime_dir": rows[0].2,
            "data_dir": rows[1].2,
            "log_dir": rows[2].2,
            "sockets": sockets,
            "install_bin_dir": rows[8].2,
        });
        return format!("{doc}\n");
    }
    let width = rows.iter().map(|(_, k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(_, k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

async fn start(dirs: &Dirs) -> Result<(), LauncherError> {
    dirs.runtime.ensure()?;
    let socket = dirs.runtime.socket(ServiceName::Launcher);
    if let Ok(status) = client::status(&dirs.runtime).await {
        return Err(LauncherError::AlreadyRunning {
            pid: status.launcher_pid,
            socket,
        });
    }
    let logs = dirs.runtime.logs();
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
        .env(env::RUNTIME_DIR, dirs.runtime.path())
        .env(env::HOME, dirs.data.path())
        .stdin(Stdio::null())
        .stdout(open_log()?)
        .stderr(open_log()?);
    // Its own session: the launcher outlives this command and its terminal.
    process::detach(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| LauncherError::io(&exe, e))?;
    let pid = child.id();

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LauncherError::StartFailed(format!(
                "pedelecd up exited ({}) before its services were healthy; {}:\n{}",
                process::describe_exit(status),
                log_path.display(),
                log_tail(&log_path, 20)
            )));
        }
        if let Ok(status) = client::status(&dirs.runtime).await
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
        tokio::time::sleep(START_POLL).await;
    }
}

async fn status(dirs: &Dirs, json: bool) -> Result<(), LauncherError> {
    let status = match client::status(&dirs.runtime).await {
        Ok(status) => status,
        Err(e @ LauncherError::NotRunning) => {
            // Say where we looked: a launcher on another runtime dir is invisible here.
            eprintln!("runtime dir: {}", dirs.runtime.path().display());
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if json {
        println!("{}", status_json(&status));
    } else {
        println!("runtime dir: {}", status.runtime_dir);
        print!("{}", status_table(&status));
    }
    Ok(())
}

async fn restart(dirs: &Dirs, service: ServiceName) -> Result<(), LauncherError> {
    let s = client::restart(&dirs.runtime, service).await?;
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
    fn paths_name_every_socket_plain_json_and_alone() {
        let dirs = Dirs {
            runtime: pedelec_common::RuntimeDir::at("/run/x"),
            data: pedelec_common::DataDir::at("/d"),
        };
        let layout = Layout::for_home(install::Platform::Linux, "/h".into());
        let paths = |which, json| paths(&dirs, &layout, which, json);
        assert_eq!(paths(Some(PathName::RuntimeDir), false), "/run/x\n");
        assert_eq!(
            paths(Some(PathName::InstallBinDir), false),
            "/h/.local/lib/pedelec/bin\n"
        );
        assert_eq!(paths(Some(PathName::Asset), false), "/run/x/asset.sock\n");
        let plain = paths(None, false);
        assert!(
            plain
                .lines()
                .any(|l| l.split_whitespace().eq(["log_dir", "/run/x/logs"])),
            "{plain}"
        );
        let json: serde_json::Value = serde_json::from_str(&paths(None, true)).unwrap();
        assert_eq!(json["data_dir"], "/d");
        for s in ServiceName::SUPERVISED
            .into_iter()
            .chain([ServiceName::Launcher])
        {
            assert_eq!(
                json["sockets"][s.as_str()],
                format!("/run/x/{}", s.socket_file()),
                "{json}"
            );
        }
    }

    #[test]
    fn help_names_the_runtime_dir_fallbacks_and_exit_codes() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "$PEDELEC_RUNTIME_DIR",
            "$XDG_RUNTIME_DIR/pedelec",
            "~/.local/state/pedelec/run",
            "pedelecd paths",
            "4 already running",
        ] {
            assert!(help.contains(needle), "help lacks {needle}");
        }
        assert_eq!(exit::ALREADY_RUNNING, 4);
    }

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
