//! `settings.json`: its on-disk form, validation, partial updates (an
//! `update_mask`) and atomic replacement.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pedelec_proto::v1::{PublicSettings, Settings};

use crate::catalog;
use crate::error::ProviderError;

/// The file form is the settings document of the wire module (one shape for
/// the file and for `pedelec-cli settings get`).
use pedelec_common::wire::SettingsDoc as SettingsFile;

/// pedelec-agent's settings, as it reads them from its environment (names in
/// services/agent/src/lib.rs). Every variable is set, empty when unset, so a
/// value inherited from the service's own environment never reaches the agent.
pub fn agent_env(s: &Settings) -> std::collections::HashMap<String, String> {
    let endpoint = if s.ollama_endpoint.is_empty() {
        DEFAULT_OLLAMA_ENDPOINT
    } else {
        s.ollama_endpoint.as_str()
    };
    [
        ("PEDELEC_OLLAMA_ENDPOINT", endpoint),
        ("PEDELEC_OLLAMA_API_KEY", s.ollama_api_key.as_str()),
        ("PEDELEC_TAVILY_API_KEY", s.tavily_api_key.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Where pedelec-agent finds Ollama when the settings name no endpoint.
pub const DEFAULT_OLLAMA_ENDPOINT: &str = "http://127.0.0.1:11434";

/// Whether `spec`'s turns get the page's tools as native MCP tools: the CLI
/// supports it and the settings do not keep it on the shell path.
pub fn native_tools(s: &Settings, spec: &catalog::ProviderSpec) -> bool {
    spec.mcp && !s.shell_tools_only.iter().any(|c| c == spec.code)
}

/// The public part: what a web page may see.
pub fn public_part(s: &Settings) -> PublicSettings {
    PublicSettings {
        default_provider: s.default_provider.clone(),
    }
}

/// One part of the settings an `update_mask` path names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    DefaultProvider,
    OllamaEndpoint,
    OllamaApiKey,
    TavilyApiKey,
    ShellToolsOnly,
    AllProfiles,
    Profiles { provider: String },
    Level { provider: String, level: String },
}

impl Part {
    /// Parses a mask path (proto field names, see provider.proto). Map keys
    /// are checked here so a typo is refused, not stored as a new entry.
    fn parse(path: &str) -> Result<Part, ProviderError> {
        let provider = |code: &str| -> Result<String, ProviderError> {
            match catalog::find(code) {
                Some(spec) => Ok(spec.code.to_string()),
                None => Err(ProviderError::invalid(format!(
                    "update_mask: {path:?}: {code:?} is not a provider; expected one of {}",
                    catalog::codes_list()
                ))),
            }
        };
        let parts: Vec<&str> = path.split('.').collect();
        Ok(match parts.as_slice() {
            ["default_provider"] => Part::DefaultProvider,
            ["ollama_endpoint"] => Part::OllamaEndpoint,
            ["ollama_api_key"] => Part::OllamaApiKey,
            ["tavily_api_key"] => Part::TavilyApiKey,
            ["shell_tools_only"] => Part::ShellToolsOnly,
            ["profiles"] => Part::AllProfiles,
            ["profiles", code] => Part::Profiles {
                provider: provider(code)?,
            },
            ["profiles", code, level] => {
                let provider = provider(code)?;
                if !catalog::is_effort_level(level) {
                    return Err(ProviderError::invalid(format!(
                        "update_mask: {path:?}: {level:?} is not an effort level; expected one of {}",
                        catalog::levels_list()
                    )));
                }
                Part::Level {
                    provider,
                    level: level.to_string(),
                }
            }
            _ => {
                return Err(ProviderError::invalid(format!(
                    "update_mask: {path:?} is not a settings path; expected default_provider, \
                     ollama_endpoint, ollama_api_key, tavily_api_key, shell_tools_only, profiles, \
                     profiles.<provider> or profiles.<provider>.<level>"
                )));
            }
        })
    }

    /// Copies this part from `from` into `to`; a part `from` lacks is cleared.
    fn copy(&self, from: &Settings, to: &mut Settings) {
        match self {
            Part::DefaultProvider => to.default_provider = from.default_provider.clone(),
            Part::OllamaEndpoint => to.ollama_endpoint = from.ollama_endpoint.clone(),
            Part::OllamaApiKey => to.ollama_api_key = from.ollama_api_key.clone(),
            Part::TavilyApiKey => to.tavily_api_key = from.tavily_api_key.clone(),
            Part::ShellToolsOnly => to.shell_tools_only = from.shell_tools_only.clone(),
            Part::AllProfiles => to.profiles = from.profiles.clone(),
            Part::Profiles { provider } => match from.profiles.get(provider) {
                Some(p) => {
                    to.profiles.insert(provider.clone(), p.clone());
                }
                None => {
                    to.profiles.remove(provider);
                }
            },
            Part::Level { provider, level } => {
                match from
                    .profiles
                    .get(provider)
                    .and_then(|p| p.levels.get(level))
                {
                    Some(l) => {
                        to.profiles
                            .entry(provider.clone())
                            .or_default()
                            .levels
                            .insert(level.clone(), l.clone());
                    }
                    None => {
                        if let Some(p) = to.profiles.get_mut(provider) {
                            p.levels.remove(level);
                            if p.levels.is_empty() {
                                to.profiles.remove(provider);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The settings after an UpdateSettings: `patch` itself without a mask (or
/// with an empty one), else `current` with the parts the mask names taken
/// from `patch`, in the mask's order. An unknown path changes nothing.
pub fn apply_update(
    current: Settings,
    patch: Settings,
    mask: Option<&[String]>,
) -> Result<Settings, ProviderError> {
    let paths = match mask {
        Some(paths) if !paths.is_empty() => paths,
        _ => return Ok(patch),
    };
    let parts = paths
        .iter()
        .map(|p| Part::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut next = current;
    for part in &parts {
        part.copy(&patch, &mut next);
    }
    Ok(next)
}

/// Checks `s` and returns it normalized: surrounding whitespace trimmed, an
/// empty default provider made absent. Errors name the offending field.
pub fn validate(mut s: Settings) -> Result<Settings, ProviderError> {
    s.default_provider = s
        .default_provider
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    if let Some(code) = &s.default_provider
        && catalog::find(code).is_none()
    {
        return Err(ProviderError::invalid(format!(
            "settings.default_provider: {code:?} is not a provider; expected one of {}",
            catalog::codes_list()
        )));
    }
    for (code, profiles) in &mut s.profiles {
        if catalog::find(code).is_none() {
            return Err(ProviderError::invalid(format!(
                "settings.profiles: {code:?} is not a provider; expected one of {}",
                catalog::codes_list()
            )));
        }
        for (level, profile) in &mut profiles.levels {
            if !catalog::is_effort_level(level) {
                return Err(ProviderError::invalid(format!(
                    "settings.profiles[{code:?}].levels: {level:?} is not an effort level; expected one of {}",
                    catalog::levels_list()
                )));
            }
            trim(&mut profile.model);
            trim(&mut profile.effort);
        }
    }
    for code in &mut s.shell_tools_only {
        trim(code);
        if catalog::find(code).is_none() {
            return Err(ProviderError::invalid(format!(
                "settings.shell_tools_only: {code:?} is not a provider; expected one of {}",
                catalog::codes_list()
            )));
        }
    }
    s.shell_tools_only.sort();
    s.shell_tools_only.dedup();
    trim(&mut s.ollama_endpoint);
    if !s.ollama_endpoint.is_empty() && !is_http_url(&s.ollama_endpoint) {
        return Err(ProviderError::invalid(format!(
            "settings.ollama_endpoint: {:?} is not an http(s) URL such as http://127.0.0.1:11434",
            s.ollama_endpoint
        )));
    }
    // Keys are pasted; a stray newline would break the Authorization header.
    trim(&mut s.ollama_api_key);
    trim(&mut s.tavily_api_key);
    Ok(s)
}

fn trim(s: &mut String) {
    let t = s.trim();
    if t.len() != s.len() {
        *s = t.to_string();
    }
}

/// `http(s)://host[:port][/path…]` with a non-empty host and a numeric port;
/// enough to catch typos without pulling in a URL parser.
fn is_http_url(s: &str) -> bool {
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let lower = s.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((host, after)) => match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return false,
                },
            },
            None => return false,
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    !host.is_empty() && port.is_none_or(|p| p.parse::<u16>().is_ok())
}

/// Reads and replaces `settings.json`. Every read looks at the file, so an
/// edit by hand is seen without a restart; the file is parsed again only when
/// its identity, size or times changed (a create asks for the profile, and a
/// `stat` is a fraction of open, read and parse).
pub struct SettingsStore {
    path: PathBuf,
    /// The corrupt file last reported, so a broken file is logged once, not on every read.
    reported: Mutex<Option<(std::time::SystemTime, u64)>>,
    /// The last settings parsed, with the stamp of the file they came from.
    parsed: Mutex<Option<(FileStamp, Settings)>>,
    /// Held from reading to writing: two partial updates at once must not
    /// each write their change over the same old settings.
    writing: tokio::sync::Mutex<()>,
}

/// What tells one version of a file from another without reading it: a
/// replace makes a new inode, an edit in place changes the size or the times.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

impl SettingsStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SettingsStore {
            path: path.into(),
            reported: Mutex::new(None),
            parsed: Mutex::new(None),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current settings: empty when the file is missing, and also when it
    /// is unreadable or corrupt (reported in the log).
    pub fn load(&self) -> Settings {
        let stamp = match std::fs::metadata(&self.path) {
            Ok(meta) => FileStamp::of(&meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Settings::default(),
            Err(e) => {
                self.report(&format!("cannot read it: {e}"));
                return Settings::default();
            }
        };
        let parsed = || self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, settings)) = &*parsed()
            && *seen == stamp
        {
            return settings.clone();
        }
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Settings::default(),
            Err(e) => {
                self.report(&format!("cannot read it: {e}"));
                return Settings::default();
            }
        };
        match serde_json::from_slice::<SettingsFile>(&bytes) {
            Ok(file) => {
                let settings: Settings = file.into();
                // Replaced between the stat and the read: the next load sees a
                // new stamp and reads again, so nothing stale is kept.
                *parsed() = Some((stamp, settings.clone()));
                settings
            }
            Err(e) => {
                self.report(&format!("not valid settings JSON: {e}"));
                Settings::default()
            }
        }
    }

    fn report(&self, why: &str) {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut reported = self.reported.lock().expect("report lock");
        if stamp.is_none() || *reported != stamp {
            *reported = stamp;
            tracing::warn!(
                path = %self.path.display(),
                "ignoring the settings file ({why}); using empty settings until it is fixed or replaced"
            );
        }
    }

    /// Validates `settings` and replaces the file with them, atomically and
    /// 0600 (it holds API keys). Returns what was stored.
    pub async fn replace(&self, settings: Settings) -> Result<Settings, ProviderError> {
        self.update(settings, None).await
    }

    /// UpdateSettings: [`apply_update`] to the current settings, validated,
    /// then stored as [`SettingsStore::replace`] stores.
    pub async fn update(
        &self,
        patch: Settings,
        mask: Option<&[String]>,
    ) -> Result<Settings, ProviderError> {
        let _writing = self.writing.lock().await;
        let settings = validate(apply_update(self.load(), patch, mask)?)?;
        let mut json = serde_json::to_vec_pretty(&SettingsFile::from(&settings))
            .map_err(|e| ProviderError::Internal(format!("cannot encode settings: {e}")))?;
        json.push(b'\n');
        let path = self.path.clone();
        // write_atomic fsyncs; keep that off the async workers.
        tokio::task::spawn_blocking(move || {
            pedelec_common::paths::write_atomic(&path, &json, 0o600)
                .map_err(|source| ProviderError::SettingsWrite { path, source })
        })
        .await
        .map_err(|e| ProviderError::Internal(format!("settings writer failed: {e}")))??;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use pedelec_proto::v1::{EffortProfile, ProviderProfiles};

    fn level(model: &str, effort: &str) -> EffortProfile {
        EffortProfile {
            model: model.into(),
            effort: effort.into(),
        }
    }

    fn profiles(levels: &[(&str, EffortProfile)]) -> ProviderProfiles {
        ProviderProfiles {
            levels: levels
                .iter()
                .map(|(name, p)| (name.to_string(), p.clone()))
                .collect(),
        }
    }

    fn invalid_message(s: Settings) -> String {
        match validate(s) {
            Err(ProviderError::InvalidInput(m)) => m,
            other => panic!("expected INVALID_INPUT, got {other:?}"),
        }
    }

    fn mask(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    fn sample() -> Settings {
        let mut s = Settings {
            default_provider: Some("codex".into()),
            ollama_endpoint: "http://127.0.0.1:11434".into(),
            ollama_api_key: "k1".into(),
            tavily_api_key: "t1".into(),
            ..Default::default()
        };
        s.profiles.insert(
            "codex".into(),
            profiles(&[("low", level("m1", "low")), ("high", level("m2", "high"))]),
        );
        s.profiles
            .insert("claude".into(), profiles(&[("default", level("opus", ""))]));
        s
    }

    #[test]
    fn a_hand_edit_is_seen_by_the_next_load_in_place_or_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("settings.json");
        let store = SettingsStore::new(&path);
        assert_eq!(store.load().default_provider, None);
        std::fs::write(&path, br#"{"defaultProvider":"codex"}"#).unwrap();
        assert_eq!(store.load().default_provider.as_deref(), Some("codex"));
        assert_eq!(store.load().default_provider.as_deref(), Some("codex"));
        // Same size, written in place (an editor that does not replace).
        std::fs::write(&path, br#"{"defaultProvider":"qwen5"}"#).unwrap();
        assert_eq!(store.load().default_provider.as_deref(), Some("qwen5"));
        // Replaced by rename.
        let other = tmp.path().join("new.json");
        std::fs::write(&other, br#"{"defaultProvider":"claude"}"#).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(store.load().default_provider.as_deref(), Some("claude"));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(store.load().default_provider, None);
    }

    #[test]
    fn native_tools_where_mcp_works_unless_kept_on_the_shell() {
        let on: Vec<&str> = catalog::PROVIDERS
            .iter()
            .filter(|p| native_tools(&Settings::default(), p))
            .map(|p| p.code)
            .collect();
        assert_eq!(on, ["codex", "opencode", "claude"]);
        let s = validate(Settings {
            shell_tools_only: vec![" claude".into(), "codex".into(), "claude".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.shell_tools_only, ["claude", "codex"]);
        let claude = catalog::find("claude").unwrap();
        let opencode = catalog::find("opencode").unwrap();
        assert!(!native_tools(&s, claude));
        assert!(native_tools(&s, opencode));
        let m = invalid_message(Settings {
            shell_tools_only: vec!["vim".into()],
            ..Default::default()
        });
        assert!(m.starts_with("settings.shell_tools_only: \"vim\""), "{m}");
        // The mask path changes only the list.
        let patch = Settings {
            shell_tools_only: vec!["opencode".into()],
            ..Default::default()
        };
        let next = apply_update(sample(), patch, Some(&mask(&["shell_tools_only"]))).unwrap();
        assert_eq!(next.shell_tools_only, ["opencode"]);
        assert_eq!(next.tavily_api_key, sample().tavily_api_key);
    }

    #[test]
    fn without_a_mask_the_patch_replaces_everything() {
        let patch = Settings {
            tavily_api_key: "new".into(),
            ..Default::default()
        };
        for m in [None, Some(&[][..])] {
            assert_eq!(apply_update(sample(), patch.clone(), m).unwrap(), patch);
        }
    }

    #[test]
    fn a_mask_changes_only_what_it_names() {
        let patch = Settings {
            default_provider: Some("claude".into()),
            ollama_api_key: "k2".into(),
            ..Default::default()
        };
        let next = apply_update(sample(), patch, Some(&mask(&["default_provider"]))).unwrap();
        let mut expected = sample();
        expected.default_provider = Some("claude".into());
        assert_eq!(next, expected, "the api key was not named, so it stays");

        // Named but absent in the patch: cleared.
        let next = apply_update(
            sample(),
            Settings::default(),
            Some(&mask(&["ollama_api_key", "default_provider"])),
        )
        .unwrap();
        assert_eq!(
            (next.ollama_api_key.as_str(), next.default_provider),
            ("", None)
        );
        assert_eq!(next.tavily_api_key, "t1");
    }

    #[test]
    fn profile_paths_reach_one_provider_or_one_level() {
        let mut patch = Settings::default();
        patch
            .profiles
            .insert("codex".into(), profiles(&[("high", level("m3", "xhigh"))]));
        // One level: the other codex level and claude stay.
        let next = apply_update(
            sample(),
            patch.clone(),
            Some(&mask(&["profiles.codex.high"])),
        )
        .unwrap();
        assert_eq!(next.profiles["codex"].levels["high"], level("m3", "xhigh"));
        assert_eq!(next.profiles["codex"].levels["low"], level("m1", "low"));
        assert!(next.profiles.contains_key("claude"));
        // One provider: its levels are replaced as a whole.
        let next = apply_update(sample(), patch.clone(), Some(&mask(&["profiles.codex"]))).unwrap();
        assert_eq!(next.profiles["codex"].levels.len(), 1);
        assert!(next.profiles.contains_key("claude"));
        // A level the patch lacks is removed, and an emptied provider with it.
        let next = apply_update(
            sample(),
            Settings::default(),
            Some(&mask(&["profiles.claude.default"])),
        )
        .unwrap();
        assert!(!next.profiles.contains_key("claude"));
        // All profiles.
        let next = apply_update(sample(), patch, Some(&mask(&["profiles"]))).unwrap();
        assert_eq!(next.profiles.len(), 1);
        assert_eq!(next.default_provider.as_deref(), Some("codex"));
    }

    #[test]
    fn unknown_mask_paths_are_invalid_input() {
        for path in [
            "effort_profiles",
            "defaultProvider",
            "profiles.gpt",
            "profiles.codex.extreme",
            "profiles.codex.high.model",
            "",
        ] {
            let err = apply_update(
                sample(),
                Settings::default(),
                Some(&mask(&["tavily_api_key", path])),
            )
            .unwrap_err();
            assert!(
                matches!(err, ProviderError::InvalidInput(_)),
                "{path}: {err:?}"
            );
        }
    }

    #[tokio::test]
    async fn masked_updates_keep_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::new(dir.path().join("settings.json"));
        store.replace(sample()).await.unwrap();
        let patch = Settings {
            ollama_endpoint: "http://10.0.0.1:11434".into(),
            ..Default::default()
        };
        store
            .update(patch, Some(&mask(&["ollama_endpoint"])))
            .await
            .unwrap();
        let mut expected = sample();
        expected.ollama_endpoint = "http://10.0.0.1:11434".into();
        assert_eq!(store.load(), expected);
    }

    #[test]
    fn default_provider_must_be_a_known_code_or_absent() {
        assert!(validate(Settings::default()).is_ok());
        for code in catalog::PROVIDERS.map(|p| p.code) {
            let s = Settings {
                default_provider: Some(code.into()),
                ..Default::default()
            };
            assert_eq!(validate(s).unwrap().default_provider.as_deref(), Some(code));
        }
        let m = invalid_message(Settings {
            default_provider: Some("gpt".into()),
            ..Default::default()
        });
        assert!(m.starts_with("settings.default_provider: \"gpt\""), "{m}");
        // Codes are exact.
        invalid_message(Settings {
            default_provider: Some("Codex".into()),
            ..Default::default()
        });
        // Empty means "none".
        let s = Settings {
            default_provider: Some("  ".into()),
            ..Default::default()
        };
        assert_eq!(validate(s).unwrap().default_provider, None);
    }

    #[test]
    fn profile_keys_must_be_provider_codes_and_levels_known() {
        let mut s = Settings::default();
        s.profiles.insert(
            "codex".into(),
            profiles(&[
                ("default", level("gpt-5", "")),
                ("high", level("", "xhigh")),
            ]),
        );
        assert!(validate(s.clone()).is_ok());

        let mut bad = s.clone();
        bad.profiles.insert("gemini".into(), profiles(&[]));
        let m = invalid_message(bad);
        assert!(m.starts_with("settings.profiles: \"gemini\""), "{m}");

        let mut bad = s.clone();
        bad.profiles
            .insert("claude".into(), profiles(&[("max", level("opus", ""))]));
        let m = invalid_message(bad);
        assert!(
            m.starts_with("settings.profiles[\"claude\"].levels: \"max\""),
            "{m}"
        );
    }

    #[test]
    fn ollama_endpoint_is_empty_or_http_url() {
        for ok in [
            "",
            "http://127.0.0.1:11434",
            "https://ollama.example.com/api/",
            "HTTP://localhost",
            "http://[::1]:11434",
            "http://user:pw@host:8080/x?y#z",
        ] {
            let s = Settings {
                ollama_endpoint: ok.into(),
                ..Default::default()
            };
            assert!(validate(s).is_ok(), "{ok:?} should be accepted");
        }
        for bad in [
            "localhost:11434",
            "ftp://host",
            "http://",
            "http://:80",
            "http://host:port",
            "http://host:99999",
            "http://a b",
            "http://[::1",
        ] {
            let s = Settings {
                ollama_endpoint: bad.into(),
                ..Default::default()
            };
            let m = invalid_message(s);
            assert!(m.starts_with("settings.ollama_endpoint:"), "{m}");
        }
    }

    #[test]
    fn values_are_trimmed() {
        let mut s = Settings {
            ollama_endpoint: " http://h:1 ".into(),
            ollama_api_key: "key\n".into(),
            tavily_api_key: "\ttv".into(),
            ..Default::default()
        };
        s.profiles.insert(
            "ollama".into(),
            profiles(&[("default", level(" qwen3 ", " "))]),
        );
        let s = validate(s).unwrap();
        assert_eq!(s.ollama_endpoint, "http://h:1");
        assert_eq!(s.ollama_api_key, "key");
        assert_eq!(s.tavily_api_key, "tv");
        assert_eq!(s.profiles["ollama"].levels["default"], level("qwen3", ""));
    }

    #[tokio::test]
    async fn missing_file_is_empty_and_replace_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::new(dir.path().join("settings.json"));
        assert_eq!(store.load(), Settings::default());

        let mut s = Settings {
            default_provider: Some("codex".into()),
            ollama_endpoint: "http://127.0.0.1:11434".into(),
            ollama_api_key: "k".into(),
            tavily_api_key: "t".into(),
            ..Default::default()
        };
        s.profiles.insert(
            "codex".into(),
            profiles(&[("high", level("gpt-5", "high"))]),
        );
        let stored = store.replace(s.clone()).await.unwrap();
        assert_eq!(stored, s);
        assert_eq!(store.load(), s);

        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(store.path()).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["defaultProvider"], "codex");
        assert_eq!(json["ollamaEndpoint"], "http://127.0.0.1:11434");
        assert_eq!(
            json["profiles"]["codex"]["levels"]["high"]["model"],
            "gpt-5"
        );
        assert!(text.contains("\n  "), "pretty-printed: {text}");
    }

    #[tokio::test]
    async fn invalid_update_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::new(dir.path().join("settings.json"));
        let good = Settings {
            default_provider: Some("claude".into()),
            ..Default::default()
        };
        store.replace(good.clone()).await.unwrap();
        let bad = Settings {
            default_provider: Some("nope".into()),
            ..Default::default()
        };
        assert!(matches!(
            store.replace(bad).await,
            Err(ProviderError::InvalidInput(_))
        ));
        assert_eq!(store.load(), good);
    }

    #[tokio::test]
    async fn corrupt_file_reads_as_empty_and_update_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        std::fs::write(&path, "{ not json").unwrap();
        let store = SettingsStore::new(&path);
        assert_eq!(store.load(), Settings::default());
        assert_eq!(store.load(), Settings::default());

        let s = Settings {
            default_provider: Some("opencode".into()),
            ..Default::default()
        };
        store.replace(s.clone()).await.unwrap();
        assert_eq!(store.load(), s);
    }

    #[test]
    fn hand_written_partial_file_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        std::fs::write(
            &path,
            r#"{"defaultProvider":"ollama","profiles":{"ollama":{"levels":{"default":{"model":"qwen3"}}}},"futureField":1}"#,
        )
        .unwrap();
        let s = SettingsStore::new(&path).load();
        assert_eq!(s.default_provider.as_deref(), Some("ollama"));
        assert_eq!(s.profiles["ollama"].levels["default"], level("qwen3", ""));
        assert_eq!(s.ollama_endpoint, "");
    }

    #[test]
    fn agent_env_has_the_endpoint_with_its_default_and_the_keys() {
        let env = agent_env(&Settings::default());
        assert_eq!(env["PEDELEC_OLLAMA_ENDPOINT"], "http://127.0.0.1:11434");
        assert_eq!(env["PEDELEC_OLLAMA_API_KEY"], "");
        assert_eq!(env["PEDELEC_TAVILY_API_KEY"], "");
        let env = agent_env(&Settings {
            ollama_endpoint: "http://h:1".into(),
            ollama_api_key: "ok".into(),
            tavily_api_key: "tk".into(),
            ..Default::default()
        });
        assert_eq!(
            (
                env["PEDELEC_OLLAMA_ENDPOINT"].as_str(),
                env["PEDELEC_OLLAMA_API_KEY"].as_str(),
                env["PEDELEC_TAVILY_API_KEY"].as_str()
            ),
            ("http://h:1", "ok", "tk")
        );
    }

    #[test]
    fn public_part_is_only_the_default_provider() {
        let s = Settings {
            default_provider: Some("cursor".into()),
            ollama_api_key: "secret".into(),
            ..Default::default()
        };
        assert_eq!(
            public_part(&s),
            PublicSettings {
                default_provider: Some("cursor".into())
            }
        );
    }
}
