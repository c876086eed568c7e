//! The dispatch loop: frames from stdin become concurrent requests, their
//! replies and attached sessions' events go to the one writer of stdout.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pedelec_common::json as pjson;
use pedelec_common::wire;
use pedelec_common::{Code, CodedError};
use pedelec_proto::v1 as pb;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::caller::Caller;
use crate::coalesce::Outgoing;
use crate::core::{self, Core};
use crate::error::HostError;
use crate::event_stream::EventStream;
use crate::frame::{self, FrameReader, Header, Inbound, MAX_INBOUND};
use crate::protocol::{self as p, Envelope, Request, ToolOutcome};

/// One gRPC call through `Core::call`, which needs the services `$needed`
/// and may retry it once after an auto-start (clients take the request by
/// value, so `Core::call` keeps it for that).
macro_rules! rpc {
    ($core:expr, $needed:expr, $client:ident . $method:ident ($req:expr)) => {
        $core
            .call($needed, $req, |req| {
                let mut client = $core.$client();
                async move { client.$method(req).await }
            })
            .await
    };
}

/// Queued outgoing messages; a full queue holds back event forwarding (and so
/// the gRPC streams) instead of dropping anything.
const OUT_QUEUE: usize = 4096;
/// At stdin's end, how long in-flight requests may still finish and be answered.
const EOF_GRACE: Duration = Duration::from_millis(400);
/// After a refusal, how long to keep refusing further frames before exiting.
const REFUSAL_LINGER: Duration = Duration::from_millis(300);
/// Requests in flight at most; reading stdin waits for one to finish.
pub const MAX_IN_FLIGHT: usize = 64;
/// Bytes of request frames in flight at most (their JSON as it arrived; a
/// request holds its frame's share until it is answered). A frame that does
/// not fit waits, its body unread, until requests in flight finish: reading
/// stdin stops (Chrome buffers) rather than the frame being refused, so the
/// extension's requests keep their order and none fails for the others'
/// size. The largest frame ([`MAX_INBOUND`]) always fits alone. What the
/// host's memory then peaks at: docs/native-messaging.md, "Figures".
pub const MAX_IN_FLIGHT_BYTES: usize = MAX_INBOUND as usize;

/// What the host does with the extension that started it.
pub enum Admission {
    /// One of the extensions this host was installed for: serve it through
    /// the services behind `Core`.
    Serve(Core),
    /// Answer every request with this error and exit: a caller this host
    /// was not installed for (NATIVE_HOST_UNAVAILABLE), or no runtime dir
    /// could be chosen (CORE_UNAVAILABLE).
    Refuse(HostError),
}

/// Serves stdin/stdout until stdin ends, as `admission` says.
pub async fn run<R, W>(stdin: R, stdout: W, caller: Caller, admission: Admission)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, queue) = mpsc::channel::<Outgoing>(OUT_QUEUE);
    let writer = tokio::spawn(async move {
        if let Err(e) = frame::write_loop(queue, stdout).await {
            tracing::warn!(error = %e, "stdout closed");
        }
    });
    let mut reader = FrameReader::new(stdin);
    pedelec_common::memory::spawn_trimmer();
    match admission {
        Admission::Serve(core) => serve(&mut reader, core, out, caller).await,
        Admission::Refuse(error) => {
            refuse(&mut reader, &out, &error).await;
            drop(out);
        }
    }
    // Every sender is gone now, so the writer drains its queue and stops.
    if tokio::time::timeout(Duration::from_millis(500), writer)
        .await
        .is_err()
    {
        tracing::warn!("stdout did not drain in time");
    }
}

async fn refuse<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    out: &mpsc::Sender<Outgoing>,
    error: &HostError,
) {
    // Wait a while for the extension's first request so it learns why; then
    // answer whatever else is already on its way and leave.
    let mut wait = Duration::from_secs(5);
    loop {
        let next = match tokio::time::timeout(wait, reader.next()).await {
            Ok(Ok(Some(next))) => next,
            _ => return,
        };
        let id = match next {
            Inbound::Frame(body) => match p::parse(&body) {
                Ok(env) => env.id,
                Err(rejected) => rejected.id,
            },
            Inbound::BadLength(_) => Value::Null,
        };
        let _ = out.send(p::error_reply(&id, error).into()).await;
        wait = REFUSAL_LINGER;
    }
}

struct Host {
    core: Core,
    /// The extension that started the host: only its own pages may use the
    /// extension-only requests.
    caller: Caller,
    out: mpsc::Sender<Outgoing>,
    attached: Mutex<HashMap<String, Attachment>>,
    generation: AtomicU64,
}

/// A session's stream, registered (as `Opening`) before the stream is
/// opened, so a detach that comes meanwhile finds it and cancels the open.
struct Attachment {
    generation: u64,
    /// The page origin that attached; only it may detach.
    origin: String,
    state: Stream,
}

/// What `Host::prepare` did for a request before it was spawned.
enum Early {
    None,
    Attach(Result<Registration, HostError>),
    Detach(Result<Option<Attachment>, HostError>),
}

struct Registration {
    generation: u64,
    cancelled: oneshot::Receiver<()>,
    replaced: Option<Attachment>,
}

enum Stream {
    /// Attach is opening the stream; firing (or dropping) the sender makes it
    /// give up and drop whatever it opened.
    Opening(oneshot::Sender<()>),
    /// Events are being forwarded.
    Forwarding(JoinHandle<()>),
}

impl Attachment {
    /// Stops it; once this returns no event of it is sent any more.
    async fn stop(self) {
        match self.state {
            Stream::Opening(cancel) => {
                // Attach sees it is no longer registered before it answers or
                // forwards anything (both happen under the lock).
                let _ = cancel.send(());
            }
            Stream::Forwarding(task) => {
                task.abort();
                let _ = task.await;
            }
        }
    }
}

async fn serve<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    core: Core,
    out: mpsc::Sender<Outgoing>,
    caller: Caller,
) {
    let host = Arc::new(Host {
        core,
        caller,
        out,
        attached: Mutex::new(HashMap::new()),
        generation: AtomicU64::new(0),
    });
    let mut requests = JoinSet::new();
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES));
    loop {
        // Wait for a slot before reading, so at most MAX_IN_FLIGHT frames are held.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let header = match reader.header().await {
            Ok(Some(header)) => header,
            Ok(None) => {
                tracing::info!("stdin closed; detaching everything");
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "stdin ended inside a frame; detaching everything");
                break;
            }
        };
        while requests.try_join_next().is_some() {}
        // And room for its bytes before reading its body, so at most
        // MAX_IN_FLIGHT_BYTES of frames are held.
        let (body, bytes) = match header {
            Header::Length(len) => {
                let bytes = room_for(&budget, len).await;
                match reader.body(len).await {
                    Ok(body) => (body, bytes),
                    Err(e) => {
                        tracing::warn!(error = %e, "stdin ended inside a frame; detaching everything");
                        break;
                    }
                }
            }
            Header::BadLength(len) => {
                let error = if len == 0 {
                    HostError::invalid("empty frame (length 0)")
                } else {
                    HostError::MessageTooLarge {
                        len,
                        limit: MAX_INBOUND,
                    }
                };
                tracing::warn!(len, "bad frame length");
                host.send(p::error_reply(&Value::Null, &error)).await;
                continue;
            }
        };
        let parsed = p::parse(&body);
        let frame_len = body.len();
        // The request holds what it parsed; the frame's bytes go now.
        drop(body);
        match parsed {
            Ok(env) => {
                // Attach and detach change the attachments here, in frame
                // order, so a detach right after an attach always finds it.
                let early = host.prepare(&env).await;
                let host = host.clone();
                requests.spawn(async move {
                    host.handle(env, early).await;
                    drop((permit, bytes));
                });
            }
            Err(rejected) => {
                tracing::warn!(id = %rejected.id, error = %rejected.error, bytes = frame_len, "bad request");
                host.send(p::error_reply(&rejected.id, &rejected.error))
                    .await;
            }
        }
    }
    host.detach_all().await;
    // Let requests already running answer, within a bound.
    let _ = tokio::time::timeout(EOF_GRACE, async {
        while requests.join_next().await.is_some() {}
    })
    .await;
    requests.shutdown().await;
    host.detach_all().await;
}

/// `len` bytes of the in-flight budget, waiting (and saying so) while the
/// requests in flight hold too much of it.
async fn room_for(budget: &Arc<Semaphore>, len: u64) -> OwnedSemaphorePermit {
    // len <= MAX_INBOUND (64 MiB), far below u32::MAX.
    let n = u32::try_from(len).unwrap_or(u32::MAX);
    if let Ok(bytes) = budget.clone().try_acquire_many_owned(n) {
        return bytes;
    }
    tracing::info!(
        frame_bytes = len,
        held_bytes = MAX_IN_FLIGHT_BYTES - budget.available_permits(),
        limit = MAX_IN_FLIGHT_BYTES,
        "requests in flight hold the byte budget; reading the next frame once they have room"
    );
    budget
        .clone()
        .acquire_many_owned(n)
        .await
        .expect("the budget is never closed")
}

impl Host {
    async fn send(&self, message: String) {
        // Fails only when the writer is gone (stdout closed): nothing to tell.
        let _ = self.out.send(message.into()).await;
    }

    /// The part of attach and detach that runs in the reader loop, in frame
    /// order: registering the attachment, or taking it away.
    async fn prepare(&self, env: &Envelope) -> Early {
        match &env.request {
            Request::Attach(a) => Early::Attach(self.register(&env.origin, &a.session_id).await),
            Request::Detach { session_id } => {
                Early::Detach(self.take(&env.origin, session_id).await)
            }
            _ => Early::None,
        }
    }

    async fn handle(self: Arc<Self>, env: Envelope, early: Early) {
        let kind = env.request.type_name();
        let id = env.id.clone();
        // A web page's errors pass the one sanitizer (no local path but its
        // own); the extension's own pages are the user's and see them whole.
        let page_keep = (!self.is_own_page(&env.origin)).then(|| env.request.given_paths());
        let error_reply = |e: &HostError| match &page_keep {
            Some(keep) => {
                let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
                p::page_error_reply(&id, e, &keep)
            }
            None => p::error_reply(&id, e),
        };
        tracing::debug!(%id, kind, origin = %env.origin, "request");
        let result = match (env.request, early) {
            (Request::Attach(attach), Early::Attach(registered)) => {
                // Answers itself: the reply must precede the stream's events.
                let attached = match registered {
                    Ok(reg) => self.clone().attach(&id, &env.origin, attach, reg).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = attached {
                    tracing::info!(%id, kind, code = %e.code(), error = %e, "request failed");
                    self.send(error_reply(&e)).await;
                }
                return;
            }
            (Request::Detach { session_id }, Early::Detach(taken)) => match taken {
                Ok(Some(a)) => {
                    // Awaited so no event of this stream follows the reply.
                    a.stop().await;
                    Ok(json!({"sessionId": session_id, "detached": true}))
                }
                Ok(None) => Ok(json!({"sessionId": session_id, "detached": false})),
                Err(e) => Err(e),
            },
            (request, _) => self.dispatch(&env.origin, request).await,
        };
        let reply = match result {
            Ok(result) => p::ok_reply(&id, result),
            Err(e) => {
                tracing::info!(%id, kind, code = %e.code(), error = %e, "request failed");
                error_reply(&e)
            }
        };
        self.send(reply).await;
    }

    /// The extension-only requests (settings with credentials, site grants,
    /// every origin's sessions): only the extension's own pages (see
    /// `Caller::owns_page`) may send them, never a web page's route. The one
    /// place this is checked.
    fn own_pages_only(&self, origin: &str, request: &Request) -> Result<(), HostError> {
        if !request.extension_only() || self.is_own_page(origin) {
            return Ok(());
        }
        Err(HostError::ExtensionOnly {
            request: request.type_name(),
            origin: origin.to_string(),
            extension: self.caller.own_origin(),
        })
    }

    /// Whether `origin` is the extension's own page (popup, settings).
    fn is_own_page(&self, origin: &str) -> bool {
        self.caller.owns_page(origin)
    }

    async fn dispatch(&self, origin: &str, request: Request) -> Result<Value, HostError> {
        self.own_pages_only(origin, &request)?;
        let core = &self.core;
        let ended = |r: tonic::Response<pb::EndSiteSessionsResponse>| json!({"endedSessionIds": r.into_inner().ended_session_ids});
        let thread = |session_id: &str| pb::ThreadRequest {
            session_id: session_id.to_string(),
            origin: origin.to_string(),
        };
        let snapshot =
            |s: tonic::Response<pb::Snapshot>| json!({"snapshot": wire::snapshot(s.get_ref())});
        Ok(match request {
            Request::Hello { protocol_version } => {
                if protocol_version != p::PROTOCOL_VERSION {
                    return Err(HostError::ProtocolMismatch {
                        host: p::PROTOCOL_VERSION,
                        client: protocol_version,
                    });
                }
                json!({
                    "hostVersion": env!("CARGO_PKG_VERSION"),
                    "protocolVersion": p::PROTOCOL_VERSION,
                    "capabilities": p::CAPABILITIES,
                    "coreRunning": core.is_running().await,
                    "userName": pedelec_common::process::user_name().unwrap_or_default(),
                })
            }
            Request::Ping => json!({
                "pong": true,
                "version": env!("CARGO_PKG_VERSION"),
                "protocolVersion": p::PROTOCOL_VERSION,
                "coreRunning": core.is_running().await,
            }),
            Request::ListProviders => {
                let r = rpc!(
                    core,
                    core::PROVIDER,
                    provider.list_providers(pb::ListProvidersRequest {
                        include_models: self.is_own_page(origin),
                    })
                )?;
                let providers: Vec<Value> = r
                    .get_ref()
                    .providers
                    .iter()
                    .map(wire::provider_info)
                    .collect();
                json!({"providers": providers})
            }
            Request::GetFullSettings => {
                let r = rpc!(
                    core,
                    core::PROVIDER,
                    provider.get_full_settings(pb::GetSettingsRequest {})
                )?;
                wire::masked_settings(r.get_ref())
            }
            Request::UpdateSettings(update) => {
                // Only the fields the page changed, named in the mask: never a
                // rewrite of settings it read earlier (that would undo a
                // concurrent change of another field). The page never sees keys.
                let r = match p::settings_update_request(update) {
                    Some(req) => rpc!(core, core::PROVIDER, provider.update_settings(req))?,
                    None => rpc!(
                        core,
                        core::PROVIDER,
                        provider.get_full_settings(pb::GetSettingsRequest {})
                    )?,
                };
                wire::masked_settings(r.get_ref())
            }
            Request::GetSettings => {
                // Only the public part: full settings hold credentials.
                let r = rpc!(
                    core,
                    core::PROVIDER,
                    provider.get_settings(pb::GetSettingsRequest {})
                )?;
                json!({"defaultProvider": r.get_ref().default_provider})
            }
            Request::CreateSession(c) => {
                let req = pb::CreateSessionRequest {
                    origin: origin.to_string(),
                    provider: c.provider,
                    effort_level: c.effort_level,
                    model: c.model,
                    skills: c.skills.as_ref().map(pjson::to_struct),
                    auto_end_on_disconnect: c.auto_end_on_disconnect,
                    workspace_path: c.workspace.map(|w| w.path),
                };
                let r = rpc!(core, core::SESSION_PROVIDER, session.create_session(req))?;
                let r = r.get_ref();
                json!({
                    "sessionId": r.session_id,
                    "provider": r.provider,
                    "effortLevel": r.effort_level,
                    "snapshot": r.snapshot.as_ref().map(wire::snapshot).unwrap_or(Value::Null),
                })
            }
            Request::Attach(_) | Request::Detach { .. } => {
                return Err(HostError::Internal(
                    "attach and detach are handled with their early part".into(),
                ));
            }
            Request::SendText { session_id, text } => {
                let req = pb::SendTextRequest {
                    session_id,
                    origin: origin.to_string(),
                    text,
                };
                let r = rpc!(core, core::SESSION, session.send_text(req))?;
                json!({"operationId": r.get_ref().operation_id})
            }
            Request::Prepare { session_id } => {
                let req = pb::PrepareRequest {
                    session_id,
                    origin: origin.to_string(),
                };
                let r = rpc!(core, core::SESSION, session.prepare(req))?;
                json!({"operationId": r.get_ref().operation_id})
            }
            Request::Cancel { session_id } => {
                let r = rpc!(core, core::SESSION, session.cancel(thread(&session_id)))?;
                let op = &r.get_ref().operation_id;
                json!({"operationId": if op.is_empty() { Value::Null } else { json!(op) }})
            }
            Request::End { session_id, reason } => {
                let req = pb::EndRequest {
                    session_id,
                    origin: origin.to_string(),
                    reason: reason as i32,
                };
                snapshot(rpc!(core, core::SESSION, session.end(req))?)
            }
            Request::Reactivate { session_id } => snapshot(rpc!(
                core,
                core::SESSION,
                session.reactivate(thread(&session_id))
            )?),
            Request::GetSession { session_id } => {
                snapshot(rpc!(core, core::SESSION, session.get(thread(&session_id)))?)
            }
            Request::GetHistory(h) => {
                // SessionService lets only the thread's own origin read it;
                // the entries' errors pass wire's page rules as events' do.
                let req = pb::GetHistoryRequest {
                    session_id: h.session_id,
                    origin: origin.to_string(),
                    before: h.before,
                    limit: h.limit,
                };
                wire::history(rpc!(core, core::SESSION, session.get_history(req))?.get_ref())
            }
            Request::SubmitToolResult(s) => {
                let outcome = match s.outcome {
                    ToolOutcome::Result(v) => {
                        pb::submit_tool_result_request::Outcome::Result(pjson::to_value(&v))
                    }
                    ToolOutcome::Error {
                        code,
                        message,
                        details,
                    } => pb::submit_tool_result_request::Outcome::Error(pb::ToolError {
                        code,
                        message,
                        details: details.as_ref().map(pjson::to_value),
                    }),
                };
                let req = pb::SubmitToolResultRequest {
                    session_id: s.session_id,
                    origin: origin.to_string(),
                    tool_request_id: s.tool_request_id,
                    outcome: Some(outcome),
                };
                rpc!(core, core::SESSION, session.submit_tool_result(req))?;
                json!({})
            }
            Request::CreateUploadTicket(t) => {
                let req = pb::CreateUploadTicketRequest {
                    session_id: t.session_id,
                    origin: origin.to_string(),
                    target_path: t.target_path,
                    name: t.name,
                    size_bytes: t.size_bytes,
                    content_type: t.content_type,
                };
                let r = rpc!(core, core::ASSETS, asset.create_upload_ticket(req))?;
                wire::ticket(r.get_ref())
            }
            Request::CreateDownloadTicket(t) => {
                let req = pb::CreateDownloadTicketRequest {
                    session_id: t.session_id,
                    origin: origin.to_string(),
                    path: t.path,
                };
                let r = rpc!(core, core::ASSETS, asset.create_download_ticket(req))?;
                wire::ticket(r.get_ref())
            }
            Request::ListAssets { session_id } => {
                let req = pb::ListAssetsRequest {
                    session_id,
                    origin: origin.to_string(),
                };
                let r = rpc!(core, core::ASSETS, asset.list(req))?;
                let assets: Vec<Value> = r.get_ref().assets.iter().map(wire::asset).collect();
                json!({"assets": assets})
            }
            Request::ListSites => {
                let r = rpc!(
                    core,
                    core::SESSION,
                    session.list_sites(pb::ListSitesRequest {})
                )?;
                let sites: Vec<Value> = r.get_ref().sites.iter().map(wire::site).collect();
                json!({"sites": sites})
            }
            Request::GrantSite(site) => {
                let req = pb::GrantSiteRequest { site: Some(site) };
                let r = rpc!(core, core::SESSION, session.grant_site(req))?;
                json!({"site": wire::site(r.get_ref())})
            }
            Request::BlockSite { site } => {
                let req = pb::SiteRequest { origin: site };
                let r = rpc!(core, core::SESSION, session.block_site(req))?;
                json!({"site": wire::site(r.get_ref())})
            }
            Request::RevokeSite { site } => {
                let req = pb::SiteRequest { origin: site };
                ended(rpc!(core, core::SESSION, session.revoke_site(req))?)
            }
            Request::EndSiteSessions { site } => {
                let req = pb::SiteRequest { origin: site };
                ended(rpc!(core, core::SESSION, session.end_site_sessions(req))?)
            }
            Request::ListSessions => {
                // Every origin's threads: the popup's "sites with running sessions".
                let req = pb::ListRequest { origin: None };
                let r = rpc!(core, core::SESSION, session.list(req))?;
                let sessions: Vec<Value> = r
                    .get_ref()
                    .sessions
                    .iter()
                    .map(wire::site_session)
                    .collect();
                json!({"sessions": sessions})
            }
        })
    }

    /// Opens the Attach stream, answers with its snapshot, then forwards its
    /// events until detach, the stream's end or stdin's end. A second attach
    /// of the same session replaces the first (the extension multiplexes its
    /// routes over one native port). The session is registered before the
    /// stream opens, so a detach sent right after the attach cancels it.
    /// Registers an attachment as opening, replacing the session's current
    /// one (of the same origin only).
    async fn register(&self, origin: &str, session_id: &str) -> Result<Registration, HostError> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (cancel, cancelled) = oneshot::channel();
        let mut attached = self.attached.lock().await;
        if let Some(other) = attached.get(session_id)
            && other.origin != origin
        {
            return Err(access_denied(session_id));
        }
        let replaced = attached.insert(
            session_id.to_string(),
            Attachment {
                generation,
                origin: origin.to_string(),
                state: Stream::Opening(cancel),
            },
        );
        Ok(Registration {
            generation,
            cancelled,
            replaced,
        })
    }

    async fn attach(
        self: Arc<Self>,
        id: &Value,
        origin: &str,
        attach: p::Attach,
        reg: Registration,
    ) -> Result<(), HostError> {
        let session_id = attach.session_id;
        let merge = attach.merge_deltas;
        let Registration {
            generation,
            mut cancelled,
            replaced,
        } = reg;
        if let Some(old) = replaced {
            old.stop().await;
        }
        let route_id = attach
            .route_id
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| format!("native-host-{}-{generation}", std::process::id()));
        let req = pb::AttachRequest {
            session_id: session_id.clone(),
            origin: origin.to_string(),
            route_id,
            after_seq: attach.after_seq,
            merge_deltas: attach.merge_deltas,
        };
        let open = async {
            let core = &self.core;
            let mut stream = core
                .call(core::SESSION, req, |req| {
                    EventStream::open(core.session_channel(), req)
                })
                .await?;
            let first = stream
                .message()
                .await
                .map_err(|s| HostError::from_status(&s))?
                .ok_or_else(|| {
                    HostError::Internal("Attach stream ended before its snapshot".into())
                })?;
            match &first.event {
                Some(pb::session_event::Event::Snapshot(snap)) => {
                    let gap = snap.replay_gap.then(|| first.clone());
                    Ok((stream, snap.clone(), gap))
                }
                _ => Err(HostError::Internal(
                    "Attach stream did not start with a snapshot".into(),
                )),
            }
        };
        let opened = tokio::select! {
            opened = open => opened,
            _ = &mut cancelled => Err(superseded(&session_id)),
        };
        let mut attached = self.attached.lock().await;
        let current = attached
            .get(&session_id)
            .is_some_and(|a| a.generation == generation);
        let (stream, snap, gap) = match opened {
            Ok(_) if !current => return Err(superseded(&session_id)),
            Ok(opened) => opened,
            Err(e) => {
                if current {
                    attached.remove(&session_id);
                }
                return Err(e);
            }
        };
        // Queued under the lock, so no event of this stream can precede it,
        // and a detach waiting for the lock finds the stream forwarding.
        self.send(p::ok_reply(
            id,
            json!({"sessionId": session_id, "snapshot": wire::snapshot(&snap)}),
        ))
        .await;
        // Events the route asked for are gone: say so as an event too, where a
        // client following the event stream reconciles (docs §4).
        if let Some(frame) = gap.as_ref().and_then(p::event_frame) {
            self.send(frame).await;
        }
        let host = self.clone();
        let sid = session_id.clone();
        let task = tokio::spawn(async move { host.forward(sid, generation, stream, merge).await });
        if let Some(a) = attached.get_mut(&session_id) {
            a.state = Stream::Forwarding(task);
        }
        Ok(())
    }

    async fn forward(
        self: Arc<Self>,
        session_id: String,
        generation: u64,
        mut stream: EventStream,
        merge: bool,
    ) {
        let (reason, error) = loop {
            match stream.message().await {
                Ok(Some(event)) => {
                    let event = Box::new(event);
                    if self
                        .out
                        .send(Outgoing::Event { event, merge })
                        .await
                        .is_err()
                    {
                        return; // stdout is gone
                    }
                }
                Ok(None) => break ("stream_ended", None),
                Err(status) => break ("stream_failed", Some(HostError::from_status(&status))),
            }
        };
        tracing::info!(session = %session_id, reason, "attached stream stopped");
        let mut attached = self.attached.lock().await;
        if attached
            .get(&session_id)
            .is_some_and(|a| a.generation == generation)
        {
            attached.remove(&session_id);
            self.send(p::detached_frame(&session_id, reason, error.as_ref()))
                .await;
        }
    }

    /// Takes the session's attachment away (stopping it is the caller's);
    /// None when it was not attached. Only the origin that attached may
    /// detach: detaching can end a session (autoEndOnDisconnect).
    async fn take(&self, origin: &str, session_id: &str) -> Result<Option<Attachment>, HostError> {
        let mut attached = self.attached.lock().await;
        match attached.get(session_id) {
            None => Ok(None),
            Some(a) if a.origin != origin => Err(access_denied(session_id)),
            Some(_) => Ok(attached.remove(session_id)),
        }
    }

    async fn detach_all(&self) {
        let all: Vec<Attachment> = self.attached.lock().await.drain().map(|(_, a)| a).collect();
        // Abort every stream first, then wait for them all.
        for a in &all {
            if let Stream::Forwarding(task) = &a.state {
                task.abort();
            }
        }
        for a in all {
            a.stop().await;
        }
    }
}

fn access_denied(session_id: &str) -> HostError {
    HostError::Service(
        CodedError::new(
            Code::THREAD_ACCESS_DENIED,
            format!("session {session_id} is attached by another origin"),
        )
        .with_details(json!({"sessionId": session_id})),
    )
}

fn superseded(session_id: &str) -> HostError {
    HostError::Service(
        CodedError::new(
            Code::CANCELLED,
            format!("attach of {session_id} was cancelled by a detach or a later attach"),
        )
        .with_details(json!({"sessionId": session_id})),
    )
}
