//! Human commands for local scripting: sessions, providers, settings, sites.
//! Results go to stdout; errors go to stderr as `CODE: message`.

use std::io::Read;
use std::path::PathBuf;

use pedelec_common::clients::{ProviderClient, SessionClient};
use pedelec_common::{Clients, Code, CodedError, RuntimeDir, ServiceName};
use pedelec_proto::prost_types::FieldMask;
use pedelec_proto::v1::{
    EffortProfile, FolderGrant, GetHistoryRequest, GetSettingsRequest, GrantSiteRequest,
    HistoryEntry, ListProvidersRequest, ListRequest, ListSitesRequest, Settings, Site, SiteRequest,
    ThreadRequest, UpdateSettingsRequest,
};
use serde_json::Value as Json;

use crate::error::{CliError, EXIT_OK};
use crate::output;
use pedelec_common::wire;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    SessionsList { origin: Option<String>, json: bool },
    SessionsShow { session_id: String, origin: String },
    SessionsHistory { session_id: String, json: bool },
    Providers { json: bool },
    SettingsGet { secrets: Secrets },
    SettingsSet(SettingChange),
    SitesList { json: bool },
    SitesShow { origin: String, json: bool },
    SitesGrant { grant: SiteGrant, json: bool },
    SitesBlock { origin: String, json: bool },
    SitesRevoke { origin: String, json: bool },
    SitesEnd { origin: String, json: bool },
}

/// A grant as given on the command line; folders are made canonical
/// (relative to the current directory, symlinks resolved) before it is sent,
/// as SessionService compares canonical paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteGrant {
    pub origin: String,
    /// `tools`, `edit` or `full` (clap checks the word).
    pub access: String,
    pub providers: Vec<String>,
    /// Each folder with its `once` flag.
    pub folders: Vec<(PathBuf, bool)>,
    pub any_model: bool,
    pub embedders: Vec<String>,
}

impl SiteGrant {
    fn into_site(self) -> Result<Site, CliError> {
        let access = wire::parse_access_level(&self.access).ok_or_else(|| {
            CliError::Usage(format!(
                "access {:?} is not one of tools, edit, full",
                self.access
            ))
        })?;
        let folders = self
            .folders
            .into_iter()
            .map(|(dir, once)| {
                let path = std::fs::canonicalize(&dir)
                    .map_err(|e| CliError::Usage(format!("folder {}: {e}", dir.display())))?;
                Ok(FolderGrant {
                    path: path.to_string_lossy().into_owned(),
                    once,
                })
            })
            .collect::<Result<_, CliError>>()?;
        Ok(Site {
            origin: self.origin,
            access: access as i32,
            providers: self.providers,
            folders,
            any_model: self.any_model,
            embedders: self.embedders,
            ..Default::default()
        })
    }
}

/// Whether `settings get` prints the keys (a terminal, a bug report and a
/// screen share should not show them by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secrets {
    Masked,
    Shown,
}

/// One edit applied to the full settings between GetFullSettings and UpdateSettings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingChange {
    /// An empty value clears the default provider.
    DefaultProvider(String),
    OllamaEndpoint(String),
    /// `-` reads the key from stdin, keeping it out of the process list.
    OllamaApiKey(String),
    TavilyApiKey(String),
    /// The providers kept on the shell path for page tools (none: MCP
    /// wherever the CLI supports it).
    ShellToolsOnly(Vec<String>),
    Profile {
        provider: String,
        level: String,
        model: String,
        effort: Option<String>,
    },
}

/// Runs an admin command, prints its output and returns the exit code.
pub fn run(command: AdminCommand) -> i32 {
    match execute(command) {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            EXIT_OK
        }
        Err(e) => {
            eprintln!("{}", output::human_error(&e));
            e.exit_code()
        }
    }
}

fn execute(command: AdminCommand) -> Result<String, CliError> {
    let clients = Clients::new(RuntimeDir::from_env()?);
    // Secrets from stdin are read before connecting, like every other local check.
    let command = match command {
        AdminCommand::SettingsSet(change) => AdminCommand::SettingsSet(read_secret(change)?),
        other => other,
    };
    let rt = crate::runtime()?;
    rt.block_on(async {
        match command {
            AdminCommand::SessionsList { origin, json } => {
                let mut client = session_client(&clients).await?;
                let resp = client
                    .list(ListRequest { origin })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(if json {
                    output::pretty(&Json::Array(
                        resp.sessions.iter().map(wire::summary).collect(),
                    ))
                } else {
                    output::sessions_table(&resp.sessions)
                })
            }
            AdminCommand::SessionsShow { session_id, origin } => {
                let mut client = session_client(&clients).await?;
                let snapshot = client
                    .get(ThreadRequest { session_id, origin })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(output::pretty(&wire::snapshot(&snapshot)))
            }
            AdminCommand::SessionsHistory { session_id, json } => {
                let mut client = session_client(&clients).await?;
                let entries = whole_history(&mut client, session_id).await?;
                Ok(if json {
                    output::pretty(&Json::Array(
                        entries.iter().map(wire::history_entry).collect(),
                    ))
                } else {
                    output::transcript(&entries)
                })
            }
            AdminCommand::Providers { json } => {
                let mut client = provider_client(&clients).await?;
                let resp = client
                    .list_providers(ListProvidersRequest {
                        include_models: true,
                    })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(if json {
                    output::pretty(&Json::Array(
                        resp.providers.iter().map(wire::provider_info).collect(),
                    ))
                } else {
                    output::providers_table(&resp.providers)
                })
            }
            AdminCommand::SettingsGet { secrets } => {
                let mut client = provider_client(&clients).await?;
                let settings = full_settings(&mut client).await?;
                Ok(output::pretty(&match secrets {
                    Secrets::Masked => wire::masked_settings(&settings),
                    Secrets::Shown => wire::settings(&settings),
                }))
            }
            AdminCommand::SettingsSet(change) => {
                let mut client = provider_client(&clients).await?;
                let updated = client
                    .update_settings(update_request(change))
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(output::pretty(&wire::settings(&updated)))
            }
            AdminCommand::SitesList { json } => {
                let sites = list_sites(&clients).await?;
                Ok(if json {
                    output::pretty(&Json::Array(sites.iter().map(wire::site).collect()))
                } else {
                    output::sites_table(&sites)
                })
            }
            AdminCommand::SitesShow { origin, json } => {
                let site = list_sites(&clients)
                    .await?
                    .into_iter()
                    .find(|s| s.origin == origin)
                    .ok_or_else(|| {
                        CliError::Service(
                            CodedError::new(
                                Code::SITE_NOT_APPROVED,
                                format!("{origin} has no grant and is not blocked"),
                            )
                            .with_details(serde_json::json!({"origin": origin})),
                        )
                    })?;
                Ok(site_output(&site, json))
            }
            AdminCommand::SitesGrant { grant, json } => {
                // Folders are checked (they exist) before connecting.
                let site = grant.into_site()?;
                let mut client = session_client(&clients).await?;
                let stored = client
                    .grant_site(GrantSiteRequest { site: Some(site) })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(site_output(&stored, json))
            }
            AdminCommand::SitesBlock { origin, json } => {
                let mut client = session_client(&clients).await?;
                let stored = client
                    .block_site(SiteRequest { origin })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner();
                Ok(site_output(&stored, json))
            }
            AdminCommand::SitesRevoke { origin, json } => {
                let mut client = session_client(&clients).await?;
                let ended = client
                    .revoke_site(SiteRequest {
                        origin: origin.clone(),
                    })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner()
                    .ended_session_ids;
                Ok(ended_output(&format!("revoked {origin}"), &ended, json))
            }
            AdminCommand::SitesEnd { origin, json } => {
                let mut client = session_client(&clients).await?;
                let ended = client
                    .end_site_sessions(SiteRequest {
                        origin: origin.clone(),
                    })
                    .await
                    .map_err(|s| CliError::from_status(&s))?
                    .into_inner()
                    .ended_session_ids;
                Ok(ended_output(&origin, &ended, json))
            }
        }
    })
}

async fn list_sites(clients: &Clients) -> Result<Vec<Site>, CliError> {
    let mut client = session_client(clients).await?;
    Ok(client
        .list_sites(ListSitesRequest {})
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner()
        .sites)
}

fn site_output(site: &Site, json: bool) -> String {
    if json {
        output::pretty(&wire::site(site))
    } else {
        output::site_text(site)
    }
}

/// `{"endedSessionIds": […]}`, or a line for people.
fn ended_output(what: &str, ended: &[String], json: bool) -> String {
    if json {
        return output::pretty(&serde_json::json!({"endedSessionIds": ended}));
    }
    match ended {
        [] => format!("{what}: no session was running"),
        _ => format!(
            "{what}: ended {} session{} ({})",
            ended.len(),
            if ended.len() == 1 { "" } else { "s" },
            ended.join(", ")
        ),
    }
}

/// Connects first, so a service that is not running is a connection error
/// (exit 2), not a failed call.
async fn session_client(clients: &Clients) -> Result<SessionClient, CliError> {
    clients.connect(ServiceName::Session).await?;
    Ok(clients.session())
}

/// Every entry of a thread's history, oldest first, read a page at a time.
async fn whole_history(
    client: &mut SessionClient,
    session_id: String,
) -> Result<Vec<HistoryEntry>, CliError> {
    let mut entries: Vec<HistoryEntry> = Vec::new();
    let mut before = 0;
    loop {
        let page = client
            .get_history(GetHistoryRequest {
                session_id: session_id.clone(),
                origin: pedelec_common::CLI_ORIGIN.into(),
                before,
                limit: pedelec_common::MAX_HISTORY_PAGE,
            })
            .await
            .map_err(|s| CliError::from_status(&s))?
            .into_inner();
        before = page.entries.first().map_or(0, |e| e.id);
        let newer = std::mem::replace(&mut entries, page.entries);
        entries.extend(newer);
        if !page.has_more || before == 0 {
            return Ok(entries);
        }
    }
}

async fn provider_client(clients: &Clients) -> Result<ProviderClient, CliError> {
    clients.connect(ServiceName::Provider).await?;
    Ok(clients.provider())
}

async fn full_settings(client: &mut ProviderClient) -> Result<Settings, CliError> {
    Ok(client
        .get_full_settings(GetSettingsRequest {})
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner())
}

fn read_secret(change: SettingChange) -> Result<SettingChange, CliError> {
    let read = |v: String| -> Result<String, CliError> {
        if v != "-" {
            return Ok(v);
        }
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .map_err(CliError::Stdin)?;
        Ok(buf.trim_end_matches(['\r', '\n']).to_string())
    };
    Ok(match change {
        SettingChange::OllamaApiKey(v) => SettingChange::OllamaApiKey(read(v)?),
        SettingChange::TavilyApiKey(v) => SettingChange::TavilyApiKey(read(v)?),
        other => other,
    })
}

/// The UpdateSettings request for one change: the new value and an
/// `update_mask` naming only it, so the service keeps every other setting
/// (also one changed by someone else since we looked). ProviderService
/// validates the result.
pub fn update_request(change: SettingChange) -> UpdateSettingsRequest {
    let mut settings = Settings::default();
    let path = match change {
        SettingChange::DefaultProvider(p) => {
            settings.default_provider = (!p.is_empty()).then_some(p);
            "default_provider".to_string()
        }
        SettingChange::OllamaEndpoint(v) => {
            settings.ollama_endpoint = v;
            "ollama_endpoint".to_string()
        }
        SettingChange::OllamaApiKey(v) => {
            settings.ollama_api_key = v;
            "ollama_api_key".to_string()
        }
        SettingChange::TavilyApiKey(v) => {
            settings.tavily_api_key = v;
            "tavily_api_key".to_string()
        }
        SettingChange::ShellToolsOnly(v) => {
            settings.shell_tools_only = v;
            "shell_tools_only".to_string()
        }
        SettingChange::Profile {
            provider,
            level,
            model,
            effort,
        } => {
            let path = format!("profiles.{provider}.{level}");
            settings
                .profiles
                .entry(provider)
                .or_default()
                .levels
                .insert(
                    level,
                    EffortProfile {
                        model,
                        effort: effort.unwrap_or_default(),
                    },
                );
            path
        }
    };
    UpdateSettingsRequest {
        settings: Some(settings),
        update_mask: Some(FieldMask { paths: vec![path] }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(req: &UpdateSettingsRequest) -> Vec<&str> {
        req.update_mask
            .as_ref()
            .map(|m| m.paths.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn set_default_provider_and_clear_it_names_only_it() {
        let req = update_request(SettingChange::DefaultProvider("claude".into()));
        assert_eq!(paths(&req), ["default_provider"]);
        assert_eq!(
            req.settings.unwrap().default_provider.as_deref(),
            Some("claude")
        );
        let req = update_request(SettingChange::DefaultProvider(String::new()));
        assert_eq!(paths(&req), ["default_provider"]);
        assert_eq!(req.settings.unwrap().default_provider, None);
    }

    #[test]
    fn set_profile_names_one_level() {
        let req = update_request(SettingChange::Profile {
            provider: "codex".into(),
            level: "high".into(),
            model: "m2".into(),
            effort: None,
        });
        assert_eq!(paths(&req), ["profiles.codex.high"]);
        let settings = req.settings.unwrap();
        let levels = &settings.profiles["codex"].levels;
        assert_eq!(levels.len(), 1);
        assert_eq!(levels["high"].model, "m2");
        assert_eq!(levels["high"].effort, "");
    }

    #[test]
    fn set_endpoint_and_keys() {
        let req = update_request(SettingChange::OllamaEndpoint(
            "http://127.0.0.1:11434".into(),
        ));
        assert_eq!(paths(&req), ["ollama_endpoint"]);
        assert_eq!(
            req.settings.unwrap().ollama_endpoint,
            "http://127.0.0.1:11434"
        );
        let req = update_request(SettingChange::OllamaApiKey("k".into()));
        assert_eq!(paths(&req), ["ollama_api_key"]);
        let req = update_request(SettingChange::TavilyApiKey("t".into()));
        assert_eq!(paths(&req), ["tavily_api_key"]);
        assert_eq!(req.settings.unwrap().tavily_api_key, "t");
        let req = update_request(SettingChange::ShellToolsOnly(vec!["claude".into()]));
        assert_eq!(paths(&req), ["shell_tools_only"]);
        assert_eq!(req.settings.unwrap().shell_tools_only, ["claude"]);
    }
}
