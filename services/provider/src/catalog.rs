//! The six providers Pedelec knows and the effort level names (DESIGN.md §3, §8).

use crate::adapters::{self, Provider};

/// One provider: its adapter, its code on the wire, its display name and the
/// CLI it runs. [`PROVIDERS`] is the only list of them; `Provider`'s methods
/// read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    pub provider: Provider,
    /// `codex`, `antigravity`, `opencode`, `cursor`, `claude` or `ollama`.
    pub code: &'static str,
    /// Display name, e.g. "Claude Code".
    pub name: &'static str,
    /// The program looked up on PATH (the adapter's, which builds its command line).
    pub program: &'static str,
    /// Look for the program beside the running executable before PATH: Pedelec
    /// ships `pedelec-agent` next to its services, and it need not be on PATH.
    pub beside_exe: bool,
    /// A turn without a model cannot run (`MODEL_REQUIRED`): Pedelec's own
    /// agent has no default model, the other CLIs fall back to their own.
    pub needs_model: bool,
    /// The CLI can be given Pedelec's MCP server for a turn, so the page's
    /// tools are native tools (codex, claude, opencode; docs/decisions.md
    /// "Page tools over MCP" says why not cursor-agent and antigravity).
    pub mcp: bool,
}

/// All providers, in the order ListProviders reports them.
pub const PROVIDERS: [ProviderSpec; 6] = [
    ProviderSpec {
        provider: Provider::Codex,
        code: "codex",
        name: "Codex",
        program: adapters::codex::PROGRAM,
        beside_exe: false,
        needs_model: false,
        mcp: true,
    },
    ProviderSpec {
        provider: Provider::Antigravity,
        code: "antigravity",
        name: "Antigravity",
        program: adapters::antigravity::PROGRAM,
        beside_exe: false,
        needs_model: false,
        mcp: false,
    },
    ProviderSpec {
        provider: Provider::Opencode,
        code: "opencode",
        name: "OpenCode",
        program: adapters::opencode::PROGRAM,
        beside_exe: false,
        needs_model: false,
        mcp: true,
    },
    ProviderSpec {
        provider: Provider::Cursor,
        code: "cursor",
        name: "Cursor",
        program: adapters::cursor::PROGRAM,
        beside_exe: false,
        needs_model: false,
        mcp: false,
    },
    ProviderSpec {
        provider: Provider::Claude,
        code: "claude",
        name: "Claude Code",
        program: adapters::claude::PROGRAM,
        beside_exe: false,
        needs_model: false,
        mcp: true,
    },
    ProviderSpec {
        provider: Provider::Ollama,
        code: "ollama",
        name: "Ollama",
        program: adapters::ollama::PROGRAM,
        beside_exe: true,
        needs_model: true,
        mcp: false,
    },
];

/// The effort level used when a request names none.
pub const DEFAULT_LEVEL: &str = "default";

/// Every effort level name a profile or a request may use.
pub const EFFORT_LEVELS: [&str; 4] = [DEFAULT_LEVEL, "low", "medium", "high"];

/// The provider with this code, if it is one of the six.
pub fn find(code: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS.iter().find(|p| p.code == code)
}

pub fn is_effort_level(name: &str) -> bool {
    EFFORT_LEVELS.contains(&name)
}

/// The provider's row of [`PROVIDERS`].
pub fn spec(provider: Provider) -> &'static ProviderSpec {
    PROVIDERS
        .iter()
        .find(|s| s.provider == provider)
        .expect("every provider has a row in PROVIDERS")
}

/// "codex, antigravity, …" for error messages.
pub fn codes_list() -> String {
    PROVIDERS.map(|p| p.code).join(", ")
}

pub fn levels_list() -> String {
    EFFORT_LEVELS.join(", ")
}

/// Interim: the settings crate's row for `spec`.
pub fn facts(spec: &ProviderSpec) -> &'static pedelec_settings::ProviderSpec {
    pedelec_settings::catalog::find(spec.code).expect("the same six providers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_each_provider_once() {
        for (i, a) in PROVIDERS.iter().enumerate() {
            for b in &PROVIDERS[i + 1..] {
                assert!(a.provider != b.provider && a.code != b.code, "{a:?} twice");
            }
            assert_eq!(spec(a.provider), a);
        }
    }
}
