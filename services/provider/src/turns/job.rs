//! A validated RunTurn request ([`Job`]) and the choice of what runs it:
//! codex's app-server or opencode's server where usable, else one CLI
//! process ([`super::cli`]). It also holds what every agent process of the
//! turn starts with (command, environment, PATH).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use pedelec_common::{Code, agent_args, process};
use pedelec_proto::v1 as pb;
use tokio::process::Command;

use super::appserver::{self, AppServers};
use super::events::{Sink, refuse};
use super::record::Records;
use super::serve::{self, OpencodeServers};
use super::servers::Fallback;
use crate::adapters::{self, Access, Provider, TurnSpec};
use crate::availability::ProgramEnv;
use crate::catalog;
use crate::error::ProviderError;
use crate::launch::{self, AgentProcs, Launch};

/// A validated request.
pub(super) struct Job {
    pub(super) session_id: String,
    pub(super) provider: Provider,
    pub(super) spec: &'static catalog::ProviderSpec,
    pub(super) turn: TurnSpec,
    pub(super) tool_env: HashMap<String, String>,
    /// Set after `tool_env`, so a request cannot override it.
    pub(super) agent_env: HashMap<String, String>,
    pub(super) programs: ProgramEnv,
    pub(super) grace: Duration,
    pub(super) records: Option<Records>,
    /// Where the turn publishes its process group for `Turns::stop_all`.
    pub(super) pgid: Arc<AtomicI32>,
    pub(super) codex: Arc<AppServers>,
    pub(super) opencode: Arc<OpencodeServers>,
    pub(super) launch: Arc<Launch>,
}

impl Job {
    pub(super) fn new(
        req: pb::RunTurnRequest,
        programs: &ProgramEnv,
        grace: Duration,
    ) -> Result<Job, ProviderError> {
        if req.session_id.is_empty() {
            return Err(ProviderError::invalid("session_id: required"));
        }
        let spec = catalog::find_provider(&req.provider)?;
        let provider = spec.provider;
        let workspace = PathBuf::from(&req.workspace);
        if !workspace.is_absolute() {
            return Err(ProviderError::invalid(format!(
                "workspace: {:?} is not an absolute path",
                req.workspace
            )));
        }
        if let Some(key) = req
            .tool_env
            .keys()
            .find(|k| k.is_empty() || k.contains(['=', '\0']))
        {
            return Err(ProviderError::invalid(format!(
                "tool_env: {key:?} is not a variable name"
            )));
        }
        if req.tool_env.values().any(|v| v.contains('\0')) {
            return Err(ProviderError::invalid("tool_env: a value contains NUL"));
        }
        let access = Access::from_request(req.access)?;
        let profile = req.profile.unwrap_or_default();
        let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
        // What goes on the CLI's command line: words none of which can read
        // as an option (the model and effort come from the settings or the
        // page; the session id from the CLI's own earlier output).
        let model = non_empty(profile.model);
        let effort = non_empty(profile.effort);
        let resume_id = req.provider_session_id.and_then(non_empty);
        let checks = [
            model.as_deref().map(agent_args::check_model),
            effort.as_deref().map(agent_args::check_effort),
            resume_id.as_deref().map(agent_args::check_session_id),
        ];
        if let Some(Err(why)) = checks.into_iter().flatten().find(Result::is_err) {
            return Err(ProviderError::InvalidInput(why));
        }
        Ok(Job {
            session_id: req.session_id,
            provider,
            spec,
            turn: TurnSpec {
                workspace,
                prompt: req.prompt,
                model,
                effort,
                resume_id,
                mcp: None,
                access,
                tool_cli: Some(pedelec_common::paths::cli_path()),
            },
            tool_env: req.tool_env,
            agent_env: HashMap::new(),
            programs: programs.clone(),
            grace,
            records: None,
            pgid: Arc::default(),
            codex: Arc::new(appserver::servers()),
            opencode: Arc::new(serve::servers()),
            launch: Arc::new(Launch::from_process()),
        })
    }

    pub(super) async fn run(self, mut sink: Sink) {
        // Once per service: whether agents are confined (servers' fingerprints
        // depend on it).
        self.launch.verdict(self.programs.path.as_deref()).await;
        if self.spec.needs_model && self.turn.model.is_none() {
            let message = format!(
                "{} needs a model; set one in the provider's effort profile",
                self.spec.code
            );
            return refuse(&mut sink, Code::MODEL_REQUIRED, message).await;
        }
        let program = match self.programs.locate(self.spec) {
            Ok(p) => p,
            Err(message) => return refuse(&mut sink, Code::PROVIDER_NOT_FOUND, message).await,
        };
        if !crate::access::honours(self.provider, self.turn.access) {
            let message = format!(
                "{} runs only with full access; grant the site full access or use another provider",
                self.spec.code
            );
            return refuse(&mut sink, Code::PROVIDER_NOT_GRANTED, message).await;
        }
        if self.turn.prompt.contains('\0') {
            let message = "prompt: contains a NUL byte".to_string();
            return refuse(&mut sink, Code::INVALID_INPUT, message).await;
        }
        let length = self.turn.prompt.len();
        if adapters::prompt_on_argv(self.provider) && length > adapters::MAX_ARGV_PROMPT {
            let message = format!(
                "the prompt is {length} bytes; {} takes it on its command line, where Pedelec allows at most {} bytes (100 KiB): send less, or use another provider",
                self.spec.code,
                adapters::MAX_ARGV_PROMPT
            );
            return refuse(&mut sink, Code::LIMIT_EXCEEDED, message).await;
        }
        if self.provider == Provider::Codex && self.codex.usable(&program, &self.programs).await {
            let servers = Arc::clone(&self.codex);
            match appserver::run_turn(&servers, &self, &program, &mut sink).await {
                Ok(()) => return,
                Err(Fallback(why)) => {
                    tracing::warn!(session = %self.session_id, "codex app-server unusable, running codex exec: {why}");
                }
            }
        }
        if self.provider == Provider::Codex {
            tracing::info!(session = %self.session_id, path = "exec", "codex turn");
        }
        if self.provider == Provider::Opencode {
            if self.opencode.usable(&program, &self.programs).await {
                let servers = Arc::clone(&self.opencode);
                match serve::run_turn(&servers, &self, &program, &mut sink).await {
                    Ok(()) => return,
                    Err(Fallback(why)) => {
                        tracing::warn!(session = %self.session_id, "opencode serve unusable, running opencode run: {why}");
                    }
                }
            }
            tracing::info!(session = %self.session_id, path = "run", "opencode turn");
        }
        self.run_cli(&program, sink).await;
    }

    /// A command that starts `program` as this turn's agent in `cwd` (see
    /// [`Launch::command`]) with the deliberate environment: the service's
    /// variables the allow-list passes, then the runtime dir, the thread's
    /// tool variables, the provider's settings and PATH.
    pub(super) async fn agent_command(&self, program: &Path, cwd: &Path) -> (Command, AgentProcs) {
        let env = launch::turn_env(
            self.records.as_ref().map(|r| r.runtime_dir.as_path()),
            &self.tool_env,
            &self.agent_env,
            self.agent_path(),
            self.provider == Provider::Claude && process::is_root(),
        );
        self.launch
            .command(
                program,
                cwd,
                self.programs.path.as_deref(),
                &env,
                (self.provider, self.turn.access),
            )
            .await
    }

    /// What a long-lived agent process was started with: a turn with other
    /// values needs a new one.
    pub(super) fn fingerprint(&self, program: &Path) -> String {
        let sorted = |m: &HashMap<String, String>| {
            let mut v: Vec<_> = m.iter().collect();
            v.sort();
            format!("{v:?}")
        };
        format!(
            "{}\0{:?}\0{}\0{}\0{}\0{}\0{}",
            program.display(),
            self.turn.mcp,
            self.turn.access.name(),
            self.turn.workspace.display(),
            sorted(&self.tool_env),
            sorted(&self.agent_env),
            self.launch.fingerprint()
        )
    }

    /// The service's PATH with the executable's folder (where `pedelec-cli`
    /// is built and installed) first, so the agent can call tools.
    fn agent_path(&self) -> OsString {
        let rest = self
            .programs
            .path
            .as_deref()
            .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
            .unwrap_or_default();
        let dirs = self.programs.exe_dir.iter().cloned().chain(rest);
        std::env::join_paths(dirs).unwrap_or_else(|_| {
            // An entry with ':' cannot be joined; keep the service's PATH as it was.
            self.programs.path.clone().unwrap_or_default()
        })
    }
}
