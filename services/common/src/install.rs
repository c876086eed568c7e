//! What `pedelecd install` writes and the native host reads back: the host
//! config beside the installed binaries and the user service manager that
//! starts `pedelecd` (docs/install.md). Written once here so the installer,
//! the doctor and the host cannot disagree on a name or a path.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RuntimeDir;

/// The native-messaging host name browsers look up (`<name>.json`).
pub const NATIVE_HOST_NAME: &str = "dev.pedelec.host";
/// The host config's file name, in the folder of the installed binaries.
pub const HOST_CONFIG_FILE: &str = "pedelec-host.json";
/// The systemd user unit's name.
pub const SYSTEMD_UNIT: &str = "pedelec.service";
/// The launchd agent's label (its plist is `<label>.plist`).
pub const LAUNCHD_LABEL: &str = "dev.pedelec.pedelecd";

/// The user service manager that starts `pedelecd` at login.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceManager {
    Systemd,
    Launchd,
}

impl ServiceManager {
    /// The command that starts the installed service now (no-op when it runs):
    /// the native host's auto-start runs it instead of `pedelecd start`, so the
    /// two never race over "already running".
    pub fn start_command(self) -> (String, Vec<String>) {
        match self {
            ServiceManager::Systemd => (
                "systemctl".into(),
                vec!["--user".into(), "start".into(), SYSTEMD_UNIT.into()],
            ),
            ServiceManager::Launchd => (
                "launchctl".into(),
                vec!["kickstart".into(), self.launchd_target()],
            ),
        }
    }

    /// `gui/<uid>/dev.pedelec.pedelecd`.
    pub fn launchd_target(self) -> String {
        format!("gui/{}/{LAUNCHD_LABEL}", crate::process::uid())
    }
}

/// `<bin dir>/pedelec-host.json`: what a browser-started host needs and cannot
/// get from its environment (the browser's environment is not the installer's,
/// and on macOS its temporary dir differs from a terminal's). The host reads
/// it after its environment: a `PEDELEC_*` variable set there still wins.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostConfig {
    /// Extension ids the host admits besides Pedelec's own.
    #[serde(default)]
    pub allowed_extensions: Vec<String>,
    /// The socket folder the installed daemon uses.
    pub runtime_dir: PathBuf,
    /// Where `pedelecd` and the services are.
    pub bin_dir: PathBuf,
    /// Set when a login unit/agent was installed: auto-start goes through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_manager: Option<ServiceManager>,
}

impl HostConfig {
    /// The config in `dir`, if there is a readable, valid one.
    pub fn load_from(dir: &Path) -> Result<Option<HostConfig>, String> {
        let path = dir.join(HOST_CONFIG_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The config beside the running executable; None when there is none or
    /// it cannot be read (the host then runs on its environment alone, and
    /// says why in its log).
    pub fn beside_current_exe() -> Result<Option<HostConfig>, String> {
        let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        else {
            return Ok(None);
        };
        HostConfig::load_from(&dir)
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a host config serializes");
        s.push('\n');
        s
    }
}

/// The runtime dir: `$PEDELEC_RUNTIME_DIR`, else the config's, else the
/// environment's default ([`RuntimeDir::from_env`], which may name none).
pub fn runtime_dir(config: Option<&HostConfig>) -> Result<RuntimeDir, crate::CommonError> {
    let set = std::env::var_os(crate::env::RUNTIME_DIR).is_some_and(|v| !v.is_empty());
    match config {
        Some(c) if !set => Ok(RuntimeDir::at(&c.runtime_dir)),
        _ => RuntimeDir::from_env(),
    }
}

/// The bin dir: `$PEDELEC_BIN_DIR`, else the config's, else beside the
/// running executable ([`crate::paths::bin_dir`]).
pub fn bin_dir(config: Option<&HostConfig>) -> Option<PathBuf> {
    let set = std::env::var_os(crate::env::BIN_DIR).is_some_and(|v| !v.is_empty());
    match config {
        Some(c) if !set => Some(c.bin_dir.clone()),
        _ => crate::paths::bin_dir(),
    }
}

/// The extension ids allowed: [`crate::extension::allowed_ids`] plus the config's.
pub fn allowed_ids(config: Option<&HostConfig>) -> Vec<String> {
    let mut ids = crate::extension::allowed_ids();
    for id in config
        .map(|c| c.allowed_extensions.as_slice())
        .unwrap_or(&[])
    {
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_with_camel_case_keys() {
        let c = HostConfig {
            allowed_extensions: vec!["a".repeat(32)],
            runtime_dir: "/run/user/1/pedelec".into(),
            bin_dir: "/h/.local/lib/pedelec/bin".into(),
            service_manager: Some(ServiceManager::Systemd),
        };
        let json = c.to_json();
        for key in ["allowedExtensions", "runtimeDir", "binDir", "\"systemd\""] {
            assert!(json.contains(key), "{json}");
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(HOST_CONFIG_FILE), json).unwrap();
        assert_eq!(HostConfig::load_from(tmp.path()).unwrap(), Some(c));
        std::fs::write(tmp.path().join(HOST_CONFIG_FILE), "{").unwrap();
        assert!(HostConfig::load_from(tmp.path()).is_err());
        assert_eq!(
            HostConfig::load_from(&tmp.path().join("none")).unwrap(),
            None
        );
    }

    #[test]
    fn start_commands_name_the_unit_and_the_agent() {
        let (p, a) = ServiceManager::Systemd.start_command();
        assert_eq!(
            (p.as_str(), a),
            (
                "systemctl",
                vec![
                    "--user".to_string(),
                    "start".into(),
                    "pedelec.service".into()
                ]
            )
        );
        let (p, a) = ServiceManager::Launchd.start_command();
        assert_eq!(p, "launchctl");
        assert_eq!(a[0], "kickstart");
        assert!(a[1].starts_with("gui/") && a[1].ends_with("/dev.pedelec.pedelecd"));
    }
}
