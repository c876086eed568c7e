//! Settings values the tests share: this crate's, and ProviderService's
//! (which keeps these settings). No code outside tests uses them.

use pedelec_proto::v1::{EffortProfile, ProviderProfiles, ResolvedProfile, Settings};

/// One effort level's profile.
pub fn level(model: &str, effort: &str) -> EffortProfile {
    EffortProfile {
        model: model.into(),
        effort: effort.into(),
    }
}

/// A provider's profiles: these levels, by name.
pub fn profiles(levels: &[(&str, EffortProfile)]) -> ProviderProfiles {
    ProviderProfiles {
        levels: levels
            .iter()
            .map(|(name, p)| (name.to_string(), p.clone()))
            .collect(),
    }
}

/// An update mask of these paths.
pub fn mask(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

/// Settings with every field set: codex's low and high levels, claude's
/// default one, both keys.
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

/// What resolving `provider`'s `level` gives, with `native_tools` as it is
/// by default (no provider kept on the shell tools).
pub fn resolved(provider: &str, level: &str, model: &str, effort: &str) -> ResolvedProfile {
    ResolvedProfile {
        provider: provider.into(),
        effort_level: level.into(),
        model: model.into(),
        effort: effort.into(),
        native_tools: matches!(provider, "codex" | "claude" | "opencode"),
    }
}
