//! Settings values the tests of several modules share.

use pedelec_proto::v1::{EffortProfile, ProviderProfiles, Settings};

/// One effort level's profile.
pub fn level(model: &str, effort: &str) -> EffortProfile {
    EffortProfile {
        model: model.into(),
        effort: effort.into(),
    }
}

pub fn profiles(levels: &[(&str, EffortProfile)]) -> ProviderProfiles {
    ProviderProfiles {
        levels: levels
            .iter()
            .map(|(name, p)| (name.to_string(), p.clone()))
            .collect(),
    }
}

pub fn mask(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

pub fn sample() -> Settings {
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
