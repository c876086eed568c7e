//! SessionService requests and reads the test files share. Every thread the
//! tests create belongs to one origin, [`ORIGIN`].

use pb::session_event::Event;
use pedelec_proto::v1 as pb;
use tonic::transport::Channel;

use crate::{Deadline, Events, kind};

/// The origin the tests' threads belong to.
pub const ORIGIN: &str = "https://app.example";

/// A grant of `origin` at `access` for `providers` and the always-allowed
/// `folders` (no model beyond the profiles'), for GrantSite
/// ([`crate::TestEnv::grant`]).
pub fn site(
    origin: &str,
    access: pb::AccessLevel,
    providers: &[&str],
    folders: &[&std::path::Path],
) -> pb::Site {
    pb::Site {
        origin: origin.into(),
        access: access as i32,
        providers: providers.iter().map(|p| p.to_string()).collect(),
        folders: folders
            .iter()
            .map(|f| pb::FolderGrant {
                path: f.display().to_string(),
                once: false,
            })
            .collect(),
        ..Default::default()
    }
}

/// A SessionService client over the session socket.
pub type Sessions = pb::session_service_client::SessionServiceClient<Channel>;

/// A CreateSessionRequest at [`ORIGIN`] for `provider`, every option at its default.
pub fn create_session_request(provider: Option<&str>) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        origin: ORIGIN.into(),
        provider: provider.map(Into::into),
        effort_level: None,
        model: None,
        skills: None,
        auto_end_on_disconnect: false,
        workspace_path: None,
    }
}

/// A ThreadRequest for `session_id` as sent by `origin`.
pub fn thread_request_from(session_id: &str, origin: &str) -> pb::ThreadRequest {
    pb::ThreadRequest {
        session_id: session_id.into(),
        origin: origin.into(),
    }
}

/// A ThreadRequest for `session_id` at [`ORIGIN`].
pub fn thread_request(session_id: &str) -> pb::ThreadRequest {
    thread_request_from(session_id, ORIGIN)
}

/// An AttachRequest at [`ORIGIN`] for one route, replaying after `after_seq`.
pub fn attach_request(
    session_id: &str,
    route_id: &str,
    after_seq: Option<u64>,
) -> pb::AttachRequest {
    pb::AttachRequest {
        session_id: session_id.into(),
        origin: ORIGIN.into(),
        route_id: route_id.into(),
        after_seq,
        merge_deltas: false,
    }
}

/// A SendTextRequest at [`ORIGIN`].
pub fn send_text_request(session_id: &str, text: &str) -> pb::SendTextRequest {
    pb::SendTextRequest {
        session_id: session_id.into(),
        origin: ORIGIN.into(),
        text: text.into(),
    }
}

/// A SubmitToolResultRequest at [`ORIGIN`] answering one tool request.
pub fn submit_tool_result_request(
    session_id: &str,
    tool_request_id: &str,
    outcome: pb::submit_tool_result_request::Outcome,
) -> pb::SubmitToolResultRequest {
    pb::SubmitToolResultRequest {
        session_id: session_id.into(),
        origin: ORIGIN.into(),
        tool_request_id: tool_request_id.into(),
        outcome: Some(outcome),
    }
}

/// A tool outcome carrying `value` as the page's result.
pub fn tool_result(value: &serde_json::Value) -> pb::submit_tool_result_request::Outcome {
    pb::submit_tool_result_request::Outcome::Result(pedelec_common::json::to_value(value))
}

/// Attaches a route at [`ORIGIN`] (must succeed); the snapshot is left unread.
pub async fn attach(
    sessions: &mut Sessions,
    session_id: &str,
    route_id: &str,
    after_seq: Option<u64>,
) -> Events {
    Events(
        sessions
            .attach(attach_request(session_id, route_id, after_seq))
            .await
            .unwrap()
            .into_inner(),
    )
}

/// Attaches a route at [`ORIGIN`] and reads the snapshot, asserting it comes first.
pub async fn attach_past_snapshot(
    sessions: &mut Sessions,
    session_id: &str,
    route_id: &str,
) -> Events {
    let mut events = attach(sessions, session_id, route_id, None).await;
    assert!(matches!(
        events.next().await.event,
        Some(Event::Snapshot(_))
    ));
    events
}

/// The thread's snapshot through Get at [`ORIGIN`] (must succeed).
pub async fn snapshot(sessions: &mut Sessions, session_id: &str) -> pb::Snapshot {
    sessions
        .get(thread_request(session_id))
        .await
        .unwrap()
        .into_inner()
}

/// Polls Get until the thread has `status`; panics with `what` after [`crate::PATIENCE`].
pub async fn wait_for_status(
    sessions: &mut Sessions,
    session_id: &str,
    status: pb::SessionStatus,
    what: &str,
) -> pb::Snapshot {
    let deadline = Deadline::patience();
    loop {
        let snap = snapshot(sessions, session_id).await;
        if snap.status == status as i32 {
            return snap;
        }
        deadline.tick(what).await;
    }
}

/// The routes SessionService counts on the thread right now (List at [`ORIGIN`]).
pub async fn attached_routes(sessions: &mut Sessions, session_id: &str) -> u32 {
    sessions
        .list(pb::ListRequest {
            origin: Some(ORIGIN.into()),
        })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .iter()
        .find(|s| s.session_id == session_id)
        .map_or(0, |s| s.attached_routes)
}

/// Polls List until SessionService counts `routes` routes on the thread: a
/// dropped route is gone once the service has seen its stream close.
pub async fn wait_for_routes(sessions: &mut Sessions, session_id: &str, routes: u32) {
    let deadline = Deadline::patience();
    loop {
        let now = attached_routes(sessions, session_id).await;
        if now == routes {
            return;
        }
        deadline
            .tick(format!("{routes} routes on {session_id} (now {now})"))
            .await;
    }
}

/// The short name of each event, in order (see [`kind`]).
pub fn kinds(events: &[pb::SessionEvent]) -> Vec<String> {
    events.iter().map(kind).collect()
}

/// The figures of the first usage event among `events`, if any.
pub fn first_usage(events: &[pb::SessionEvent]) -> Option<pb::Usage> {
    events.iter().find_map(|e| match &e.event {
        Some(Event::Usage(u)) => Some(*u),
        _ => None,
    })
}

/// Settings whose "default" profile of each listed provider uses the given model.
pub fn settings_with_default_models(models: &[(&str, &str)]) -> pb::Settings {
    let mut settings = pb::Settings::default();
    for (provider, model) in models {
        settings.profiles.insert(
            provider.to_string(),
            pb::ProviderProfiles {
                levels: [(
                    "default".to_string(),
                    pb::EffortProfile {
                        model: model.to_string(),
                        effort: String::new(),
                    },
                )]
                .into(),
            },
        );
    }
    settings
}

/// The text of the completed chat messages among `events`, joined.
pub fn chat_text(events: &[pb::SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Chat(c)) => Some(c.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text of the streamed chat deltas among `events`, joined.
pub fn delta_text(events: &[pb::SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::ChatDelta(d)) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}
