//! The parts of the settings others may see: the public part (a web page)
//! and the profile part (SessionService, over WatchSettings). Neither holds a
//! key.

use pedelec_proto::v1::{ProfileSettings, PublicSettings, Settings};

/// The public part: what a web page may see.
pub fn public_part(s: &Settings) -> PublicSettings {
    PublicSettings {
        default_provider: s.default_provider.clone(),
    }
}

/// What a named provider's profile and `native_tools` are resolved from
/// ([`crate::resolve_named`]): the profiles and the shell-only list. Its
/// `generation` is left 0: ProviderService numbers what it sends.
pub fn profile_part(s: &Settings) -> ProfileSettings {
    ProfileSettings {
        profiles: s.profiles.clone(),
        shell_tools_only: s.shell_tools_only.clone(),
        generation: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::sample;

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

    #[test]
    fn the_profile_part_has_the_profiles_and_no_key() {
        let mut s = sample();
        s.shell_tools_only = vec!["claude".into()];
        let part = profile_part(&s);
        assert_eq!(part.profiles, s.profiles);
        assert_eq!(part.shell_tools_only, ["claude"]);
        let encoded = format!("{part:?}");
        for secret in [&s.ollama_api_key, &s.tavily_api_key, &s.ollama_endpoint] {
            assert!(!encoded.contains(secret.as_str()), "{encoded}");
        }
    }
}
