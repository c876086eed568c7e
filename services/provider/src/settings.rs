//! `settings.json`: ProviderService is its one reader and writer. This module
//! reads it (seeing an edit by hand) and replaces it atomically; the rules
//! over its value (validation, partial updates, the parts others may see,
//! profiles) are the `pedelec-settings` crate's.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pedelec_common::env;
use pedelec_proto::v1::Settings;

use crate::error::ProviderError;

/// The file form is the settings document of the wire module (one shape for
/// the file and for `pedelec-cli settings get`).
use pedelec_common::wire::SettingsDoc as SettingsFile;

/// pedelec-agent's settings, as it reads them from its environment (names in
/// `pedelec_common::env`). Every variable is set, empty when unset, so a
/// value inherited from the service's own environment never reaches the agent.
pub fn agent_env(s: &Settings) -> std::collections::HashMap<String, String> {
    let endpoint = if s.ollama_endpoint.is_empty() {
        DEFAULT_OLLAMA_ENDPOINT
    } else {
        s.ollama_endpoint.as_str()
    };
    [
        (env::OLLAMA_ENDPOINT, endpoint),
        (env::OLLAMA_API_KEY, s.ollama_api_key.as_str()),
        (env::TAVILY_API_KEY, s.tavily_api_key.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Where pedelec-agent finds Ollama when the settings name no endpoint.
pub const DEFAULT_OLLAMA_ENDPOINT: &str = "http://127.0.0.1:11434";

/// Reads and replaces `settings.json`. Every read looks at the file, so an
/// edit by hand is seen without a restart; the file is parsed again only when
/// its identity, size or times changed (every RunTurn reads the settings, and
/// the WatchSettings streams look once a second; a `stat` is a fraction of
/// open, read and parse).
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

    /// UpdateSettings: `pedelec_settings::apply_update` to the current
    /// settings, validated,
    /// then stored as [`SettingsStore::replace`] stores.
    pub async fn update(
        &self,
        patch: Settings,
        mask: Option<&[String]>,
    ) -> Result<Settings, ProviderError> {
        let _writing = self.writing.lock().await;
        let settings =
            pedelec_settings::validate(pedelec_settings::apply_update(self.load(), patch, mask)?)?;
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
    use pedelec_settings::SettingsError;
    use pedelec_settings::testutil::{level, mask, profiles, sample};

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
            Err(ProviderError::Settings(SettingsError::InvalidInput(_)))
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
}
