//! `pedelecd start | status | stop` as a user runs them: detached start, a
//! refused second start, the status table, a clean stop, a start over stale
//! sockets left by a killed launcher.

use pedelec_common::ServiceName;
use pedelec_tests::*;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn start_status_stop_and_restart_over_stale_sockets() {
    let env = TestEnv::new();
    // Not running yet.
    let out = env.pedelecd(&["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        stdout(&out).contains("not running")
            || String::from_utf8_lossy(&out.stderr).contains("not running")
    );

    // Detached start returns once everything is healthy.
    let out = env.pedelecd(&["start"]);
    assert!(out.status.success(), "start failed: {out:?}");
    assert!(
        stdout(&out).contains("pedelecd started (pid"),
        "{}",
        stdout(&out)
    );
    for service in ServiceName::SUPERVISED {
        assert!(
            pedelec_common::uds::is_serving(&env.socket(service), service).await,
            "{} not serving",
            service.as_str()
        );
    }

    // A second start is refused with its own exit code (the native host
    // decides by it) and names the running instance.
    let status = env.supervisor_status().await.unwrap();
    let out = env.pedelecd(&["start"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        said.contains("already running") && said.contains(&format!("pid {}", status.launcher_pid)),
        "{said}"
    );

    // The status table has a row per service with pid, socket and state.
    let out = env.pedelecd(&["status"]);
    assert!(out.status.success());
    let table = stdout(&out);
    for header in ["SERVICE", "PID", "SOCKET", "STATE", "RESTARTS", "UPTIME"] {
        assert!(table.contains(header), "{table}");
    }
    let rt = env.runtime_dir().display().to_string();
    assert!(
        table.starts_with(&format!("runtime dir: {rt}\n")),
        "{table}"
    );
    for s in &status.services {
        let row = table
            .lines()
            .find(|l| l.starts_with(&s.name))
            .unwrap_or_else(|| panic!("no row for {}: {table}", s.name));
        assert!(
            row.contains(&s.pid.to_string()) && row.contains("serving") && row.contains(&s.socket),
            "{row}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&env.pedelecd(&["status", "--json"]).stdout).unwrap();
    assert_eq!(json["services"].as_array().unwrap().len(), 4);
    assert_eq!(json["runtime_dir"], rt);

    // Stop: nothing left running, no sockets.
    let out = env.pedelecd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    wait_until_nothing_runs(&env.runtime_dir()).await;
    for service in ServiceName::SUPERVISED
        .into_iter()
        .chain([ServiceName::Launcher])
    {
        assert!(
            !env.socket(service).exists(),
            "{} socket left behind",
            service.as_str()
        );
    }
    let out = env.pedelecd(&["stop"]);
    assert!(out.status.success() && stdout(&out).contains("not running"));

    // A launcher killed with SIGKILL takes its services along (parent-death
    // signal) and leaves stale sockets; the next start replaces them.
    let mut launcher = env.up().await;
    signal(launcher.pid() as i32, libc::SIGKILL);
    let _ = launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
    assert!(
        env.socket(ServiceName::Launcher).exists(),
        "expected a stale launcher socket"
    );
    let out = env.pedelecd(&["start"]);
    assert!(
        out.status.success(),
        "start over stale sockets failed: {out:?}"
    );
    env.wait_all_serving().await;
    let out = env.pedelecd(&["stop"]);
    assert!(out.status.success());
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

/// A private bin dir for the launcher: links to the built binaries, except
/// `service`'s, which is the shell `script` (the real binary is beside it as
/// `<binary>.real`; `$DIR` in the script is the bin dir). Points
/// PEDELEC_BIN_DIR at it.
fn wrap_service(env: &mut TestEnv, service: ServiceName, script: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = env.root.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let link = |from: &std::path::Path, to: &std::path::Path| {
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).unwrap();
        }
    };
    for s in ServiceName::SUPERVISED {
        let real = bin(s.binary());
        if s == service {
            link(&real, &dir.join(format!("{}.real", s.binary())));
        } else {
            link(&real, &dir.join(s.binary()));
        }
    }
    let wrapper = dir.join(service.binary());
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nDIR='{}'\n{script}\n", dir.display()),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.extra_env
        .insert("PEDELEC_BIN_DIR".into(), dir.display().to_string());
    dir
}

/// `pedelecd up` that is not expected to get every service serving; SIGTERM
/// (then SIGKILL of its group) on drop.
struct Up(std::process::Child);

impl Up {
    fn start(env: &TestEnv) -> Up {
        let mut cmd = env.command(bin("pedelecd"));
        cmd.arg("up")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(env.root.path().join("pedelecd.stderr")).unwrap());
        set_own_process_group(&mut cmd);
        Up(cmd.spawn().expect("spawn pedelecd up"))
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        signal(self.0.id() as i32, libc::SIGTERM);
        let deadline = std::time::Instant::now() + PATIENCE;
        while self.0.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                signal(-(self.0.id() as i32), libc::SIGKILL);
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn state(s: &pedelec_proto::v1::ServiceStatus) -> pedelec_proto::v1::ServiceState {
    pedelec_proto::v1::ServiceState::try_from(s.state).unwrap()
}

/// A service that fails for about a second (a port or lock not free yet) is
/// restarted with backoff until it serves; it is not given up on after a few
/// quick crashes.
#[tokio::test]
async fn a_service_that_fails_briefly_ends_up_serving() {
    let mut env = TestEnv::new();
    wrap_service(
        &mut env,
        ServiceName::Asset,
        r#"m="$DIR/flaky-since"
[ -f "$m" ] || date +%s%N > "$m"
age=$(( ($(date +%s%N) - $(cat "$m")) / 1000000 ))
if [ "$age" -lt 1000 ]; then echo "failing on purpose, ${age}ms after the first start" >&2; exit 1; fi
exec "$DIR/pedelec-asset.real" "$@""#,
    );
    let mut launcher = env.up().await;
    let asset = env.service_status(ServiceName::Asset).await;
    assert_eq!(state(&asset), pedelec_proto::v1::ServiceState::Serving);
    // More than 5 crashes within a minute, and still restarted.
    assert!(asset.restarts >= 5, "{asset:?}");
    assert!(
        asset.last_exit.contains("exit 1") && asset.last_exit.contains("in a row"),
        "{asset:?}"
    );
    assert!(
        pedelec_common::uds::is_serving(&env.socket(ServiceName::Asset), ServiceName::Asset).await
    );
    // The table shows it serving.
    let table = stdout(&env.pedelecd(&["status"]));
    let row = table.lines().find(|l| l.starts_with("asset")).unwrap();
    assert!(row.contains("serving"), "{row}");
    launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

/// A service that never starts is restarted with growing delays, reported
/// meanwhile (state and crash count), and marked `failed` after crashing
/// with the delay at its 5 s cap (about 25 s); then it is left alone.
#[tokio::test]
async fn a_service_that_always_crashes_ends_failed() {
    use pedelec_proto::v1::ServiceState;
    let mut env = TestEnv::new();
    wrap_service(
        &mut env,
        ServiceName::Asset,
        r#"echo "always failing" >&2; exit 1"#,
    );
    let up = Up::start(&env);
    let started = std::time::Instant::now();
    let mut saw_backoff_with_count = false;
    let failed = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "asset never marked failed"
        );
        if let Ok(status) = env.supervisor_status().await {
            let asset = status
                .services
                .iter()
                .find(|s| s.name == "asset")
                .unwrap()
                .clone();
            match state(&asset) {
                ServiceState::Failed => break asset,
                ServiceState::Backoff | ServiceState::Starting
                    if asset.last_exit.contains("in a row") =>
                {
                    saw_backoff_with_count = true;
                }
                ServiceState::Serving => panic!("a crashing service serving: {asset:?}"),
                _ => {}
            }
            // The others are unaffected.
            for s in status.services.iter().filter(|s| s.name != "asset") {
                assert_ne!(state(s), ServiceState::Failed, "{s:?}");
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let took = started.elapsed();
    assert!(saw_backoff_with_count, "the crash count was never reported");
    assert!(
        took >= std::time::Duration::from_secs(20),
        "gave up after only {took:?}"
    );
    assert!(failed.restarts >= 10, "{failed:?}");
    assert!(
        failed.last_exit.contains("exit 1") && failed.last_exit.contains("gave up"),
        "{failed:?}"
    );
    assert_eq!(failed.pid, 0);
    // Not restarted any more.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let later = env.service_status(ServiceName::Asset).await;
    assert_eq!(state(&later), ServiceState::Failed);
    assert_eq!(later.restarts, failed.restarts);
    let table = stdout(&env.pedelecd(&["status"]));
    let row = table.lines().find(|l| l.starts_with("asset")).unwrap();
    assert!(row.contains("failed"), "{row}");
    drop(up);
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

/// SIGCONT on drop, so a failing test leaves no stopped process behind.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0 as i32, libc::SIGCONT);
    }
}

/// A service that is alive but stuck (SIGSTOP) fails its periodic health
/// checks, is reported as not serving, and is replaced by a new process.
#[tokio::test]
async fn a_stuck_service_is_reported_and_restarted() {
    use pedelec_proto::v1::ServiceState;
    let env = TestEnv::new();
    let mut launcher = env.up().await;
    let before = env.service_status(ServiceName::Asset).await;
    signal(before.pid as i32, libc::SIGSTOP);
    let _cont = Continue(before.pid);
    // Reported as not serving once three checks (2 s apart, 1 s each) failed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = env.service_status(ServiceName::Asset).await;
        if state(&now) != ServiceState::Serving {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a stopped service still shows serving: {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Then stopped (SIGTERM, SIGKILL after the grace) and started again.
    let after = env.wait_service_back(ServiceName::Asset, before.pid).await;
    assert!(after.restarts > before.restarts, "{after:?}");
    assert!(after.last_exit.contains("unresponsive"), "{after:?}");
    assert!(!alive(before.pid), "the stuck process is still there");
    assert!(
        pedelec_common::uds::is_serving(&env.socket(ServiceName::Asset), ServiceName::Asset).await
    );
    // The others never noticed.
    let status = env.wait_all_serving().await;
    for s in status.services.iter().filter(|s| s.name != "asset") {
        assert_eq!(s.restarts, 0, "{s:?}");
    }
    launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

/// SessionService opens its watches of ToolBridge's tools and Provider's
/// settings as it starts, beside them: its first try waits for their sockets,
/// so with ToolBridge slow to start no try fails (a failed one runs error
/// handling that stays mapped at idle) and both watches open.
#[tokio::test]
async fn session_watches_wait_for_a_slow_toolbridge_instead_of_failing() {
    let mut env = TestEnv::new();
    env.extra_env
        .insert("PEDELEC_LOG".into(), "info,pedelec_session=debug".into());
    wrap_service(
        &mut env,
        ServiceName::ToolBridge,
        r#"sleep 0.3; exec "$DIR/pedelec-toolbridge.real" "$@""#,
    );
    let mut launcher = env.up().await;
    let log = std::fs::read_to_string(env.runtime_dir().join("logs/session.log")).unwrap();
    for watch in ["tool watch", "settings watch"] {
        assert!(
            log.contains(&format!("{watch} open")),
            "{watch} never opened:\n{log}"
        );
    }
    assert!(
        !log.contains("not available yet"),
        "a watch tried before its service listened:\n{log}"
    );
    launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

/// A ToolBridge that never comes up does not keep SessionService down: it
/// serves while ToolBridge is still starting (its tool watch waits apart).
#[tokio::test]
async fn session_service_serves_while_toolbridge_never_comes_up() {
    let mut env = TestEnv::new();
    wrap_service(&mut env, ServiceName::ToolBridge, "exec sleep 3600");
    let _up = Up::start(&env);
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Ok(status) = env.supervisor_status().await
            && status.services.iter().any(|s| {
                s.name == ServiceName::Session.as_str()
                    && state(s) == pedelec_proto::v1::ServiceState::Serving
            })
        {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SessionService never served"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let toolbridge = status
        .services
        .iter()
        .find(|s| s.name == ServiceName::ToolBridge.as_str())
        .unwrap();
    assert_eq!(
        state(toolbridge),
        pedelec_proto::v1::ServiceState::Starting,
        "{status:?}"
    );
}
