//! gRPC clients other than grpcurl on the Unix sockets, as docs/grpc-clients.md
//! tells users to set them up: Python's grpcio (installed by tests/run.sh into
//! `.tools/pip`) with the `grpc.default_authority` override, against a real
//! SessionService: a create, a List and a coded error.

use std::path::PathBuf;
use std::process::Command;

use pedelec_tests::*;

fn tools_pip() -> PathBuf {
    std::env::var_os("PEDELEC_PYTHONPATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/pip"))
}

#[tokio::test]
async fn python_grpcio_lists_sessions_and_reads_a_coded_error() {
    let pip = tools_pip();
    assert!(
        pip.join("grpc").is_dir(),
        "grpcio not found in {}: tests/run.sh installs it (pip install --target .tools/pip grpcio)",
        pip.display()
    );
    let env = TestEnv::new();
    env.stub("codex", r#"echo "codex-cli 0.0.0-stub""#);
    let _launcher = env.up().await;
    // The script's origin, approved as the extension would.
    env.grant_site(
        "https://py.example",
        pedelec_proto::v1::AccessLevel::Full,
        &["codex"],
        &[],
    )
    .await;

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/grpcio_session.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(env.runtime_dir())
        .env("PYTHONPATH", &pip)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // Each check printed its line, so the script ran to the end.
    for line in [
        "created thr_",
        "listed thr_",
        "error NOT_FOUND THREAD_NOT_FOUND: ",
    ] {
        assert!(stdout.contains(line), "{stdout}");
    }
    // The thread Python created is really there.
    let listed = env
        .session()
        .await
        .list(pedelec_proto::v1::ListRequest {
            origin: Some("https://py.example".into()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.sessions.len(), 1);
}
