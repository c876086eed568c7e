//! SessionService's periodic pruning pass, over real processes: with a small
//! retention (PEDELEC_ENDED_RETENTION_MS) an ended thread's journal record and
//! managed workspace are removed by the running service's sweep, with no
//! restart and no request naming the thread; an open thread is never pruned.
//! (The start-up pass and the week's default are in exhaustion.rs.)

use pedelec_proto::v1 as pb;
use pedelec_tests::*;

#[tokio::test]
async fn the_running_sweep_removes_an_ended_thread_past_the_retention_and_keeps_an_open_one() {
    let mut env = TestEnv::with_codex_stub();
    env.extra_env
        .insert(pedelec_common::env::ENDED_RETENTION_MS.into(), "200".into());
    let _launcher = env.up().await;
    let mut s = env.session().await;
    let create = || create_session_request(Some("codex"));
    let ended = s
        .create_session(create())
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let open = s
        .create_session(create())
        .await
        .unwrap()
        .into_inner()
        .session_id;
    for id in [&ended, &open] {
        s.open_workspace(thread_request(id)).await.unwrap();
    }
    let record = |id: &str| env.data_dir().join("sessions").join(format!("{id}.json"));
    let managed = |id: &str| env.data_dir().join("workspaces").join(id);
    assert!(managed(&ended).is_dir() && record(&ended).exists());
    s.end(pb::EndRequest::from(thread_request(&ended)))
        .await
        .unwrap();

    // Nothing asks for the ended thread: only the sweep can remove it.
    wait_until("the sweep removes the ended thread's record", || {
        !record(&ended).exists()
    })
    .await;
    wait_until("the sweep removes its managed workspace", || {
        !managed(&ended).exists()
    })
    .await;
    assert_eq!(
        code(s.get(thread_request(&ended)).await),
        "THREAD_NOT_FOUND"
    );
    let listed = s
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    let listed: Vec<&str> = listed.iter().map(|t| t.session_id.as_str()).collect();
    assert_eq!(listed, [open.as_str()]);
    // The open thread outlives many retentions untouched.
    assert!(record(&open).exists() && managed(&open).is_dir());
    let kept = s.get(thread_request(&open)).await.unwrap().into_inner();
    assert_ne!(kept.status, pb::SessionStatus::Ended as i32);
}
