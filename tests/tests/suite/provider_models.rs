//! ListProviders' effort values and model suggestions: the real codex and
//! opencode list theirs (codex app-server `model/list`, `opencode models`,
//! configured for the mock model server as the other real-CLI tests are), a
//! stub `cursor-agent` its `models`, the Ollama server its `/api/tags`; a
//! listing never holds up ListProviders, and a settings change lists again.

use std::collections::HashMap;

use pedelec_proto::v1 as pb;
use pedelec_tests::agents;
use pedelec_tests::mock_ollama::{MockOllama, text_reply};
use pedelec_tests::*;

/// A stub `cursor-agent` whose `models` prints `models` (a heading, then
/// `id - label` lines) after `before`.
fn cursor_stub(env: &TestEnv, before: &str) {
    env.stub(
        "cursor-agent",
        &format!(
            "[ \"$1\" = \"--version\" ] && echo \"cursor-agent 0.0.0-stub\" && exit 0\n\
             if [ \"$1\" = models ]; then {before}\n\
             printf 'Available models\\n\\nauto - Auto  (current)\\nstub-model - Stub Model\\n\\nTip: use --model <id> to switch.\\n'; exit 0; fi\n\
             exit 2"
        ),
    );
}

/// Links the installed real codex and opencode into the stubs folder and
/// gives them the suite's mock configuration in the services' home.
fn real_clis(env: &mut TestEnv) {
    let bin = agents::agents_bin();
    for cli in ["codex", "opencode"] {
        assert!(
            bin.join(cli).exists(),
            "the real agent CLIs are not installed: `tests/setup.sh` installs them"
        );
        std::os::unix::fs::symlink(bin.join(cli), env.stubs().join(cli)).unwrap();
    }
    let home = env.home();
    for (key, dir) in [
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
    ] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
        env.extra_env
            .insert(key.into(), home.join(dir).display().to_string());
    }
    // Listing asks no model: a port nothing listens on shows it.
    let port = 9;
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    agents::write_codex_mock_config(&codex_home, port).unwrap();
    env.extra_env
        .insert("CODEX_HOME".into(), codex_home.display().to_string());
    let opencode = home.join(".config/opencode");
    std::fs::create_dir_all(&opencode).unwrap();
    std::fs::write(
        opencode.join("opencode.json"),
        agents::opencode_mock_config(port).to_string(),
    )
    .unwrap();
    env.extra_env
        .insert("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into());
    env.extra_env
        .insert("OPENCODE_DISABLE_AUTOUPDATE".into(), "1".into());
}

async fn list(env: &TestEnv) -> HashMap<String, pb::ProviderInfo> {
    env.provider()
        .await
        .list_providers(pb::ListProvidersRequest {
            include_models: true,
        })
        .await
        .unwrap()
        .into_inner()
        .providers
        .into_iter()
        .map(|p| (p.code.clone(), p))
        .collect()
}

/// ListProviders until `code`'s first listing has ended.
async fn listed(env: &TestEnv, code: &str) -> pb::ProviderInfo {
    let deadline = Deadline::after(std::time::Duration::from_secs(60));
    loop {
        let mut all = list(env).await;
        let info = all.remove(code).unwrap();
        if !info.models_pending {
            return info;
        }
        deadline.tick(format!("{code}'s models")).await;
    }
}

#[tokio::test]
async fn real_clis_a_stub_cursor_and_ollama_list_their_models() {
    let mut env = TestEnv::new();
    real_clis(&mut env);
    cursor_stub(&env, "");
    let ollama = MockOllama::start(|_| text_reply(&["ok"], 1, 1)).await;
    let _launcher = env.up().await;
    env.update_settings(pb::Settings {
        ollama_endpoint: ollama.url.clone(),
        ..Default::default()
    })
    .await;

    let opencode = listed(&env, "opencode").await;
    assert!(
        opencode.models.iter().any(|m| m == "mock/mock-model"),
        "{opencode:?}"
    );
    let codex = listed(&env, "codex").await;
    assert!(!codex.models.is_empty(), "{codex:?}");
    let cursor = listed(&env, "cursor").await;
    assert_eq!(cursor.models, ["auto", "stub-model"]);
    let ollama_info = listed(&env, "ollama").await;
    assert_eq!(ollama_info.models, ["llama3.2:latest"]);
    assert!(ollama.requests().iter().any(|r| r.path == "/api/tags"));

    let all = list(&env).await;
    // Claude Code and Antigravity cannot list; nothing is pending for them.
    for code in ["claude", "antigravity"] {
        assert!(all[code].models.is_empty() && !all[code].models_pending);
    }
    // The effort values are the catalog's.
    let efforts: HashMap<&str, &[&str]> = [
        ("codex", &["minimal", "low", "medium", "high", "xhigh"][..]),
        ("claude", &["low", "medium", "high", "xhigh", "max"]),
        ("opencode", &["minimal", "low", "medium", "high", "max"]),
        ("cursor", &[]),
        ("antigravity", &[]),
        ("ollama", &[]),
    ]
    .into();
    for (code, info) in &all {
        assert_eq!(info.effort_values, efforts[code.as_str()], "{code}");
    }
    // Names only: no local path reaches a page.
    for info in all.values() {
        for model in &info.models {
            assert!(!model.starts_with('/') && !model.contains(char::is_whitespace));
        }
    }
}

#[tokio::test]
async fn a_listing_that_hangs_does_not_hold_up_list_providers() {
    let env = TestEnv::new();
    let started = env.stubs().join("models-started");
    // `models` announces itself, then waits until the test removes the mark.
    cursor_stub(
        &env,
        &format!(
            "touch {0}; while [ -e {0} ]; do sleep 1; done",
            started.display()
        ),
    );
    let _launcher = env.up().await;
    let first = list(&env).await;
    assert!(first["cursor"].models.is_empty());
    wait_until("cursor-agent models to start", || started.exists()).await;
    // Answered while the listing still runs.
    let again = list(&env).await;
    assert!(again["cursor"].available);
    assert!(again["cursor"].models.is_empty() && again["cursor"].models_pending);
    // Let the stub end; its listing is then kept.
    std::fs::remove_file(&started).unwrap();
    assert_eq!(listed(&env, "cursor").await.models, ["auto", "stub-model"]);
}

#[tokio::test]
async fn a_settings_change_lists_the_ollama_models_again() {
    let env = TestEnv::new();
    let _launcher = env.up().await;
    // Nothing listens on port 9: the listing fails and lists nothing.
    env.update_settings(pb::Settings {
        ollama_endpoint: "http://127.0.0.1:9".into(),
        ..Default::default()
    })
    .await;
    assert!(listed(&env, "ollama").await.models.is_empty());

    let ollama = MockOllama::start(|_| text_reply(&["ok"], 1, 1)).await;
    env.update_settings(pb::Settings {
        ollama_endpoint: ollama.url.clone(),
        ..Default::default()
    })
    .await;
    assert_eq!(listed(&env, "ollama").await.models, ["llama3.2:latest"]);
}
