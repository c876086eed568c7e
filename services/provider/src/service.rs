//! The service logic, free of gRPC: `Providers` answers with plain values or a `ProviderError`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pedelec_proto::v1::{ProfileSettings, ProviderInfo, PublicSettings, ResolvedProfile, Settings};
use pedelec_settings::{Provider, profile_part};
use tokio::sync::{mpsc, watch};
use tokio_stream::{Stream, StreamExt};

use crate::availability::{Availability, ProgramEnv};
use crate::catalog;
use crate::error::ProviderError;
use crate::models::Models;
use crate::settings::{self, SettingsStore};
use crate::turns::Turns;

/// How often a WatchSettings stream looks at settings.json for an edit by
/// hand (a `stat`; the file is read again only when it changed).
pub const HAND_EDIT_POLL: Duration = Duration::from_secs(1);

/// How long UpdateSettings waits for the WatchSettings watchers to
/// acknowledge the change before it returns anyway (with a warning): a
/// watcher that is stuck must not hang whoever changes the settings.
/// SessionService acknowledges within a millisecond or so.
pub const SETTINGS_ACK_WITHIN: Duration = Duration::from_secs(2);

pub struct Providers {
    settings: SettingsStore,
    /// The profile part of the settings last stored or seen, numbered by its
    /// `generation`, for the WatchSettings streams: UpdateSettings sends
    /// here, and so does a stream that finds the file edited by hand.
    profile_part: watch::Sender<ProfileSettings>,
    /// Per WatchSettings stream, the generation its watcher acknowledged
    /// last; a closed one is a watcher gone (or no longer acknowledging).
    acks: Mutex<Vec<watch::Receiver<u64>>>,
    /// How long UpdateSettings waits for the acks ([`SETTINGS_ACK_WITHIN`]).
    ack_within: Duration,
    availability: Arc<Availability>,
    /// The model names the CLIs list (crate::models), for ListProviders.
    models: Arc<Models>,
    turns: Turns,
}

impl Providers {
    /// `settings_file` is `<data dir>/settings.json`; `programs` says where the CLIs are looked up.
    pub fn new(settings_file: impl Into<PathBuf>, programs: ProgramEnv) -> Self {
        let settings = SettingsStore::new(settings_file);
        let first = ProfileSettings {
            generation: 1,
            ..profile_part(&settings.load())
        };
        let (profile_part, _) = watch::channel(first);
        Providers {
            settings,
            profile_part,
            acks: Mutex::default(),
            ack_within: SETTINGS_ACK_WITHIN,
            turns: Turns::new(programs.clone()),
            availability: Arc::new(Availability::new(programs)),
            models: Arc::default(),
        }
    }

    /// Records running turns under `<runtime_dir>/turns/` (see `turns::reap_orphans`).
    pub fn with_turn_records(
        mut self,
        runtime_dir: &std::path::Path,
        key: crate::turns::RecordKey,
    ) -> Self {
        self.turns = self.turns.with_records(runtime_dir, key);
        self
    }

    /// Confines agents where bubblewrap works, hiding Pedelec's folders from
    /// them, each in its own cgroup where one can be made (`crate::launch`).
    pub fn with_agent_confinement(mut self, hidden: crate::launch::Hidden) -> Self {
        self.turns = self.turns.with_confinement(hidden);
        self
    }

    pub fn settings_store(&self) -> &SettingsStore {
        &self.settings
    }

    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// The running agent turns (RunTurn, CancelTurn).
    pub fn turns(&self) -> &Turns {
        &self.turns
    }

    /// Starts a turn; pedelec-agent gets the Ollama settings in its
    /// environment, and a CLI with native tools gets `pedelec-cli mcp` as its
    /// MCP server when the thread has tools (a tool token).
    pub fn run_turn(
        &self,
        req: pedelec_proto::v1::RunTurnRequest,
    ) -> Result<tokio::sync::mpsc::Receiver<pedelec_proto::v1::ProviderEvent>, ProviderError> {
        let settings = self.settings.load();
        let env = if Provider::from_code(&req.provider) == Some(Provider::Ollama) {
            settings::agent_env(&settings)
        } else {
            Default::default()
        };
        let has_tools = req.tool_env.contains_key(pedelec_common::env::TOOL_TOKEN);
        // Native even for a provider the user set to shell tools only, where
        // its commands cannot reach the page's tools at this level.
        let shell_reaches = |spec: &pedelec_settings::catalog::ProviderSpec| {
            crate::access::Access::from_request(req.access).is_ok_and(|a| {
                pedelec_settings::catalog::shell_reaches_page_tools(spec.provider, a.is_full())
            })
        };
        let mcp = pedelec_settings::catalog::find(&req.provider)
            .filter(|spec| {
                has_tools
                    && spec.mcp
                    && (pedelec_settings::native_tools(&settings.shell_tools_only, spec)
                        || !shell_reaches(spec))
            })
            .map(|_| pedelec_common::paths::cli_path());
        self.turns.run_with_env(req, env, mcp)
    }

    /// All six providers, checked concurrently. A verdict on the same program
    /// file younger than the cache's TTL is reused (a page polling
    /// ListProviders must not spawn six `--version` processes per call); the
    /// lookup is fresh, and a replaced, installed or removed CLI is seen at once.
    /// With `include_models`, the models are what crate::models keeps; a
    /// listing they lack starts in the background and is not waited for.
    /// Without, no CLI is started for a listing and the models stay empty.
    pub async fn list_providers(
        &self,
        include_models: bool,
    ) -> Result<Vec<ProviderInfo>, ProviderError> {
        let settings = self.settings.load();
        let default = settings.default_provider.clone();
        let checks: Vec<_> = catalog::PROVIDERS
            .iter()
            .map(|spec| {
                let availability = Arc::clone(&self.availability);
                tokio::spawn(async move { availability.check_cached(spec).await })
            })
            .collect();
        let mut out = Vec::with_capacity(checks.len());
        for (spec, check) in catalog::PROVIDERS.iter().zip(checks) {
            let outcome = check
                .await
                .map_err(|e| ProviderError::Internal(format!("availability check failed: {e}")))?;
            let kept = if include_models {
                self.models.kept(
                    spec.provider,
                    outcome.as_ref().ok().cloned(),
                    &settings,
                    self.availability.env(),
                )
            } else {
                Default::default()
            };
            out.push(ProviderInfo {
                name: spec.name.to_string(),
                code: spec.code.to_string(),
                available: outcome.is_ok(),
                is_default: default.as_deref() == Some(spec.code),
                error: outcome.err(),
                effort_values: spec.effort_values.iter().map(|v| v.to_string()).collect(),
                models: kept.models,
                models_pending: kept.pending,
            });
        }
        Ok(out)
    }

    pub fn public_settings(&self) -> PublicSettings {
        pedelec_settings::public_part(&self.settings.load())
    }

    pub fn full_settings(&self) -> Settings {
        self.settings.load()
    }

    /// Validates and replaces the settings; returns them as stored.
    /// Replaces the settings, or with a `mask` (UpdateSettings' `update_mask`
    /// paths) only the parts it names. Returns once every WatchSettings
    /// watcher has acknowledged the change (or gone away), or after
    /// [`SETTINGS_ACK_WITHIN`]: a create sent after this returned sees it.
    pub async fn update_settings(
        &self,
        settings: Settings,
        mask: Option<&[String]>,
    ) -> Result<Settings, ProviderError> {
        let stored = self.settings.update(settings, mask).await?;
        // The Ollama address or key may have changed: list again.
        self.models.forget();
        // The file as it is now rather than `stored`: an update that stored
        // after this one must not be undone for the watchers.
        let generation = self.publish(&self.settings.load());
        self.until_acknowledged(generation).await;
        Ok(stored)
    }

    /// Hands the profile part of `settings` to the WatchSettings streams, if
    /// it changed, as the next generation. Returns the generation now current.
    fn publish(&self, settings: &Settings) -> u64 {
        let mut part = profile_part(settings);
        let mut generation = 0;
        self.profile_part.send_if_modified(|current| {
            part.generation = current.generation;
            let changed = *current != part;
            if changed {
                part.generation += 1;
                *current = part;
            }
            generation = current.generation;
            changed
        });
        generation
    }

    /// Until every WatchSettings watcher connected now has acknowledged
    /// `generation` or gone away, for at most `ack_within`. One that connects
    /// later is sent that generation or a later one first.
    async fn until_acknowledged(&self, generation: u64) {
        let watchers = {
            let mut acks = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
            acks.retain(|acked| acked.has_changed().is_ok());
            acks.clone()
        };
        let all = async {
            for mut acked in watchers {
                // An error is a watcher gone: nothing to wait for.
                let _ = acked.wait_for(|acked| *acked >= generation).await;
            }
        };
        if tokio::time::timeout(self.ack_within, all).await.is_err() {
            tracing::warn!(
                generation,
                "a settings watcher did not acknowledge a change within {:?}; \
                 UpdateSettings returns without it",
                self.ack_within
            );
        }
    }

    /// WatchSettings: the profile part of the settings now, then after every
    /// change; `acks` are the generations the watcher acknowledges. While the
    /// stream is open, settings.json is looked at every [`HAND_EDIT_POLL`],
    /// so an edit by hand is sent too. The stream's task ends when its
    /// receiver is dropped (the caller went away); a watcher whose `acks` end
    /// is no longer waited for.
    pub fn watch_settings(
        self: &Arc<Self>,
        acks: impl Stream<Item = u64> + Send + 'static,
    ) -> mpsc::Receiver<ProfileSettings> {
        let (tx, rx) = mpsc::channel(1);
        let (acked, acked_rx) = watch::channel(0);
        self.acks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(acked_rx);
        let providers = Arc::clone(self);
        let mut changes = self.profile_part.subscribe();
        tokio::spawn(async move {
            let mut acks = std::pin::pin!(acks);
            let mut acked = Some(acked);
            // The file as it is now comes first: an edit by hand since the
            // last look is part of "now".
            providers.publish(&providers.settings.load());
            let mut poll = tokio::time::interval_at(
                tokio::time::Instant::now() + HAND_EDIT_POLL,
                HAND_EDIT_POLL,
            );
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let current = changes.borrow_and_update().clone();
                if tx.send(current).await.is_err() {
                    return;
                }
                // Until the next change, looking at the file meanwhile.
                loop {
                    tokio::select! {
                        _ = tx.closed() => return,
                        changed = changes.changed() => match changed {
                            Ok(()) => break,
                            Err(_) => return,
                        },
                        ack = acks.next(), if acked.is_some() => match ack {
                            Some(generation) => {
                                if let Some(acked) = &acked {
                                    acked.send_modify(|last| *last = generation.max(*last));
                                }
                            }
                            // No more acks: nothing waits for this watcher now.
                            None => acked = None,
                        },
                        _ = poll.tick() => {
                            providers.publish(&providers.settings.load());
                        }
                    }
                }
            }
        });
        rx
    }

    /// The provider and effort profile for a new thread. Absent or empty
    /// `provider` means the default, which must be set and available; an
    /// explicit provider is only checked to be one of the six. Absent or empty
    /// `effort_level` means "default".
    pub async fn resolve_profile(
        &self,
        provider: Option<&str>,
        effort_level: Option<&str>,
    ) -> Result<ResolvedProfile, ProviderError> {
        let settings = self.settings.load();
        if let Some(code) = provider.filter(|p| !p.is_empty()) {
            // As SessionService resolves it from the part WatchSettings sends.
            return Ok(pedelec_settings::resolve_named(
                &profile_part(&settings),
                code,
                effort_level,
            )?);
        }
        let level = pedelec_settings::requested_level(effort_level)?;
        let code = settings
            .default_provider
            .as_deref()
            .ok_or(ProviderError::DefaultProviderNotSet)?;
        let unavailable = |reason: String| ProviderError::DefaultProviderUnavailable {
            provider: code.to_string(),
            reason,
        };
        // Only a hand-edited settings.json can hold an unknown code.
        let spec = catalog::find(code)
            .ok_or_else(|| unavailable("it is not a known provider".to_string()))?;
        self.availability
            .check_cached(spec)
            .await
            .map_err(unavailable)?;
        Ok(pedelec_settings::profile_of(
            &profile_part(&settings),
            spec,
            level,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use pedelec_proto::v1::EffortProfile;
    use pedelec_settings::SettingsError;
    use pedelec_settings::testutil::resolved;

    use super::*;
    use crate::testutil::Bin;

    struct Fixture {
        bin: Bin,
        _data: tempfile::TempDir,
        providers: Arc<Providers>,
    }

    fn fixture() -> Fixture {
        fixture_acking_within(SETTINGS_ACK_WITHIN)
    }

    fn fixture_acking_within(ack_within: Duration) -> Fixture {
        let bin = Bin::new();
        let data = tempfile::tempdir().unwrap();
        let mut providers = Providers::new(data.path().join("settings.json"), bin.env());
        providers.ack_within = ack_within;
        Fixture {
            bin,
            _data: data,
            providers: Arc::new(providers),
        }
    }

    /// A WatchSettings watcher that acknowledges every value once it has
    /// passed it on, as SessionService does once its copy holds it.
    fn acking_watcher(providers: &Arc<Providers>) -> mpsc::UnboundedReceiver<ProfileSettings> {
        let (ack, acks) = mpsc::unbounded_channel();
        let mut changes =
            providers.watch_settings(tokio_stream::wrappers::UnboundedReceiverStream::new(acks));
        let (applied, out) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(part) = changes.recv().await {
                let generation = part.generation;
                if applied.send(part).is_err() || ack.send(generation).is_err() {
                    return;
                }
            }
        });
        out
    }

    fn ollama_default_model(part: &ProfileSettings) -> Option<String> {
        part.profiles
            .get("ollama")
            .and_then(|p| p.levels.get("default"))
            .map(|l| l.model.clone())
    }

    impl Fixture {
        async fn set(&self, s: Settings) {
            self.providers.update_settings(s, None).await.unwrap();
        }

        async fn set_default(&self, code: &str) {
            let mut s = self.providers.full_settings();
            s.default_provider = Some(code.into());
            self.set(s).await;
        }

        async fn set_level(&self, code: &str, level: &str, model: &str, effort: &str) {
            let mut s = self.providers.full_settings();
            s.profiles.entry(code.into()).or_default().levels.insert(
                level.into(),
                EffortProfile {
                    model: model.into(),
                    effort: effort.into(),
                },
            );
            self.set(s).await;
        }

        async fn resolve(
            &self,
            provider: Option<&str>,
            level: Option<&str>,
        ) -> Result<ResolvedProfile, ProviderError> {
            self.providers.resolve_profile(provider, level).await
        }
    }

    #[tokio::test]
    async fn repeated_lists_run_each_version_probe_once_until_the_program_changes() {
        let f = fixture();
        let count = f.bin.dir.path().join("count");
        let body = format!("echo x >> {}", count.display());
        f.bin.script("codex", &body);
        let runs = || {
            std::fs::read_to_string(&count)
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        for _ in 0..5 {
            let list = f.providers.list_providers(false).await.unwrap();
            assert!(list[0].available, "{list:?}");
        }
        assert_eq!(runs(), 1);
        // A new version of the CLI is probed at once.
        f.bin
            .script("codex", &format!("{body}; echo broken >&2; exit 3"));
        let list = f.providers.list_providers(false).await.unwrap();
        assert!(!list[0].available);
        assert_eq!(runs(), 2);
    }

    #[tokio::test]
    async fn list_reports_all_six_in_order_with_default_independent_of_availability() {
        let f = fixture();
        f.bin.script("codex", "exit 0");
        f.bin.script(
            "claude",
            "echo '/home/u/.nvm/bin/node: sk-secret-1' >&2; exit 1",
        );
        f.set_default("cursor").await;

        let list = f.providers.list_providers(false).await.unwrap();
        let rows: Vec<_> = list
            .iter()
            .map(|p| (p.code.as_str(), p.name.as_str(), p.available, p.is_default))
            .collect();
        assert_eq!(
            rows,
            [
                ("codex", "Codex", true, false),
                ("antigravity", "Antigravity", false, false),
                ("opencode", "OpenCode", false, false),
                ("cursor", "Cursor", false, true),
                ("claude", "Claude Code", false, false),
                ("ollama", "Ollama", false, false),
            ]
        );
        assert_eq!(list[0].error, None);
        assert_eq!(
            list[3].error.as_deref(),
            Some("cursor-agent not found on PATH")
        );
        // Pages get this list: how the check failed, neither what the CLI
        // printed nor a folder of this machine.
        assert_eq!(
            list[4].error.as_deref(),
            Some("`claude --version` exited with code 1; see the Pedelec log")
        );
        let dir = f.bin.dir.path().display().to_string();
        for p in &list {
            let error = p.error.as_deref().unwrap_or_default();
            assert!(
                !error.contains("sk-secret") && !error.contains('/') && !error.contains(&dir),
                "{}: {error}",
                p.code
            );
        }
    }

    #[tokio::test]
    async fn checks_run_concurrently() {
        let f = fixture();
        for program in [
            "codex",
            "agy",
            "opencode",
            "cursor-agent",
            "claude",
            "pedelec-agent",
        ] {
            f.bin.script(program, "/bin/sleep 0.4");
        }
        let started = std::time::Instant::now();
        let list = f.providers.list_providers(false).await.unwrap();
        assert!(list.iter().all(|p| p.available));
        assert!(
            started.elapsed() < std::time::Duration::from_millis(2000),
            "took {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn no_default_set() {
        let f = fixture();
        f.bin.script("codex", "exit 0");
        let err = f.resolve(None, None).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::DefaultProviderNotSet),
            "{err:?}"
        );
        // An empty provider is the same as an absent one.
        let err = f.resolve(Some(""), None).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::DefaultProviderNotSet),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn default_must_be_available() {
        let f = fixture();
        f.set_default("codex").await;
        let err = f.resolve(None, None).await.unwrap_err();
        match err {
            ProviderError::DefaultProviderUnavailable { provider, reason } => {
                assert_eq!(provider, "codex");
                assert_eq!(reason, "codex not found on PATH");
            }
            other => panic!("{other:?}"),
        }

        f.bin.script("codex", "exit 2");
        let err = f.resolve(None, None).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::DefaultProviderUnavailable { .. }),
            "{err:?}"
        );

        f.bin.script("codex", "echo codex 0.50");
        assert_eq!(
            f.resolve(None, None).await.unwrap(),
            resolved("codex", "default", "", "")
        );
    }

    #[tokio::test]
    async fn unknown_default_in_a_hand_edited_file_is_unavailable() {
        let f = fixture();
        std::fs::write(
            f.providers.settings_store().path(),
            r#"{"defaultProvider":"gemini"}"#,
        )
        .unwrap();
        let err = f.resolve(None, None).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::DefaultProviderUnavailable { .. }),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn explicit_provider_must_be_known_but_need_not_be_available() {
        let f = fixture();
        let err = f.resolve(Some("gpt"), None).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Settings(SettingsError::ProviderNotFound { .. })
            ),
            "{err:?}"
        );
        // Nothing is on PATH, yet an explicit known provider resolves.
        assert_eq!(
            f.resolve(Some("claude"), None).await.unwrap(),
            resolved("claude", "default", "", "")
        );
    }

    #[tokio::test]
    async fn effort_level_is_validated_and_defaults_to_default() {
        let f = fixture();
        for level in [None, Some("")] {
            assert_eq!(
                f.resolve(Some("codex"), level).await.unwrap().effort_level,
                "default"
            );
        }
        let err = f.resolve(Some("codex"), Some("max")).await.unwrap_err();
        match err {
            ProviderError::Settings(SettingsError::InvalidInput(m)) => {
                assert!(m.starts_with("effort_level:"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // The level is checked before anything else.
        let err = f.resolve(None, Some("max")).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::Settings(SettingsError::InvalidInput(_))),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn profile_is_taken_as_is_and_level_names_the_effort() {
        let f = fixture();
        f.set_level("codex", "default", "gpt-5", "").await;
        f.set_level("codex", "medium", "gpt-5-mini", "").await;
        f.set_level("codex", "high", "", "xhigh").await;

        assert_eq!(
            f.resolve(Some("codex"), None).await.unwrap(),
            resolved("codex", "default", "gpt-5", "")
        );
        assert_eq!(
            f.resolve(Some("codex"), Some("medium")).await.unwrap(),
            resolved("codex", "medium", "gpt-5-mini", "medium")
        );
        assert_eq!(
            f.resolve(Some("codex"), Some("high")).await.unwrap(),
            resolved("codex", "high", "", "xhigh")
        );
        // No fallback to the default level's model.
        assert_eq!(
            f.resolve(Some("codex"), Some("low")).await.unwrap(),
            resolved("codex", "low", "", "low")
        );
        // Another provider's profiles do not leak.
        assert_eq!(
            f.resolve(Some("claude"), Some("high")).await.unwrap(),
            resolved("claude", "high", "", "high")
        );
    }

    #[tokio::test]
    async fn ollama_needs_a_model() {
        let f = fixture();
        let err = f.resolve(Some("ollama"), None).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Settings(SettingsError::ModelRequired { .. })
            ),
            "{err:?}"
        );

        f.set_level("ollama", "default", "qwen3:8b", "").await;
        assert_eq!(
            f.resolve(Some("ollama"), None).await.unwrap(),
            resolved("ollama", "default", "qwen3:8b", "")
        );
        // Per level, without fallback.
        let err = f.resolve(Some("ollama"), Some("high")).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Settings(SettingsError::ModelRequired { .. })
            ),
            "{err:?}"
        );

        // As the default provider too, once it is available.
        f.bin.script("pedelec-agent", "exit 0");
        f.set_default("ollama").await;
        assert_eq!(
            f.resolve(None, None).await.unwrap(),
            resolved("ollama", "default", "qwen3:8b", "")
        );
    }

    /// WatchSettings sends the profile part at once, again after an
    /// UpdateSettings, and again after an edit of the file by hand, each as
    /// the next generation; never a key.
    #[tokio::test]
    async fn watch_settings_sends_now_after_an_update_and_after_a_hand_edit() {
        let f = fixture();
        let next = async |rx: &mut mpsc::UnboundedReceiver<ProfileSettings>| {
            tokio::time::timeout(HAND_EDIT_POLL * 5, rx.recv())
                .await
                .expect("a snapshot in time")
                .expect("the stream goes on")
        };
        let model = ollama_default_model;
        let mut rx = acking_watcher(&f.providers);
        let first = next(&mut rx).await;
        assert_eq!(
            first,
            ProfileSettings {
                generation: 1,
                ..Default::default()
            }
        );

        f.set_level("ollama", "default", "qwen3:8b", "").await;
        let part = next(&mut rx).await;
        assert_eq!(model(&part).as_deref(), Some("qwen3:8b"));
        assert_eq!(part.generation, 2);

        // A key alone is not in the part: nothing is sent for it.
        let mut s = f.providers.full_settings();
        s.ollama_api_key = "secret-key".into();
        s.shell_tools_only = vec!["codex".into()];
        f.set(s).await;
        let part = next(&mut rx).await;
        assert_eq!(part.shell_tools_only, ["codex"]);
        assert!(!format!("{part:?}").contains("secret-key"));

        let hand_edit = r#"{"profiles":{"ollama":{"levels":{"default":{"model":"by-hand"}}}}}"#;
        std::fs::write(f.providers.settings_store().path(), hand_edit).unwrap();
        let part = next(&mut rx).await;
        assert_eq!(model(&part).as_deref(), Some("by-hand"));
        assert!(part.shell_tools_only.is_empty());
        assert_eq!(part.generation, 4);
    }

    /// UpdateSettings returns only once every watcher has acknowledged the
    /// change: by then each has been sent it. A change the part does not
    /// show (a key) sends nothing and waits for nothing new.
    #[tokio::test]
    async fn update_settings_returns_once_every_watcher_has_the_change() {
        let f = fixture();
        let mut watchers = [acking_watcher(&f.providers), acking_watcher(&f.providers)];
        for round in 0..50 {
            let model = format!("model-{round}");
            f.set_level("ollama", "default", &model, "").await;
            for rx in &mut watchers {
                let mut latest = None;
                while let Ok(part) = rx.try_recv() {
                    latest = Some(part);
                }
                let latest = latest.expect("sent before UpdateSettings returned");
                assert_eq!(ollama_default_model(&latest), Some(model.clone()));
            }
        }
        let mut s = f.providers.full_settings();
        s.tavily_api_key = "another-key".into();
        tokio::time::timeout(Duration::from_secs(1), f.set(s))
            .await
            .expect("no wait for a change nobody is sent");
        assert!(watchers.iter_mut().all(|rx| rx.try_recv().is_err()));
    }

    /// A watcher that never acknowledges holds UpdateSettings up for the
    /// bound and no longer; one that went away, or whose acks ended, not at all.
    #[tokio::test]
    async fn update_settings_waits_for_a_silent_watcher_only_as_long_as_the_bound() {
        let bound = Duration::from_millis(300);
        let f = fixture_acking_within(bound);
        let timed_update = async |model: &str| {
            let started = std::time::Instant::now();
            f.set_level("ollama", "default", model, "").await;
            started.elapsed()
        };

        let gone = f.providers.watch_settings(tokio_stream::pending());
        drop(gone);
        let _no_acks = f.providers.watch_settings(tokio_stream::empty());
        let took = timed_update("a").await;
        assert!(took < bound, "waited {took:?} for watchers that cannot ack");

        let _silent = f.providers.watch_settings(tokio_stream::pending());
        let took = timed_update("b").await;
        assert!(
            took >= bound && took < bound * 3,
            "waited {took:?} for a silent watcher"
        );
        assert_eq!(
            ollama_default_model(&profile_part(&f.providers.full_settings())).as_deref(),
            Some("b"),
            "stored all the same"
        );
    }
}
