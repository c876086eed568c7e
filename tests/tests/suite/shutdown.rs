//! Service shutdown and crashes must not leave agents running: `pedelecd stop`
//! during a turn ends promptly without SIGKILLing services, and a
//! ProviderService killed with SIGKILL has its agents ended on restart.

use std::time::Instant;

use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

/// A `cursor-agent` that records its pid (`cursor.pid`) and its child's
/// (`cursor.child`), prints the init line and hangs.
fn hanging_cursor(env: &TestEnv) {
    let root = env.stubs();
    let at = |ext: &str| root.join(format!("cursor.{ext}")).display().to_string();
    env.stub(
        "cursor-agent",
        &format!(
            r#"[ "$1" = "--version" ] && echo "cursor-agent 0.0.0-stub" && exit 0
echo $$ > {pid}
/bin/cat > /dev/null
echo '{{"type":"system","subtype":"init","cwd":"/w","session_id":"5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c","model":"m"}}'
/bin/sleep 60 &
echo $! > {child}
wait"#,
            pid = at("pid"),
            child = at("child"),
        ),
    );
}

/// Starts a cursor turn that hangs; returns the agent's and its child's pids.
async fn start_hanging_turn(env: &TestEnv) -> (u32, u32, Events) {
    let mut sessions = env.session().await;
    let created = sessions
        .create_session(create_session_request(Some("cursor")))
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let events = attach_past_snapshot(&mut sessions, &id, "route-1").await;
    sessions
        .send_text(send_text_request(&id, "hang"))
        .await
        .unwrap();
    // The stub writes the pids it sees (in its own pid namespace when confined).
    let agent = host_pid(
        &env.runtime_dir(),
        read_pid(&env.stubs().join("cursor.pid")).await,
    );
    let child = host_pid(
        &env.runtime_dir(),
        read_pid(&env.stubs().join("cursor.child")).await,
    );
    assert!(alive(agent) && alive(child));
    (agent, child, events)
}

#[tokio::test]
async fn stop_during_a_turn_needs_no_sigkill_and_leaves_nothing() {
    let env = TestEnv::new();
    hanging_cursor(&env);
    let mut launcher = env.up().await;
    env.update_settings(pb::Settings::default()).await;
    let (agent, child, _events) = start_hanging_turn(&env).await;

    let began = Instant::now();
    let out = env.pedelecd(&["stop"]);
    let took = began.elapsed();
    eprintln!("pedelecd stop took {took:?}");
    if std::env::var_os("SHUTDOWN_DEBUG").is_some() {
        eprintln!(
            "{}",
            std::fs::read_to_string(env.root.path().join("pedelecd.stderr")).unwrap()
        );
    }
    assert!(
        out.status.success(),
        "pedelecd stop failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(launcher.stop().success());

    let log = std::fs::read_to_string(env.root.path().join("pedelecd.stderr")).unwrap();
    assert!(
        !log.contains("did not stop within"),
        "a service had to be SIGKILLed:\n{log}"
    );
    assert!(!alive(agent), "the agent survived the stop");
    wait_until("the agent's child to exit", || !alive(child)).await;
    wait_until_nothing_runs(&env.runtime_dir()).await;
}

#[tokio::test]
async fn agents_of_a_killed_provider_are_ended() {
    let env = TestEnv::new();
    hanging_cursor(&env);
    let _launcher = env.up().await;
    env.update_settings(pb::Settings::default()).await;
    let (agent, child, _events) = start_hanging_turn(&env).await;
    let records = env.runtime_dir().join("turns");
    assert!(
        records.join(pgid_of(agent).to_string()).exists(),
        "turn recorded under its process group"
    );

    let provider = env.service_status(ServiceName::Provider).await.pid;
    signal(provider as i32, libc::SIGKILL);
    env.wait_service_back(ServiceName::Provider, provider).await;

    wait_until("the agent to exit", || !alive(agent)).await;
    wait_until("the agent's child to exit", || !alive(child)).await;
    wait_until("the turn record to go", || {
        std::fs::read_dir(&records).map_or(true, |mut d| d.next().is_none())
    })
    .await;
}
