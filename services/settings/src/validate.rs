//! What a stored settings value must be: known provider codes and effort
//! levels, an http(s) Ollama endpoint, values without stray whitespace.

use pedelec_proto::v1::Settings;

use crate::catalog;
use crate::error::SettingsError;

/// Checks `s` and returns it normalized: surrounding whitespace trimmed, an
/// empty default provider made absent. Errors name the offending field.
pub fn validate(mut s: Settings) -> Result<Settings, SettingsError> {
    s.default_provider = s
        .default_provider
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    if let Some(code) = &s.default_provider
        && catalog::find(code).is_none()
    {
        return Err(SettingsError::invalid(format!(
            "settings.default_provider: {code:?} is not a provider; expected one of {}",
            catalog::codes_list()
        )));
    }
    for (code, profiles) in &mut s.profiles {
        if catalog::find(code).is_none() {
            return Err(SettingsError::invalid(format!(
                "settings.profiles: {code:?} is not a provider; expected one of {}",
                catalog::codes_list()
            )));
        }
        for (level, profile) in &mut profiles.levels {
            if !catalog::is_effort_level(level) {
                return Err(SettingsError::invalid(format!(
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
            return Err(SettingsError::invalid(format!(
                "settings.shell_tools_only: {code:?} is not a provider; expected one of {}",
                catalog::codes_list()
            )));
        }
    }
    s.shell_tools_only.sort();
    s.shell_tools_only.dedup();
    trim(&mut s.ollama_endpoint);
    if !s.ollama_endpoint.is_empty() && !is_http_url(&s.ollama_endpoint) {
        return Err(SettingsError::invalid(format!(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::{level, profiles};

    pub(crate) fn invalid_message(s: Settings) -> String {
        match validate(s) {
            Err(SettingsError::InvalidInput(m)) => m,
            other => panic!("expected INVALID_INPUT, got {other:?}"),
        }
    }

    #[test]
    fn default_provider_must_be_a_known_code_or_absent() {
        assert!(validate(Settings::default()).is_ok());
        for code in crate::catalog::PROVIDERS.map(|p| p.code) {
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
}
