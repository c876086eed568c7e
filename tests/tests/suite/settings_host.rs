//! The native host's settings requests over the real host binary: only the
//! calling extension's own pages (origin `chrome-extension://<id>`, the id
//! Chrome passes as argv[1]) may read or change settings; a web page's
//! origin gets SETTINGS_ACCESS_DENIED and learns nothing, keys included.
//! Every request and reply is checked against the schema.

use pedelec_proto::v1 as pb;
use pedelec_tests::schema::Schema;
use pedelec_tests::*;
use serde_json::{Value, json};

const OLLAMA_KEY: &str = "ollama-secret-key-1234";
const TAVILY_KEY: &str = "tvly-secret-key-5678";

/// The extension's own pages' origin: argv[1] without its trailing slash.
fn own_origin() -> &'static str {
    EXTENSION.trim_end_matches('/')
}

/// Writes one settings request (schema-checked) and returns its id.
async fn send(host: &mut Host, schema: &Schema, kind: &str, origin: &str, payload: Value) -> Value {
    host.next_id += 1;
    let id = json!(format!("s{}", host.next_id));
    let request = json!({"id": id, "type": kind, "origin": origin, "payload": payload});
    schema.assert_valid("Request", &request);
    host.send(&request).await;
    id
}

/// The reply to `id`, checked against the schema and for keys.
async fn reply(host: &mut Host, schema: &Schema, id: &Value) -> Value {
    let reply = host.reply_to(id).await;
    assert!(
        !reply.text.contains(OLLAMA_KEY) && !reply.text.contains(TAVILY_KEY),
        "a key crossed the host: {}",
        reply.text
    );
    let reply = reply.value;
    if reply["ok"] == true {
        schema.assert_valid("OkReply", &reply);
        schema.assert_valid("FullSettingsResult", &reply["result"]);
    } else {
        schema.assert_valid("ErrorReply", &reply);
    }
    reply
}

async fn call(host: &mut Host, schema: &Schema, kind: &str, origin: &str, payload: Value) -> Value {
    let id = send(host, schema, kind, origin, payload).await;
    reply(host, schema, &id).await
}

async fn stored(env: &TestEnv) -> pb::Settings {
    env.provider()
        .await
        .get_full_settings(pb::GetSettingsRequest {})
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn only_the_extension_itself_reads_and_writes_settings() {
    let env = TestEnv::new();
    let _launcher = env.up().await;
    let mut settings = settings_with_default_models(&[("codex", "gpt-5")]);
    settings.default_provider = Some("codex".into());
    settings.ollama_api_key = OLLAMA_KEY.into();
    settings.tavily_api_key = TAVILY_KEY.into();
    env.update_settings(settings.clone()).await;
    let schema = Schema::native_messaging();
    let mut host = Host::spawn(&env, EXTENSION);

    let change = json!({
        "defaultProvider": "ollama",
        "profiles": {"ollama": {"levels": {"default": {"model": "qwen3:8b", "effort": ""}}}},
        "ollamaEndpoint": "http://127.0.0.1:9",
        "ollamaApiKey": {"action": "replace", "value": "stolen"},
        "tavilyApiKey": {"action": "clear"}
    });
    // A web page's route, another extension, and look-alikes are all refused.
    for origin in [
        ORIGIN,
        "chrome-extension://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "chrome-extension://ekeclpceddngodnkncegoclkkeknaacb.evil.example",
        "https://ekeclpceddngodnkncegoclkkeknaacb",
    ] {
        for (kind, payload) in [
            ("get_full_settings", json!({})),
            ("update_settings", change.clone()),
        ] {
            let reply = call(&mut host, &schema, kind, origin, payload).await;
            assert_eq!(reply["ok"], false, "{kind} from {origin}: {reply}");
            assert_eq!(reply["error"]["code"], "SETTINGS_ACCESS_DENIED", "{reply}");
        }
    }
    assert_eq!(
        stored(&env).await,
        settings,
        "a refused update changed nothing"
    );

    // The extension's own page reads them, keys masked.
    let read = call(
        &mut host,
        &schema,
        "get_full_settings",
        own_origin(),
        json!({}),
    )
    .await;
    assert_eq!(read["ok"], true, "{read}");
    let result = &read["result"];
    assert_eq!(result["defaultProvider"], "codex");
    assert_eq!(
        result["profiles"]["codex"]["levels"]["default"]["model"],
        "gpt-5"
    );
    assert_eq!(
        result["ollamaApiKey"],
        json!({"set": true, "masked": "••••1234"})
    );
    assert_eq!(
        result["tavilyApiKey"],
        json!({"set": true, "masked": "••••5678"})
    );

    // ...and changes them: a key replaced, the other cleared.
    let mut change = change;
    change["ollamaApiKey"] = json!({"action": "replace", "value": "new-ollama-key-9999"});
    let written = call(
        &mut host,
        &schema,
        "update_settings",
        &format!("{}/", own_origin()),
        change,
    )
    .await;
    assert_eq!(written["ok"], true, "{written}");
    assert_eq!(written["result"]["ollamaApiKey"]["masked"], "••••9999");
    assert_eq!(
        written["result"]["tavilyApiKey"],
        json!({"set": false, "masked": ""})
    );
    let now = stored(&env).await;
    assert_eq!(now.default_provider.as_deref(), Some("ollama"));
    assert_eq!(now.profiles["ollama"].levels["default"].model, "qwen3:8b");
    assert_eq!(now.ollama_endpoint, "http://127.0.0.1:9");
    assert_eq!(
        (now.ollama_api_key.as_str(), now.tavily_api_key.as_str()),
        ("new-ollama-key-9999", "")
    );

    // Keys stay when the page leaves them out; invalid settings are refused by ProviderService.
    let kept = call(
        &mut host,
        &schema,
        "update_settings",
        own_origin(),
        json!({"defaultProvider": null}),
    )
    .await;
    assert_eq!(kept["result"]["defaultProvider"], Value::Null);
    assert_eq!(stored(&env).await.ollama_api_key, "new-ollama-key-9999");
    let bad = call(
        &mut host,
        &schema,
        "update_settings",
        own_origin(),
        json!({"ollamaEndpoint": "ftp://x"}),
    )
    .await;
    assert_eq!(bad["error"]["code"], "INVALID_INPUT", "{bad}");
}

/// `update_settings` names only the fields it changes (an update mask), so
/// updates of different fields in flight at once all land: a read-modify-write
/// of the whole settings would let the last one undo the others. Profiles are
/// per provider: a page changing ollama's keeps codex's.
#[tokio::test]
async fn concurrent_updates_of_different_fields_all_land() {
    let env = TestEnv::new();
    let _launcher = env.up().await;
    let mut settings = settings_with_default_models(&[("codex", "gpt-5")]);
    settings.ollama_api_key = OLLAMA_KEY.into();
    env.update_settings(settings).await;
    let schema = Schema::native_messaging();
    let mut host = Host::spawn(&env, EXTENSION);

    let level = |model: &str| json!({"levels": {"high": {"model": model, "effort": "high"}}});
    let changes = [
        json!({"defaultProvider": "claude"}),
        json!({"ollamaEndpoint": "http://127.0.0.1:11500"}),
        json!({"tavilyApiKey": {"action": "replace", "value": TAVILY_KEY}}),
        json!({"profiles": {"ollama": level("qwen3:32b")}}),
        json!({"profiles": {"claude": level("opus")}}),
    ];
    // All written before any reply is read: the host handles them concurrently.
    let mut ids = Vec::new();
    for change in changes {
        ids.push(send(&mut host, &schema, "update_settings", own_origin(), change).await);
    }
    for id in &ids {
        let r = reply(&mut host, &schema, id).await;
        assert_eq!(r["ok"], true, "{r}");
    }
    // ...and one from outside the host (as `pedelec-cli settings set` does), then one more from the page.
    env.provider()
        .await
        .update_settings(pb::UpdateSettingsRequest {
            settings: Some(pb::Settings {
                shell_tools_only: vec!["codex".into()],
                ..Default::default()
            }),
            update_mask: Some(pedelec_proto::prost_types::FieldMask {
                paths: vec!["shell_tools_only".into()],
            }),
        })
        .await
        .unwrap();
    let last = call(
        &mut host,
        &schema,
        "update_settings",
        own_origin(),
        json!({"profiles": {"claude": {"levels": {}}}}),
    )
    .await;
    assert_eq!(last["ok"], true, "{last}");

    let now = stored(&env).await;
    assert_eq!(now.default_provider.as_deref(), Some("claude"));
    assert_eq!(now.ollama_endpoint, "http://127.0.0.1:11500");
    assert_eq!(
        (now.ollama_api_key.as_str(), now.tavily_api_key.as_str()),
        (OLLAMA_KEY, TAVILY_KEY)
    );
    assert_eq!(now.profiles["ollama"].levels["high"].model, "qwen3:32b");
    assert_eq!(now.profiles["codex"].levels["default"].model, "gpt-5");
    assert!(
        !now.profiles.contains_key("claude"),
        "a provider sent without levels is removed: {:?}",
        now.profiles
    );
    assert_eq!(now.shell_tools_only, ["codex"]);

    // An update that changes nothing writes nothing (no empty mask, which
    // would mean a full replace) and answers the settings as stored.
    let none = call(
        &mut host,
        &schema,
        "update_settings",
        own_origin(),
        json!({"ollamaApiKey": {"action": "keep"}}),
    )
    .await;
    assert_eq!(none["result"]["defaultProvider"], "claude", "{none}");
    assert_eq!(stored(&env).await, now);
    // A profile for something that is not a provider is refused, nothing changes.
    let bad = call(
        &mut host,
        &schema,
        "update_settings",
        own_origin(),
        json!({"profiles": {"nope": level("x")}}),
    )
    .await;
    assert_eq!(bad["error"]["code"], "INVALID_INPUT", "{bad}");
    assert_eq!(stored(&env).await, now);
}
