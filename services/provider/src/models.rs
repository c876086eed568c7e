//! The model names each CLI can list without asking a model, for
//! ListProviders (a settings page offers them as suggestions): codex's
//! app-server `model/list`, `opencode models`, `cursor-agent models`, and the
//! Ollama server's `/api/tags` (over plain http, with the settings' key).
//! Claude Code and Antigravity have no offline listing.
//!
//! A listing runs in the background with [`LIST_TIMEOUT`] (its process group
//! killed after it); its answer is kept for [`MODELS_TTL`], and every entry is
//! dropped when the settings change (the Ollama address or key may be new).
//! ListProviders never waits for a listing: it answers with what is kept and
//! starts one where nothing fresh is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use pedelec_common::process;
use pedelec_proto::v1::Settings;
use serde_json::Value as Json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::adapters::Provider;
use crate::availability::ProgramEnv;
use crate::settings::DEFAULT_OLLAMA_ENDPOINT;

/// How long a listing is kept before the next ListProviders lists again.
pub const MODELS_TTL: Duration = Duration::from_secs(10 * 60);

/// How long one listing may take (a process started and answered, or the
/// Ollama server asked); after it the listing counts as failed (no models).
pub const LIST_TIMEOUT: Duration = Duration::from_secs(20);

/// At most this many names are kept per provider.
const MAX_MODELS: usize = 500;

/// At most this many bytes of a listing's output are read.
const MAX_OUTPUT: usize = 1 << 20;

/// How a provider's models are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lister {
    /// `codex app-server`: `initialize`, then `model/list` (models not `hidden`).
    CodexAppServer,
    /// `opencode models`: one `provider/model` per line.
    OpencodeModels,
    /// `cursor-agent models`: `id - label` lines under a heading.
    CursorModels,
    /// GET `<ollama endpoint>/api/tags`: `models[].name`.
    OllamaTags,
}

/// The listing of `provider`, if its CLI has one.
pub fn lister(provider: Provider) -> Option<Lister> {
    match provider {
        Provider::Codex => Some(Lister::CodexAppServer),
        Provider::Opencode => Some(Lister::OpencodeModels),
        Provider::Cursor => Some(Lister::CursorModels),
        Provider::Ollama => Some(Lister::OllamaTags),
        Provider::Claude | Provider::Antigravity => None,
    }
}

#[derive(Default)]
struct Entry {
    /// The last listing's names and when it ended; `None`: none yet.
    listed: Option<(Vec<String>, Instant)>,
    running: bool,
}

/// The kept listings, by provider.
#[derive(Default)]
pub struct Models {
    entries: Mutex<HashMap<Provider, Entry>>,
    /// Counts the settings changes; a listing started before one is not kept.
    epoch: Mutex<u64>,
}

/// What ListProviders reports of a provider's models.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    pub models: Vec<String>,
    /// The first listing runs.
    pub pending: bool,
}

impl Models {
    /// What is kept for `provider`, at once. Without a fresh listing, and with
    /// the program found (`program`), starts one in the background.
    pub fn kept(
        self: &Arc<Self>,
        provider: Provider,
        program: Option<PathBuf>,
        settings: &Settings,
        env: &ProgramEnv,
    ) -> Kept {
        let Some(how) = lister(provider) else {
            return Kept::default();
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.entry(provider).or_default();
        let fresh = entry
            .listed
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < MODELS_TTL);
        let mut start = false;
        if !fresh
            && !entry.running
            && let Some(program) = program
        {
            entry.running = true;
            start = true;
            let epoch = *self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
            let this = Arc::clone(self);
            let settings = settings.clone();
            let env = env.clone();
            tokio::spawn(async move {
                let listed = list(how, &program, &settings, &env).await;
                let models = listed.unwrap_or_else(|e| {
                    tracing::info!(?provider, "listing the models failed: {e}");
                    Vec::new()
                });
                this.store(provider, epoch, models);
            });
        }
        Kept {
            models: entry
                .listed
                .as_ref()
                .map(|(m, _)| m.clone())
                .unwrap_or_default(),
            pending: entry.listed.is_none() && (entry.running || start),
        }
    }

    fn store(&self, provider: Provider, epoch: u64, models: Vec<String>) {
        let current = *self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.entry(provider).or_default();
        entry.running = false;
        if epoch == current {
            entry.listed = Some((models, Instant::now()));
        }
    }

    /// Drops every listing (the settings changed): the next ListProviders
    /// lists again.
    pub fn forget(&self) {
        let mut epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        *epoch += 1;
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in entries.values_mut() {
            entry.listed = None;
            // A listing still running is not kept ([`Models::store`]); a new
            // one may start at once.
            entry.running = false;
        }
    }
}

/// Lists `how`'s models within [`LIST_TIMEOUT`].
pub async fn list(
    how: Lister,
    program: &Path,
    settings: &Settings,
    env: &ProgramEnv,
) -> Result<Vec<String>, String> {
    let listed = tokio::time::timeout(LIST_TIMEOUT, async {
        match how {
            Lister::CodexAppServer => {
                let input = concat!(
                    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"pedelec","version":"0"}}}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","method":"initialized"}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":2,"method":"model/list","params":{}}"#,
                    "\n"
                );
                let out = run(program, env, &["app-server"], input, |line| {
                    codex_models(line).is_some()
                })
                .await?;
                out.lines()
                    .find_map(codex_models)
                    .ok_or_else(|| "codex app-server gave no model/list answer".to_string())
            }
            Lister::OpencodeModels => {
                Ok(opencode_models(&run(program, env, &["models"], "", |_| false).await?))
            }
            Lister::CursorModels => {
                Ok(cursor_models(&run(program, env, &["models"], "", |_| false).await?))
            }
            Lister::OllamaTags => ollama_tags(settings).await,
        }
    })
    .await
    .map_err(|_| format!("no answer within {} s", LIST_TIMEOUT.as_secs()))??;
    let mut names: Vec<String> = Vec::new();
    for name in listed {
        if page_safe(&name) && !names.contains(&name) && names.len() < MAX_MODELS {
            names.push(name);
        }
    }
    Ok(names)
}

/// A model name fit for a page: no path, no whitespace, not overlong.
fn page_safe(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['/', '~', '.'])
        && !name.contains("://")
        && name.chars().all(|c| !c.is_whitespace() && !c.is_control())
}

/// Runs `program args` in its own process group with the agent's allow-list
/// of the service's environment (as `--version` does), writes `input`, and
/// reads stdout until it closes or a line is `done`; then kills the group.
/// `Err` when it exits non-zero without a `done` line.
async fn run(
    program: &Path,
    env: &ProgramEnv,
    args: &[&str],
    input: &str,
    done: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(crate::launch::passed_env(std::env::vars_os()))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    match &env.path {
        Some(path) => cmd.env("PATH", path),
        None => cmd.env_remove("PATH"),
    };
    let mut child = process::spawn(&mut cmd)
        .await
        .map_err(|e| format!("could not start: {e}"))?;
    let pid = child.id();
    let _kill = KillGroup(pid);
    // Kept open until the answer: codex's app-server ends when its stdin does.
    let mut stdin = child.stdin.take();
    if let Some(stdin) = stdin.as_mut() {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(|e| format!("could not write: {e}"))?;
    }
    if input.is_empty() {
        drop(stdin.take());
    }
    let mut lines = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
    let mut out = String::new();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("could not read: {e}"))?
    {
        if out.len() + line.len() < MAX_OUTPUT {
            out.push_str(&line);
            out.push('\n');
        }
        if done(&line) {
            return Ok(out);
        }
    }
    drop(stdin);
    let status = child
        .wait()
        .await
        .map_err(|e| format!("could not wait: {e}"))?;
    if status.success() {
        Ok(out)
    } else {
        Err(process::ended(status))
    }
}

/// Kills the listing's process group when the listing ends or times out.
struct KillGroup(Option<u32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            process::signal_group(pid, libc::SIGKILL);
        }
    }
}

/// The names in codex app-server's answer to `model/list` (request id 2), if
/// `line` is that answer: `result.data[].model` of the models not `hidden`.
pub fn codex_models(line: &str) -> Option<Vec<String>> {
    let answer: Json = serde_json::from_str(line).ok()?;
    if answer.get("id") != Some(&Json::from(2)) {
        return None;
    }
    let data = answer.pointer("/result/data")?.as_array()?;
    Some(
        data.iter()
            .filter(|m| m.get("hidden") != Some(&Json::Bool(true)))
            .filter_map(|m| m.get("model").or_else(|| m.get("id"))?.as_str())
            .map(str::to_string)
            .collect(),
    )
}

/// `opencode models`' names: the `provider/model` lines.
pub fn opencode_models(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| {
            l.split_once('/')
                .is_some_and(|(p, m)| !p.is_empty() && !m.is_empty())
                && !l.contains(char::is_whitespace)
        })
        .map(str::to_string)
        .collect()
}

/// `cursor-agent models`' names: the id of each `id - label` line (colour
/// codes removed; the heading and tips have no such line).
pub fn cursor_models(out: &str) -> Vec<String> {
    strip_ansi(out)
        .lines()
        .filter_map(|l| {
            let (id, label) = l.trim().split_once(" - ")?;
            let id = id.trim_start_matches(['*', '-', ' ']).trim();
            (!id.is_empty() && !label.trim().is_empty() && !id.contains(char::is_whitespace))
                .then(|| id.to_string())
        })
        .collect()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ … final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The names in an Ollama server's `/api/tags` answer.
pub fn ollama_names(answer: &Json) -> Vec<String> {
    answer
        .get("models")
        .and_then(Json::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.get("name").or_else(|| m.get("model"))?.as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Asks the settings' Ollama server (plain http; an https address is not
/// listed) for its models, with the settings' key.
async fn ollama_tags(settings: &Settings) -> Result<Vec<String>, String> {
    let endpoint = match settings.ollama_endpoint.trim() {
        "" => DEFAULT_OLLAMA_ENDPOINT,
        e => e,
    };
    let uri: hyper::Uri = format!("{}/api/tags", endpoint.trim_end_matches('/'))
        .parse()
        .map_err(|_| "the Ollama address is no URL".to_string())?;
    if uri.scheme_str() != Some("http") {
        return Err("only an http:// Ollama address is listed".into());
    }
    let host = uri.host().ok_or("the Ollama address has no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| format!("could not connect: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("http: {e}"))?;
    tokio::spawn(conn);
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let path = uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let mut request = hyper::Request::get(path).header("host", authority);
    if !settings.ollama_api_key.is_empty() {
        request = request.header(
            "authorization",
            format!("Bearer {}", settings.ollama_api_key),
        );
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("http: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let body = http_body_util::Limited::new(response.into_body(), MAX_OUTPUT)
        .collect()
        .await
        .map_err(|e| format!("http: {e}"))?
        .to_bytes();
    let answer: Json = serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
    Ok(ollama_names(&answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codex_lists_the_visible_models_of_the_model_list_answer() {
        let answer = json!({"id": 2, "result": {"data": [
            {"id": "gpt-6.2-sol", "model": "gpt-6.2-sol", "hidden": false, "isDefault": true},
            {"id": "old", "model": "old", "hidden": true},
            {"id": "gpt-6.2-astra", "model": "gpt-6.2-astra"}
        ]}});
        assert_eq!(
            codex_models(&answer.to_string()),
            Some(vec!["gpt-6.2-sol".to_string(), "gpt-6.2-astra".into()])
        );
        assert_eq!(codex_models(r#"{"id":1,"result":{"userAgent":"x"}}"#), None);
        assert_eq!(
            codex_models(r#"{"method":"remoteControl/status/changed","params":{}}"#),
            None
        );
        assert_eq!(codex_models("not json"), None);
    }

    #[test]
    fn opencode_lists_the_provider_model_lines() {
        let out = "opencode/big-pickle\nmock/mock-model\n\nINFO something happened\n";
        assert_eq!(
            opencode_models(out),
            ["opencode/big-pickle", "mock/mock-model"]
        );
    }

    #[test]
    fn cursor_lists_the_ids_under_its_heading() {
        let out = "\u{1b}[1mAvailable models\u{1b}[0m\n\nauto - Auto  (current)\nsonnet-4.5 - Claude 4.5 Sonnet\ngpt-5 - GPT-5 (default)\n\nTip: use --model <id> to switch.\n";
        assert_eq!(cursor_models(out), ["auto", "sonnet-4.5", "gpt-5"]);
        assert!(cursor_models("Authentication required").is_empty());
    }

    #[test]
    fn ollama_lists_the_tag_names() {
        let answer = json!({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest"}, {"model": "qwen3:8b"}, {"size": 1}]});
        assert_eq!(ollama_names(&answer), ["llama3.2:latest", "qwen3:8b"]);
        assert!(ollama_names(&json!({"error": "x"})).is_empty());
    }

    #[test]
    fn only_page_safe_names_are_kept() {
        assert!(page_safe("mock/mock-model"));
        assert!(page_safe("llama3.2:latest"));
        for bad in [
            "",
            "/home/u/model.gguf",
            "~/m",
            "./m",
            "a b",
            "file://x",
            "a\u{7}",
        ] {
            assert!(!page_safe(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_codex_opencode_cursor_and_ollama_list() {
        let listing: Vec<_> = crate::catalog::PROVIDERS
            .iter()
            .filter(|p| lister(p.provider).is_some())
            .map(|p| p.code)
            .collect();
        assert_eq!(listing, ["codex", "opencode", "cursor", "ollama"]);
    }
}
