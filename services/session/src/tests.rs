//! SessionService's state machine in-process: `Sessions` over fake
//! ProviderService and ToolBridgeService served on sockets in a temp dir, so
//! end, cancel, reactivate, auto-end and eviction are tested without the
//! other processes (the cross-process tests in `tests/` run the real ones).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pb::provider_event::Event as ProviderEvent;
use pb::provider_service_server::{ProviderService, ProviderServiceServer};
use pb::session_event::Event;
use pb::tool_bridge_service_server::{ToolBridgeService, ToolBridgeServiceServer};
use pedelec_common::{DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::record::Workspace;
use crate::settings::Current;
use crate::{Config, SessionError, Sessions, Upstream};

type Reply<T> = Result<Response<T>, Status>;
type Events<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

const ORIGIN: &str = "https://app.example";
/// An effort level for which the fake ProviderService answers that the
/// default provider is not installed.
const UNINSTALLED: &str = "uninstalled";

/// What the fakes saw, and the turns they are running.
#[derive(Default)]
struct Seen {
    /// One sender per RunTurn: the test plays the agent through it.
    turns: Vec<mpsc::Sender<Result<pb::ProviderEvent, Status>>>,
    /// (session id, keep_manifest) of every Drop.
    drops: Vec<(String, bool)>,
    registered: Vec<String>,
    /// The tool token every Register carried ("" for none).
    register_tokens: Vec<String>,
    /// ResolveProfile calls.
    resolved: usize,
    /// Register answers as a bridge that is down would.
    refuse_register: bool,
    /// `native_tools` of every RenderPrompt.
    rendered: Vec<bool>,
}

#[derive(Clone)]
struct Fakes {
    seen: Arc<Mutex<Seen>>,
    /// The settings the fake ProviderService holds: ResolveProfile resolves
    /// from them, WatchSettings sends them at once and every change.
    settings: Arc<watch::Sender<pb::ProfileSettings>>,
    /// WatchSettings answers only while this is true (ProviderService not up
    /// yet, as far as the watch can tell), and its stream ends when it turns
    /// false (ProviderService restarting).
    watch_open: Arc<watch::Sender<bool>>,
}

impl Fakes {
    fn new(watch_open: bool) -> Self {
        Fakes {
            seen: Arc::default(),
            settings: Arc::new(watch::channel(pb::ProfileSettings::default()).0),
            watch_open: Arc::new(watch::channel(watch_open).0),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }
}

#[tonic::async_trait]
impl ProviderService for Fakes {
    async fn list_providers(
        &self,
        _: Request<pb::ListProvidersRequest>,
    ) -> Reply<pb::ListProvidersResponse> {
        Err(Status::unimplemented("not needed"))
    }
    async fn get_settings(&self, _: Request<pb::GetSettingsRequest>) -> Reply<pb::PublicSettings> {
        Err(Status::unimplemented("not needed"))
    }
    async fn get_full_settings(&self, _: Request<pb::GetSettingsRequest>) -> Reply<pb::Settings> {
        Err(Status::unimplemented("not needed"))
    }
    async fn update_settings(&self, _: Request<pb::UpdateSettingsRequest>) -> Reply<pb::Settings> {
        Err(Status::unimplemented("not needed"))
    }
    async fn resolve_profile(
        &self,
        req: Request<pb::ResolveProfileRequest>,
    ) -> Reply<pb::ResolvedProfile> {
        let req = req.into_inner();
        self.seen().resolved += 1;
        // A named provider as the real service resolves it.
        if let Some(code) = req.provider.as_deref() {
            let level = req.effort_level.as_deref();
            return pedelec_settings::resolve_named(&self.settings.borrow(), code, level)
                .map(Response::new)
                .map_err(|e| e.to_coded().to_status());
        }
        if req.effort_level.as_deref() == Some(UNINSTALLED) {
            return Err(pedelec_common::status_with_code(
                pedelec_common::Code::DEFAULT_PROVIDER_UNAVAILABLE,
                "not installed",
            ));
        }
        Ok(Response::new(pb::ResolvedProfile {
            provider: "codex".into(),
            effort_level: "default".into(),
            model: String::new(),
            effort: String::new(),
            native_tools: false,
        }))
    }
    type WatchSettingsStream = Events<pb::ProfileSettings>;
    /// Sends the settings and ignores the acks: the fake's UpdateSettings,
    /// which would wait for them, is not needed.
    async fn watch_settings(
        &self,
        _: Request<tonic::Streaming<pb::SettingsAck>>,
    ) -> Reply<Self::WatchSettingsStream> {
        let mut open = self.watch_open.subscribe();
        let _ = open.wait_for(|open| *open).await;
        let mut settings = self.settings.subscribe();
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let current = settings.borrow_and_update().clone();
                if tx.send(Ok(current)).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = settings.changed() => if changed.is_err() {
                        return;
                    },
                    _ = open.wait_for(|open| !*open) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
    type RunTurnStream = Events<pb::ProviderEvent>;
    async fn run_turn(&self, _: Request<pb::RunTurnRequest>) -> Reply<Self::RunTurnStream> {
        let (tx, rx) = mpsc::channel(16);
        self.seen().turns.push(tx);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
    async fn cancel_turn(
        &self,
        _: Request<pb::CancelTurnRequest>,
    ) -> Reply<pb::CancelTurnResponse> {
        Err(Status::unimplemented("not needed"))
    }
}

#[tonic::async_trait]
impl ToolBridgeService for Fakes {
    async fn register(
        &self,
        req: Request<pb::RegisterToolsRequest>,
    ) -> Reply<pb::RegisterToolsResponse> {
        if self.seen().refuse_register {
            return Err(Status::unavailable("the bridge is down"));
        }
        let req = req.into_inner();
        let mut seen = self.seen();
        seen.registered.push(req.session_id);
        seen.register_tokens.push(req.tool_token.clone());
        // As the real bridge: the token given, else a new one.
        let tool_token = if req.tool_token.is_empty() {
            format!("minted-{}", seen.register_tokens.len())
        } else {
            req.tool_token
        };
        Ok(Response::new(pb::RegisterToolsResponse {
            tool_token,
            tool_count: 0,
        }))
    }
    async fn render_prompt(
        &self,
        req: Request<pb::RenderPromptRequest>,
    ) -> Reply<pb::RenderPromptResponse> {
        self.seen().rendered.push(req.into_inner().native_tools);
        Ok(Response::new(pb::RenderPromptResponse::default()))
    }
    async fn get_tool_spec(&self, _: Request<pb::GetToolSpecRequest>) -> Reply<pb::ToolSpec> {
        Err(Status::unimplemented("not needed"))
    }
    async fn list_tools(&self, _: Request<pb::ListToolsRequest>) -> Reply<pb::ListToolsResponse> {
        Err(Status::unimplemented("not needed"))
    }
    async fn call_tool(&self, _: Request<pb::CallToolRequest>) -> Reply<pb::CallToolResponse> {
        Err(Status::unimplemented("not needed"))
    }
    type WatchStream = Events<pb::ToolEvent>;
    async fn watch(&self, _: Request<pb::WatchToolsRequest>) -> Reply<Self::WatchStream> {
        Ok(Response::new(Box::pin(tokio_stream::pending())))
    }
    async fn resolve(&self, _: Request<pb::ResolveToolRequest>) -> Reply<pb::ResolveToolResponse> {
        Err(Status::unimplemented("not needed"))
    }
    async fn drop(&self, req: Request<pb::DropToolsRequest>) -> Reply<pb::DropToolsResponse> {
        let req = req.into_inner();
        self.seen().drops.push((req.session_id, req.keep_manifest));
        Ok(Response::new(pb::DropToolsResponse { dropped: 0 }))
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    config: Config,
    fakes: Fakes,
    sessions: Sessions,
    /// Stops the fake ProviderService (as if it went down).
    stop_provider: Option<oneshot::Sender<()>>,
}

/// Sessions over the fakes, once the fake ProviderService's first settings
/// (empty) have arrived, as they have in a running Pedelec.
async fn harness(configure: impl FnOnce(&mut Config)) -> Harness {
    let h = harness_with(true, configure).await;
    h.settings_arrived(&pb::ProfileSettings::default()).await;
    h
}

/// Sessions over the fakes; the fake ProviderService's WatchSettings answers
/// once `watch_open` is set.
async fn harness_with(watch_open: bool, configure: impl FnOnce(&mut Config)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let runtime_dir = RuntimeDir::at(dir.path().join("rt"));
    runtime_dir.ensure().unwrap();
    let data_dir = DataDir::at(dir.path().join("data"));
    data_dir.ensure().unwrap();
    let fakes = Fakes::new(watch_open);
    let (stop_provider, provider_stopped) = oneshot::channel::<()>();
    let provider_stopped = async {
        let _ = provider_stopped.await;
    };
    serve(
        &runtime_dir,
        ServiceName::Provider,
        tonic::service::Routes::new(ProviderServiceServer::new(fakes.clone())),
        provider_stopped,
    );
    serve(
        &runtime_dir,
        ServiceName::ToolBridge,
        tonic::service::Routes::new(ToolBridgeServiceServer::new(fakes.clone())),
        std::future::pending(),
    );
    let mut config = Config::new(runtime_dir, data_dir);
    configure(&mut config);
    let sessions = Sessions::open(
        config.clone(),
        Upstream::on_sockets(&config.runtime_dir, None),
    );
    grant_full(&sessions, ORIGIN);
    Harness {
        _dir: dir,
        config,
        fakes,
        sessions,
        stop_provider: Some(stop_provider),
    }
}

/// Grants `origin` full access with every provider and any model, as the
/// user would have before a page's first request.
fn grant_full(sessions: &Sessions, origin: &str) {
    grant_at(sessions, origin, pb::AccessLevel::Full);
}

/// Grants `origin` `access` with every provider and any model.
fn grant_at(sessions: &Sessions, origin: &str, access: pb::AccessLevel) {
    sessions
        .inner
        .sites
        .grant(pb::Site {
            origin: origin.into(),
            access: access as i32,
            providers: pedelec_settings::catalog::PROVIDERS
                .iter()
                .map(|p| p.code.to_string())
                .collect(),
            any_model: true,
            ..Default::default()
        })
        .unwrap();
}

/// Serves a fake service on its socket in `runtime_dir` until `stopped`.
fn serve(
    runtime_dir: &RuntimeDir,
    service: ServiceName,
    routes: tonic::service::Routes,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let socket = runtime_dir.socket(service);
    tokio::spawn(async move {
        pedelec_common::uds::serve(&socket, service, routes, stopped)
            .await
            .unwrap()
    });
}

impl Harness {
    /// Until SessionService holds `settings` from the fake's WatchSettings.
    async fn settings_arrived(&self, settings: &pb::ProfileSettings) {
        eventually("the settings reach SessionService", || {
            matches!(
                self.sessions.inner.settings.current(),
                Current::Watched(held) if *held == *settings
            )
        })
        .await;
    }

    /// Changes the fake ProviderService's settings, as an UpdateSettings
    /// does, and waits until SessionService has them.
    async fn push_settings(&self, settings: pb::ProfileSettings) {
        self.fakes.settings.send_replace(settings.clone());
        self.settings_arrived(&settings).await;
    }

    async fn create(&self, auto_end: bool) -> String {
        let manifest = serde_json::json!({"tools": []});
        self.sessions
            .create(pb::CreateSessionRequest {
                origin: ORIGIN.into(),
                auto_end_on_disconnect: auto_end,
                skills: Some(pedelec_common::json::to_struct(
                    manifest.as_object().unwrap(),
                )),
                ..Default::default()
            })
            .await
            .unwrap()
            .session_id
    }

    fn status(&self, id: &str) -> pb::SessionStatus {
        let snapshot = self.sessions.get(id, ORIGIN).unwrap();
        pb::SessionStatus::try_from(snapshot.status).unwrap()
    }

    /// The sender of the newest turn, once the operation has asked for it.
    async fn turn(&self) -> mpsc::Sender<Result<pb::ProviderEvent, Status>> {
        for _ in 0..500 {
            if let Some(tx) = self.fakes.seen().turns.last() {
                return tx.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no RunTurn arrived");
    }
}

/// Every event of a stream until `done` accepts one (or the stream ends).
async fn events_until(
    rx: &mut crate::sessions::EventStream,
    done: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
        let event = *event;
        let event = event.event.unwrap();
        let stop = done(&event);
        out.push(event);
        if stop {
            return out;
        }
    }
    panic!("stream ended or stalled after {out:?}");
}

fn is_finished(e: &Event) -> bool {
    matches!(e, Event::OperationFinished(_))
}

/// Polls `cond` until it holds (a ceiling against hangs, not a speed check).
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen");
}

/// The hidden (spare) or the visible entries of a folder.
fn entries(dir: &std::path::Path, hidden: bool) -> Vec<std::path::PathBuf> {
    let Ok(listed) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    listed
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.') == hidden)
        .map(|e| e.path())
        .collect()
}

/// The error code of the operation that finishes next on `rx`, which must
/// have failed.
async fn failed_with(rx: &mut crate::sessions::EventStream) -> String {
    let events = events_until(rx, is_finished).await;
    let Some(Event::OperationFinished(f)) = events.last() else {
        unreachable!()
    };
    assert_eq!(f.outcome, pb::OperationOutcome::Failed as i32);
    f.error
        .as_ref()
        .expect("a failed operation's error")
        .code
        .clone()
}

fn attach(h: &Harness, id: &str) -> crate::sessions::EventStream {
    h.sessions
        .attach(pb::AttachRequest {
            session_id: id.into(),
            origin: ORIGIN.into(),
            route_id: "test".into(),
            after_seq: None,
            merge_deltas: false,
        })
        .unwrap()
}

fn create_request(provider: Option<&str>, effort_level: Option<&str>) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        origin: ORIGIN.into(),
        provider: provider.map(str::to_string),
        effort_level: effort_level.map(str::to_string),
        ..Default::default()
    }
}

fn code_of(err: SessionError) -> (String, String) {
    let coded = err.to_coded();
    (coded.wire_code().to_string(), coded.message)
}

/// A create refused by ProviderService (the default provider is not
/// installed) passes its code on and keeps nothing.
#[tokio::test]
async fn a_refused_create_keeps_nothing() {
    let h = harness(|_| {}).await;
    let err = h
        .sessions
        .create(create_request(None, Some(UNINSTALLED)))
        .await
        .unwrap_err();
    let (code, message) = code_of(err);
    assert_eq!(code, "DEFAULT_PROVIDER_UNAVAILABLE");
    assert!(message.contains("not installed"), "{message}");
    assert!(h.fakes.seen().registered.is_empty());
    let left = entries(&h.config.data_dir.workspaces(), false);
    assert!(left.is_empty(), "workspaces left: {left:?}");
    assert!(h.sessions.list(None).await.unwrap().is_empty());
}

/// Profile settings with one model for `provider` at `level`, and the
/// providers kept on the shell path.
fn profile_settings(models: &[(&str, &str, &str)], shell_only: &[&str]) -> pb::ProfileSettings {
    let mut settings = pb::ProfileSettings {
        shell_tools_only: shell_only.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    for (provider, level, model) in models {
        settings
            .profiles
            .entry(provider.to_string())
            .or_default()
            .levels
            .insert(
                level.to_string(),
                pb::EffortProfile {
                    model: model.to_string(),
                    effort: String::new(),
                },
            );
    }
    settings
}

/// A named provider's profile is resolved in this process from the settings
/// ProviderService sent, refusals included; only the default provider, which
/// must also be installed, is asked of ProviderService.
#[tokio::test]
async fn a_named_providers_profile_comes_from_the_watched_settings() {
    let h = harness(|_| {}).await;
    let create = |provider, level| h.sessions.create(create_request(provider, level));
    // Ollama has no model of its own: without settings it needs one.
    let (code, message) = code_of(create(Some("ollama"), Some("high")).await.unwrap_err());
    assert_eq!(code, "MODEL_REQUIRED", "{message}");
    h.push_settings(profile_settings(&[("ollama", "high", "qwen3:4b")], &[]))
        .await;
    let created = create(Some("ollama"), Some("high")).await.unwrap();
    assert_eq!(
        (created.provider.as_str(), created.effort_level.as_str()),
        ("ollama", "high")
    );
    assert_eq!(created.snapshot.unwrap().model, "qwen3:4b");
    let (code, message) = code_of(create(Some("nope"), None).await.unwrap_err());
    assert_eq!(code, "PROVIDER_NOT_FOUND");
    assert!(
        message.contains("ollama"),
        "names the known providers: {message}"
    );
    let (code, _) = code_of(create(Some("ollama"), Some("extreme")).await.unwrap_err());
    assert_eq!(code, "INVALID_INPUT");
    assert_eq!(h.fakes.seen().resolved, 0);

    let created = create(None, None).await.unwrap();
    assert_eq!(created.provider, "codex");
    assert_eq!(h.fakes.seen().resolved, 1);
}

/// A change of the settings pushed through the watch reaches the next create
/// and the first turn of a thread created before it, with no round trip.
#[tokio::test]
async fn a_settings_change_reaches_the_next_create_and_turn() {
    let h = harness(|_| {}).await;
    h.push_settings(profile_settings(&[("codex", "default", "gpt-a")], &[]))
        .await;
    let before = h.create(false).await;
    let created = h
        .sessions
        .create(create_request(Some("codex"), None))
        .await
        .unwrap();
    assert_eq!(created.snapshot.unwrap().model, "gpt-a");

    h.push_settings(profile_settings(
        &[("codex", "default", "gpt-b")],
        &["codex"],
    ))
    .await;
    let created = h
        .sessions
        .create(create_request(Some("codex"), None))
        .await
        .unwrap();
    assert_eq!(created.snapshot.unwrap().model, "gpt-b");
    // The thread made before the change gets its tools on the shell path.
    h.sessions.send_text(&before, ORIGIN, "hi".into()).unwrap();
    let _turn = h.turn().await;
    let seen = h.fakes.seen();
    assert_eq!(seen.rendered, [false]);
    assert_eq!(seen.resolved, 1, "only the default-provider create asked");
}

/// Before ProviderService has sent any settings (it is not up yet), a create
/// that names its provider asks ResolveProfile rather than resolving from
/// none; once they arrive it no longer asks.
#[tokio::test]
async fn a_named_create_before_any_settings_asks_resolve_profile() {
    let h = harness_with(false, |_| {}).await;
    let settings = profile_settings(&[("ollama", "default", "qwen3:4b")], &[]);
    // ProviderService has the settings; SessionService has not been sent them.
    h.fakes.settings.send_replace(settings.clone());
    let created = h
        .sessions
        .create(create_request(Some("ollama"), None))
        .await
        .unwrap();
    assert_eq!(created.snapshot.unwrap().model, "qwen3:4b");
    assert_eq!(h.fakes.seen().resolved, 1);

    h.fakes.watch_open.send_replace(true);
    h.settings_arrived(&settings).await;
    h.sessions
        .create(create_request(Some("ollama"), None))
        .await
        .unwrap();
    assert_eq!(h.fakes.seen().resolved, 1);
}

/// While the watch is not open (ProviderService restarting) a change could be
/// missed: a named create asks ResolveProfile, and the settings received last
/// answer only when ProviderService cannot be asked.
#[tokio::test]
async fn a_named_create_asks_resolve_profile_while_the_watch_is_closed() {
    let mut h = harness(|_| {}).await;
    h.push_settings(profile_settings(&[("ollama", "default", "old")], &[]))
        .await;
    h.fakes.watch_open.send_replace(false);
    eventually("the watch closed", || {
        matches!(
            h.sessions.inner.settings.current(),
            Current::Unwatched(Some(_))
        )
    })
    .await;
    h.fakes
        .settings
        .send_replace(profile_settings(&[("ollama", "default", "new")], &[]));
    let model = async || {
        let created = h.sessions.create(create_request(Some("ollama"), None));
        created.await.unwrap().snapshot.unwrap().model
    };
    assert_eq!(model().await, "new");
    assert_eq!(h.fakes.seen().resolved, 1);

    h.stop_provider.take().unwrap().send(()).unwrap();
    let socket = h.config.runtime_dir.socket(ServiceName::Provider);
    eventually("ProviderService down", || !socket.exists()).await;
    assert_eq!(model().await, "old");
}

/// While ProviderService is down, the settings it sent last answer.
#[tokio::test]
async fn the_last_settings_answer_while_provider_service_is_down() {
    let mut h = harness(|_| {}).await;
    h.push_settings(profile_settings(&[("ollama", "default", "qwen3:4b")], &[]))
        .await;
    h.stop_provider.take().unwrap().send(()).unwrap();
    let socket = h.config.runtime_dir.socket(ServiceName::Provider);
    eventually("ProviderService down", || !socket.exists()).await;
    let created = h
        .sessions
        .create(create_request(Some("ollama"), None))
        .await
        .unwrap();
    assert_eq!(created.snapshot.unwrap().model, "qwen3:4b");
    // A refusal stands as the settings say when it cannot be checked.
    let (code, _) = code_of(
        h.sessions
            .create(create_request(Some("ollama"), Some("high")))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, "MODEL_REQUIRED");
}

/// A create gives ToolBridge nothing: the thread's first operation registers
/// its manifest, before the turn starts. When the bridge cannot be given it,
/// the operation fails with the bridge's error before any agent starts (the
/// agent could call none of the page's tools), and the next one tries again.
#[tokio::test]
async fn the_first_operation_registers_the_tools_or_fails() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    assert!(h.fakes.seen().registered.is_empty());
    h.fakes.seen().refuse_register = true;
    let mut rx = attach(&h, &id);
    h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
    assert_eq!(failed_with(&mut rx).await, "CORE_UNAVAILABLE");
    assert!(h.fakes.seen().turns.is_empty(), "no RunTurn was sent");

    h.fakes.seen().refuse_register = false;
    h.sessions.send_text(&id, ORIGIN, "again".into()).unwrap();
    let _turn = h.turn().await;
    assert_eq!(h.fakes.seen().registered, vec![id]);
}

/// Two registrations of a thread at once (its first turn, and the Watch's
/// re-registration of every thread just after start-up) give the bridge one
/// token, the one the thread keeps: the second carries the first's.
#[tokio::test]
async fn registrations_at_once_agree_on_one_token() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    let thread = h.sessions.thread_unchecked(&id).unwrap();
    let (a, b) = tokio::join!(
        h.sessions.reregister_tools(&thread),
        h.sessions.reregister_tools(&thread)
    );
    a.unwrap();
    b.unwrap();
    let kept = crate::sessions::lock(&thread).record.tool_token.clone();
    let sent = h.fakes.seen().register_tokens.clone();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], "", "the first registration asks for a token");
    assert_eq!(kept.as_ref().map(|t| t.expose()), Some("minted-1"));
    assert_eq!(
        sent[1], "minted-1",
        "the second gives the bridge the same token"
    );
}

/// The first turn's prompt names the tools as native (MCP) tools or as
/// pedelec-cli commands as the settings of the moment say, decided in this
/// process without asking ProviderService — except below full access, where
/// codex's commands cannot reach the page's tools and it gets them natively.
#[tokio::test]
async fn the_first_prompt_follows_the_settings_of_the_moment() {
    let h = harness(|_| {}).await;
    // codex (the fake's default) takes MCP tools unless kept on the shell.
    for (turns, shell_tools_only, access) in [
        (1, false, pb::AccessLevel::Full),
        (2, true, pb::AccessLevel::Full),
        (3, true, pb::AccessLevel::Edit),
    ] {
        if shell_tools_only {
            h.push_settings(profile_settings(&[], &["codex"])).await;
        }
        grant_at(&h.sessions, ORIGIN, access);
        let id = h.create(false).await;
        h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
        eventually("the turn's RunTurn", || h.fakes.seen().turns.len() == turns).await;
    }
    let seen = h.fakes.seen();
    assert_eq!(seen.rendered, [true, false, true]);
    assert_eq!(
        seen.resolved, 3,
        "one ResolveProfile per default-provider create, none for the prompts"
    );
}

/// A bad manifest is refused at create with the error the bridge would give
/// (its code and the JSON pointer of the bad node), with or without patterns
/// to compile, and nothing is kept.
#[tokio::test]
async fn a_bad_manifest_is_refused_at_create_with_the_bridges_error() {
    let h = harness(|_| {}).await;
    let bad_pattern = serde_json::json!({"tools": [{
        "name": "find",
        "description": "finds",
        "argsSchema": {"type": "object", "properties": {"q": {"type": "string", "pattern": "("}}}
    }]});
    for (manifest, pointer) in [
        (serde_json::json!({"tools": 5}), "/tools"),
        (bad_pattern, "/tools/0/argsSchema/properties/q/pattern"),
    ] {
        let mut request = create_request(None, None);
        request.skills = Some(pedelec_common::json::to_struct(
            manifest.as_object().unwrap(),
        ));
        let (code, message) = code_of(h.sessions.create(request).await.unwrap_err());
        assert_eq!(code, "TOOLS_MANIFEST_INVALID", "{message}");
        assert!(message.contains(pointer), "{message}");
    }
    assert!(h.fakes.seen().registered.is_empty());
    assert!(h.sessions.list(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn cancel_finishes_the_operation_and_stops_the_turn() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    let mut rx = attach(&h, &id);
    h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
    let turn = h.turn().await;
    turn.send(Ok(pb::ProviderEvent {
        event: Some(ProviderEvent::ChatDelta("Hel".into())),
    }))
    .await
    .unwrap();
    let cancelled = h.sessions.cancel(&id, ORIGIN).await.unwrap();
    assert!(!cancelled.is_empty());
    let events = events_until(&mut rx, is_finished).await;
    let Some(Event::OperationFinished(f)) = events.last() else {
        unreachable!()
    };
    assert_eq!(f.outcome, pb::OperationOutcome::Cancelled as i32);
    assert_eq!(f.error.as_ref().unwrap().code, "CANCELLED");
    assert_eq!(h.status(&id), pb::SessionStatus::Idle);
    // The operation's task dropped its RunTurn stream (ProviderService then
    // kills the process group); the bridge was told to fail pending calls
    // but keep the tools.
    tokio::time::timeout(Duration::from_secs(5), turn.closed())
        .await
        .expect("the turn stream was dropped");
    assert_eq!(h.fakes.seen().drops, vec![(id.clone(), true)]);
    // Nothing runs any more: a second cancel has nothing to interrupt.
    assert_eq!(h.sessions.cancel(&id, ORIGIN).await.unwrap(), "");
}

#[tokio::test]
async fn end_is_idempotent_and_blocks_operations_until_reactivate() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    let mut rx = attach(&h, &id);
    h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
    let turn = h.turn().await;
    let ended = h
        .sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    assert_eq!(ended.status, pb::SessionStatus::Ended as i32);
    let events = events_until(&mut rx, |e| matches!(e, Event::Ended(_))).await;
    let finished: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::OperationFinished(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].error.as_ref().unwrap().code, "SESSION_ENDED");
    let Some(Event::Ended(e)) = events.last() else {
        unreachable!()
    };
    assert_eq!(e.reason, pb::EndReason::Requested as i32);
    tokio::time::timeout(Duration::from_secs(5), turn.closed())
        .await
        .expect("the turn stream was dropped");

    // Again: no new events, the same state.
    let seq = ended.last_seq;
    let again = h
        .sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    assert_eq!(again.last_seq, seq);
    assert_eq!(
        h.sessions
            .send_text(&id, ORIGIN, "more".into())
            .unwrap_err()
            .code(),
        pedelec_common::Code::SESSION_ENDED
    );
    assert_eq!(h.fakes.seen().drops, vec![(id.clone(), false)]);

    let snapshot = h.sessions.reactivate(&id, ORIGIN).await.unwrap();
    assert_eq!(snapshot.status, pb::SessionStatus::Idle as i32);
    assert_eq!(h.fakes.seen().registered.len(), 2, "tools registered again");
    h.sessions.send_text(&id, ORIGIN, "more".into()).unwrap();
}

#[tokio::test]
async fn reactivate_needs_the_workspace() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    h.sessions.open_workspace(&id, ORIGIN).unwrap();
    h.sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    std::fs::remove_dir_all(h.config.data_dir.workspaces().join(&id)).unwrap();
    let err = h.sessions.reactivate(&id, ORIGIN).await.unwrap_err();
    assert_eq!(err.code(), pedelec_common::Code::WORKSPACE_OPEN_FAILED);
    assert_eq!(h.status(&id), pb::SessionStatus::Ended);
}

/// A managed workspace that was made and is gone is not made again empty:
/// opening it, or the next operation, is WORKSPACE_OPEN_FAILED.
#[tokio::test]
async fn a_workspace_made_and_gone_is_not_made_again() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    h.sessions.open_workspace(&id, ORIGIN).unwrap();
    let folder = h.config.data_dir.workspaces().join(&id);
    std::fs::remove_dir_all(&folder).unwrap();
    let err = h.sessions.open_workspace(&id, ORIGIN).unwrap_err();
    assert_eq!(err.code(), pedelec_common::Code::WORKSPACE_OPEN_FAILED);
    // The next operation fails before any agent starts, and the next one may
    // be tried again.
    let mut rx = attach(&h, &id);
    h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
    assert_eq!(failed_with(&mut rx).await, "WORKSPACE_OPEN_FAILED");
    assert!(h.fakes.seen().turns.is_empty(), "no RunTurn was sent");
    assert!(!folder.exists());
    h.sessions.send_text(&id, ORIGIN, "again".into()).unwrap();
}

#[tokio::test]
async fn auto_end_after_the_last_route_unless_one_comes_back() {
    let grace = Duration::from_millis(1000);
    let h = harness(|c| c.auto_end_grace = grace).await;
    let id = h.create(true).await;

    // A route that comes back within the grace period keeps the thread.
    drop(attach(&h, &id));
    let rx = attach(&h, &id);
    tokio::time::sleep(grace * 3 / 2).await;
    assert_eq!(h.status(&id), pb::SessionStatus::Idle);

    // The last route gone for good: ended with reason auto_end.
    drop(rx);
    eventually("auto-end", || h.status(&id) == pb::SessionStatus::Ended).await;
    let mut rx = h
        .sessions
        .attach(pb::AttachRequest {
            session_id: id.clone(),
            origin: ORIGIN.into(),
            route_id: "late".into(),
            after_seq: Some(0),
            merge_deltas: false,
        })
        .unwrap();
    let events = events_until(&mut rx, |e| matches!(e, Event::Ended(_))).await;
    let Some(Event::Ended(e)) = events.last() else {
        unreachable!()
    };
    assert_eq!(e.reason, pb::EndReason::AutoEnd as i32);

    // A thread never attached is not auto-ended.
    let never = h.create(true).await;
    tokio::time::sleep(grace * 3 / 2).await;
    assert_eq!(h.status(&never), pb::SessionStatus::Idle);
}

#[tokio::test]
async fn an_ended_thread_leaves_memory_and_comes_back_from_the_journal() {
    let h = harness(|c| c.evict_ended_after = Duration::from_millis(50)).await;
    let id = h.create(false).await;
    h.sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    eventually("eviction", || !h.sessions.in_memory(&id)).await;
    // Get loads it again, as it was.
    assert_eq!(h.status(&id), pb::SessionStatus::Ended);
    assert!(h.sessions.in_memory(&id));
    // An attached route keeps it in memory past the eviction time.
    let rx = attach(&h, &id);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(h.sessions.in_memory(&id));
    drop(rx);
    eventually("eviction after the route left", || {
        !h.sessions.in_memory(&id)
    })
    .await;
}

/// Evicts `id`'s ended thread from memory once, at the moment the next
/// Attach or Reactivate has looked it up and not yet locked it.
fn evict_after_the_next_lookup(h: &Harness, id: &str) {
    let sessions = h.sessions.clone();
    let id = id.to_string();
    *h.sessions.inner.pause_after_lookup.lock().unwrap() = Some(Box::new(move || {
        let thread = sessions.thread_unchecked(&id).unwrap();
        assert!(sessions.evict_if_unused(&thread), "nothing to evict");
    }));
}

/// An ended thread, in memory, that only an explicit eviction removes.
async fn ended_thread(h: &Harness) -> String {
    let id = h.create(false).await;
    h.sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    assert!(h.sessions.in_memory(&id));
    id
}

/// Attach racing the eviction of an ended thread: the eviction
/// happens after Attach found the thread and before it took its route. The
/// route must be on the thread in memory, so it sees what happens next; it
/// used to land on the evicted copy, which nothing finds again.
#[tokio::test]
async fn an_attach_racing_eviction_attaches_to_the_thread_in_memory() {
    let h = harness(|c| c.evict_ended_after = Duration::from_secs(3600)).await;
    let id = ended_thread(&h).await;
    evict_after_the_next_lookup(&h, &id);
    let mut rx = attach(&h, &id);
    assert!(
        h.sessions.in_memory(&id),
        "the route is on a copy that is not in memory"
    );
    events_until(&mut rx, |e| matches!(e, Event::Snapshot(_))).await;
    h.sessions.reactivate(&id, ORIGIN).await.unwrap();
    let idle = pb::SessionStatus::Idle as i32;
    events_until(
        &mut rx,
        |e| matches!(e, Event::Status(s) if s.status == idle),
    )
    .await;
}

/// Reactivate racing the same eviction: the reactivated thread, with its
/// tools, is the one in memory (it used to be the evicted copy, and the next
/// call loaded the journal's, which has no tool token).
#[tokio::test]
async fn a_reactivate_racing_eviction_reactivates_the_thread_in_memory() {
    let h = harness(|c| c.evict_ended_after = Duration::from_secs(3600)).await;
    let id = ended_thread(&h).await;
    evict_after_the_next_lookup(&h, &id);
    h.sessions.reactivate(&id, ORIGIN).await.unwrap();
    assert!(
        h.sessions.in_memory(&id),
        "the reactivated thread is not in memory"
    );
    let thread = h.sessions.thread_unchecked(&id).unwrap();
    let t = crate::sessions::lock(&thread);
    assert_eq!(t.record.status, crate::record::Status::Idle);
    assert!(t.record.tool_token.is_some(), "the thread has no tools");
}

#[tokio::test]
async fn a_workspace_inside_pedelec_folders_or_another_threads_workspace_is_refused() {
    let h = harness(|_| {}).await;
    let root = h._dir.path().join("apps");
    let shared = root.join("shared");
    std::fs::create_dir_all(shared.join("sub")).unwrap();
    std::fs::create_dir_all(shared.join(".pedelec-runtime/assets/up")).unwrap();
    // A local caller: these rules hold whatever a grant allows.
    let create = |path: &std::path::Path| {
        h.sessions.create(pb::CreateSessionRequest {
            origin: "cli".into(),
            workspace_path: Some(path.display().to_string()),
            ..Default::default()
        })
    };
    create(&shared).await.unwrap();
    // Sharing the same folder is allowed.
    create(&shared).await.unwrap();
    for bad in [
        shared.join("sub"),
        shared.join(".pedelec-runtime/assets/up"),
    ] {
        let err = create(&bad).await.unwrap_err();
        assert_eq!(err.code(), pedelec_common::Code::INVALID_INPUT, "{bad:?}");
    }
    // A managed thread's uploads folder is refused too: it is inside
    // Pedelec's data folder, which is never granted.
    let managed = h.create(false).await;
    let uploads = h
        .config
        .data_dir
        .workspaces()
        .join(&managed)
        .join(".pedelec-runtime");
    std::fs::create_dir_all(&uploads).unwrap();
    assert_eq!(
        create(&uploads).await.unwrap_err().code(),
        pedelec_common::Code::FOLDER_NOT_GRANTABLE
    );
}

/// One origin may hold only so many open threads; ending one makes room,
/// and another origin is not affected.
#[tokio::test]
async fn open_threads_per_origin_are_bounded() {
    let h = harness(|c| c.max_open_threads_per_origin = 3).await;
    let ids = [
        h.create(false).await,
        h.create(false).await,
        h.create(false).await,
    ];
    let refused = h
        .sessions
        .create(pb::CreateSessionRequest {
            origin: ORIGIN.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), pedelec_common::Code::LIMIT_EXCEEDED);
    assert!(refused.to_string().contains("3 open sessions"), "{refused}");
    assert_eq!(h.sessions.list(Some(ORIGIN)).await.unwrap().len(), 3);

    grant_full(&h.sessions, "http://127.0.0.1:9");
    let other = h
        .sessions
        .create(pb::CreateSessionRequest {
            origin: "http://127.0.0.1:9".into(),
            ..Default::default()
        })
        .await;
    assert!(other.is_ok(), "{other:?}");

    h.sessions
        .end(&ids[0], ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    h.create(false).await;
}

/// Reactivate opens an ended thread again, so it counts against the cap: an
/// origin at its cap is refused with LIMIT_EXCEEDED and the thread stays
/// ended; once another ends, the reactivation goes through.
#[tokio::test]
async fn reactivate_counts_against_the_open_thread_cap() {
    let h = harness(|c| c.max_open_threads_per_origin = 2).await;
    let ended = h.create(false).await;
    h.sessions
        .end(&ended, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    let open = [h.create(false).await, h.create(false).await];

    let refused = h.sessions.reactivate(&ended, ORIGIN).await.unwrap_err();
    assert_eq!(refused.code(), pedelec_common::Code::LIMIT_EXCEEDED);
    assert!(refused.to_string().contains("2 open sessions"), "{refused}");
    assert_eq!(h.status(&ended), pb::SessionStatus::Ended);
    assert_eq!(
        h.sessions
            .list(Some(ORIGIN))
            .await
            .unwrap()
            .iter()
            .filter(|s| s.status != pb::SessionStatus::Ended as i32)
            .count(),
        2
    );

    // Reactivating an open thread is not a new one: no refusal.
    h.sessions.reactivate(&open[0], ORIGIN).await.unwrap();

    h.sessions
        .end(&open[1], ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    h.sessions.reactivate(&ended, ORIGIN).await.unwrap();
    assert_eq!(h.status(&ended), pb::SessionStatus::Idle);
}

/// An operation cancelled before its task ran, followed at once by the next
/// operation, never starts an agent of its own: the task takes its stop
/// signal when the operation starts, not when it first runs (by then the next
/// operation had replaced it), and checks its operation is still the active
/// one.
#[tokio::test]
async fn a_cancelled_operation_never_reaches_the_provider() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    h.sessions.send_text(&id, ORIGIN, "first".into()).unwrap();
    // Cancel's first poll finishes the operation; its remaining work (the
    // tool drop) is not needed here, and no other task runs in between.
    let cancel = std::pin::pin!(h.sessions.cancel(&id, ORIGIN));
    let first_poll = cancel.poll(&mut Context::from_waker(Waker::noop()));
    assert!(matches!(first_poll, Poll::Pending | Poll::Ready(Ok(_))));
    h.sessions.send_text(&id, ORIGIN, "second".into()).unwrap();
    // Now both operations' tasks run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        h.fakes.seen().turns.len(),
        1,
        "RunTurn sent for the cancelled operation too"
    );
}

/// A route a whole replay buffer behind can miss OperationFinished: Cancel's
/// few events push its place out of the buffer. The replay-gap snapshot it
/// gets instead names the cancelled operation in `recent_operations`, which is
/// how a client settles it (the race behind a rare failure of the resilience
/// test, which now settles the same way).
#[tokio::test]
async fn a_route_that_missed_operation_finished_settles_it_from_the_gap_snapshot() {
    let h = harness(|c| {
        c.replay = crate::ReplayLimits {
            max_events: 64,
            max_bytes: 1 << 20,
        }
    })
    .await;
    let id = h.create(false).await;
    // Takes nothing until the cancel: its channel fills and its place in the
    // replay buffer falls out.
    let mut rx = attach(&h, &id);
    let op = h.sessions.send_text(&id, ORIGIN, "hi".into()).unwrap();
    let turn = h.turn().await;
    const DELTAS: u64 = 3000;
    for _ in 0..DELTAS {
        turn.send(Ok(pb::ProviderEvent {
            event: Some(ProviderEvent::ChatDelta("x".into())),
        }))
        .await
        .unwrap();
    }
    eventually("every delta in the replay buffer", || {
        h.sessions.get(&id, ORIGIN).unwrap().last_seq > DELTAS
    })
    .await;
    h.sessions.cancel(&id, ORIGIN).await.unwrap();

    fn settled<'a>(s: &'a pb::Snapshot, op: &str) -> Option<&'a pb::Operation> {
        s.recent_operations.iter().find(|o| o.operation_id == op)
    }
    let settles = |e: &Event| match e {
        Event::Snapshot(s) => s.replay_gap && settled(s, &op).is_some(),
        other => is_finished(other),
    };
    let events = events_until(&mut rx, settles).await;
    let Some(Event::Snapshot(gap)) = events.last() else {
        panic!(
            "the route got OperationFinished, not a gap: {:?}",
            events.last()
        );
    };
    let cancelled = settled(gap, &op).unwrap();
    assert_eq!(cancelled.outcome, pb::OperationOutcome::Cancelled as i32);
    assert_eq!(
        pb::SessionStatus::try_from(gap.status).unwrap(),
        pb::SessionStatus::Idle
    );
}

/// A create makes no folder: it takes a record file made ahead of it (no
/// new inode on its path), and the next one is made after it. The managed
/// workspace is made, private, on first use, and that is recorded: a thread
/// never used and ended is reactivated without a folder, and one that was used
/// needs its folder (`reactivate_needs_the_workspace`).
#[tokio::test]
async fn a_create_makes_no_folder_and_takes_the_file_made_ahead() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let h = harness(|_| {}).await;
    let (workspaces, journal) = (h.config.data_dir.workspaces(), h.config.data_dir.sessions());
    let ready = || entries(&journal, true).len() == pedelec_common::recycle::READY_SPARES;
    eventually("the first spares", ready).await;
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    let files: Vec<u64> = entries(&journal, true).iter().map(|p| ino(p)).collect();

    let id = h.create(false).await;
    assert!(files.contains(&ino(&journal.join(format!("{id}.json")))));
    eventually("the next spares", ready).await;
    let folder = workspaces.join(&id);
    let snapshot = h.sessions.get(&id, ORIGIN).unwrap();
    assert_eq!(std::path::Path::new(&snapshot.workspace_path), folder);
    assert!(entries(&workspaces, false).is_empty() && entries(&workspaces, true).is_empty());
    let record = |id: &str| h.sessions.inner.journal.load(id).unwrap();
    assert_eq!(record(&id).workspace, Workspace::ManagedPending);

    // Never used, ended and reactivated: still nothing to need.
    h.sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    h.sessions.reactivate(&id, ORIGIN).await.unwrap();
    assert!(!folder.exists());

    // First use makes it, private, and the journal says so.
    h.sessions.open_workspace(&id, ORIGIN).unwrap();
    let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(record(&id).workspace, Workspace::ManagedMade);
    // Opening it again changes nothing.
    std::fs::write(folder.join("kept"), b"x").unwrap();
    h.sessions.open_workspace(&id, ORIGIN).unwrap();
    assert!(folder.join("kept").exists());
}

/// A thread's first operation makes its managed workspace before its agent
/// starts.
#[tokio::test]
async fn the_first_operation_makes_the_workspace() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    let folder = h.config.data_dir.workspaces().join(&id);
    assert!(!folder.exists());
    h.sessions.prepare(&id, ORIGIN).unwrap();
    let _turn = h.turn().await;
    assert!(
        folder.is_dir(),
        "RunTurn was sent before the folder was made"
    );
}

/// The sweep removes ended threads past the retention (record, memory, the
/// managed workspace) and keeps a recent one, one still attached, and any
/// open thread; what it removed is THREAD_NOT_FOUND.
#[tokio::test]
async fn the_sweep_removes_ended_threads_past_the_retention_only() {
    let h = harness(|_| {}).await;
    let ids: Vec<String> = [
        h.create(false).await,
        h.create(false).await,
        h.create(false).await,
        h.create(false).await,
    ]
    .into();
    for id in &ids {
        h.sessions.open_workspace(id, ORIGIN).unwrap();
    }
    for id in &ids[..3] {
        h.sessions
            .end(id, ORIGIN, pb::EndReason::Requested)
            .await
            .unwrap();
    }
    let (old, recent, watched, open) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    let _route = attach(&h, watched);
    let week = h.config.ended_retention.as_millis() as u64;
    for id in [old, watched, open] {
        let thread = h.sessions.thread(id, ORIGIN).unwrap();
        let mut t = crate::sessions::lock(&thread);
        // As if they had ended (or, the open one, been created) a week and a minute ago.
        t.record.ended_at_ms = Some(pedelec_common::now_ms() - week - 60_000);
        t.save(&h.sessions.inner.journal).unwrap();
    }
    assert_eq!(h.sessions.sweep(), 1);
    assert_eq!(
        h.sessions.get(old, ORIGIN).unwrap_err().code(),
        pedelec_common::Code::THREAD_NOT_FOUND
    );
    assert!(!h.sessions.in_memory(old));
    let workspaces = h.config.data_dir.workspaces();
    assert!(
        !workspaces.join(old).exists(),
        "its managed workspace is kept"
    );
    for kept in [recent, watched] {
        assert_eq!(h.status(kept), pb::SessionStatus::Ended);
        assert!(workspaces.join(kept).is_dir());
    }
    assert_eq!(h.status(open), pb::SessionStatus::Idle);
    assert_eq!(h.sessions.sweep(), 0, "nothing more to remove");
}

/// A record written before `ended_at_ms` existed counts from its file's last
/// write, and keeps that time when a Get loads it (and writes it) again.
#[tokio::test]
async fn an_ended_record_without_its_end_time_counts_from_its_file() {
    let h = harness(|_| {}).await;
    let id = h.create(false).await;
    h.sessions
        .end(&id, ORIGIN, pb::EndReason::Requested)
        .await
        .unwrap();
    let thread = h.sessions.thread(&id, ORIGIN).unwrap();
    assert!(h.sessions.evict_if_unused(&thread));
    let file = h.config.data_dir.sessions().join(format!("{id}.json"));
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("ended_at_ms");
    std::fs::write(&file, serde_json::to_vec(&json).unwrap()).unwrap();
    let eight_days = Duration::from_secs(8 * 24 * 60 * 60);
    let then = std::time::SystemTime::now() - eight_days;
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(then)
        .unwrap();
    // Loaded (and written) again by a Get: the end time is the file's.
    assert_eq!(h.status(&id), pb::SessionStatus::Ended);
    assert_eq!(h.sessions.sweep(), 1);
    assert_eq!(
        h.sessions.get(&id, ORIGIN).unwrap_err().code(),
        pedelec_common::Code::THREAD_NOT_FOUND
    );
}
