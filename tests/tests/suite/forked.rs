//! Services forked from pedelecd's own executable (the release layout: one
//! file under six names; `pedelec_common::process::fork_server`): each is
//! pedelecd's child, shares its memory layout, gets the service secret, and is
//! supervised as an exec'd one is; without the fork server, or with
//! `PEDELEC_FORK_SERVICES=0`, the services are exec'd from their files.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

/// The release layout from the debug build: `pedelec-multicall` under each
/// program's name (hard links of one file), and `pedelec-cli`.
fn one_executable(env: &TestEnv) -> PathBuf {
    let dir = env.root.path().join("release");
    std::fs::create_dir(&dir).unwrap();
    let listed = std::process::Command::new(bin("pedelec-multicall"))
        .arg("--list")
        .output()
        .unwrap();
    let names = String::from_utf8(listed.stdout).unwrap();
    let mut names = names.lines();
    let first = dir.join(names.next().unwrap());
    std::fs::copy(bin("pedelec-multicall"), &first).unwrap();
    for name in names {
        std::fs::hard_link(&first, dir.join(name)).unwrap();
    }
    std::fs::copy(bin("pedelec-cli"), dir.join("pedelec-cli")).unwrap();
    dir
}

fn up(env: &TestEnv, dir: &Path, fork: bool) -> Launcher {
    let mut cmd = env.command(dir.join("pedelecd"));
    cmd.env("PEDELEC_BIN_DIR", dir)
        .arg("up")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.root.path().join("pedelecd.stderr")).unwrap());
    if !fork {
        cmd.env(pedelec_common::env::FORK_SERVICES, "0");
    }
    set_own_process_group(&mut cmd);
    Launcher::adopt(cmd.spawn().unwrap(), env.runtime_dir())
}

fn parent_of(pid: u32) -> u32 {
    stat_field(pid, 4).unwrap_or(0) as u32
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// Where the executable lies in `pid`'s memory: its first mapping's address
/// range. The same in two processes only when one was forked from the other
/// (each exec places it at a new random address).
fn executable_at(pid: u32) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.split_whitespace().next().unwrap().to_string()
}

/// pedelecd's children besides the services: the fork server.
fn other_children(launcher: u32, status: &pb::SupervisorStatus) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent_of(*pid) == launcher && alive(*pid))
        .filter(|pid| status.services.iter().all(|s| s.pid != *pid))
        .map(|pid| (pid, comm(pid)))
        .collect()
}

/// The service is pedelecd's child, in its own process group, named as its
/// file, with pedelecd's layout (forked) or its own (exec'd).
fn assert_started(launcher: u32, service: &pb::ServiceStatus, forked: bool) {
    let pid = service.pid;
    let name = ServiceName::parse(&service.name).unwrap().binary();
    assert_eq!(parent_of(pid), launcher, "{name}'s parent");
    assert_eq!(pgid_of(pid), pid, "{name} leads its own group");
    assert_eq!(comm(pid), name[..name.len().min(15)], "{name}'s name");
    let layout = executable_at(pid) == executable_at(launcher);
    assert_eq!(layout, forked, "{name} shares pedelecd's layout: {layout}");
    let argv0 = command_line(pid);
    assert_eq!(
        argv0.contains(&format!("/{name} ")),
        !forked,
        "{name}'s command line: {argv0}"
    );
}

/// A service holds the secret: its internal RPCs refuse a caller without it.
async fn assert_holds_secret(env: &TestEnv) {
    let mut bridge = pb::tool_bridge_service_client::ToolBridgeServiceClient::new(
        env.channel(ServiceName::ToolBridge).await,
    );
    let watch = bridge.watch(pb::WatchToolsRequest {}).await.map(|_| ());
    assert_eq!(code(watch), "SERVICE_ACCESS_DENIED");
    // And the hub's requests between the services pass: a grant goes
    // through ProviderService's settings to SessionService.
    env.grant_test_origin().await;
}

#[tokio::test]
async fn services_of_pedelecds_own_executable_are_forked_and_supervised_as_before() {
    let env = TestEnv::new();
    let dir = one_executable(&env);
    let mut launcher = up(&env, &dir, true);
    let pedelecd = launcher.pid();
    let status = env.wait_all_serving().await;
    for service in &status.services {
        assert_started(pedelecd, service, true);
    }
    let forks = other_children(pedelecd, &status);
    assert_eq!(
        forks.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(),
        ["pedelec-forks"]
    );
    let fork_server = forks[0].0;
    assert_holds_secret(&env).await;

    // A crash: the launcher forks it again.
    let session = env.service_status(ServiceName::Session).await;
    signal(session.pid as i32, libc::SIGKILL);
    let back = env
        .wait_service_back(ServiceName::Session, session.pid)
        .await;
    assert_started(pedelecd, &back, true);
    assert_eq!(back.last_exit, "signal 9", "{back:?}");
    // A restart asked for.
    let bridge = env.service_status(ServiceName::ToolBridge).await;
    let out = env.pedelecd(&["restart", "toolbridge"]);
    assert!(out.status.success(), "{out:?}");
    let back = env.service_status(ServiceName::ToolBridge).await;
    assert_ne!(back.pid, bridge.pid);
    assert_started(pedelecd, &back, true);
    assert_holds_secret(&env).await;

    // Without its fork server, pedelecd starts a service from its file.
    signal(fork_server as i32, libc::SIGKILL);
    let asset = env.service_status(ServiceName::Asset).await;
    let out = env.pedelecd(&["restart", "asset"]);
    assert!(out.status.success(), "{out:?}");
    let back = env.service_status(ServiceName::Asset).await;
    assert_ne!(back.pid, asset.pid);
    assert_started(pedelecd, &back, false);
    let stderr = std::fs::read_to_string(env.root.path().join("pedelecd.stderr")).unwrap();
    assert!(
        stderr.contains("the fork server did not start it"),
        "{stderr}"
    );

    // Stopped, nothing of it is left, the fork server reaped.
    assert!(launcher.stop().success());
    wait_until_nothing_runs(&env.runtime_dir()).await;
    assert!(
        !Path::new(&format!("/proc/{fork_server}")).exists(),
        "the fork server is left, or was not reaped by pedelecd"
    );
}

#[tokio::test]
async fn with_forking_turned_off_the_services_are_started_from_their_files() {
    let env = TestEnv::new();
    let dir = one_executable(&env);
    let mut launcher = up(&env, &dir, false);
    let pedelecd = launcher.pid();
    let status = env.wait_all_serving().await;
    for service in &status.services {
        assert_started(pedelecd, service, false);
    }
    assert_eq!(other_children(pedelecd, &status), []);
    assert_holds_secret(&env).await;
    assert!(launcher.stop().success());
}
