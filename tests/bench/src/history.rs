//! The history group: GetHistory of the newest 1,000 entries of a thread
//! whose history holds 2,000 (docs/history.md), over gRPC — SessionService's
//! read, one socket hop, the decode.

use std::time::{Duration, Instant};

use pb::session_event::Event;
use pedelec_common::ServiceName;
use pedelec_common::json::to_struct;
use pedelec_proto::v1 as pb;

use crate::Config;
use crate::env::{BenchEnv, ORIGIN, stop};
use crate::report::{Row, Target};
use crate::sessions::{
    Sessions, attach_request, next_event, send_text, skills, stub_agent_settings,
};

/// Entries the thread's history holds: operation_started, the user's text,
/// this many messages, operation_finished.
const MESSAGES: u32 = 1_997;
const HELD: u32 = MESSAGES + 3;

pub(crate) async fn history_phase(cfg: &Config) -> Result<Vec<Row>, String> {
    let env = BenchEnv::new(&cfg.release)?;
    let mut launcher = env.spawn_up("launcher.log")?;
    let result = read_1000(cfg, &env).await;
    stop(&mut launcher);
    result
}

async fn read_1000(cfg: &Config, env: &BenchEnv) -> Result<Vec<Row>, String> {
    env.wait_serving(Duration::from_millis(5)).await?;
    env.grant(ORIGIN).await?;
    let provider = pedelec_common::uds::connect(&env.socket(ServiceName::Provider))
        .await
        .map_err(|e| e.to_string())?;
    stub_agent_settings(provider).await?;
    let session = pedelec_common::uds::connect(&env.socket(ServiceName::Session))
        .await
        .map_err(|e| e.to_string())?;
    let mut sessions = Sessions::new(session);
    let id = sessions
        .create_session(pb::CreateSessionRequest {
            origin: ORIGIN.into(),
            provider: Some("ollama".into()),
            skills: Some(to_struct(skills().as_object().unwrap())),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("CreateSession: {e}"))?
        .into_inner()
        .session_id;
    let mut stream = sessions
        .attach(attach_request(&id, "bench-history"))
        .await
        .map_err(|e| format!("Attach: {e}"))?
        .into_inner();
    send_text(&mut sessions, &id, format!("@@chats {MESSAGES}")).await?;
    while !matches!(
        next_event(&mut stream).await?.event,
        Some(Event::OperationFinished(_))
    ) {}
    drop(stream);
    let request = |before| pb::GetHistoryRequest {
        session_id: id.clone(),
        origin: ORIGIN.into(),
        before,
        limit: 1_000,
    };
    let whole = sessions
        .get_history(request(0))
        .await
        .map_err(|e| format!("GetHistory: {e}"))?
        .into_inner();
    let oldest = sessions
        .get_history(request(whole.entries.first().map_or(0, |e| e.id)))
        .await
        .map_err(|e| format!("GetHistory: {e}"))?
        .into_inner();
    let held = whole.entries.len() + oldest.entries.len();
    if whole.entries.len() != 1_000 || held != HELD as usize || oldest.has_more {
        return Err(format!(
            "the history holds {held} entries (newest page {}), not {HELD}",
            whole.entries.len()
        ));
    }
    let n = cfg.n(200, 30);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 5 {
        let t = Instant::now();
        let page = sessions
            .get_history(request(0))
            .await
            .map_err(|e| format!("GetHistory: {e}"))?
            .into_inner();
        let took = t.elapsed();
        if page.entries.len() != 1_000 {
            return Err(format!("a page of {} entries", page.entries.len()));
        }
        if i >= 5 {
            samples.push(took.as_secs_f64() * 1e6);
        }
    }
    let _ = sessions
        .end(pb::EndRequest::from(crate::sessions::thread(&id)))
        .await;
    Ok(vec![
        Row::latency(
            "history.read_1000",
            format!("GetHistory of the newest 1,000 of {HELD} entries over gRPC"),
            samples,
        )
        .target(
            Target::Latency {
                p50: 5_000.0,
                p99: None,
            },
            "<= 5 ms",
        ),
    ])
}
