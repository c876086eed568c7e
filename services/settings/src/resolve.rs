//! A provider's effort profile for a new thread, from the profile part of the
//! settings alone. A named provider is only checked to be one of the six, so
//! its profile needs nothing else: ProviderService answers ResolveProfile with
//! these functions, and SessionService resolves in its own process from the
//! part WatchSettings sent it, with the same result and the same errors.

use pedelec_proto::v1::{ProfileSettings, ResolvedProfile};

use crate::catalog::{self, DEFAULT_LEVEL, ProviderSpec};
use crate::error::SettingsError;

/// Whether `spec`'s turns get the page's tools as native MCP tools: the CLI
/// supports it and the settings' `shell_tools_only` does not keep it on the
/// shell path.
pub fn native_tools(shell_tools_only: &[String], spec: &ProviderSpec) -> bool {
    spec.mcp && !shell_tools_only.iter().any(|c| c == spec.code)
}

/// The profile of a provider named by its code.
pub fn resolve_named(
    s: &ProfileSettings,
    code: &str,
    effort_level: Option<&str>,
) -> Result<ResolvedProfile, SettingsError> {
    let level = requested_level(effort_level)?;
    profile_of(s, find_provider(code)?, level)
}

/// The effort level a request names; absent or empty is the default.
pub fn requested_level(effort_level: Option<&str>) -> Result<&str, SettingsError> {
    match effort_level.filter(|l| !l.is_empty()) {
        None => Ok(DEFAULT_LEVEL),
        Some(l) if catalog::is_effort_level(l) => Ok(l),
        Some(l) => Err(SettingsError::invalid(format!(
            "effort_level: {l:?} is not an effort level; expected one of {}",
            catalog::levels_list()
        ))),
    }
}

/// The provider with this code, or `PROVIDER_NOT_FOUND` naming the six.
pub fn find_provider(code: &str) -> Result<&'static ProviderSpec, SettingsError> {
    catalog::find(code).ok_or_else(|| SettingsError::ProviderNotFound {
        code: code.to_string(),
        expected: catalog::codes_list(),
    })
}

/// `spec`'s profile at `level` in `s`.
pub fn profile_of(
    s: &ProfileSettings,
    spec: &ProviderSpec,
    level: &str,
) -> Result<ResolvedProfile, SettingsError> {
    let profile = s
        .profiles
        .get(spec.code)
        .and_then(|p| p.levels.get(level))
        .cloned()
        .unwrap_or_default();
    if spec.needs_model && profile.model.is_empty() {
        return Err(SettingsError::ModelRequired {
            provider: spec.code.to_string(),
            level: level.to_string(),
        });
    }
    // A named level with no explicit flag value passes the level itself,
    // so "high" reaches codex/claude/opencode as `high`.
    let effort = if profile.effort.is_empty() && level != DEFAULT_LEVEL {
        level.to_string()
    } else {
        profile.effort
    };
    Ok(ResolvedProfile {
        provider: spec.code.to_string(),
        effort_level: level.to_string(),
        model: profile.model,
        effort,
        native_tools: native_tools(&s.shell_tools_only, spec),
    })
}

#[cfg(test)]
mod tests {
    use pedelec_proto::v1::Settings;

    use super::*;
    use crate::testutil::{level, mask, profiles, resolved, sample};
    use crate::validate::tests::invalid_message;
    use crate::{apply_update, profile_part, validate};

    #[test]
    fn native_tools_where_mcp_works_unless_kept_on_the_shell() {
        let on: Vec<&str> = catalog::PROVIDERS
            .iter()
            .filter(|p| native_tools(&[], p))
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
        assert!(!native_tools(&s.shell_tools_only, claude));
        assert!(native_tools(&s.shell_tools_only, opencode));
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
    fn a_profile_is_taken_as_is_and_the_level_names_the_effort() {
        let mut s = Settings::default();
        s.profiles.insert(
            "codex".into(),
            profiles(&[
                ("default", level("gpt-5", "")),
                ("medium", level("gpt-5-mini", "")),
                ("high", level("", "xhigh")),
            ]),
        );
        let s = profile_part(&s);
        let named = |code, level| resolve_named(&s, code, level);
        assert_eq!(
            named("codex", None).unwrap(),
            resolved("codex", "default", "gpt-5", "")
        );
        assert_eq!(
            named("codex", Some("")).unwrap(),
            resolved("codex", "default", "gpt-5", "")
        );
        assert_eq!(
            named("codex", Some("medium")).unwrap(),
            resolved("codex", "medium", "gpt-5-mini", "medium")
        );
        assert_eq!(
            named("codex", Some("high")).unwrap(),
            resolved("codex", "high", "", "xhigh")
        );
        // No fallback to the default level's model, nor to another provider's.
        assert_eq!(
            named("codex", Some("low")).unwrap(),
            resolved("codex", "low", "", "low")
        );
        assert_eq!(
            named("claude", Some("high")).unwrap(),
            resolved("claude", "high", "", "high")
        );
    }

    #[test]
    fn errors_carry_their_codes() {
        let none = ProfileSettings::default();
        let code = |r: Result<ResolvedProfile, SettingsError>| r.unwrap_err().code().to_string();
        assert_eq!(
            code(resolve_named(&none, "gpt", None)),
            "PROVIDER_NOT_FOUND"
        );
        assert_eq!(
            code(resolve_named(&none, "codex", Some("max"))),
            "INVALID_INPUT"
        );
        assert_eq!(code(resolve_named(&none, "ollama", None)), "MODEL_REQUIRED");
        let message = resolve_named(&none, "gpt", None).unwrap_err().to_string();
        assert!(message.contains("ollama"), "names the six: {message}");
        let message = resolve_named(&none, "ollama", Some("high"))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("profiles.ollama.levels.high.model"),
            "{message}"
        );
    }
}
