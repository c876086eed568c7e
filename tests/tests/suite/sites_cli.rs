//! `pedelec-cli sites` against the real services: a grant made from a shell
//! is the one SessionService enforces and the extension lists; show, list
//! (table and JSON), block and revoke (which ends the site's sessions), and
//! errors with their Pedelec code.

use std::process::Output;

use pedelec_proto::v1 as pb;
use pedelec_tests::*;
use serde_json::{Value, json};

fn cli(env: &TestEnv, args: &[&str]) -> Output {
    env.command(bin("pedelec-cli")).args(args).output().unwrap()
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = cli(env, args);
    assert!(out.status.success(), "pedelec-cli {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(env: &TestEnv, args: &[&str]) -> Value {
    serde_json::from_str(&ok(env, args)).unwrap()
}

/// `CODE: message` on stderr and exit 1.
fn refused(env: &TestEnv, args: &[&str]) -> String {
    let out = cli(env, args);
    assert_eq!(out.status.code(), Some(1), "pedelec-cli {args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

async fn create(env: &TestEnv, origin: &str) -> Result<String, String> {
    env.session()
        .await
        .create_session(pb::CreateSessionRequest {
            origin: origin.into(),
            provider: Some("ollama".into()),
            auto_end_on_disconnect: false,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().session_id)
        .map_err(|s| pedelec_common::codes::code_of_status(&s).unwrap_or_default())
}

#[tokio::test]
async fn sites_grant_list_show_block_and_revoke_from_a_shell() {
    let mut env = TestEnv::new();
    let _launcher = services(&mut env).await;
    let site = "https://shell.example";
    let project = env.root.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = project.canonicalize().unwrap();

    assert_eq!(create(&env, site).await, Err("SITE_NOT_APPROVED".into()));
    let err = refused(&env, &["sites", "show", site]);
    assert!(err.starts_with("SITE_NOT_APPROVED: "), "{err}");

    // Grant from the shell: the services enforce exactly it.
    let granted = json_of(
        &env,
        &[
            "sites",
            "grant",
            site,
            "--access",
            "tools",
            "--provider",
            "ollama",
            "--folder",
            project.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(granted["access"], "tools");
    assert_eq!(granted["providers"], json!(["ollama"]));
    assert_eq!(
        granted["folders"],
        json!([{"path": project.to_str().unwrap(), "once": false}])
    );
    let id = create(&env, site).await.expect("granted");

    // show and list, for people and as JSON (the host's shape).
    let text = ok(&env, &["sites", "show", site]);
    assert!(text.contains("access:    tools\n"), "{text}");
    assert!(
        text.contains(&format!("folders:   {}\n", project.display())),
        "{text}"
    );
    let mut shown = json_of(&env, &["sites", "show", site, "--json"]);
    // Creating the session used the grant: only its last use may differ.
    shown["lastUsedAt"] = granted["lastUsedAt"].clone();
    assert_eq!(shown, granted);
    let table = ok(&env, &["sites", "list"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(site))
        .unwrap_or_else(|| panic!("{site} not listed:\n{table}"));
    assert!(row.contains("tools") && row.contains("ollama"), "{row}");
    assert!(table.lines().any(|l| l.starts_with(ORIGIN)), "{table}");
    let listed = json_of(&env, &["sites", "list", "--json"]);
    let origins: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["origin"].as_str().unwrap())
        .collect();
    assert_eq!(origins, [ORIGIN, site], "sorted by origin");

    // The services' refusals come back with their code.
    let err = refused(
        &env,
        &[
            "sites",
            "grant",
            "http://plain.example",
            "--access",
            "edit",
            "--provider",
            "ollama",
        ],
    );
    assert!(err.starts_with("ORIGIN_NOT_SECURE: "), "{err}");
    let err = refused(
        &env,
        &[
            "sites",
            "grant",
            site,
            "--access",
            "edit",
            "--provider",
            "ollama",
            "--folder",
            "/",
        ],
    );
    assert!(err.starts_with("FOLDER_NOT_GRANTABLE: "), "{err}");
    // A folder that does not exist is the command line's mistake (exit 2).
    let out = cli(
        &env,
        &[
            "sites",
            "grant",
            site,
            "--access",
            "edit",
            "--provider",
            "ollama",
            "--folder",
            "/no/such/dir",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("INVALID_INPUT: "),
        "{out:?}"
    );
    // The refused grants changed nothing.
    assert_eq!(
        json_of(&env, &["sites", "show", site, "--json"])["access"],
        "tools"
    );

    // Revoke ends the site's sessions and forgets the grant.
    let out = ok(&env, &["sites", "revoke", site]);
    assert_eq!(out, format!("revoked {site}: ended 1 session ({id})\n"));
    let snapshot = env
        .session()
        .await
        .get(pb::ThreadRequest {
            session_id: id.clone(),
            origin: "cli".into(),
        })
        .await;
    // The thread is ended (or already gone): either way it no longer runs.
    if let Ok(s) = snapshot {
        assert_eq!(s.into_inner().status, pb::SessionStatus::Ended as i32);
    }
    assert_eq!(create(&env, site).await, Err("SITE_NOT_APPROVED".into()));
    assert!(refused(&env, &["sites", "show", site]).starts_with("SITE_NOT_APPROVED: "));
    let again = json_of(&env, &["sites", "revoke", site, "--json"]);
    assert_eq!(again, json!({"endedSessionIds": []}));

    // Block: listed as blocked, refused.
    let blocked = json_of(&env, &["sites", "block", site, "--json"]);
    assert_eq!(
        (blocked["blocked"].clone(), blocked["access"].clone()),
        (json!(true), Value::Null)
    );
    let row = ok(&env, &["sites", "list"])
        .lines()
        .find(|l| l.starts_with(site))
        .map(String::from)
        .unwrap();
    assert!(row.contains("blocked"), "{row}");
    assert_eq!(create(&env, site).await, Err("SITE_NOT_APPROVED".into()));
}
