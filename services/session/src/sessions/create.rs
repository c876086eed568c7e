//! CreateSession: checks, the profile, the manifest, then the new record.

use std::sync::{Arc, Mutex};

use pedelec_common::{agent_args, ids, json, now_ms};
use pedelec_proto::v1 as pb;

use super::workspace::conflict_error;
use super::{Sessions, SharedThread, lock};
use crate::error::{SessionError, upstream};
use crate::record::{Status, ThreadRecord, UsageRecord, Workspace};
use crate::settings::Current;
use crate::sites::Grant;
use crate::thread::Thread;

impl Sessions {
    pub async fn create(
        &self,
        req: pb::CreateSessionRequest,
    ) -> Result<pb::CreateSessionResponse, SessionError> {
        if req.origin.is_empty() {
            return Err(SessionError::InvalidInput("origin is empty".into()));
        }
        // None: a local caller (`cli`), which needs no grant.
        let grant = self.inner.sites.check(&req.origin)?;
        // Every create a granted web origin asks for counts, a refused one too.
        self.inner.limits.take_create(&req.origin)?;
        let model = req.model.as_deref().filter(|m| !m.is_empty());
        if let Some(model) = model {
            check_model_name(model)?;
        }
        // An unknown provider is PROVIDER_NOT_FOUND, from the profile's resolution.
        if let (Some(grant), Some(code)) = (&grant, named_provider(&req))
            && pedelec_settings::catalog::find(code).is_some()
        {
            check_provider(&req.origin, grant, code)?;
        }
        self.check_open_threads(&req.origin)?;
        let explicit_workspace = match req.workspace_path.as_deref() {
            Some(path) if !path.is_empty() => {
                Some(self.check_explicit_workspace(path, &req.origin, grant.as_ref())?)
            }
            _ => None,
        };
        let profile = self.create_profile(&req).await?;
        if let Some(grant) = &grant {
            // The default provider is known only now.
            check_provider(&req.origin, grant, &profile.provider)?;
            if let Some(model) = model
                && !grant.any_model
            {
                self.check_profile_model(&req.origin, &profile.provider, model)
                    .await?;
            }
        }
        // The manifest is checked here, by the parser ToolBridgeService uses; the
        // bridge is given it when the thread's first operation starts
        // (`tools_ready`). A create then asks no other service when it names
        // its provider (docs/decisions.md, "Create").
        let manifest = req.skills.as_ref().map(json::from_struct);
        if let Some(manifest) = &manifest {
            crate::tools::check_manifest(manifest).await?;
        }
        let session_id = ids::new_id("thr");
        // A managed workspace is made on first use (`make_workspace`): a
        // thread that is never used costs no folder, and a create no mkdir.
        let (workspace_path, workspace) = match explicit_workspace {
            Some(path) => (path, Workspace::Explicit),
            None => (
                self.inner.config.data_dir.workspaces().join(&session_id),
                Workspace::ManagedPending,
            ),
        };

        let record = ThreadRecord {
            session_id: session_id.clone(),
            origin: req.origin,
            provider: profile.provider.clone(),
            effort_level: profile.effort_level.clone(),
            model: model.map(str::to_string).unwrap_or(profile.model),
            effort: profile.effort,
            workspace_path,
            workspace,
            auto_end_on_disconnect: req.auto_end_on_disconnect,
            created_at_ms: now_ms(),
            status: Status::Idle,
            ended_at_ms: None,
            provider_session_id: None,
            ever_attached: false,
            first_turn_done: false,
            usage: None,
            cumulative_seen: UsageRecord::default(),
            manifest: manifest.map(serde_json::Value::Object),
            tool_token: None,
            active_operation: None,
            recent_operations: Vec::new(),
            pending_tool_request: None,
            last_seq: 0,
            seq_reserved: 0,
        };
        let mut thread = Thread::new(record, self.inner.config.replay);
        thread.history = self.history_of(&session_id);
        // Checked again: other creates of the origin may have finished while
        // this one awaited ProviderService or the manifest's check.
        self.check_open_threads(&thread.record.origin)?;
        // The folder's conflicts checked again and the thread added to the
        // index under one lock: another create may have claimed a
        // conflicting folder meanwhile.
        let explicit = workspace == Workspace::Explicit;
        if explicit {
            let given = req.workspace_path.as_deref().unwrap_or_default();
            let r = &thread.record;
            self.inner
                .workspaces
                .claim(&r.workspace_path, &session_id, &r.origin)
                .map_err(|c| conflict_error(given, c, grant.is_none()))?;
        }
        let stored = async {
            if explicit
                && let Some(grant) = &grant
                && grant
                    .folders
                    .iter()
                    .any(|f| f.once && f.path == thread.record.workspace_path)
            {
                // A folder allowed once is used up by this create.
                let (sites, origin) = (self.inner.sites.clone(), thread.record.origin.clone());
                let path = thread.record.workspace_path.clone();
                tokio::task::spawn_blocking(move || sites.use_once(&origin, &path))
                    .await
                    .map_err(|e| SessionError::Internal(format!("site grants: {e}")))??;
            }
            thread.save(&self.inner.journal)
        }
        .await;
        if let Err(e) = stored {
            if explicit {
                let path = &thread.record.workspace_path;
                self.inner.workspaces.remove(path, &session_id);
            }
            return Err(e);
        }
        let snapshot = thread.snapshot();
        self.threads()
            .insert(session_id.clone(), Arc::new(Mutex::new(thread)));
        self.refill_spares();
        tracing::info!(session = %session_id, provider = %profile.provider, "created thread");
        Ok(pb::CreateSessionResponse {
            session_id,
            provider: profile.provider,
            effort_level: profile.effort_level,
            snapshot: Some(snapshot),
        })
    }

    /// The thread's provider and effort profile. A named provider's is
    /// resolved here from the settings ProviderService sent
    /// (`Sessions::named_profile`); the default provider must also be
    /// installed, which ProviderService checks (and caches).
    async fn create_profile(
        &self,
        req: &pb::CreateSessionRequest,
    ) -> Result<pb::ResolvedProfile, SessionError> {
        let effort_level = req.effort_level.as_deref().filter(|e| !e.is_empty());
        match req.provider.as_deref().filter(|p| !p.is_empty()) {
            Some(code) => self.named_profile(code, effort_level).await,
            None => self.resolve_profile(None, effort_level).await,
        }
    }

    /// MODEL_NOT_ALLOWED unless `model` is one of the user's profile models
    /// of `provider` (at any effort level).
    async fn check_profile_model(
        &self,
        origin: &str,
        provider: &str,
        model: &str,
    ) -> Result<(), SessionError> {
        let profiles = match self.inner.settings.current() {
            Current::Watched(s) | Current::Unwatched(Some(s)) => s.profiles.clone(),
            Current::Unwatched(None) => {
                self.inner
                    .provider
                    .clone()
                    .get_full_settings(pb::GetSettingsRequest {})
                    .await
                    .map_err(upstream)?
                    .into_inner()
                    .profiles
            }
        };
        let known = profiles
            .get(provider)
            .is_some_and(|p| p.levels.values().any(|l| l.model == model));
        if known {
            return Ok(());
        }
        Err(SessionError::ModelNotAllowed {
            origin: origin.to_string(),
            provider: provider.to_string(),
            model: model.to_string(),
        })
    }

    /// `LIMIT_EXCEEDED` when `origin` already holds the most open threads
    /// allowed. Counted without holding the map lock across thread locks, so
    /// creates racing on other workers may pass together (by at most a few).
    pub(super) fn check_open_threads(&self, origin: &str) -> Result<(), SessionError> {
        let all: Vec<SharedThread> = self.threads().values().cloned().collect();
        let open = all
            .iter()
            .filter(|t| {
                let t = lock(t);
                t.record.origin == origin && t.record.status != Status::Ended
            })
            .count();
        let max = self.inner.config.max_open_threads_per_origin;
        if open >= max {
            return Err(SessionError::Limit(format!(
                "{origin} already has {open} open sessions (the most allowed is {max}); end one first"
            )));
        }
        Ok(())
    }
}

fn named_provider(req: &pb::CreateSessionRequest) -> Option<&str> {
    req.provider.as_deref().filter(|p| !p.is_empty())
}

fn check_provider(origin: &str, grant: &Grant, provider: &str) -> Result<(), SessionError> {
    if grant.providers.iter().any(|p| p == provider) {
        return Ok(());
    }
    Err(SessionError::ProviderNotGranted {
        origin: origin.to_string(),
        provider: provider.to_string(),
    })
}

/// A model reaches the CLI as one `--model=<value>` argument; the rule is
/// ProviderService's ([`agent_args::check_model`]), asked here so a create
/// with a model no turn could run fails at once.
pub fn check_model_name(model: &str) -> Result<(), SessionError> {
    agent_args::check_model(model).map_err(SessionError::InvalidInput)
}

#[cfg(test)]
mod tests {
    use super::check_model_name;

    #[test]
    fn model_names_follow_provider_services_rule() {
        for model in [
            "gpt-5.2",
            "llama3.1:8b-instruct-q4_K_M",
            "qwen2.5-coder:7b_q4_K_M",
            "sonnet[1m]",
            "anthropic/claude-sonnet-4-5",
        ] {
            assert!(check_model_name(model).is_ok(), "{model}");
        }
        for model in ["-m", "--model=x", "a b", "a=b", "", "[1m]"] {
            assert!(check_model_name(model).is_err(), "{model}");
        }
    }
}
