//! Site grants through the real services over their sockets: a web origin
//! acts only under a live grant SessionService holds (docs/security.md,
//! "Site grants"); local callers (`cli`) need none.

use std::path::{Path, PathBuf};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_proto::v1 as pb;
use pedelec_tests::*;

/// A site the user never approved.
const STRANGER: &str = "https://stranger.example";
/// A site the tests approve (and revoke, block) themselves.
const SITE: &str = "https://site.example";

const CURSOR_SESSION: &str = "5f3c2a1e-0b7d-4c8e-9a6f-1d2e3f4a5b6c";

/// Services up with a codex stub and a cursor-agent stub whose turn writes
/// its pid to `<stubs>/cursor.pid` and hangs.
async fn start() -> (TestEnv, Launcher) {
    let mut env = TestEnv::with_codex_stub();
    // Some tests here make dozens of (refused) creates from one origin in a
    // second, over the per-origin create rate a page meets (exhaustion::).
    env.lift_session_limits();
    let pid = env.stubs().join("cursor.pid");
    env.stub(
        "cursor-agent",
        &format!(
            r#"[ "$1" = "--version" ] && echo "cursor 0.0.0-stub" && exit 0
echo '{{"type":"system","subtype":"init","cwd":"/w","session_id":"{CURSOR_SESSION}","model":"m"}}'
echo $$ > {pid}
exec /bin/sleep 60"#,
            pid = pid.display()
        ),
    );
    let launcher = env.up().await;
    (env, launcher)
}

fn create_at(origin: &str, provider: Option<&str>) -> pb::CreateSessionRequest {
    let mut request = create_session_request(provider);
    request.origin = origin.into();
    request
}

async fn create(env: &TestEnv, request: pb::CreateSessionRequest) -> Result<String, tonic::Status> {
    env.session()
        .await
        .create_session(request)
        .await
        .map(|r| r.into_inner().session_id)
}

/// Every thread's (status, last seq), through the admin List (no origin).
async fn all_threads(env: &TestEnv) -> Vec<(String, String, i32, u64)> {
    env.session()
        .await
        .list(pb::ListRequest { origin: None })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| (s.session_id, s.origin, s.status, s.last_seq))
        .collect()
}

async fn sites(env: &TestEnv) -> Vec<pb::Site> {
    env.session()
        .await
        .list_sites(pb::ListSitesRequest {})
        .await
        .unwrap()
        .into_inner()
        .sites
}

async fn grant_result(env: &TestEnv, site: pb::Site) -> Result<pb::Site, tonic::Status> {
    env.session()
        .await
        .grant_site(pb::GrantSiteRequest { site: Some(site) })
        .await
        .map(|r| r.into_inner())
}

/// Each kind of request `origin` can make about thread `id`, with its code.
async fn codes_of_every_request(
    env: &TestEnv,
    id: &str,
    origin: &str,
) -> Vec<(&'static str, String)> {
    let mut s = env.session().await;
    let mut a = env.asset().await;
    let t = || thread_request_from(id, origin);
    let mut out = vec![
        (
            "create",
            code(s.create_session(create_at(origin, Some("codex"))).await),
        ),
        (
            "attach",
            code(
                s.attach(pb::AttachRequest {
                    session_id: id.into(),
                    origin: origin.into(),
                    route_id: "r".into(),
                    after_seq: None,
                    merge_deltas: false,
                })
                .await,
            ),
        ),
        (
            "send",
            code(
                s.send_text(pb::SendTextRequest {
                    session_id: id.into(),
                    origin: origin.into(),
                    text: "hi".into(),
                })
                .await,
            ),
        ),
        (
            "prepare",
            code(
                s.prepare(pb::PrepareRequest {
                    session_id: id.into(),
                    origin: origin.into(),
                })
                .await,
            ),
        ),
        ("cancel", code(s.cancel(t()).await)),
        ("reactivate", code(s.reactivate(t()).await)),
        ("get", code(s.get(t()).await)),
        ("open_workspace", code(s.open_workspace(t()).await)),
        (
            "list",
            code(
                s.list(pb::ListRequest {
                    origin: Some(origin.into()),
                })
                .await,
            ),
        ),
    ];
    let mut result = submit_tool_result_request(id, "tr_1", tool_result(&serde_json::json!(1)));
    result.origin = origin.into();
    out.push(("tool_result", code(s.submit_tool_result(result).await)));
    out.push((
        "end",
        code(
            s.end(pb::EndRequest {
                session_id: id.into(),
                origin: origin.into(),
                reason: 0,
            })
            .await,
        ),
    ));
    out.push((
        "assets_list",
        code(
            a.list(pb::ListAssetsRequest {
                session_id: id.into(),
                origin: origin.into(),
            })
            .await,
        ),
    ));
    out.push((
        "upload_ticket",
        code(
            a.create_upload_ticket(pb::CreateUploadTicketRequest {
                session_id: id.into(),
                origin: origin.into(),
                target_path: Some("/a.txt".into()),
                name: String::new(),
                size_bytes: 1,
                content_type: "text/plain".into(),
            })
            .await,
        ),
    ));
    out.push((
        "download_ticket",
        code(
            a.create_download_ticket(pb::CreateDownloadTicketRequest {
                session_id: id.into(),
                origin: origin.into(),
                path: "/a.txt".into(),
            })
            .await,
        ),
    ));
    out.push((
        "read",
        code(
            a.read(pb::ReadAssetRequest {
                session_id: id.into(),
                origin: origin.into(),
                path: "/a.txt".into(),
            })
            .await,
        ),
    ));
    let header = pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Header(pb::UploadHeader {
            session_id: id.into(),
            origin: origin.into(),
            path: "/b.txt".into(),
            size_bytes: 1,
        })),
    };
    let data = pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Data(b"x".to_vec())),
    };
    out.push((
        "upload",
        code(a.upload(tokio_stream::iter([header, data])).await),
    ));
    out
}

fn assert_all(codes: &[(&str, String)], expected: &str) {
    let wrong: Vec<_> = codes.iter().filter(|(_, c)| c != expected).collect();
    assert!(
        wrong.is_empty(),
        "expected {expected} everywhere: {wrong:?}"
    );
}

#[tokio::test]
async fn an_origin_without_a_live_grant_is_refused_everywhere_and_nothing_changes() {
    let (env, _launcher) = start().await;
    let id = create(&env, create_session_request(Some("codex")))
        .await
        .unwrap();
    let before = all_threads(&env).await;

    // Never approved: on the thread of another origin (no hint it exists)
    // and on one that does not exist.
    assert_all(
        &codes_of_every_request(&env, &id, STRANGER).await,
        "SITE_NOT_APPROVED",
    );
    assert_all(
        &codes_of_every_request(&env, "thr_nope", STRANGER).await,
        "SITE_NOT_APPROVED",
    );

    // Blocked: listed as blocked, refused the same.
    let blocked = env
        .session()
        .await
        .block_site(pb::SiteRequest {
            origin: SITE.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(blocked.blocked);
    assert_eq!(blocked.access, pb::AccessLevel::Unspecified as i32);
    assert_all(
        &codes_of_every_request(&env, &id, SITE).await,
        "SITE_NOT_APPROVED",
    );

    // Expired: gone from the list, refused.
    let mut soon = site(
        "https://soon.example",
        pb::AccessLevel::Full,
        &["codex"],
        &[],
    );
    let at = std::time::SystemTime::now() + std::time::Duration::from_millis(300);
    soon.expires_at = Some(pedelec_common::to_timestamp(at));
    env.grant(soon).await;
    create(&env, create_at("https://soon.example", Some("codex")))
        .await
        .unwrap();
    let deadline = Deadline::patience();
    while sites(&env)
        .await
        .iter()
        .any(|s| s.origin == "https://soon.example")
    {
        deadline.tick("the grant to expire").await;
    }
    assert_eq!(
        code(create(&env, create_at("https://soon.example", Some("codex"))).await),
        "SITE_NOT_APPROVED"
    );

    // Nothing changed: the same threads, statuses and seqs (one more: the
    // expired site's own), no thread of the refused origins.
    let after = all_threads(&env).await;
    assert!(
        after.iter().all(|t| t.1 != STRANGER && t.1 != SITE),
        "{after:?}"
    );
    let ours: Vec<_> = after.iter().filter(|t| t.1 == ORIGIN).cloned().collect();
    assert_eq!(ours, before);
}

#[tokio::test]
async fn create_stays_inside_the_grants_providers_models_and_folders() {
    let (env, _launcher) = start().await;
    env.update_settings(settings_with_default_models(&[("codex", "gpt-known")]))
        .await;
    let app = env.root.path().join("app");
    let once = env.root.path().join("once");
    let other = env.root.path().join("other");
    for dir in [&app, &once, &other] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut grant = site(SITE, pb::AccessLevel::Edit, &["codex"], &[&app]);
    grant.folders.push(pb::FolderGrant {
        path: once.display().to_string(),
        once: true,
    });
    env.grant(grant).await;

    // Provider outside the grant (named, and the default).
    assert_eq!(
        code(create(&env, create_at(SITE, Some("cursor"))).await),
        "PROVIDER_NOT_GRANTED"
    );
    let mut settings = settings_with_default_models(&[("codex", "gpt-known")]);
    settings.default_provider = Some("cursor".into());
    env.update_settings(settings).await;
    assert_eq!(
        code(create(&env, create_at(SITE, None)).await),
        "PROVIDER_NOT_GRANTED"
    );

    // Models: the profiles' only, unless any_model; the name's shape for everyone.
    let with_model = |origin: &str, model: &str| {
        let mut r = create_at(origin, Some("codex"));
        r.model = Some(model.into());
        r
    };
    assert_eq!(
        code(create(&env, with_model(SITE, "gpt-other")).await),
        "MODEL_NOT_ALLOWED"
    );
    create(&env, with_model(SITE, "gpt-known")).await.unwrap();
    create(&env, with_model(ORIGIN, "gpt-other")).await.unwrap();
    for bad in [
        "--dangerously-skip-permissions",
        "-m",
        "a b",
        "a\nb",
        "",
        "x;rm",
    ] {
        if bad.is_empty() {
            continue; // absent: the profile's model
        }
        for origin in [SITE, ORIGIN, "cli"] {
            assert_eq!(
                code(create(&env, with_model(origin, bad)).await),
                "INVALID_INPUT",
                "{bad:?} from {origin}"
            );
        }
    }
    let long = "m".repeat(129);
    assert_eq!(
        code(create(&env, with_model("cli", &long)).await),
        "INVALID_INPUT"
    );

    // Folders: only the granted ones (canonical), a once grant once.
    let in_folder = |dir: &Path| {
        let mut r = create_at(SITE, Some("codex"));
        r.workspace_path = Some(dir.display().to_string());
        r
    };
    assert_eq!(
        code(create(&env, in_folder(&other)).await),
        "FOLDER_NOT_GRANTED"
    );
    create(&env, in_folder(&app)).await.unwrap();
    create(&env, in_folder(&app)).await.unwrap();
    std::os::unix::fs::symlink(&app, env.root.path().join("app-link")).unwrap();
    create(&env, in_folder(&env.root.path().join("app-link")))
        .await
        .unwrap();
    create(&env, in_folder(&once)).await.unwrap();
    assert_eq!(
        code(create(&env, in_folder(&once)).await),
        "FOLDER_NOT_GRANTED"
    );
    let listed = sites(&env).await;
    let ours = listed.iter().find(|s| s.origin == SITE).unwrap();
    let folders: Vec<&str> = ours.folders.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(folders, [app.canonicalize().unwrap().display().to_string()]);
}

#[tokio::test]
async fn never_grantable_folders_and_other_origins_workspaces_are_refused() {
    let (env, _launcher) = start().await;
    let home = env.home();
    let credentials = [
        ".ssh",
        ".gnupg",
        ".aws",
        ".azure",
        ".kube",
        ".docker",
        ".config/gh",
        ".config/gcloud",
        ".codex",
        ".claude",
        ".config/opencode",
        ".local/share/opencode",
        ".cursor",
        ".gemini",
        ".netrc",
        ".password-store",
    ];
    let mut refused: Vec<PathBuf> = vec![
        PathBuf::from("/"),
        home.clone(),
        env.data_dir(),
        env.data_dir().join("workspaces"),
        env.runtime_dir(),
        // Contains Pedelec's folders.
        env.root.path().to_path_buf(),
        home.join(".config"),
    ];
    for c in credentials {
        std::fs::create_dir_all(home.join(c).join("inner")).unwrap();
        refused.push(home.join(c));
        refused.push(home.join(c).join("inner"));
    }
    let link = env.root.path().join("innocent");
    std::os::unix::fs::symlink(home.join(".ssh"), &link).unwrap();
    refused.push(link);
    env.grant_site(SITE, pb::AccessLevel::Full, &["codex"], &[])
        .await;
    for dir in &refused {
        let mut grant = site(SITE, pb::AccessLevel::Edit, &["codex"], &[dir]);
        grant.any_model = true;
        assert_eq!(
            code(grant_result(&env, grant).await),
            "FOLDER_NOT_GRANTABLE",
            "GrantSite {}",
            dir.display()
        );
        // A site's grant cannot list it, and the grant is asked first.
        for (origin, refused) in [
            (SITE, "FOLDER_NOT_GRANTED"),
            ("cli", "FOLDER_NOT_GRANTABLE"),
        ] {
            let mut r = create_at(origin, Some("codex"));
            r.workspace_path = Some(dir.display().to_string());
            assert_eq!(
                code(create(&env, r).await),
                refused,
                "CreateSession from {origin} in {}",
                dir.display()
            );
        }
    }

    // Another origin's workspace, a folder inside it or one containing it.
    let shared = env.root.path().join("apps/shared");
    std::fs::create_dir_all(shared.join("sub")).unwrap();
    let apps = env.root.path().join("apps");
    env.grant_site(ORIGIN, pb::AccessLevel::Full, &["codex"], &[&shared])
        .await;
    let mut r = create_session_request(Some("codex"));
    r.workspace_path = Some(shared.display().to_string());
    create(&env, r).await.unwrap();
    env.grant_site(
        SITE,
        pb::AccessLevel::Full,
        &["codex"],
        &[&shared, &shared.join("sub"), &apps],
    )
    .await;
    for dir in [&shared, &shared.join("sub"), &apps] {
        let mut r = create_at(SITE, Some("codex"));
        r.workspace_path = Some(dir.display().to_string());
        assert_eq!(
            code(create(&env, r).await),
            "WORKSPACE_IN_USE",
            "{}",
            dir.display()
        );
    }
}

/// The thread's events up to its end, through a route at `origin`.
async fn attach_at(env: &TestEnv, id: &str, origin: &str) -> Events {
    let mut s = env.session().await;
    let mut events = Events(
        s.attach(pb::AttachRequest {
            session_id: id.into(),
            origin: origin.into(),
            route_id: "r".into(),
            after_seq: None,
            merge_deltas: false,
        })
        .await
        .unwrap()
        .into_inner(),
    );
    assert!(matches!(
        events.next().await.event,
        Some(Event::Snapshot(_))
    ));
    events
}

#[tokio::test]
async fn revoke_ends_every_session_cancels_the_turn_and_voids_tickets() {
    let (env, _launcher) = start().await;
    env.grant_site(SITE, pb::AccessLevel::Full, &["codex", "cursor"], &[])
        .await;
    let running = create(&env, create_at(SITE, Some("cursor"))).await.unwrap();
    let mut kept = create_at(SITE, Some("codex"));
    kept.auto_end_on_disconnect = false;
    let kept = create(&env, kept).await.unwrap();
    let mine = create(&env, create_session_request(Some("codex")))
        .await
        .unwrap();

    // An asset and a download ticket made before the revoke.
    let mut assets = env.asset().await;
    let header = pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Header(pb::UploadHeader {
            session_id: kept.clone(),
            origin: SITE.into(),
            path: "/a.txt".into(),
            size_bytes: 1,
        })),
    };
    let data = pb::UploadChunk {
        chunk: Some(pb::upload_chunk::Chunk::Data(b"a".to_vec())),
    };
    assets
        .upload(tokio_stream::iter([header, data]))
        .await
        .unwrap();
    let ticket = assets
        .create_download_ticket(pb::CreateDownloadTicketRequest {
            session_id: kept.clone(),
            origin: SITE.into(),
            path: "/a.txt".into(),
        })
        .await
        .unwrap()
        .into_inner();

    let mut events = attach_at(&env, &running, SITE).await;
    let mut s = env.session().await;
    s.send_text(pb::SendTextRequest {
        session_id: running.clone(),
        origin: SITE.into(),
        text: "work".into(),
    })
    .await
    .unwrap();
    let pid = host_pid(
        &env.runtime_dir(),
        read_pid(&env.stubs().join("cursor.pid")).await,
    );

    let ended = s
        .revoke_site(pb::SiteRequest {
            origin: SITE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .ended_session_ids;
    let mut sorted = ended.clone();
    sorted.sort();
    let mut expected = vec![running.clone(), kept.clone()];
    expected.sort();
    assert_eq!(sorted, expected);

    let seen = events
        .until(|e| matches!(e.event, Some(Event::Ended(_))))
        .await;
    let kinds = kinds(&seen);
    assert!(
        kinds.contains(&"operation_finished:cancelled".to_string()),
        "{kinds:?}"
    );
    let deadline = Deadline::patience();
    while alive(pid) {
        deadline.tick("the revoked site's agent to stop").await;
    }
    for (id, origin, status, _) in all_threads(&env).await {
        let expected = if origin == SITE {
            pb::SessionStatus::Ended
        } else {
            pb::SessionStatus::Idle
        };
        assert_eq!(status, expected as i32, "{id} of {origin}");
    }
    assert!(sites(&env).await.iter().all(|s| s.origin != SITE));
    assert_eq!(
        snapshot(&mut s, &mine).await.status,
        pb::SessionStatus::Idle as i32
    );

    // The ticket made before is no good now.
    let (host_port, path) = ticket
        .url
        .strip_prefix("http://")
        .and_then(|u| u.split_once('/'))
        .unwrap();
    let answer = http_get(host_port, &format!("/{path}"), &ticket.token, SITE).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(answer.contains("SITE_NOT_APPROVED"), "{answer}");

    // A second revoke is fine and ends nothing.
    let again = s
        .revoke_site(pb::SiteRequest {
            origin: SITE.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.ended_session_ids.is_empty());
}

/// A bare HTTP/1.1 GET with a bearer token and an Origin; the whole answer.
async fn http_get(host_port: &str, path: &str, token: &str, origin: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(host_port).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host_port}\r\nAuthorization: Bearer {token}\r\nOrigin: {origin}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn end_site_sessions_keeps_the_grant_and_block_ends_them_too() {
    let (env, _launcher) = start().await;
    env.grant_site(SITE, pb::AccessLevel::Edit, &["codex"], &[])
        .await;
    let id = create(&env, create_at(SITE, Some("codex"))).await.unwrap();
    let mut s = env.session().await;
    let ended = s
        .end_site_sessions(pb::SiteRequest {
            origin: SITE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .ended_session_ids;
    assert_eq!(ended, std::slice::from_ref(&id));
    // Still granted: the site reactivates its thread.
    let back = s.reactivate(thread_request_from(&id, SITE)).await.unwrap();
    assert_eq!(back.into_inner().status, pb::SessionStatus::Idle as i32);

    let blocked = s
        .block_site(pb::SiteRequest {
            origin: SITE.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(blocked.blocked);
    let threads = all_threads(&env).await;
    let (_, _, status, _) = threads.iter().find(|t| t.0 == id).unwrap();
    assert_eq!(*status, pb::SessionStatus::Ended as i32);
    // Granting again unblocks.
    env.grant_site(SITE, pb::AccessLevel::Edit, &["codex"], &[])
        .await;
    create(&env, create_at(SITE, Some("codex"))).await.unwrap();
}

#[tokio::test]
async fn cli_needs_no_grant_and_grants_survive_a_restart_of_session_service() {
    let (env, _launcher) = start().await;
    create(&env, create_at("cli", Some("codex"))).await.unwrap();
    env.grant_site(SITE, pb::AccessLevel::Tools, &["codex"], &[])
        .await;
    let file = env.data_dir().join("sites.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let old = env.service_status(ServiceName::Session).await;
    signal(old.pid as i32, libc::SIGKILL);
    env.wait_service_back(ServiceName::Session, old.pid).await;

    let listed = sites(&env).await;
    let site = listed.iter().find(|s| s.origin == SITE).expect("kept");
    assert_eq!(site.access, pb::AccessLevel::Tools as i32);
    assert_eq!(site.providers, ["codex"]);
    create(&env, create_at(SITE, Some("codex"))).await.unwrap();
    create(&env, create_at("cli", Some("codex"))).await.unwrap();
}

#[tokio::test]
async fn plain_http_is_refused_and_loopback_grants_expire_within_a_day() {
    let (env, _launcher) = start().await;
    for origin in ["http://app.example", "http://192.168.1.2:8080"] {
        assert_eq!(
            code(grant_result(&env, site(origin, pb::AccessLevel::Edit, &["codex"], &[])).await),
            "ORIGIN_NOT_SECURE",
            "{origin}"
        );
    }
    assert_eq!(
        code(create(&env, create_at("http://app.example", Some("codex"))).await),
        "SITE_NOT_APPROVED"
    );
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
    ] {
        let mut grant = site(origin, pb::AccessLevel::Edit, &["codex"], &[]);
        // Asked for a year: a day at most.
        let year = std::time::SystemTime::now() + std::time::Duration::from_secs(365 * 24 * 3600);
        grant.expires_at = Some(pedelec_common::to_timestamp(year));
        let stored = env.grant(grant).await;
        let day = std::time::SystemTime::now() + std::time::Duration::from_secs(24 * 3600);
        let expires = pedelec_common::timestamp_ms(&stored.expires_at.expect("an expiry"));
        let limit = pedelec_common::timestamp_ms(&pedelec_common::to_timestamp(day));
        assert!(expires <= limit, "{origin}: {expires} > {limit}");
        create(&env, create_at(origin, Some("codex")))
            .await
            .unwrap();
    }
    // Unknown provider, no level: INVALID_INPUT.
    assert_eq!(
        code(grant_result(&env, site(SITE, pb::AccessLevel::Edit, &["nope"], &[])).await),
        "INVALID_INPUT"
    );
    assert_eq!(
        code(
            grant_result(
                &env,
                site(SITE, pb::AccessLevel::Unspecified, &["codex"], &[])
            )
            .await
        ),
        "INVALID_INPUT"
    );
}
