//! SessionService's bounds on what pages can start, over real processes:
//! running turns per web origin and overall, and the rates of creates and
//! turn starts per web origin (small knobs). Past a bound the request is
//! LIMIT_EXCEEDED and nothing changed; when a turn ends another may start.

use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

const OTHER: &str = "https://other.example";
/// A local caller: no grant, no per-origin cap, no rate.
const LOCAL: &str = "cli";

/// A cursor-agent whose turns run until they are cancelled or ended.
fn hanging_cursor() -> &'static str {
    "[ \"$1\" = \"--version\" ] && echo \"cursor-agent 0.0.0-stub\" && exit 0\nexec /bin/sleep 60"
}

async fn up_with(knobs: &[(&str, &str)]) -> (TestEnv, Launcher, Sessions) {
    let mut env = TestEnv::new();
    for (k, v) in knobs {
        env.extra_env.insert((*k).into(), (*v).into());
    }
    env.stub("cursor-agent", hanging_cursor());
    let launcher = env.up().await;
    env.grant_site(OTHER, pb::AccessLevel::Full, &["cursor"], &[])
        .await;
    let sessions = env.session().await;
    (env, launcher, sessions)
}

async fn create(sessions: &mut Sessions, origin: &str) -> Result<String, tonic::Status> {
    let mut req = create_session_request(Some("cursor"));
    req.origin = origin.into();
    sessions
        .create_session(req)
        .await
        .map(|r| r.into_inner().session_id)
}

async fn send(sessions: &mut Sessions, id: &str, origin: &str) -> Result<String, tonic::Status> {
    let mut req = send_text_request(id, "work");
    req.origin = origin.into();
    sessions
        .send_text(req)
        .await
        .map(|r| r.into_inner().operation_id)
}

async fn snapshot_from(sessions: &mut Sessions, id: &str, origin: &str) -> pb::Snapshot {
    sessions
        .get(thread_request_from(id, origin))
        .await
        .expect("Get")
        .into_inner()
}

/// Refused with LIMIT_EXCEEDED, the message naming the bound; returns the error.
fn limit_exceeded<T: std::fmt::Debug>(result: Result<T, tonic::Status>, says: &str) -> CodedError {
    let status = result.expect_err("expected LIMIT_EXCEEDED");
    let error = CodedError::from_status(&status, Code::INTERNAL);
    assert_eq!(error.code, Code::LIMIT_EXCEEDED, "{status:?}");
    assert!(error.message.contains(says), "{}", error.message);
    error
}

/// The thread is idle with no operation: the refused send started nothing.
async fn unchanged(sessions: &mut Sessions, id: &str, origin: &str) {
    let s = snapshot_from(sessions, id, origin).await;
    assert_eq!(s.status, pb::SessionStatus::Idle as i32);
    assert!(s.active_operation.is_none(), "{s:?}");
    assert!(s.last_operation.is_none(), "{s:?}");
}

#[tokio::test]
async fn running_turns_are_capped_per_origin_and_overall() {
    let (_env, _launcher, mut s) = up_with(&[
        ("PEDELEC_MAX_RUNNING_TURNS_PER_ORIGIN", "2"),
        ("PEDELEC_MAX_RUNNING_TURNS", "3"),
    ])
    .await;
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(create(&mut s, ORIGIN).await.unwrap());
    }
    let b = create(&mut s, OTHER).await.unwrap();
    let local = create(&mut s, LOCAL).await.unwrap();

    send(&mut s, &a[0], ORIGIN).await.unwrap();
    send(&mut s, &a[1], ORIGIN).await.unwrap();
    limit_exceeded(
        send(&mut s, &a[2], ORIGIN).await,
        "the most one site may run at once",
    );
    unchanged(&mut s, &a[2], ORIGIN).await;

    // Another origin has its own count; three run now, the overall cap,
    // which holds for a local caller too.
    send(&mut s, &b, OTHER).await.unwrap();
    limit_exceeded(send(&mut s, &local, LOCAL).await, "for all sites together");
    unchanged(&mut s, &local, LOCAL).await;

    // A cancelled turn gives its place back to its origin...
    s.cancel(thread_request(&a[0])).await.unwrap();
    send(&mut s, &a[2], ORIGIN).await.unwrap();
    // ...and an ended thread's turn its place overall.
    s.end(pb::EndRequest::from(thread_request_from(&b, OTHER)))
        .await
        .unwrap();
    send(&mut s, &local, LOCAL).await.unwrap();
    let running = snapshot_from(&mut s, &local, LOCAL).await;
    assert_eq!(running.status, pb::SessionStatus::Running as i32);
}

#[tokio::test]
async fn creates_and_turn_starts_are_rate_limited_per_web_origin() {
    let (_env, _launcher, mut s) = up_with(&[
        ("PEDELEC_CREATE_RATE_LIMIT", "3"),
        ("PEDELEC_TURN_RATE_LIMIT", "2"),
    ])
    .await;
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(create(&mut s, ORIGIN).await.unwrap());
    }
    let refused = limit_exceeded(create(&mut s, ORIGIN).await, "creates sessions faster");
    // 3 per minute: a token every 20 s at most.
    let retry = refused.details.expect("details")["retryAfterMs"]
        .as_u64()
        .expect("retryAfterMs");
    assert!((1..=20_000).contains(&retry), "{retry}");
    // Other origins have buckets of their own; local callers none at all.
    create(&mut s, OTHER).await.unwrap();
    for _ in 0..5 {
        create(&mut s, LOCAL).await.unwrap();
    }

    send(&mut s, &a[0], ORIGIN).await.unwrap();
    send(&mut s, &a[1], ORIGIN).await.unwrap();
    let refused = limit_exceeded(send(&mut s, &a[2], ORIGIN).await, "starts turns faster");
    assert!(
        refused.details.expect("details")["retryAfterMs"]
            .as_u64()
            .unwrap()
            <= 30_000
    );
    unchanged(&mut s, &a[2], ORIGIN).await;
}
