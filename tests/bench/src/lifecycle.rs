//! create_session, attach and end: through the native host and straight to
//! SessionService.

use std::time::Instant;

use pb::session_event::Event;
use pedelec_common::json::to_struct;
use pedelec_proto::v1 as pb;
use serde_json::json;

use crate::Config;
use crate::env::{ORIGIN, PATIENCE};
use crate::host::Host;
use crate::measure::us;
use crate::report::{Row, Target};
use crate::sessions::{Sessions, attach_request, skills, thread};

pub(crate) async fn lifecycle_host(cfg: &Config, host: &mut Host) -> Result<Vec<Row>, String> {
    let n = cfg.n(200, 20);
    let (mut create, mut attach, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let t = Instant::now();
        let created = host
            .call(
                "create_session",
                json!({"provider": "ollama", "skills": skills(), "autoEndOnDisconnect": false}),
            )
            .await?;
        let c = t.elapsed();
        let id = created["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_string();
        let t = Instant::now();
        let attached = host.call("attach", json!({"sessionId": id})).await?;
        let a = t.elapsed();
        if attached["snapshot"]["status"] != "idle" {
            return Err(format!(
                "attach reply without the idle snapshot: {attached}"
            ));
        }
        let t = Instant::now();
        host.call("end", json!({"sessionId": id})).await?;
        let e = t.elapsed();
        host.call("detach", json!({"sessionId": id})).await?;
        if i >= 10 {
            create.push(us(c));
            attach.push(us(a));
            end.push(us(e));
        }
    }
    host.drain();
    Ok(vec![
        Row::latency(
            "create_session.host",
            "create_session (ollama, one tool, no provider start) through the native host",
            create,
        )
        .target(
            Target::Latency {
                p50: 400.0,
                p99: None,
            },
            "p50 ≤ 400 µs",
        )
        .floor("floor.host_hop"),
        Row::latency(
            "attach.host",
            "attach through the native host (reply carries the first snapshot)",
            attach,
        )
        .target(
            Target::Latency {
                p50: 200.0,
                p99: None,
            },
            "p50 ≤ 200 µs",
        )
        .floor("floor.host_hop"),
        Row::latency("end.host", "end through the native host", end).floor("floor.host_hop"),
    ])
}

pub(crate) async fn lifecycle_grpc(
    cfg: &Config,
    sessions: &mut Sessions,
) -> Result<Vec<Row>, String> {
    let n = cfg.n(200, 20);
    let (mut create, mut attach, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 10 {
        let t = Instant::now();
        let created = sessions
            .create_session(pb::CreateSessionRequest {
                origin: ORIGIN.into(),
                provider: Some("ollama".into()),
                skills: Some(to_struct(skills().as_object().unwrap())),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("CreateSession: {e}"))?
            .into_inner();
        let c = t.elapsed();
        let t = Instant::now();
        let mut stream = sessions
            .attach(attach_request(&created.session_id, "bench-lifecycle"))
            .await
            .map_err(|e| format!("Attach: {e}"))?
            .into_inner();
        let first = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .map_err(|_| "no snapshot")?
            .map_err(|e| e.to_string())?;
        let a = t.elapsed();
        if !matches!(first.and_then(|e| e.event), Some(Event::Snapshot(_))) {
            return Err("first Attach message is not a snapshot".into());
        }
        let t = Instant::now();
        sessions
            .end(pedelec_proto::v1::EndRequest::from(thread(
                &created.session_id,
            )))
            .await
            .map_err(|e| format!("End: {e}"))?;
        let e = t.elapsed();
        drop(stream);
        if i >= 10 {
            create.push(us(c));
            attach.push(us(a));
            end.push(us(e));
        }
    }
    Ok(vec![
        Row::latency(
            "create_session.grpc",
            "CreateSession straight to SessionService",
            create,
        )
        .floor("floor.grpc_unary"),
        Row::latency(
            "attach.grpc",
            "Attach straight to SessionService, until the first snapshot",
            attach,
        )
        .floor("floor.grpc_unary"),
        Row::latency("end.grpc", "End straight to SessionService", end).floor("floor.grpc_unary"),
    ])
}
