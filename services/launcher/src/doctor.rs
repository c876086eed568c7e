//! `pedelecd doctor [--json]` (docs/install.md): every check prints its state
//! and, when something is wrong, the command or step that fixes it. `--json`
//! is for bug reports: secrets (keys, tokens) are redacted.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use pedelec_common::extension::PEDELEC_FIREFOX_ADDON_ID;
use pedelec_common::install::{HostConfig, NATIVE_HOST_NAME, SYSTEMD_UNIT, ServiceManager};
use pedelec_common::{Clients, Program};
use pedelec_proto::v1 as pb;
use serde::Serialize;

use crate::Dirs;
use crate::install::{
    Layout, Platform, Record, allowed_origins, firefox_manifest_path, manifest_path,
    service_manager_running,
};

const RPC_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Ok,
    /// Worth knowing, not broken (exit code 0).
    Warn,
    /// Broken: doctor exits 1.
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub check: String,
    pub state: State,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl Check {
    fn ok(check: impl Into<String>, message: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            state: State::Ok,
            message: message.into(),
            fix: None,
            details: None,
        }
    }
    fn warn(check: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            state: State::Warn,
            fix: Some(fix.into()),
            ..Check::ok(check, message)
        }
    }
    fn fail(check: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            state: State::Fail,
            fix: Some(fix.into()),
            ..Check::ok(check, message)
        }
    }
    fn with_details(mut self, details: serde_json::Value) -> Check {
        self.details = Some(details);
        self
    }
}

/// Runs every check.
pub async fn run(layout: &Layout, dirs: &Dirs) -> Vec<Check> {
    let reinstall = format!(
        "{} install",
        layout.bin.join(Program::Launcher.file_name()).display()
    );
    let mut checks = Vec::new();
    let record = match Record::load(layout) {
        Ok(Some(r)) => {
            checks.push(Check::ok(
                "install",
                format!("installed in {}", layout.bin.display()),
            ));
            Some(r)
        }
        Ok(None) => {
            checks.push(Check::fail(
                "install",
                format!("Pedelec is not installed for this user (no {})", layout.record().display()),
                "pedelecd install (from the folder of the built binaries, e.g. target/release/pedelecd install)",
            ));
            None
        }
        Err(e) => {
            checks.push(Check::fail(
                "install",
                e.to_string(),
                format!("rm {} && pedelecd install", layout.record().display()),
            ));
            None
        }
    };
    let installed = record.is_some();
    if installed {
        checks.push(binaries(layout, &reinstall));
    }
    let config = match HostConfig::load_from(&layout.bin) {
        Ok(Some(c)) => {
            checks.push(Check::ok(
                "host-config",
                format!(
                    "{} names runtime dir {}",
                    layout.host_config().display(),
                    c.runtime_dir.display()
                ),
            ));
            Some(c)
        }
        Ok(None) if installed => {
            checks.push(Check::fail(
                "host-config",
                format!("{} is missing", layout.host_config().display()),
                reinstall.clone(),
            ));
            None
        }
        Ok(None) => None,
        Err(e) => {
            checks.push(Check::fail(
                "host-config",
                format!("unreadable: {e}"),
                reinstall.clone(),
            ));
            None
        }
    };
    let extra: Vec<String> = config
        .as_ref()
        .map(|c| c.allowed_extensions.clone())
        .unwrap_or_default();
    let mut folders: Vec<(String, std::path::PathBuf)> = layout
        .browsers()
        .into_iter()
        .filter(|(_, d)| d.is_dir())
        .map(|(n, d)| (n.to_string(), d))
        .collect();
    if let Some(r) = &record {
        folders.extend(
            r.user_data_dirs
                .iter()
                .map(|d| (format!("profile {}", d.display()), d.clone())),
        );
    }
    let firefox = layout.firefox();
    if folders.is_empty() && firefox.is_none() {
        checks.push(Check::warn(
            "browsers",
            "no supported browser's config folder found (Chrome, Chromium, Brave, Edge, Vivaldi, Firefox)",
            "start the browser once (it creates its folder), then run pedelecd install again",
        ));
    }
    for (name, folder) in &folders {
        let allowed = Allowed::Origins(allowed_origins(&extra));
        checks.push(browser(
            name,
            &manifest_path(folder),
            layout,
            allowed,
            &reinstall,
        ));
    }
    if let Some(hosts) = &firefox {
        let allowed = Allowed::Extensions(vec![PEDELEC_FIREFOX_ADDON_ID.to_string()]);
        checks.push(browser(
            "Firefox",
            &firefox_manifest_path(hosts),
            layout,
            allowed,
            &reinstall,
        ));
    }
    for (name, dir) in layout.sandboxed() {
        checks.push(Check::warn(
            format!("sandboxed:{name}"),
            format!(
                "{name} ({}) runs in a sandbox that cannot start {NATIVE_HOST_NAME} from {}",
                dir.display(),
                layout.bin.display()
            ),
            "use a browser installed from your distribution's or the vendor's .deb/.rpm \
             (e.g. Google Chrome, Brave's apt repo, Debian's chromium or firefox-esr, Mozilla's \
             Firefox .deb), then pedelecd install",
        ));
    }
    let manager = record.as_ref().and_then(|r| r.service_manager);
    checks.push(login_start(layout, manager, installed));
    let status = crate::client::status(&dirs.runtime).await;
    checks.push(match &status {
        // Refused before anything was sent: the folder or its server is not this user's.
        Err(crate::LauncherError::Common(e @ pedelec_common::CommonError::Untrusted { .. })) => {
            Check::fail(
                "services",
                e.to_string(),
                format!(
                    "check what is in {} and who made it; stop what serves it, remove it (or `chmod 700` it if it is yours), then pedelecd start",
                    dirs.runtime.path().display()
                ),
            )
        }
        _ => services(status.as_ref().ok(), manager, layout),
    });
    let status = status.ok();
    checks.extend(permissions(dirs));
    if let Some(c) = &config {
        checks.push(agreement(c, dirs, status.as_ref(), &reinstall));
    }
    if status.is_some() {
        checks.push(providers(dirs).await);
    }
    checks.push(confinement());
    checks.push(agent_cleanup(status.as_ref()));
    checks.push(settings(dirs));
    checks
}

fn binaries(layout: &Layout, reinstall: &str) -> Check {
    let mut problems = Vec::new();
    for name in crate::install::BINARIES {
        let path = layout.bin.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.mode() & 0o111 != 0 => {}
            Ok(_) => problems.push(format!("{} is not an executable file", path.display())),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    if problems.is_empty() {
        let pedelecd = layout.bin.join(Program::Launcher.file_name());
        let runs = Command::new(&pedelecd)
            .arg("--version")
            .stdin(Stdio::null())
            .output();
        match runs {
            Ok(o) if o.status.success() => {
                return Check::ok(
                    "binaries",
                    format!(
                        "{} binaries in {}; {}",
                        crate::install::BINARIES.len(),
                        layout.bin.display(),
                        String::from_utf8_lossy(&o.stdout).trim()
                    ),
                );
            }
            Ok(o) => problems.push(format!(
                "{} --version failed: {}",
                pedelecd.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => problems.push(format!("{} does not run: {e}", pedelecd.display())),
        }
    }
    Check::fail("binaries", problems.join("; "), reinstall.to_string())
}

/// Whom a host manifest must admit: Chromium's `allowed_origins`, Firefox's
/// `allowed_extensions`.
enum Allowed {
    Origins(Vec<String>),
    Extensions(Vec<String>),
}

fn browser(name: &str, path: &Path, layout: &Layout, allowed: Allowed, reinstall: &str) -> Check {
    let id = format!("browser:{name}");
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return Check::fail(
                id,
                format!("manifest {} missing ({e})", path.display()),
                reinstall.to_string(),
            );
        }
    };
    let doc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(d) => d,
        Err(e) => {
            return Check::fail(
                id,
                format!("manifest {} is not valid JSON ({e})", path.display()),
                reinstall.to_string(),
            );
        }
    };
    if doc["name"] != NATIVE_HOST_NAME || doc["type"] != "stdio" {
        return Check::fail(
            id,
            format!(
                "manifest {} does not describe {NATIVE_HOST_NAME} (stdio)",
                path.display()
            ),
            reinstall.to_string(),
        );
    }
    let host = doc["path"].as_str().unwrap_or_default();
    let runnable = std::fs::metadata(host).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0);
    if !runnable {
        return Check::fail(
            id,
            format!(
                "manifest {} points at {host:?}, which is not an executable (installed: {})",
                path.display(),
                layout.native_host().display()
            ),
            reinstall.to_string(),
        );
    }
    let (key, expected) = match allowed {
        Allowed::Origins(o) => ("allowed_origins", o),
        Allowed::Extensions(e) => ("allowed_extensions", e),
    };
    let mut have: Vec<String> = doc[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    have.sort();
    let mut want = expected.clone();
    want.sort();
    if have != want {
        return Check::fail(
            id,
            format!(
                "manifest {} allows {have:?}, expected {want:?}",
                path.display()
            ),
            format!("{reinstall} (add --extension-id ID for each extension of yours)"),
        );
    }
    Check::ok(id, format!("{} -> {host}", path.display()))
}

fn login_start(layout: &Layout, manager: Option<ServiceManager>, installed: bool) -> Check {
    let wanted = layout.platform.service_manager();
    let Some(manager) = manager else {
        if !installed {
            return Check::warn("login-start", "not installed", "pedelecd install");
        }
        if service_manager_running(wanted) {
            return Check::warn(
                "login-start",
                "not installed (--no-login-start): the native host starts pedelecd when the browser asks",
                "pedelecd uninstall && pedelecd install (to start pedelecd at login)",
            );
        }
        return Check::ok(
            "login-start",
            "no user service manager runs here: the native host starts pedelecd when the browser asks",
        );
    };
    if !layout.login_file.is_file() {
        return Check::fail(
            "login-start",
            format!("{} is missing", layout.login_file.display()),
            "pedelecd install",
        );
    }
    match manager {
        ServiceManager::Systemd => {
            let out = Command::new("systemctl")
                .args(["--user", "is-active", SYSTEMD_UNIT])
                .stdin(Stdio::null())
                .output();
            let state = out
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|e| format!("systemctl: {e}"));
            if state == "active" {
                Check::ok(
                    "login-start",
                    format!("{SYSTEMD_UNIT} is installed and active"),
                )
            } else {
                Check::fail(
                    "login-start",
                    format!("{SYSTEMD_UNIT} is installed but {state}"),
                    format!(
                        "systemctl --user restart {SYSTEMD_UNIT}; journalctl --user -u {SYSTEMD_UNIT} says why it stopped"
                    ),
                )
            }
        }
        ServiceManager::Launchd => {
            let target = manager.launchd_target();
            let out = Command::new("launchctl")
                .args(["print", &target])
                .stdin(Stdio::null())
                .output();
            let text = out
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            if text.contains("state = running") {
                Check::ok("login-start", format!("{target} is loaded and running"))
            } else {
                Check::fail(
                    "login-start",
                    format!("{target} is not running"),
                    format!("launchctl kickstart {target}; its log: pedelecd paths log-dir"),
                )
            }
        }
    }
}

fn services(
    status: Option<&pb::SupervisorStatus>,
    manager: Option<ServiceManager>,
    layout: &Layout,
) -> Check {
    let Some(status) = status else {
        let start = format!(
            "{} start",
            layout.bin.join(Program::Launcher.file_name()).display()
        );
        return if manager.is_some() {
            Check::fail(
                "services",
                "pedelecd is not running",
                "see login-start above",
            )
        } else {
            Check::warn(
                "services",
                "pedelecd is not running (the native host starts it when the browser asks)",
                start,
            )
        };
    };
    let down: Vec<String> = status
        .services
        .iter()
        .filter(|s| s.state != pb::ServiceState::Serving as i32)
        .map(|s| format!("{} ({})", s.name, s.last_exit))
        .collect();
    if down.is_empty() {
        Check::ok(
            "services",
            format!(
                "pedelecd (pid {}) and its {} services are serving",
                status.launcher_pid,
                status.services.len()
            ),
        )
    } else {
        Check::fail(
            "services",
            format!("not serving: {}", down.join(", ")),
            "pedelecd restart <service>; its log: $(pedelecd paths log-dir)/<service>.log",
        )
    }
}

/// The runtime dir and its sockets, the data dir: owned by the user, private.
fn permissions(dirs: &Dirs) -> Vec<Check> {
    let me = pedelec_common::process::uid();
    let mut checks = Vec::new();
    for (check, dir) in [
        ("runtime-dir", dirs.runtime.path()),
        ("data-dir", dirs.data.path()),
    ] {
        let Ok(meta) = std::fs::symlink_metadata(dir) else {
            checks.push(Check::ok(
                check,
                format!(
                    "{} does not exist yet (created private on start)",
                    dir.display()
                ),
            ));
            continue;
        };
        let mut problems = Vec::new();
        let mut fixes = Vec::new();
        if meta.uid() != me {
            problems.push(format!(
                "{} is owned by uid {}, not {me}",
                dir.display(),
                meta.uid()
            ));
            fixes.push(format!(
                "remove {} (another user's) or set PEDELEC_RUNTIME_DIR",
                dir.display()
            ));
        }
        if meta.mode() & 0o777 != 0o700 {
            problems.push(format!(
                "{} has mode {:o}, not 700",
                dir.display(),
                meta.mode() & 0o777
            ));
            fixes.push(format!("chmod 700 {}", dir.display()));
        }
        if check == "runtime-dir" {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let Ok(m) = entry.metadata() else { continue };
                if !m.file_type().is_socket() {
                    continue;
                }
                if m.uid() != me || m.mode() & 0o077 != 0 {
                    problems.push(format!(
                        "{} has mode {:o} owner {}",
                        entry.path().display(),
                        m.mode() & 0o777,
                        m.uid()
                    ));
                    fixes.push(format!("chmod 600 {}", entry.path().display()));
                }
            }
        }
        checks.push(if problems.is_empty() {
            Check::ok(check, format!("{} is yours and private", dir.display()))
        } else {
            Check::fail(check, problems.join("; "), fixes.join("; "))
        });
    }
    checks
}

/// The daemon (this environment, the running launcher) and the host (its
/// config) name the same socket folder.
fn agreement(
    config: &HostConfig,
    dirs: &Dirs,
    status: Option<&pb::SupervisorStatus>,
    reinstall: &str,
) -> Check {
    let host = config.runtime_dir.display().to_string();
    let here = dirs.runtime.path().display().to_string();
    let mut seen = vec![("this environment", here.clone())];
    if let Some(s) = status {
        seen.push(("the running pedelecd", s.runtime_dir.clone()));
    }
    let differing: Vec<String> = seen
        .iter()
        .filter(|(_, p)| *p != host)
        .map(|(who, p)| format!("{who} uses {p}"))
        .collect();
    if differing.is_empty() {
        Check::ok(
            "socket-folder",
            format!("the daemon and the host agree on {host}"),
        )
    } else {
        Check::fail(
            "socket-folder",
            format!("the host uses {host} but {}", differing.join(", ")),
            format!(
                "{reinstall} from the environment pedelecd runs in (it writes the socket folder into the host config), or set PEDELEC_RUNTIME_DIR={host}"
            ),
        )
    }
}

async fn providers(dirs: &Dirs) -> Check {
    let clients = Clients::new(dirs.runtime.clone());
    let call = async {
        let mut client = clients.provider();
        client
            .list_providers(pb::ListProvidersRequest::default())
            .await
    };
    let list = match tokio::time::timeout(RPC_TIMEOUT, call).await {
        Ok(Ok(r)) => r.into_inner().providers,
        Ok(Err(s)) => {
            return Check::fail(
                "providers",
                format!("ProviderService: {}", s.message()),
                "pedelecd restart provider",
            );
        }
        Err(_) => {
            return Check::fail(
                "providers",
                "ProviderService did not answer",
                "pedelecd restart provider",
            );
        }
    };
    let details: Vec<serde_json::Value> = list
        .iter()
        .map(|p| serde_json::json!({"code": p.code, "available": p.available, "reason": p.error}))
        .collect();
    let available: Vec<&str> = list
        .iter()
        .filter(|p| p.available)
        .map(|p| p.code.as_str())
        .collect();
    let missing: Vec<String> = list
        .iter()
        .filter(|p| !p.available)
        .map(|p| format!("{} ({})", p.code, p.error.clone().unwrap_or_default()))
        .collect();
    let mut message = format!(
        "available: {}; not: {}",
        if available.is_empty() {
            "none".into()
        } else {
            available.join(", ")
        },
        if missing.is_empty() {
            "-".into()
        } else {
            missing.join("; ")
        }
    );
    if let Some(note) = argv_note(&available) {
        message.push_str("; ");
        message.push_str(note);
    }
    let check = if available.is_empty() {
        Check::warn(
            "providers",
            message,
            "install an agent CLI, e.g. npm install -g @openai/codex (then codex login)",
        )
    } else {
        Check::ok("providers", message)
    };
    check.with_details(serde_json::Value::Array(details))
}

/// What a user should know before using an available provider whose CLI
/// takes the prompt on its command line (docs/security.md, "argv").
fn argv_note(available: &[&str]) -> Option<&'static str> {
    available.contains(&"antigravity").then_some(
        "note: antigravity takes each prompt on its command line, which other local users can read in `ps` while the turn runs",
    )
}

/// Whether agents start confined by bubblewrap (docs/security.md,
/// "Narrowing what an agent can reach"), probed as ProviderService probes it.
fn confinement() -> Check {
    use pedelec_common::process::confine::{self, Verdict};
    let path = std::env::var_os("PATH");
    let verdict = confine::probe(path.as_deref());
    let message = verdict.describe();
    match verdict {
        Verdict::Confined { .. } => Check::ok("agent-confinement", message),
        Verdict::SwitchedOff => Check::warn(
            "agent-confinement",
            message,
            format!(
                "unset {} in pedelecd's environment, then pedelecd restart provider",
                pedelec_common::env::CONFINE
            ),
        ),
        Verdict::Unavailable(_) => Check::warn(
            "agent-confinement",
            message,
            "install bubblewrap (Debian/Ubuntu: sudo apt install bubblewrap; Fedora: sudo dnf install bubblewrap) and allow unprivileged user namespaces, then pedelecd restart provider",
        ),
    }
}

/// Whether an agent's descendants that leave its process group (setsid, a
/// double fork) are ended with it: each agent gets a cgroup where
/// ProviderService's cgroup (v2) is writable.
fn agent_cleanup(status: Option<&pb::SupervisorStatus>) -> Check {
    use pedelec_common::process::cgroup;
    let provider = status.and_then(|s| {
        s.services
            .iter()
            .find(|svc| svc.name == pedelec_common::ServiceName::Provider.as_str() && svc.pid > 0)
            .map(|svc| svc.pid.to_string())
    });
    let (whose, verdict) = match &provider {
        Some(pid) => ("ProviderService's", cgroup::dir_of(pid)),
        None => ("this process's", cgroup::own_dir()),
    };
    match verdict {
        Ok(dir) => Check::ok(
            "agent-cleanup",
            format!(
                "each agent gets its own cgroup under {} ({whose} cgroup): whatever it starts ends with it",
                dir.display()
            ),
        ),
        Err(why) => Check::warn(
            "agent-cleanup",
            format!(
                "agents get no cgroup ({why}): a process an unconfined agent detaches (setsid, double fork) outlives its turn; a confined agent's end with its pid namespace"
            ),
            "run pedelecd under systemd with Delegate=yes (pedelecd install does), or confine agents (bubblewrap)",
        ),
    }
}

fn settings(dirs: &Dirs) -> Check {
    let file = dirs.data.settings_file();
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::ok(
                "settings",
                format!("{} not written yet (defaults)", file.display()),
            );
        }
        Err(e) => {
            return Check::fail(
                "settings",
                format!("{}: {e}", file.display()),
                format!("chmod 600 {}", file.display()),
            );
        }
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v.is_object() => {
            Check::ok("settings", format!("{} is valid", file.display())).with_details(v)
        }
        Ok(_) | Err(_) => Check::fail(
            "settings",
            format!("{} is not a JSON object", file.display()),
            format!(
                "fix it or move it away (mv {0} {0}.bad); pedelec-cli settings set … writes a valid one",
                file.display()
            ),
        ),
    }
}

/// Masks every string under a key that names a secret.
pub fn redact(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let k = k.to_ascii_lowercase();
                let secret = ["key", "token", "secret", "password"]
                    .iter()
                    .any(|s| k.contains(s));
                if secret && v.as_str().is_some_and(|s| !s.is_empty()) {
                    *v = serde_json::Value::String("<redacted>".into());
                } else {
                    redact(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The report as text, one check a line, fixes indented under it.
pub fn text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let tag = match c.state {
            State::Ok => "ok  ",
            State::Warn => "warn",
            State::Fail => "FAIL",
        };
        out.push_str(&format!("{tag}  {}: {}\n", c.check, c.message));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("      fix: {fix}\n"));
        }
    }
    let failed = checks.iter().filter(|c| c.state == State::Fail).count();
    if failed == 0 {
        out.push_str("all good\n");
    } else {
        out.push_str(&format!("{failed} problem(s)\n"));
    }
    out
}

/// The report as JSON with secrets redacted.
pub fn json(checks: &[Check], layout: &Layout) -> String {
    let mut doc = serde_json::json!({
        "ok": checks.iter().all(|c| c.state != State::Fail),
        "platform": match layout.platform { Platform::Linux => "linux", Platform::Macos => "macos" },
        "version": env!("CARGO_PKG_VERSION"),
        "checks": checks,
    });
    redact(&mut doc);
    format!("{doc}\n")
}

pub fn broken(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.state == State::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_at_any_depth() {
        let mut v = serde_json::json!({"ollamaApiKey": "sk-1", "profiles": [{"tavilyKey": "t"}], "token": "", "model": "m"});
        redact(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"ollamaApiKey": "<redacted>", "profiles": [{"tavilyKey": "<redacted>"}], "token": "", "model": "m"})
        );
    }

    #[test]
    fn an_available_antigravity_is_flagged_for_its_argv_prompts() {
        assert!(argv_note(&["codex", "antigravity"]).is_some_and(|n| n.contains("`ps`")));
        assert_eq!(argv_note(&["codex", "claude"]), None);
    }

    #[test]
    fn a_failed_check_is_broken_and_shows_its_fix() {
        let checks = vec![Check::ok("a", "fine"), Check::fail("b", "bad", "do x")];
        assert!(broken(&checks));
        let t = text(&checks);
        assert!(t.contains("FAIL  b: bad\n      fix: do x\n"), "{t}");
        assert!(t.ends_with("1 problem(s)\n"));
        assert!(!broken(&checks[..1]));
    }
}
