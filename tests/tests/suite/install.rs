//! `pedelecd install`, `uninstall` and `doctor` on a temp HOME
//! (docs/install.md): the files and their modes per browser folder present,
//! idempotence, --dry-run, an uninstall that leaves HOME as it was, the
//! doctor's verdict on a good install and on each broken state, the systemd
//! unit through `systemd-analyze verify`, the launchd plist through plistlib.
//!
//! A stub `systemctl` comes first on PATH in every test, so no test ever
//! talks to the developer's real user service manager.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use pedelec_launcher::install::BINARIES;
use pedelec_tests::{Host, TestEnv, bin, bin_dir, read_frames};

const EXTENSION_ID: &str = "ekeclpceddngodnkncegoclkkeknaacb";
const OTHER_ID: &str = "abcdefghijklmnopabcdefghijklmnop";

/// A temp HOME with a stub `systemctl`: `manager` says whether a user service
/// manager "runs"; `is-active` answers what the `unit-state` file holds.
fn env(manager: bool) -> TestEnv {
    let env = TestEnv::new();
    // As pedelecd leaves them (TestEnv makes them with the umask's mode).
    for dir in [env.runtime_dir(), env.data_dir()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let log = env.root.path().join("systemctl.log");
    let state = env.root.path().join("unit-state");
    std::fs::write(&state, "active\n").unwrap();
    env.stub(
        "systemctl",
        &format!(
            r#"echo "$*" >> {log}
case "$*" in
  "--user show-environment") {answer} ;;
  "--user is-active pedelec.service") s=$(cat {state}); echo "$s"; [ "$s" = active ] ;;
  "--user start pedelec.service") [ -x {on_start} ] && exec {on_start}; exit 0 ;;
  *) exit 0 ;;
esac"#,
            log = log.display(),
            state = state.display(),
            on_start = env.root.path().join("on-start").display(),
            answer = if manager { "exit 0" } else { "exit 1" },
        ),
    );
    env
}

fn systemctl_calls(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(env.root.path().join("systemctl.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn run(env: &TestEnv, args: &[&str]) -> (i32, String) {
    let out: Output = env.pedelecd(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let (code, text) = run(env, args);
    assert_eq!(code, 0, "pedelecd {args:?}:\n{text}");
    text
}

fn home(env: &TestEnv) -> PathBuf {
    env.home()
}
fn lib_bin(env: &TestEnv) -> PathBuf {
    home(env).join(".local/lib/pedelec/bin")
}
fn manifest(folder: &Path) -> PathBuf {
    folder.join("NativeMessagingHosts/dev.pedelec.host.json")
}
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Every entry under `root`: type, mode, size, mtime and (for files under
/// 1 MiB) the content, so any write, chmod or touch shows.
fn listing(root: &Path) -> BTreeMap<PathBuf, String> {
    listing_of(root, true)
}

/// [`listing`] without folders' mtimes: adding a file to a folder and
/// removing it again changes the folder's mtime, and nothing else.
fn listing_after_undo(root: &Path) -> BTreeMap<PathBuf, String> {
    listing_of(root, false)
}

fn listing_of(root: &Path, dir_mtimes: bool) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let content = if m.is_file() && m.len() < (1 << 20) {
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
            } else {
                String::new()
            };
            let mtime = if m.is_dir() && !dir_mtimes {
                String::new()
            } else {
                format!("{}.{}", m.mtime(), m.mtime_nsec())
            };
            out.insert(
                path.strip_prefix(root).unwrap().to_path_buf(),
                format!(
                    "{:?} {:o} {} {mtime} {content}",
                    m.file_type(),
                    m.mode(),
                    m.len()
                ),
            );
            if m.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// Chrome and Brave "installed" (their config folders exist), nothing else.
fn with_two_browsers(env: &TestEnv) -> (PathBuf, PathBuf) {
    let chrome = home(env).join(".config/google-chrome");
    let brave = home(env).join(".config/BraveSoftware/Brave-Browser");
    std::fs::create_dir_all(chrome.join("Default")).unwrap();
    std::fs::create_dir_all(&brave).unwrap();
    (chrome, brave)
}

#[test]
fn install_writes_the_binaries_config_and_a_manifest_per_present_browser() {
    let env = env(false);
    let (chrome, brave) = with_two_browsers(&env);
    let profile = env.root.path().join("profile");
    let out = ok(
        &env,
        &[
            "install",
            "--extension-id",
            OTHER_ID,
            "--user-data-dir",
            profile.to_str().unwrap(),
        ],
    );
    assert!(out.contains("no user service manager"), "{out}");

    let bin = lib_bin(&env);
    for name in BINARIES {
        let installed = bin.join(name);
        assert_eq!(mode(&installed), 0o755, "{name}");
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(bin_dir().join(name)).unwrap(),
            "{name} is a copy of the built one"
        );
    }
    let expected = serde_json::json!({
        "name": "dev.pedelec.host",
        "description": "Pedelec native messaging host",
        "path": bin.join("pedelec-native-host"),
        "type": "stdio",
        "allowed_origins": [format!("chrome-extension://{EXTENSION_ID}/"), format!("chrome-extension://{OTHER_ID}/")],
    });
    for folder in [&chrome, &brave, &profile] {
        let path = manifest(folder);
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc, expected, "{}", path.display());
        assert_eq!(mode(&path), 0o644);
    }
    // Absent browsers get nothing, not even their folder.
    for absent in [
        "chromium",
        "google-chrome-beta",
        "google-chrome-unstable",
        "microsoft-edge",
        "vivaldi",
    ] {
        assert!(
            !home(&env).join(".config").join(absent).exists(),
            "{absent}"
        );
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bin.join("pedelec-host.json")).unwrap()).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "allowedExtensions": [OTHER_ID],
            "runtimeDir": env.runtime_dir(),
            "binDir": bin,
        })
    );
    // No service manager: no unit, and nothing but the probe was asked of systemctl.
    assert!(!home(&env).join(".config/systemd").exists());
    assert_eq!(systemctl_calls(&env), ["--user show-environment"]);
}

/// The release layout (build-release.sh): pedelecd, the four services and the
/// native host are one executable, `pedelec-multicall`, under six names.
/// Installed, they stay one file, so their processes share its pages; each
/// name still runs its own program; a second install finds it all unchanged.
#[test]
fn the_one_executable_installs_as_one_file_under_each_program_name() {
    let env = env(false);
    let listed = std::process::Command::new(bin("pedelec-multicall"))
        .arg("--list")
        .output()
        .unwrap();
    let programs: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(programs.len(), 6, "{programs:?}");
    assert_eq!(
        programs[0], "pedelecd",
        "install runs from pedelecd's folder"
    );
    let from = env.root.path().join("release");
    std::fs::create_dir(&from).unwrap();
    std::fs::copy(bin("pedelec-multicall"), from.join("pedelecd")).unwrap();
    for name in &programs[1..] {
        std::fs::hard_link(from.join("pedelecd"), from.join(name)).unwrap();
    }
    std::fs::copy(bin("pedelec-cli"), from.join("pedelec-cli")).unwrap();

    let install = |env: &TestEnv| {
        let out = env
            .command(from.join("pedelecd"))
            .env("PEDELEC_BIN_DIR", &from)
            .arg("install")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    install(&env);
    let bin = lib_bin(&env);
    let inode = |name: &str| std::fs::metadata(bin.join(name)).unwrap().ino();
    for name in &programs {
        assert_eq!(
            inode(name),
            inode("pedelecd"),
            "{name} is not the same file"
        );
        assert_eq!(mode(&bin.join(name)), 0o755, "{name}");
    }
    assert_eq!(
        std::fs::metadata(bin.join("pedelecd")).unwrap().nlink(),
        programs.len() as u64
    );
    assert_ne!(inode("pedelec-cli"), inode("pedelecd"));
    assert_ne!(
        inode("pedelecd"),
        std::fs::metadata(from.join("pedelecd")).unwrap().ino(),
        "a copy, not the build's own file"
    );
    // Each name runs its own program.
    for name in ["pedelecd", "pedelec-session", "pedelec-asset"] {
        let out = env
            .command(bin.join(name))
            .arg("--version")
            .output()
            .unwrap();
        let version = String::from_utf8_lossy(&out.stdout);
        assert!(
            version.starts_with(&format!("{name} ")),
            "{name}: {version}"
        );
    }
    let again = install(&env);
    assert!(!again.contains("wrote "), "{again}");
}

#[test]
fn a_second_install_changes_nothing_and_dry_run_writes_nothing() {
    let env = env(true);
    with_two_browsers(&env);
    let before = listing(&home(&env));
    let dry = ok(&env, &["install", "--dry-run"]);
    assert_eq!(
        listing(&home(&env)),
        before,
        "--dry-run wrote something:\n{dry}"
    );
    // Every file and every command it would write or run.
    for path in [
        lib_bin(&env).join("pedelecd"),
        lib_bin(&env).join("pedelec-host.json"),
        manifest(&home(&env).join(".config/google-chrome")),
        home(&env).join(".config/systemd/user/pedelec.service"),
        home(&env).join(".local/lib/pedelec/installed.json"),
    ] {
        assert!(
            dry.contains(&format!("would write {}", path.display())),
            "{dry}"
        );
    }
    assert!(
        dry.contains("would run: systemctl --user enable --now pedelec.service"),
        "{dry}"
    );
    assert!(!systemctl_calls(&env).iter().any(|c| c.contains("enable")));

    ok(&env, &["install"]);
    let first = listing(&home(&env));
    assert!(systemctl_calls(&env).contains(&"--user enable --now pedelec.service".to_string()));
    let again = ok(&env, &["install"]);
    assert_eq!(
        listing(&home(&env)),
        first,
        "the second install changed HOME:\n{again}"
    );
    assert!(!again.contains("wrote "), "{again}");
    assert!(
        !again.contains("try-restart"),
        "nothing changed, nothing to restart:\n{again}"
    );
}

#[test]
fn uninstall_leaves_home_exactly_as_it_was() {
    let env = env(true);
    with_two_browsers(&env);
    // A file of the user's own next to ours stays.
    let own = home(&env).join(".config/google-chrome/NativeMessagingHosts/other.json");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, "{}").unwrap();
    let profile = env.root.path().join("profile");
    let before = listing_after_undo(&home(&env));
    ok(
        &env,
        &["install", "--user-data-dir", profile.to_str().unwrap()],
    );
    assert!(
        home(&env)
            .join(".config/systemd/user/pedelec.service")
            .is_file()
    );
    std::fs::create_dir_all(env.data_dir()).unwrap();
    std::fs::write(env.data_dir().join("settings.json"), "{}").unwrap();
    let out = ok(&env, &["uninstall"]);
    assert_eq!(listing_after_undo(&home(&env)), before, "{out}");
    assert!(
        !profile.exists(),
        "the profile folder install created is gone"
    );
    assert!(systemctl_calls(&env).contains(&"--user disable --now pedelec.service".to_string()));
    assert!(
        env.data_dir().join("settings.json").exists(),
        "data stays without --purge"
    );
    assert!(out.contains("--purge"), "{out}");
    // Nothing left to remove; --purge removes the data.
    let again = ok(&env, &["uninstall", "--purge"]);
    assert!(again.contains("not installed"), "{again}");
    assert!(!env.data_dir().exists());
}

#[test]
fn a_bad_extension_id_is_a_usage_error() {
    let env = env(false);
    let (code, text) = run(&env, &["install", "--extension-id", "not-an-id"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("32 letters a-p"), "{text}");
    assert!(!lib_bin(&env).exists());
}

fn doctor(env: &TestEnv) -> (i32, String) {
    run(env, &["doctor"])
}

/// The check's line and its fix line, asserted to say `what` and `fix`.
fn assert_reports(report: &str, state: &str, what: &str, fix: &str) {
    let lines: Vec<&str> = report.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.starts_with(state) && l.contains(what))
        .unwrap_or_else(|| panic!("no {state} line with {what:?}:\n{report}"));
    let fix_line = lines.get(i + 1).copied().unwrap_or_default();
    assert!(
        fix_line.trim_start().starts_with("fix:") && fix_line.contains(fix),
        "fix for {what:?} lacks {fix:?}:\n{report}"
    );
}

#[tokio::test]
async fn doctor_gives_a_clean_bill_on_a_good_install_with_the_services_running() {
    let env = env(false);
    env.stub(
        "codex",
        r#"[ "$1" = "--version" ] && echo "codex-cli 0.0.0-stub"; exit 0"#,
    );
    let (chrome, _) = with_two_browsers(&env);
    ok(&env, &["install"]);
    // The installed pedelecd, as a user would start it.
    let installed = env
        .command(lib_bin(&env).join("pedelecd"))
        .arg("start")
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");
    std::fs::write(
        env.data_dir().join("settings.json"),
        r#"{"defaultProvider":"codex","ollamaApiKey":"sk-very-secret"}"#,
    )
    .unwrap();
    let (code, report) = doctor(&env);
    let (jcode, json) = run(&env, &["doctor", "--json"]);
    ok(&env, &["stop"]);
    assert_eq!(code, 0, "{report}");
    assert!(report.ends_with("all good\n"), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    for needle in [
        "ok    binaries:",
        "ok    services: pedelecd",
        "ok    socket-folder: the daemon and the host agree",
        "ok    runtime-dir:",
        "ok    providers:",
        "ok    settings:",
        // The tests run as root, where bwrap and cgroups work.
        "ok    agent-confinement: agents run confined by",
        "ok    agent-cleanup: each agent gets its own cgroup under",
        "(ProviderService's cgroup)",
    ] {
        assert!(report.contains(needle), "{needle}:\n{report}");
    }
    assert!(
        report.contains(&manifest(&chrome).display().to_string()),
        "{report}"
    );
    assert_eq!(jcode, 0);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["ok"], true);
    assert!(
        !json.contains("sk-very-secret"),
        "a key leaked into --json: {json}"
    );
    assert!(json.contains("<redacted>"), "{json}");
}

#[test]
fn doctor_reports_each_broken_state_with_its_fix() {
    let env = env(false);
    let (chrome, brave) = with_two_browsers(&env);
    let chromium = home(&env).join(".config/chromium");
    std::fs::create_dir_all(&chromium).unwrap();
    ok(&env, &["install"]);
    let (code, report) = doctor(&env);
    assert_eq!(code, 0, "{report}");

    // Missing manifest, wrong path, stale allowed origin.
    std::fs::remove_file(manifest(&chrome)).unwrap();
    let edit = |path: PathBuf, f: &dyn Fn(&mut serde_json::Value)| {
        let mut doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        f(&mut doc);
        std::fs::write(&path, doc.to_string()).unwrap();
    };
    edit(manifest(&brave), &|d| {
        d["path"] = "/opt/old/pedelec-native-host".into()
    });
    edit(manifest(&chromium), &|d| {
        d["allowed_origins"] = serde_json::json!([format!("chrome-extension://{OTHER_ID}/")])
    });
    // Bad permissions on the socket folder.
    std::fs::create_dir_all(env.runtime_dir()).unwrap();
    std::fs::set_permissions(env.runtime_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A snap browser.
    std::fs::create_dir_all(home(&env).join("snap/chromium")).unwrap();

    let (code, report) = doctor(&env);
    assert_eq!(code, 1, "{report}");
    let reinstall = format!("{} install", lib_bin(&env).join("pedelecd").display());
    assert_reports(
        &report,
        "FAIL",
        &format!("{} missing", manifest(&chrome).display()),
        &reinstall,
    );
    assert_reports(
        &report,
        "FAIL",
        "points at \"/opt/old/pedelec-native-host\"",
        &reinstall,
    );
    assert_reports(
        &report,
        "FAIL",
        &format!("allows [\"chrome-extension://{OTHER_ID}/\"]"),
        "--extension-id",
    );
    assert_reports(
        &report,
        "FAIL",
        "has mode 755, not 700",
        &format!("chmod 700 {}", env.runtime_dir().display()),
    );
    assert_reports(&report, "warn", "Chromium (snap)", ".deb/.rpm");
    assert!(report.ends_with("4 problem(s)\n"), "{report}");

    // Each fix applied, the report is clean again (the snap stays a warning).
    ok(&env, &["install"]);
    std::fs::set_permissions(env.runtime_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, report) = doctor(&env);
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("warn  sandboxed:Chromium (snap)"),
        "{report}"
    );
}

#[test]
fn doctor_reports_a_dead_service_and_a_host_on_another_socket_folder() {
    let env = env(true);
    with_two_browsers(&env);
    ok(&env, &["install"]);
    std::fs::write(env.root.path().join("unit-state"), "failed\n").unwrap();
    let (code, report) = doctor(&env);
    assert_eq!(code, 1, "{report}");
    assert_reports(
        &report,
        "FAIL",
        "pedelec.service is installed but failed",
        "systemctl --user restart pedelec.service",
    );
    assert_reports(&report, "FAIL", "pedelecd is not running", "login-start");

    // The daemon's environment names another runtime dir than the host's config.
    let mut other = env.command(bin("pedelecd"));
    other
        .arg("doctor")
        .env("PEDELEC_RUNTIME_DIR", env.root.path().join("elsewhere"));
    let out = other.output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_reports(&report, "FAIL", "the host uses", "PEDELEC_RUNTIME_DIR=");
}

#[test]
fn doctor_without_an_install_says_how_to_install() {
    let env = env(false);
    let (code, report) = doctor(&env);
    assert_eq!(code, 1, "{report}");
    assert_reports(
        &report,
        "FAIL",
        "not installed for this user",
        "pedelecd install",
    );
}

#[test]
fn the_installed_systemd_unit_passes_systemd_analyze_verify() {
    let env = env(true);
    ok(&env, &["install"]);
    let unit = home(&env).join(".config/systemd/user/pedelec.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(
        text.contains(&format!(
            "ExecStart=\"{}\" up --runtime-dir \"{}\"",
            lib_bin(&env).join("pedelecd").display(),
            env.runtime_dir().display()
        )),
        "{text}"
    );
    let analyze = which("systemd-analyze")
        .expect("systemd-analyze is missing: apt-get install systemd (tests/run.sh does)");
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It does check: a unit naming a missing program fails.
    let broken = env.root.path().join("pedelec.service");
    std::fs::write(
        &broken,
        text.replace(&lib_bin(&env).display().to_string(), "/nonexistent"),
    )
    .unwrap();
    let out = std::process::Command::new(which("systemd-analyze").unwrap())
        .arg("verify")
        .arg(&broken)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "verify accepted a missing ExecStart program"
    );
}

#[test]
fn the_launchd_plist_parses_and_names_existing_programs() {
    use pedelec_launcher::install::{Platform, login_file};
    let env = env(false);
    ok(&env, &["install"]);
    let dirs = pedelec_launcher::Dirs {
        runtime: pedelec_common::RuntimeDir::at(env.runtime_dir()),
        data: pedelec_common::DataDir::at(env.data_dir()),
    };
    let plist = env.root.path().join("dev.pedelec.pedelecd.plist");
    std::fs::write(&plist, login_file(Platform::Macos, &lib_bin(&env), &dirs)).unwrap();
    let script = r#"
import os, plistlib, sys
d = plistlib.load(open(sys.argv[1], "rb"))
assert d["Label"] == "dev.pedelec.pedelecd", d
args = d["ProgramArguments"]
assert os.access(args[0], os.X_OK), args[0]
assert args[1:3] == ["up", "--runtime-dir"], args
assert d["RunAtLoad"] is True
print(args[0])
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&plist)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        lib_bin(&env).join("pedelecd").display().to_string()
    );
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// With the unit installed, a host started as a browser starts it (no
/// `PEDELEC_*` in its environment) asks the service manager to start the
/// services instead of spawning `pedelecd start`, and finds them through its
/// host config.
#[tokio::test]
async fn the_installed_host_asks_the_service_manager_and_finds_the_daemon_by_its_config() {
    let env = env(true);
    ok(&env, &["install"]);
    let bin = lib_bin(&env);
    // What the unit's ExecStart does, started here by the stub `systemctl --user start`.
    let on_start = env.root.path().join("on-start");
    std::fs::write(
        &on_start,
        format!(
            "#!/bin/sh\nexec {} --runtime-dir {} --data-dir {} start\n",
            bin.join("pedelecd").display(),
            env.runtime_dir().display(),
            env.data_dir().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&on_start, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut cmd = std::process::Command::new(bin.join("pedelec-native-host"));
    cmd.env_clear()
        .env("HOME", home(&env))
        .env("PATH", env.path_var())
        .arg(format!("chrome-extension://{EXTENSION_ID}/"))
        .current_dir(&bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(env.root.path().join("host.stderr")).unwrap());
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (tx, incoming) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(read_frames(child.stdout.take().unwrap(), tx));
    let mut host = Host {
        stdin: child.stdin.take(),
        child,
        incoming,
        stash: Default::default(),
        next_id: 0,
    };
    let reply = host.call("list_providers", serde_json::json!({})).await;
    let running = env.pedelecd(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&running.stdout).unwrap_or_default();
    let launcher_exe = std::fs::read_link(format!("/proc/{}/exe", status["launcher_pid"]));
    ok(&env, &["stop"]);
    assert_eq!(reply["ok"], true, "{reply}");
    assert!(
        systemctl_calls(&env).contains(&"--user start pedelec.service".to_string()),
        "{:?}",
        systemctl_calls(&env)
    );
    assert!(running.status.success(), "{running:?}");
    assert_eq!(
        status["runtime_dir"],
        env.runtime_dir().display().to_string()
    );
    assert_eq!(
        launcher_exe.unwrap(),
        bin.join("pedelecd"),
        "the installed pedelecd runs"
    );
}

/// Firefox, once it has run (its `~/.mozilla` exists): install registers the
/// host in `~/.mozilla/native-messaging-hosts` for Pedelec's add-on (shown by
/// --dry-run first), doctor checks it and flags a broken one, a snap or
/// flatpak Firefox is explained, and uninstall removes what it wrote.
#[test]
fn firefox_gets_its_own_manifest_checked_by_doctor_and_removed_by_uninstall() {
    let env = env(false);
    std::fs::create_dir_all(home(&env).join(".mozilla/firefox")).unwrap();
    let before = listing_after_undo(&home(&env));
    let path = home(&env).join(".mozilla/native-messaging-hosts/dev.pedelec.host.json");

    let dry = ok(&env, &["install", "--dry-run"]);
    assert!(
        dry.contains(&format!("would write {} (644)", path.display())),
        "{dry}"
    );
    assert!(!path.exists(), "a dry run writes nothing");

    ok(&env, &["install"]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({
            "name": "dev.pedelec.host",
            "description": "Pedelec native messaging host",
            "path": lib_bin(&env).join("pedelec-native-host"),
            "type": "stdio",
            "allowed_extensions": [pedelec_common::extension::PEDELEC_FIREFOX_ADDON_ID],
        })
    );
    assert_eq!(mode(&path), 0o644);
    let (_, report) = doctor(&env);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("browser:Firefox")),
        "{report}"
    );

    // Another add-on's manifest in its place is reported with the fix.
    let mut other = doc.clone();
    other["allowed_extensions"] = serde_json::json!(["someone@else.example"]);
    std::fs::write(&path, other.to_string()).unwrap();
    let (code, report) = doctor(&env);
    assert_eq!(code, 1, "{report}");
    assert_reports(&report, "FAIL", "browser:Firefox", "pedelecd install");

    // A snap Firefox cannot start the host: explained.
    std::fs::create_dir_all(home(&env).join("snap/firefox")).unwrap();
    let (_, report) = doctor(&env);
    assert_reports(&report, "warn", "sandboxed:Firefox (snap)", "firefox-esr");
    std::fs::remove_dir_all(home(&env).join("snap")).unwrap();

    ok(&env, &["uninstall"]);
    assert!(!path.exists());
    assert_eq!(listing_after_undo(&home(&env)), before);
}
