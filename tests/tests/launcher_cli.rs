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

    // A second start is refused and names the running instance.
    let status = env.supervisor_status().await.unwrap();
    let out = env.pedelecd(&["start"]);
    assert_eq!(out.status.code(), Some(1));
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
