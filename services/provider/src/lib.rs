//! ProviderService: the provider catalog and availability, settings.json, effort
//! profiles, and the agent turns. `Providers` holds the logic; `grpc`
//! is the thin tonic adapter; `run` serves it on `provider.sock`.

#![forbid(unsafe_code)]

pub mod access;
pub mod adapters;
pub mod availability;
pub mod catalog;
pub mod error;
pub mod grpc;
pub mod launch;
pub mod models;
pub mod program;
pub mod service;
pub mod settings;
pub mod turns;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pedelec_common::secret::{InternalGate, ServiceSecret};
use pedelec_common::server::ServiceServer;
use pedelec_common::{DataDir, RuntimeDir, ServiceName};
use pedelec_proto::v1::provider_service_server::ProviderServiceServer;

pub use availability::ProgramEnv;
pub use error::ProviderError;
pub use grpc::ProviderGrpc;
pub use service::Providers;
pub use turns::Turns;

/// What the process needs to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub runtime_dir: RuntimeDir,
    pub data_dir: DataDir,
    /// Where provider CLIs are looked up; the process's own PATH by default.
    pub programs: ProgramEnv,
    /// What the internal RPCs (ResolveProfile, WatchSettings, RunTurn,
    /// CancelTurn) require; None admits every caller (a service started by
    /// hand).
    pub service_secret: Option<ServiceSecret>,
}

impl Config {
    pub fn new(runtime_dir: RuntimeDir, data_dir: DataDir) -> Self {
        Config {
            runtime_dir,
            data_dir,
            programs: ProgramEnv::from_process(),
            service_secret: None,
        }
    }
}

/// At shutdown, how long running turns get after SIGTERM before their groups
/// are SIGKILLed (the launcher allows a service 3 s in all).
const STOP_TURNS_WITHIN: Duration = Duration::from_secs(1);

/// Serves until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), ProviderError> {
    run_until(config, pedelec_common::shutdown_signal()).await
}

/// Ensures the dirs, then serves ProviderService on `<runtime dir>/provider.sock`
/// until `shutdown` resolves.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProviderError> {
    let server =
        ServiceServer::prepare(ServiceName::Provider, &config.runtime_dir, &config.data_dir)?;
    // Agents a crashed predecessor left running (their records survived it).
    // Records are sealed with the service secret, so only ours are acted on.
    let record_key = turns::RecordKey::new(config.service_secret.as_ref());
    turns::reap_orphans(config.runtime_dir.path(), &record_key);
    let providers = Arc::new(
        Providers::new(config.data_dir.settings_file(), config.programs)
            .with_turn_records(config.runtime_dir.path(), record_key)
            .with_agent_confinement(launch::Hidden {
                runtime_dir: config.runtime_dir.path().to_path_buf(),
                data_dir: config.data_dir.path().to_path_buf(),
            }),
    );
    let grpc = ProviderGrpc::new(
        Arc::clone(&providers),
        InternalGate::new(config.service_secret),
    );
    let served = server
        .serve(ProviderServiceServer::new(grpc), shutdown)
        .await;
    // The RunTurn streams may still be open; no agent outlives the service.
    providers.turns().stop_all(STOP_TURNS_WITHIN).await;
    served?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::time::Duration;

    use crate::ProgramEnv;

    /// A temp folder of stand-in CLIs: tiny shell scripts.
    pub struct Bin {
        pub dir: tempfile::TempDir,
    }

    impl Bin {
        pub fn new() -> Self {
            Bin {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        pub fn script(&self, name: &str, body: &str) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        }

        /// PATH = this folder only (scripts call tools by absolute path), so a
        /// real CLI installed on the machine cannot leak into a test.
        pub fn env(&self) -> ProgramEnv {
            ProgramEnv {
                path: Some(self.dir.path().as_os_str().to_owned()),
                exe_dir: None,
                timeout: Duration::from_secs(5),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pedelec_common::code_of_status;
    use pedelec_proto::v1::{
        CancelTurnRequest, GetSettingsRequest, ListProvidersRequest, ResolveProfileRequest,
        Settings, UpdateSettingsRequest,
    };

    use super::*;
    use crate::testutil::Bin;

    /// The whole service over its Unix socket, in-process.
    #[tokio::test]
    async fn serves_provider_service_on_its_socket() {
        let runtime = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let bin = Bin::new();
        bin.script("claude", "echo 2.0.0");
        let config = Config {
            runtime_dir: RuntimeDir::at(runtime.path().join("rt")),
            data_dir: DataDir::at(data.path().join("home")),
            programs: bin.env(),
            service_secret: None,
        };
        let socket = config.runtime_dir.socket(ServiceName::Provider);
        let clients = pedelec_common::Clients::new(config.runtime_dir.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(run_until(config, async {
            let _ = stopped.await;
        }));

        let mut up = false;
        for _ in 0..200 {
            if clients.connect(ServiceName::Provider).await.is_ok() {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(up, "service came up");
        let mut client = clients.provider();

        let err = client
            .resolve_profile(ResolveProfileRequest::default())
            .await
            .unwrap_err();
        assert_eq!(
            code_of_status(&err).as_deref(),
            Some("DEFAULT_PROVIDER_NOT_SET")
        );

        let settings = Settings {
            default_provider: Some("claude".into()),
            ..Default::default()
        };
        client
            .update_settings(UpdateSettingsRequest {
                settings: Some(settings),
                update_mask: None,
            })
            .await
            .unwrap();
        // A masked update changes only what it names.
        let stored = client
            .update_settings(UpdateSettingsRequest {
                settings: Some(Settings {
                    ollama_endpoint: "http://127.0.0.1:11434".into(),
                    default_provider: Some("codex".into()),
                    ..Default::default()
                }),
                update_mask: Some(pedelec_proto::prost_types::FieldMask {
                    paths: vec!["ollama_endpoint".into()],
                }),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(stored.default_provider.as_deref(), Some("claude"));
        assert_eq!(stored.ollama_endpoint, "http://127.0.0.1:11434");
        let err = client
            .update_settings(UpdateSettingsRequest {
                settings: None,
                update_mask: Some(pedelec_proto::prost_types::FieldMask {
                    paths: vec!["effort_profiles".into()],
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(code_of_status(&err).as_deref(), Some("INVALID_INPUT"));
        let public = client
            .get_settings(GetSettingsRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(public.default_provider.as_deref(), Some("claude"));

        let list = client
            .list_providers(ListProvidersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .providers;
        let claude = list.iter().find(|p| p.code == "claude").unwrap();
        assert!(claude.available && claude.is_default);

        let resolved = client
            .resolve_profile(ResolveProfileRequest {
                provider: None,
                effort_level: Some("high".into()),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (resolved.provider.as_str(), resolved.effort.as_str()),
            ("claude", "high")
        );

        let err = client
            .update_settings(UpdateSettingsRequest {
                settings: None,
                update_mask: None,
            })
            .await
            .unwrap_err();
        assert_eq!(code_of_status(&err).as_deref(), Some("INVALID_INPUT"));

        let err = client
            .cancel_turn(CancelTurnRequest::default())
            .await
            .unwrap_err();
        assert_eq!(code_of_status(&err).as_deref(), Some("INVALID_INPUT"));
        let idle = client
            .cancel_turn(CancelTurnRequest {
                session_id: "thr_none".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!idle.was_running);

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        assert!(!socket.exists(), "socket removed at shutdown");
    }
}
