//! UpdateSettings' arithmetic: the settings after a patch, whole or through
//! an `update_mask` that names the parts it changes.

use pedelec_proto::v1::Settings;

use crate::catalog;
use crate::error::SettingsError;

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
    fn parse(path: &str) -> Result<Part, SettingsError> {
        let provider = |code: &str| -> Result<String, SettingsError> {
            match catalog::find(code) {
                Some(spec) => Ok(spec.code.to_string()),
                None => Err(SettingsError::invalid(format!(
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
                    return Err(SettingsError::invalid(format!(
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
                return Err(SettingsError::invalid(format!(
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
) -> Result<Settings, SettingsError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{level, mask, profiles, sample};

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
                matches!(err, SettingsError::InvalidInput(_)),
                "{path}: {err:?}"
            );
        }
    }
}
