//! The providers as ProviderService launches them: each one's facts (the
//! `pedelec_settings::catalog` row SessionService resolves with too) and the
//! program its adapter runs, with where that is looked up.

use std::ops::Deref;

pub use pedelec_settings::catalog::{
    DEFAULT_LEVEL, EFFORT_LEVELS, codes_list, is_effort_level, levels_list,
};

use pedelec_settings::SettingsError;

use crate::adapters::{self, Provider};

/// One provider to launch. Its facts (code, name, `needs_model`, `mcp`) are
/// read through it (`spec.code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    facts: pedelec_settings::ProviderSpec,
    /// The program looked up on PATH (the adapter's, which builds its command line).
    pub program: &'static str,
    /// Look for the program beside the running executable before PATH: Pedelec
    /// ships `pedelec-agent` next to its services, and it need not be on PATH.
    pub beside_exe: bool,
}

impl Deref for ProviderSpec {
    type Target = pedelec_settings::ProviderSpec;

    fn deref(&self) -> &Self::Target {
        &self.facts
    }
}

const fn launched(facts: pedelec_settings::ProviderSpec) -> ProviderSpec {
    ProviderSpec {
        facts,
        program: adapters::program(facts.provider),
        // The ollama provider runs Pedelec's own agent.
        beside_exe: matches!(facts.provider, Provider::Ollama),
    }
}

/// All providers, in the order of `pedelec_settings::catalog::PROVIDERS` (the
/// order ListProviders reports them in).
pub const PROVIDERS: [ProviderSpec; pedelec_settings::catalog::PROVIDERS.len()] = {
    let facts = pedelec_settings::catalog::PROVIDERS;
    let mut launch = [launched(facts[0]); pedelec_settings::catalog::PROVIDERS.len()];
    let mut i = 1;
    while i < launch.len() {
        launch[i] = launched(facts[i]);
        i += 1;
    }
    launch
};

/// The provider with this code, if it is one of the six.
pub fn find(code: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS.iter().find(|p| p.code == code)
}

/// The provider with this code, or `PROVIDER_NOT_FOUND` as the settings
/// rules word it.
pub fn find_provider(code: &str) -> Result<&'static ProviderSpec, SettingsError> {
    let facts = pedelec_settings::find_provider(code)?;
    Ok(find(facts.code).expect("every provider is launched"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_is_launched_as_its_facts_say() {
        for (launch, facts) in PROVIDERS.iter().zip(&pedelec_settings::catalog::PROVIDERS) {
            assert_eq!(**launch, *facts);
            assert_eq!(find(facts.code), Some(launch));
        }
        let programs: Vec<&str> = PROVIDERS.iter().map(|p| p.program).collect();
        assert_eq!(
            programs,
            [
                "codex",
                "agy",
                "opencode",
                "cursor-agent",
                "claude",
                "pedelec-agent"
            ]
        );
        let beside: Vec<&str> = PROVIDERS
            .iter()
            .filter(|p| p.beside_exe)
            .map(|p| p.code)
            .collect();
        assert_eq!(beside, ["ollama"]);
    }
}
