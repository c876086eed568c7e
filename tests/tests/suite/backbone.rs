//! The backbone over real processes: `pedelecd up` with its four services on a
//! temp runtime dir, every SessionService and ProviderService RPC over the
//! sockets, crash recovery, and a clean stop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

fn env_with_codex() -> TestEnv {
    let env = TestEnv::with_codex_stub();
    // Installed but broken: --version fails.
    env.stub("claude", "echo 'broken install' >&2; exit 3");
    env
}

fn settings(default: Option<&str>) -> pb::Settings {
    pb::Settings {
        default_provider: default.map(Into::into),
        ..Default::default()
    }
}

/// Creates a codex thread at ORIGIN; returns its id.
async fn new_codex_thread(sessions: &mut Sessions) -> String {
    sessions
        .create_session(create_session_request(Some("codex")))
        .await
        .unwrap()
        .into_inner()
        .session_id
}

/// Every thread's (status, last seq), by id.
async fn statuses_and_seqs(sessions: &mut Sessions) -> HashMap<String, (i32, u64)> {
    sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| (s.session_id, (s.status, s.last_seq)))
        .collect()
}

#[tokio::test]
async fn provider_service_lists_resolves_and_keeps_settings() {
    let mut env = env_with_codex();
    // ResolveProfile is internal (docs/security.md): called as SessionService
    // calls it, with the service secret.
    env.capture_service_secret();
    let _launcher = env.up().await;
    let mut provider = env.service_clients().await.provider();

    let list = provider
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .providers;
    let by_code: HashMap<_, _> = list.iter().map(|p| (p.code.as_str(), p)).collect();
    let mut codes: Vec<_> = by_code.keys().copied().collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            "antigravity",
            "claude",
            "codex",
            "cursor",
            "ollama",
            "opencode"
        ]
    );
    assert!(by_code["codex"].available, "{:?}", by_code["codex"]);
    assert!(!by_code["claude"].available);
    // How the check failed, not what the CLI printed (that goes to the log).
    assert_eq!(
        by_code["claude"].error.as_deref(),
        Some("`claude --version` exited with code 3; see the Pedelec log")
    );
    assert!(!by_code["cursor"].available);
    assert!(list.iter().all(|p| !p.is_default));

    // No default yet.
    let public = provider
        .get_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(public.default_provider, None);
    let resolve = |provider: Option<&str>, level: Option<&str>| pb::ResolveProfileRequest {
        provider: provider.map(Into::into),
        effort_level: level.map(Into::into),
    };
    let update = |settings: pb::Settings| pb::UpdateSettingsRequest {
        settings: Some(settings),
        update_mask: None,
    };
    assert_eq!(
        code(provider.resolve_profile(resolve(None, None)).await),
        "DEFAULT_PROVIDER_NOT_SET"
    );

    // A default that is not installed is still the default, but cannot be used.
    provider
        .update_settings(update(settings(Some("cursor"))))
        .await
        .unwrap();
    let list = provider
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .providers;
    let cursor = list.iter().find(|p| p.code == "cursor").unwrap();
    assert!(cursor.is_default && !cursor.available);
    assert_eq!(
        code(provider.resolve_profile(resolve(None, None)).await),
        "DEFAULT_PROVIDER_UNAVAILABLE"
    );

    // Profiles: codex high has a model; ollama default has none.
    let mut full = settings(Some("codex"));
    full.profiles.insert(
        "codex".into(),
        pb::ProviderProfiles {
            levels: [(
                "high".to_string(),
                pb::EffortProfile {
                    model: "gpt-5.5".into(),
                    effort: String::new(),
                },
            )]
            .into(),
        },
    );
    full.ollama_endpoint = "http://127.0.0.1:11434".into();
    full.tavily_api_key = "tvly-secret".into();
    provider
        .update_settings(update(full.clone()))
        .await
        .unwrap();

    let public = provider
        .get_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(public.default_provider.as_deref(), Some("codex"));
    let stored = provider
        .get_full_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.tavily_api_key, "tvly-secret");
    assert_eq!(stored.profiles["codex"].levels["high"].model, "gpt-5.5");
    // Written to settings.json, private.
    let file = env.data_dir().join("settings.json");
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(on_disk.to_string().contains("gpt-5.5"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let high = provider
        .resolve_profile(resolve(None, Some("high")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            high.provider.as_str(),
            high.effort_level.as_str(),
            high.model.as_str(),
            high.effort.as_str()
        ),
        ("codex", "high", "gpt-5.5", "high")
    );
    let default = provider
        .resolve_profile(resolve(Some("claude"), None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (default.provider.as_str(), default.effort_level.as_str()),
        ("claude", "default")
    );
    assert_eq!(
        code(
            provider
                .resolve_profile(resolve(Some("ollama"), None))
                .await
        ),
        "MODEL_REQUIRED"
    );
    assert_eq!(
        code(
            provider
                .resolve_profile(resolve(Some("gemini"), None))
                .await
        ),
        "PROVIDER_NOT_FOUND"
    );
    assert_eq!(
        code(
            provider
                .resolve_profile(resolve(Some("codex"), Some("turbo")))
                .await
        ),
        "INVALID_INPUT"
    );

    // Invalid settings are refused and change nothing.
    let bad = settings(Some("gemini"));
    assert_eq!(
        code(provider.update_settings(update(bad)).await),
        "INVALID_INPUT"
    );
    let mut bad = settings(Some("codex"));
    bad.ollama_endpoint = "ftp://nope".into();
    assert_eq!(
        code(provider.update_settings(update(bad)).await),
        "INVALID_INPUT"
    );
    let stored_after = provider
        .get_full_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored_after, stored);
}

/// Once UpdateSettings has returned, the next create that names the provider
/// has the change (SessionService acknowledges each value WatchSettings sends
/// it once it resolves from it, and UpdateSettings waits for that): many times
/// over, alternating two models.
#[tokio::test]
async fn the_next_create_sees_what_update_settings_returned_from() {
    let mut env = env_with_codex();
    // 200 creates in a row: more than one origin may make a minute.
    env.lift_session_limits();
    let _launcher = env.up().await;
    let mut provider = env.provider().await;
    let mut sessions = env.session().await;
    let mut stale = Vec::new();
    for i in 0..200 {
        let model = if i % 2 == 0 { "gpt-a" } else { "gpt-b" };
        provider
            .update_settings(pb::UpdateSettingsRequest {
                settings: Some(settings_with_default_models(&[("codex", model)])),
                update_mask: Some(pedelec_proto::prost_types::FieldMask {
                    paths: vec!["profiles.codex.default".into()],
                }),
            })
            .await
            .unwrap();
        let created = sessions
            .create_session(create_session_request(Some("codex")))
            .await
            .unwrap()
            .into_inner();
        let seen = created.snapshot.unwrap().model;
        if seen != model {
            stale.push((i, seen));
        }
    }
    assert!(
        stale.is_empty(),
        "{} of 200 creates had the settings before, the first: {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
}

#[tokio::test]
async fn session_lifecycle_errors_and_replay() {
    let env = env_with_codex();
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    // Approved sites, so the refusals below are about the thread, not the
    // site (an unapproved one gets SITE_NOT_APPROVED: sites::).
    for other in ["https://evil.example", "https://other.example"] {
        env.grant_site(other, pb::AccessLevel::Full, &["codex"], &[])
            .await;
    }

    // The default provider is resolved through ProviderService.
    assert_eq!(
        code(sessions.create_session(create_session_request(None)).await),
        "DEFAULT_PROVIDER_NOT_SET"
    );
    env.update_settings(settings(Some("codex"))).await;
    let created = sessions
        .create_session(create_session_request(None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.provider, "codex");
    assert_eq!(created.effort_level, "default");
    let id = created.session_id.clone();
    let snapshot = created.snapshot.unwrap();
    assert_eq!(snapshot.status, pb::SessionStatus::Idle as i32);
    // A managed workspace under the data dir, made on first use (here
    // OpenWorkspace, as AssetService opens it; else the first operation).
    let folder = std::path::Path::new(&snapshot.workspace_path);
    assert!(folder.starts_with(env.data_dir().join("workspaces")));
    assert!(!folder.exists());
    let opened = sessions
        .open_workspace(thread_request(&id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(opened.workspace_path, snapshot.workspace_path);
    assert!(folder.is_dir());

    // Bad input and ownership.
    let mut no_origin = create_session_request(Some("codex"));
    no_origin.origin.clear();
    assert_eq!(
        code(sessions.create_session(no_origin).await),
        "INVALID_INPUT"
    );
    assert_eq!(
        code(
            sessions
                .create_session(create_session_request(Some("gemini")))
                .await
        ),
        "PROVIDER_NOT_FOUND"
    );
    assert_eq!(
        code(sessions.get(thread_request("")).await),
        "INVALID_INPUT"
    );
    assert_eq!(
        code(sessions.get(thread_request("thr_nope")).await),
        "THREAD_NOT_FOUND"
    );
    assert_eq!(
        code(
            sessions
                .get(thread_request_from(&id, "https://evil.example"))
                .await
        ),
        "THREAD_ACCESS_DENIED"
    );
    assert_eq!(
        code(
            sessions
                .end(pedelec_proto::v1::EndRequest::from(thread_request_from(
                    &id,
                    "https://evil.example"
                )))
                .await
        ),
        "THREAD_ACCESS_DENIED"
    );
    assert_eq!(
        code(sessions.reactivate(thread_request("thr_nope")).await),
        "THREAD_NOT_FOUND"
    );
    let attach_other = sessions
        .attach(pb::AttachRequest {
            origin: "https://evil.example".into(),
            ..attach_request(&id, "r", None)
        })
        .await;
    assert_eq!(code(attach_other), "THREAD_ACCESS_DENIED");

    // Explicit workspaces.
    let mut relative = create_session_request(Some("codex"));
    relative.workspace_path = Some("relative/dir".into());
    assert_eq!(
        code(sessions.create_session(relative).await),
        "INVALID_INPUT"
    );
    // A web origin: folders outside its grant are refused before the disk
    // is looked at (exhaustion.rs has every kind of folder).
    let mut missing = create_session_request(Some("codex"));
    missing.workspace_path = Some(env.root.path().join("missing").display().to_string());
    assert_eq!(
        code(sessions.create_session(missing).await),
        "FOLDER_NOT_GRANTED"
    );
    let mut inside_managed = create_session_request(Some("codex"));
    inside_managed.workspace_path = Some(snapshot.workspace_path.clone());
    assert_eq!(
        code(sessions.create_session(inside_managed).await),
        "FOLDER_NOT_GRANTED"
    );
    let app_dir = env.root.path().join("app-workspace");
    std::fs::create_dir(&app_dir).unwrap();
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&app_dir])
        .await;
    let mut explicit = create_session_request(Some("codex"));
    explicit.workspace_path = Some(app_dir.display().to_string());
    let explicit = sessions
        .create_session(explicit)
        .await
        .unwrap()
        .into_inner();

    // List, filtered by origin.
    let all = sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(all.len(), 2);
    let theirs = sessions
        .list(pb::ListRequest {
            origin: Some("https://other.example".into()),
        })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(theirs.is_empty());

    // Attach: snapshot first, then live events.
    let mut events = attach(&mut sessions, &id, "route-1", None).await;
    let first = events.next().await;
    assert!(matches!(first.event, Some(Event::Snapshot(_))));
    assert_eq!(first.seq, 0);

    let ended = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&id)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ended.status, pb::SessionStatus::Ended as i32);
    let seen = events
        .until(|e| matches!(e.event, Some(Event::Ended(_))))
        .await;
    assert_eq!(kinds(&seen), ["status:ended", "ended"]);
    assert_eq!(seen.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    // End is idempotent and adds no events.
    let again = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&id)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.last_seq, 2);
    // No operations on an ended thread.
    let send = sessions.send_text(send_text_request(&id, "hi")).await;
    assert_eq!(code(send), "SESSION_ENDED");
    assert_eq!(
        code(
            sessions
                .prepare(pb::PrepareRequest {
                    session_id: id.clone(),
                    origin: ORIGIN.into()
                })
                .await
        ),
        "SESSION_ENDED"
    );
    // The workspace is kept after End.
    assert!(std::path::Path::new(&snapshot.workspace_path).is_dir());

    // Reactivate: Ended -> Idle, same thread.
    let back = sessions
        .reactivate(thread_request(&id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.status, pb::SessionStatus::Idle as i32);
    let seen = events.until(|e| kind(e) == "status:idle").await;
    assert_eq!(seen.last().unwrap().seq, 3);
    // Reactivate on an active thread is a no-op.
    let same = sessions
        .reactivate(thread_request(&id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(same.last_seq, 3);

    // Replay: a route re-attaching after seq 1 gets the snapshot, then 2 and 3.
    let mut replay = attach(&mut sessions, &id, "route-2", Some(1)).await;
    let snap = replay.next().await;
    match &snap.event {
        Some(Event::Snapshot(s)) => assert!(!s.replay_gap && s.last_seq == 3),
        other => panic!("expected a snapshot, got {other:?}"),
    }
    let replayed = [replay.next().await, replay.next().await];
    assert_eq!(
        replayed
            .iter()
            .map(|e| (e.seq, kind(e)))
            .collect::<Vec<_>>(),
        [(2, "ended".to_string()), (3, "status:idle".to_string())]
    );

    // Reactivate fails once the recorded workspace is gone.
    sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(
            &explicit.session_id,
        )))
        .await
        .unwrap();
    std::fs::remove_dir(&app_dir).unwrap();
    assert_eq!(
        code(
            sessions
                .reactivate(thread_request(&explicit.session_id))
                .await
        ),
        "WORKSPACE_OPEN_FAILED"
    );
    // The application's workspace was never Pedelec's to delete; End left it alone (removed above by the test).
}

/// The codex stub env with a short auto-end grace period.
fn env_with_auto_end_grace_ms(ms: u64) -> TestEnv {
    let mut env = env_with_codex();
    env.extra_env
        .insert("PEDELEC_AUTO_END_GRACE_MS".into(), ms.to_string());
    env
}

/// A codex thread that ends when its last route goes away.
fn auto_end_request() -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        auto_end_on_disconnect: true,
        ..create_session_request(Some("codex"))
    }
}

#[tokio::test]
async fn auto_end_waits_for_the_grace_period_and_a_returning_route() {
    // Long enough that a route attached right after the last one went is
    // back well within it on a loaded machine.
    const GRACE: Duration = Duration::from_millis(1000);
    // Past the grace period, with room for its timer to run.
    const PAST_GRACE: Duration = Duration::from_millis(1500);
    let env = env_with_auto_end_grace_ms(GRACE.as_millis() as u64);
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let req = auto_end_request();
    let id = sessions
        .create_session(req)
        .await
        .unwrap()
        .into_inner()
        .session_id;
    // A thread without auto-end is never ended by a disconnect (checked at
    // the end, several grace periods later).
    let keep = new_codex_thread(&mut sessions).await;
    let route = sessions
        .attach(attach_request(&keep, "r", None))
        .await
        .unwrap();
    drop(route);

    // Two routes; dropping one keeps the thread.
    let mut a = attach(&mut sessions, &id, "r", None).await;
    let b = attach(&mut sessions, &id, "r", None).await;
    a.next().await;
    drop(b);
    wait_for_routes(&mut sessions, &id, 1).await;
    tokio::time::sleep(PAST_GRACE).await;
    assert_eq!(
        snapshot(&mut sessions, &id).await.status,
        pb::SessionStatus::Idle as i32
    );

    // The last route goes and a new one comes back within the grace period.
    drop(a);
    wait_for_routes(&mut sessions, &id, 0).await;
    let gone = Instant::now();
    let mut c = attach(&mut sessions, &id, "r", Some(0)).await;
    c.next().await;
    let back = gone.elapsed();
    assert!(back < GRACE, "the route came back only after {back:?}");
    tokio::time::sleep_until((gone + PAST_GRACE).into()).await;
    assert_eq!(
        snapshot(&mut sessions, &id).await.status,
        pb::SessionStatus::Idle as i32
    );

    // Gone for good: ended after the grace period.
    drop(c);
    wait_for_status(
        &mut sessions,
        &id,
        pb::SessionStatus::Ended,
        "auto-end never happened",
    )
    .await;
    assert_eq!(attached_routes(&mut sessions, &keep).await, 0);
    assert_eq!(
        snapshot(&mut sessions, &keep).await.status,
        pb::SessionStatus::Idle as i32
    );
}

#[tokio::test]
async fn kill_9_of_each_service_recovers_and_threads_survive() {
    let env = env_with_codex();
    let mut launcher = env.up().await;
    let mut sessions = env.session().await;
    let active = new_codex_thread(&mut sessions).await;
    let ended = new_codex_thread(&mut sessions).await;
    sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&ended)))
        .await
        .unwrap();
    let before = statuses_and_seqs(&mut sessions).await;
    assert_eq!(before[&ended], (pb::SessionStatus::Ended as i32, 2));

    for service in ServiceName::SUPERVISED {
        let old = env.service_status(service).await;
        assert!(old.pid > 0);
        signal(old.pid as i32, libc::SIGKILL);
        let killed_at = Instant::now();
        let new = env.wait_service_back(service, old.pid).await;
        eprintln!(
            "{} back after {:?} (pid {} -> {})",
            service.as_str(),
            killed_at.elapsed(),
            old.pid,
            new.pid
        );
        assert_eq!(new.restarts, old.restarts + 1);
        assert!(new.last_exit.contains('9'), "last_exit: {}", new.last_exit);
        assert!(!alive(old.pid));

        // Every thread is there again with its status and seq.
        let mut sessions = env.session().await;
        let after = statuses_and_seqs(&mut sessions).await;
        assert_eq!(after, before, "after killing {}", service.as_str());
        // And usable.
        let snap = snapshot(&mut sessions, &active).await;
        assert_eq!(snap.status, pb::SessionStatus::Idle as i32);
    }

    // A killed launcher is no app exit: its services go with it, and the
    // next start brings every thread back with its status and seq, and the
    // managed workspaces with their files.
    let opened = sessions.open_workspace(thread_request(&active)).await;
    let workspace = PathBuf::from(opened.unwrap().into_inner().workspace_path);
    std::fs::write(workspace.join("kept.txt"), "still here").unwrap();
    signal(launcher.pid() as i32, libc::SIGKILL);
    let _ = launcher.stop();
    wait_until_nothing_runs(&env.runtime_dir()).await;
    let mut launcher = env.up().await;
    let mut sessions = env.session().await;
    assert_eq!(
        statuses_and_seqs(&mut sessions).await,
        before,
        "after kill -9 of the launcher"
    );
    assert_eq!(
        snapshot(&mut sessions, &active).await.status,
        pb::SessionStatus::Idle as i32
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "still here"
    );

    // A clean stop leaves no process and no socket, and the app state is cleared.
    let runtime_dir = env.runtime_dir();
    let status = launcher.stop();
    assert!(status.success(), "pedelecd exited with {status}");
    wait_until_nothing_runs(&runtime_dir).await;
    let sockets: Vec<_> = std::fs::read_dir(&runtime_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .map(|e| e.path())
        .collect();
    assert!(sockets.is_empty(), "stale sockets: {sockets:?}");
    assert_eq!(
        std::fs::read_dir(env.data_dir().join("sessions"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(env.data_dir().join("workspaces"))
            .unwrap()
            .count(),
        0
    );
}

/// An orderly stop whose cleanup was cut short (its `app-exit` marker is
/// still there) is finished by the next start: the threads are gone.
#[tokio::test]
async fn an_unfinished_app_exit_is_finished_at_the_next_start() {
    let env = env_with_codex();
    let launcher = env.up().await;
    let mut sessions = env.session().await;
    let id = new_codex_thread(&mut sessions).await;
    signal(launcher.pid() as i32, libc::SIGKILL);
    drop(launcher);
    wait_until_nothing_runs(&env.runtime_dir()).await;
    std::fs::write(env.data_dir().join("app-exit"), b"").unwrap();

    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    assert_eq!(
        code(sessions.get(thread_request(&id)).await),
        "THREAD_NOT_FOUND"
    );
    assert_eq!(visible_entries(&env.data_dir().join("workspaces")), 0);
    assert!(!env.data_dir().join("app-exit").exists());
}

/// A journal that cannot be written (here its folder is replaced by a file;
/// a full disk fails the same way): every request whose change must be
/// durable reports JOURNAL_WRITE_FAILED instead of success, a refused create
/// leaves no thread and no workspace, a refused send_text starts nothing.
/// Once the journal can be written again, everything works.
#[tokio::test]
async fn a_failed_journal_write_is_reported_and_keeps_nothing_half_done() {
    let env = env_with_codex();
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let id = new_codex_thread(&mut sessions).await;
    let before = statuses_and_seqs(&mut sessions).await;
    let journal = env.data_dir().join("sessions");
    let away = env.data_dir().join("sessions.away");
    std::fs::rename(&journal, &away).unwrap();
    std::fs::write(&journal, b"not a folder").unwrap();
    let workspaces = || visible_entries(&env.data_dir().join("workspaces"));
    let workspaces_before = workspaces();

    assert_eq!(
        code(
            sessions
                .create_session(create_session_request(Some("codex")))
                .await
        ),
        "JOURNAL_WRITE_FAILED"
    );
    assert_eq!(statuses_and_seqs(&mut sessions).await.len(), before.len());
    assert_eq!(
        workspaces(),
        workspaces_before,
        "a refused create left its workspace"
    );

    assert_eq!(
        code(sessions.send_text(send_text_request(&id, "hello")).await),
        "JOURNAL_WRITE_FAILED"
    );
    let snap = snapshot(&mut sessions, &id).await;
    assert_eq!(snap.status, pb::SessionStatus::Idle as i32);
    assert!(snap.active_operation.is_none(), "{snap:?}");

    std::fs::remove_file(&journal).unwrap();
    std::fs::rename(&away, &journal).unwrap();
    let again = new_codex_thread(&mut sessions).await;
    assert!(journal.join(format!("{again}.json")).exists());
}

#[tokio::test]
async fn a_corrupt_journal_record_is_skipped_and_the_others_load() {
    let env = env_with_codex();
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let good = new_codex_thread(&mut sessions).await;
    let bad = new_codex_thread(&mut sessions).await;
    let bad_file = env.data_dir().join("sessions").join(format!("{bad}.json"));
    let bytes = std::fs::read(&bad_file).unwrap();
    std::fs::write(&bad_file, &bytes[..bytes.len() / 2]).unwrap();

    let session_pid = env.service_status(ServiceName::Session).await.pid;
    signal(session_pid as i32, libc::SIGKILL);
    env.wait_service_back(ServiceName::Session, session_pid)
        .await;
    let mut sessions = env.session().await;
    let ids: Vec<String> = sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids, vec![good]);
    assert_eq!(
        code(sessions.get(thread_request(&bad)).await),
        "THREAD_NOT_FOUND"
    );
    // Reported, and left in place for inspection.
    assert!(bad_file.exists());
    let log =
        std::fs::read_to_string(env.runtime_dir().join("logs/session.log")).unwrap_or_default();
    assert!(
        log.contains("journal"),
        "session log does not report the bad record:\n{log}"
    );
}

#[tokio::test]
async fn a_connection_from_another_user_is_refused() {
    // Needs root to connect as another uid; the check itself is in pedelec-common.
    if pedelec_common::process::uid() != 0 {
        panic!("this test must run as root (CI and the dev machines do) to connect as another uid");
    }
    let env = env_with_codex();
    let _launcher = env.up().await;
    // The runtime dir is 0700: another user cannot even reach the socket; open
    // it up so the peer check is what refuses.
    use std::os::unix::fs::PermissionsExt;
    let rt = env.runtime_dir();
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = env.socket(ServiceName::Session);
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    // Sends an HTTP/2 preface and a SETTINGS frame; prints "refused" when the
    // server closes or resets the connection without answering, else "served N".
    const PROBE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    s.settimeout(5)
    n = len(s.recv(100))
except (ConnectionError, BrokenPipeError):
    n = 0
print("served %d" % n if n else "refused")
"#;
    let sock_str = sock.display().to_string();
    // As uid 65534 (nobody).
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", PROBE, &sock_str])
        .output()
        .expect("setpriv");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "refused",
        "another uid; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same probe as this user is answered.
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", PROBE, &sock_str])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("served "),
        "same user not served: {stdout}"
    );
}

/// After a restart of SessionService, an auto-end thread gets the grace period
/// to be re-attached; one that was never attached is not ended at all.
#[tokio::test]
async fn after_a_restart_only_threads_that_had_routes_are_auto_ended() {
    let env = env_with_auto_end_grace_ms(300);
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let req = auto_end_request();
    let attached = sessions
        .create_session(req.clone())
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let never = sessions
        .create_session(req)
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let _route = attach(&mut sessions, &attached, "r", None).await;

    let old = env.service_status(ServiceName::Session).await;
    signal(old.pid as i32, libc::SIGKILL);
    env.wait_service_back(ServiceName::Session, old.pid).await;
    let mut sessions = env.session().await;
    wait_for_status(
        &mut sessions,
        &attached,
        pb::SessionStatus::Ended,
        "auto-end after the restart",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        snapshot(&mut sessions, &never).await.status,
        pb::SessionStatus::Idle as i32
    );
}

#[tokio::test]
async fn text_with_a_nul_character_is_invalid_input() {
    let env = env_with_codex();
    let _launcher = env.up().await;
    let mut sessions = env.session().await;
    let id = sessions
        .create_session(create_session_request(Some("codex")))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let sent = sessions.send_text(send_text_request(&id, "a\0b")).await;
    assert_eq!(code(sent), "INVALID_INPUT");
    assert_eq!(
        snapshot(&mut sessions, &id).await.status,
        pb::SessionStatus::Idle as i32
    );
}

/// An ended thread leaves memory after a while and is loaded again from the
/// journal when asked for: Get, List, Attach and Reactivate still work.
#[tokio::test]
async fn an_evicted_ended_thread_comes_back_from_the_journal() {
    let mut env = env_with_codex();
    env.extra_env
        .insert("PEDELEC_EVICT_ENDED_MS".into(), "100".into());
    let _launcher = env.up().await;
    env.grant_site(
        "https://evil.example",
        pb::AccessLevel::Full,
        &["codex"],
        &[],
    )
    .await;
    let mut sessions = env.session().await;
    let id = sessions
        .create_session(create_session_request(Some("codex")))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let ended = sessions
        .end(pedelec_proto::v1::EndRequest::from(thread_request(&id)))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(600)).await;

    let listed = sessions
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner();
    let summary = listed
        .sessions
        .iter()
        .find(|s| s.session_id == id)
        .expect("listed");
    assert_eq!(
        (summary.status, summary.last_seq),
        (pb::SessionStatus::Ended as i32, ended.last_seq)
    );
    let got = snapshot(&mut sessions, &id).await;
    assert_eq!(
        (got.status, got.last_seq),
        (pb::SessionStatus::Ended as i32, ended.last_seq)
    );
    assert_eq!(
        code(
            sessions
                .get(thread_request_from(&id, "https://evil.example"))
                .await
        ),
        "THREAD_ACCESS_DENIED"
    );
    let mut events = attach_past_snapshot(&mut sessions, &id, "r").await;
    let back = sessions
        .reactivate(thread_request(&id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.status, pb::SessionStatus::Idle as i32);
    let seen = events.until(|e| kind(e) == "status:idle").await;
    assert_eq!(seen.last().unwrap().seq, ended.last_seq + 1);
    // Ids that could name a file outside the journal are simply unknown.
    assert_eq!(
        code(sessions.get(thread_request("../settings")).await),
        "THREAD_NOT_FOUND"
    );
}
