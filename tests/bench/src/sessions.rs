//! The threads the measurements make: the one bench tool and its manifest,
//! the stub agent's settings, a thread opened through the host, and the
//! requests at the bench's origin.

use pedelec_proto::v1 as pb;
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::env::{ORIGIN, PATIENCE};
use crate::host::Host;

pub(crate) type Sessions = pb::session_service_client::SessionServiceClient<Channel>;

pub(crate) const TOOL: &str = "bench_echo";
pub(crate) const ARGS: &str = r#"{"q":"x"}"#;

pub(crate) fn skills() -> Value {
    json!({
        "guidance": "Benchmark tools.",
        "tools": [{"name": TOOL, "description": "Echoes q.",
                   "argsSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
    })
}

/// Settings for turns of the stub agent (run as the `ollama` provider, which
/// needs a model).
pub(crate) async fn stub_agent_settings(provider: Channel) -> Result<(), String> {
    let mut settings = pb::Settings::default();
    settings.profiles.insert(
        "ollama".into(),
        pb::ProviderProfiles {
            levels: [(
                "default".to_string(),
                pb::EffortProfile {
                    model: "bench-model".into(),
                    effort: String::new(),
                },
            )]
            .into(),
        },
    );
    pb::provider_service_client::ProviderServiceClient::new(provider)
        .update_settings(pb::UpdateSettingsRequest {
            settings: Some(settings),
            update_mask: None,
        })
        .await
        .map_err(|e| format!("UpdateSettings: {e}"))?;
    Ok(())
}

pub(crate) async fn open_host_session(host: &mut Host) -> Result<String, String> {
    let created = host
        .call(
            "create_session",
            json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false}),
        )
        .await?;
    let id = created["sessionId"]
        .as_str()
        .ok_or("create_session without sessionId")?
        .to_string();
    host.call("attach", json!({"sessionId": id})).await?;
    Ok(id)
}

pub(crate) fn attach_request(id: &str, route: &str) -> pb::AttachRequest {
    pb::AttachRequest {
        session_id: id.into(),
        origin: ORIGIN.into(),
        route_id: route.into(),
        after_seq: None,
        merge_deltas: false,
    }
}

/// SendText of `text` to thread `id`.
pub(crate) async fn send_text(
    sessions: &mut Sessions,
    id: &str,
    text: String,
) -> Result<(), String> {
    sessions
        .send_text(pb::SendTextRequest {
            session_id: id.into(),
            origin: ORIGIN.into(),
            text,
        })
        .await
        .map(drop)
        .map_err(|e| format!("SendText: {e}"))
}

/// The next event of an Attach stream, within [`PATIENCE`].
pub(crate) async fn next_event(
    stream: &mut tonic::Streaming<pb::SessionEvent>,
) -> Result<pb::SessionEvent, String> {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .map_err(|_| "no event within the ceiling")?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "Attach stream ended".into())
}

pub(crate) fn thread(id: &str) -> pb::ThreadRequest {
    pb::ThreadRequest {
        session_id: id.into(),
        origin: ORIGIN.into(),
    }
}
