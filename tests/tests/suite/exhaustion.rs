//! SessionService's bounds on what pages can start, over real processes:
//! running turns per web origin and overall, and the rates of creates and
//! turn starts per web origin (small knobs). Past a bound the request is
//! LIMIT_EXCEEDED and nothing changed; when a turn ends another may start.
//! Then what a page learns of the folders it names (nothing of the disk),
//! and ended threads removed a week after their end.

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

/// A cursor-agent whose turns fail at once: the CLI exits with an error.
fn failing_cursor() -> &'static str {
    "[ \"$1\" = \"--version\" ] && echo \"cursor-agent 0.0.0-stub\" && exit 0\necho crashed >&2\nexit 3"
}

async fn up_with(knobs: &[(&str, &str)]) -> (TestEnv, Launcher, Sessions) {
    up_with_agent(knobs, hanging_cursor()).await
}

async fn up_with_agent(knobs: &[(&str, &str)], agent: &str) -> (TestEnv, Launcher, Sessions) {
    let mut env = TestEnv::new();
    for (k, v) in knobs {
        env.extra_env.insert((*k).into(), (*v).into());
    }
    env.stub("cursor-agent", agent);
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

#[tokio::test]
async fn a_failed_turn_gives_its_place_back() {
    let (_env, _launcher, mut s) =
        up_with_agent(&[("PEDELEC_MAX_RUNNING_TURNS", "1")], failing_cursor()).await;
    let first = create(&mut s, ORIGIN).await.unwrap();
    let second = create(&mut s, ORIGIN).await.unwrap();
    for id in [&first, &second, &first] {
        let mut events = attach_past_snapshot(&mut s, id, "route-1").await;
        send(&mut s, id, ORIGIN).await.unwrap();
        let seen = events.until(is_finished).await;
        assert_eq!(
            kinds(&seen).last().map(String::as_str),
            Some("operation_finished:failed")
        );
        // Its place is free once the operation has finished: the next
        // send (one place in all) starts.
    }
}

// ---- What a page learns of the folders it names, and how long ended
// threads are kept (docs/security.md, "What a page learns of a folder";
// docs/decisions.md, "Ended threads are kept a week").

/// A create of `origin` in the folder `dir`, which must be refused; its error.
async fn refused_in(sessions: &mut Sessions, origin: &str, dir: &std::path::Path) -> CodedError {
    let mut req = create_session_request(Some("codex"));
    req.origin = origin.into();
    req.workspace_path = Some(dir.display().to_string());
    let status = sessions
        .create_session(req)
        .await
        .expect_err(&format!("a create in {} was accepted", dir.display()));
    CodedError::from_status(&status, Code::INTERNAL)
}

/// The message with the folder the page gave (and the origin, whose scheme
/// has slashes) taken out: no path may be left.
fn without(message: &str, dir: &std::path::Path, origin: &str) -> String {
    let rest = message
        .replace(origin, "<origin>")
        .replace(&dir.display().to_string(), "<folder>");
    assert!(
        !rest.contains('/'),
        "a path besides the given one: {message}"
    );
    rest
}

async fn thread_count(sessions: &mut Sessions) -> usize {
    sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .len()
}

#[tokio::test]
async fn a_page_learns_nothing_of_the_disk_from_the_folders_it_names() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::PathBuf;
    let env = TestEnv::with_codex_stub();
    let _launcher = env.up().await;
    let mut s = env.session().await;
    let root = env.root.path();
    let file = root.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let locked = root.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let before = thread_count(&mut s).await;

    // Not in the grant: FOLDER_NOT_GRANTED, decided before the disk is looked
    // at, so it is the same for every kind of folder.
    let everywhere = [
        PathBuf::from("/"),
        root.join("missing"),
        file.clone(),
        locked.clone(),
        locked.join("inner"),
        env.data_dir().join("sessions"),
        env.data_dir().join("workspaces"),
        env.runtime_dir(),
        env.home(),
    ];
    let mut said = std::collections::BTreeSet::new();
    for dir in &everywhere {
        let e = refused_in(&mut s, ORIGIN, dir).await;
        assert_eq!(
            e.code,
            Code::FOLDER_NOT_GRANTED,
            "{}: {}",
            dir.display(),
            e.message
        );
        said.insert(without(&e.message, dir, ORIGIN));
    }
    assert_eq!(said.len(), 1, "the messages differ: {said:?}");

    // In the grant when it was given, then changed on the disk: one code,
    // one message, whatever the folder became.
    let granted = root.join("granted");
    let names = [
        "gone",
        "a-file",
        "to-root",
        "to-data",
        "to-runtime",
        "to-home",
        "locked",
    ];
    let folders: Vec<PathBuf> = names.iter().map(|n| granted.join(n)).collect();
    for f in &folders {
        std::fs::create_dir_all(f).unwrap();
    }
    let refs: Vec<&std::path::Path> = folders.iter().map(PathBuf::as_path).collect();
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &refs)
        .await;
    for f in &folders[..6] {
        std::fs::remove_dir(f).unwrap();
    }
    std::fs::write(&folders[1], "x").unwrap();
    symlink("/", &folders[2]).unwrap();
    symlink(env.data_dir().join("sessions"), &folders[3]).unwrap();
    symlink(env.runtime_dir(), &folders[4]).unwrap();
    symlink(env.home(), &folders[5]).unwrap();
    std::fs::set_permissions(&folders[6], std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads a folder of mode 000: there it is a usable workspace.
    let unusable = if pedelec_common::process::uid() == 0 {
        6
    } else {
        7
    };
    let mut said = std::collections::BTreeSet::new();
    for dir in &folders[..unusable] {
        let e = refused_in(&mut s, ORIGIN, dir).await;
        assert_eq!(
            e.code,
            Code::WORKSPACE_OPEN_FAILED,
            "{}: {}",
            dir.display(),
            e.message
        );
        said.insert(without(&e.message, dir, ORIGIN));
    }
    assert_eq!(said.len(), 1, "the messages differ: {said:?}");
    assert_eq!(
        thread_count(&mut s).await,
        before,
        "a refused create kept a thread"
    );

    // Another origin's workspace: WORKSPACE_IN_USE, without its thread's id.
    let shared = root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    env.grant_site(OTHER, pb::AccessLevel::Full, &["codex"], &[&shared])
        .await;
    let mut theirs = create_session_request(Some("codex"));
    theirs.origin = OTHER.into();
    theirs.workspace_path = Some(shared.display().to_string());
    let theirs = s
        .create_session(theirs)
        .await
        .unwrap()
        .into_inner()
        .session_id;
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&shared])
        .await;
    let e = refused_in(&mut s, ORIGIN, &shared).await;
    assert_eq!(e.code, Code::WORKSPACE_IN_USE);
    assert!(!e.message.contains(&theirs), "{}", e.message);
    without(&e.message, &shared, ORIGIN);

    // A local caller hears why, in words that name no Pedelec folder.
    for dir in [
        PathBuf::from("/"),
        env.data_dir().join("sessions"),
        env.home(),
    ] {
        let e = refused_in(&mut s, LOCAL, &dir).await;
        assert_eq!(e.code, Code::FOLDER_NOT_GRANTABLE, "{}", e.message);
        without(&e.message, &dir, LOCAL);
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&folders[6], std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[tokio::test]
async fn an_ended_thread_is_removed_a_week_after_its_end_and_a_recent_one_kept() {
    use std::path::PathBuf;
    let env = TestEnv::with_codex_stub();
    let _launcher = env.up().await;
    let mut s = env.session().await;
    let folder = env.root.path().join("app");
    std::fs::create_dir(&folder).unwrap();
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&folder])
        .await;
    env.grant_site(OTHER, pb::AccessLevel::Full, &["codex"], &[&folder])
        .await;
    let new_thread = |workspace: Option<&PathBuf>| {
        let mut req = create_session_request(Some("codex"));
        req.workspace_path = workspace.map(|w| w.display().to_string());
        req
    };
    // Old ones: managed (its folder made) and in the application's folder.
    let mut ids = Vec::new();
    for workspace in [None, Some(&folder), None] {
        let id = s
            .create_session(new_thread(workspace))
            .await
            .unwrap()
            .into_inner()
            .session_id;
        s.open_workspace(thread_request(&id)).await.unwrap();
        s.end(pb::EndRequest::from(thread_request(&id)))
            .await
            .unwrap();
        ids.push(id);
    }
    let (old_managed, old_explicit, recent) = (&ids[0], &ids[1], &ids[2]);
    let record = |id: &str| env.data_dir().join("sessions").join(format!("{id}.json"));
    let managed_folder = env.data_dir().join("workspaces").join(old_managed);
    assert!(managed_folder.is_dir());
    // The application's folder is still another origin's to share: ended
    // threads count until they are gone.
    let mut theirs = new_thread(Some(&folder));
    theirs.origin = OTHER.into();
    assert_eq!(
        code(s.create_session(theirs.clone()).await),
        "WORKSPACE_IN_USE"
    );

    // The two old ones ended eight days ago, as their records say.
    let eight_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 8 * 24 * 60 * 60 * 1000;
    for id in [old_managed, old_explicit] {
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(record(id)).unwrap()).unwrap();
        assert!(json["ended_at_ms"].is_u64(), "{json}");
        json["ended_at_ms"] = eight_days_ago.into();
        std::fs::write(record(id), serde_json::to_vec(&json).unwrap()).unwrap();
    }
    let old = env
        .service_status(pedelec_common::ServiceName::Session)
        .await;
    signal(old.pid as i32, libc::SIGKILL);
    env.wait_service_back(pedelec_common::ServiceName::Session, old.pid)
        .await;
    let mut s = env.session().await;

    for id in [old_managed, old_explicit] {
        assert_eq!(code(s.get(thread_request(id)).await), "THREAD_NOT_FOUND");
        assert!(!record(id).exists(), "{id}'s record is kept");
    }
    assert!(!managed_folder.exists(), "the managed workspace is kept");
    assert!(folder.is_dir(), "the application's folder was removed");
    let listed = s
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    let listed: Vec<&str> = listed.iter().map(|t| t.session_id.as_str()).collect();
    assert_eq!(listed, [recent.as_str()]);
    // The recent one is all there: Get, and Reactivate.
    let kept = s.get(thread_request(recent)).await.unwrap().into_inner();
    assert_eq!(kept.status, pb::SessionStatus::Ended as i32);
    s.reactivate(thread_request(recent)).await.unwrap();
    // The index let the folder go with its last thread.
    s.create_session(theirs).await.unwrap();
}
