//! The six providers Pedelec knows, as far as the settings need them (codes,
//! names, what a profile must hold, whether page tools can be native), and
//! the effort level names. How each CLI is found and run is ProviderService's
//! (its adapters).

/// The providers Pedelec can launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Codex,
    Claude,
    Opencode,
    Cursor,
    Antigravity,
    Ollama,
}

/// One provider's facts. [`PROVIDERS`] is the only list of them; `Provider`'s
/// methods read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    pub provider: Provider,
    /// `codex`, `antigravity`, `opencode`, `cursor`, `claude` or `ollama`: the
    /// code in settings and on the wire.
    pub code: &'static str,
    /// Display name, e.g. "Claude Code".
    pub name: &'static str,
    /// A turn without a model cannot run (`MODEL_REQUIRED`): Pedelec's own
    /// agent has no default model, the other CLIs fall back to their own.
    pub needs_model: bool,
    /// The CLI can be given Pedelec's MCP server for a turn, so the page's
    /// tools are native tools (codex, claude, opencode; docs/decisions.md
    /// "Page tools over MCP" says why not cursor-agent and antigravity).
    pub mcp: bool,
    /// The values the CLI takes for its effort setting, which a profile's
    /// `effort` passes on: codex's `model_reasoning_effort`, Claude Code's
    /// `--effort`, opencode's `--variant` (model-specific; the common ones),
    /// as the pinned CLIs document them. Empty for a CLI without one
    /// (ProviderService passes none). ListProviders reports them, so a
    /// settings page offers them as a choice.
    pub effort_values: &'static [&'static str],
}

/// All providers, in the order ListProviders reports them.
pub const PROVIDERS: [ProviderSpec; 6] = [
    ProviderSpec {
        provider: Provider::Codex,
        code: "codex",
        name: "Codex",
        needs_model: false,
        mcp: true,
        effort_values: &["minimal", "low", "medium", "high", "xhigh"],
    },
    ProviderSpec {
        provider: Provider::Antigravity,
        code: "antigravity",
        name: "Antigravity",
        needs_model: false,
        mcp: false,
        effort_values: &[],
    },
    ProviderSpec {
        provider: Provider::Opencode,
        code: "opencode",
        name: "OpenCode",
        needs_model: false,
        mcp: true,
        effort_values: &["minimal", "low", "medium", "high", "max"],
    },
    ProviderSpec {
        provider: Provider::Cursor,
        code: "cursor",
        name: "Cursor",
        needs_model: false,
        mcp: false,
        effort_values: &[],
    },
    ProviderSpec {
        provider: Provider::Claude,
        code: "claude",
        name: "Claude Code",
        needs_model: false,
        mcp: true,
        effort_values: &["low", "medium", "high", "xhigh", "max"],
    },
    ProviderSpec {
        provider: Provider::Ollama,
        code: "ollama",
        name: "Ollama",
        needs_model: true,
        mcp: false,
        effort_values: &[],
    },
];

/// The effort level used when a request names none.
pub const DEFAULT_LEVEL: &str = "default";

/// Every effort level name a profile or a request may use.
pub const EFFORT_LEVELS: [&str; 4] = [DEFAULT_LEVEL, "low", "medium", "high"];

/// Whether `provider`'s shell commands can reach the page's tools
/// (`pedelec-cli tool-call` connects to ToolBridge's socket), with
/// `full_access` or below it (docs/security.md, "Access levels"). codex below
/// full access runs commands in its own sandbox, whose seccomp filter refuses
/// `connect()` of every socket family, AF_UNIX included, when commands have
/// no network (codex 0.171): there the page's tools reach the agent only
/// natively, as MCP tools, whatever the settings' `shell_tools_only` says.
pub fn shell_reaches_page_tools(provider: Provider, full_access: bool) -> bool {
    provider != Provider::Codex || full_access
}

/// The provider with this code, if it is one of the six.
pub fn find(code: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS.iter().find(|p| p.code == code)
}

pub fn is_effort_level(name: &str) -> bool {
    EFFORT_LEVELS.contains(&name)
}

/// "codex, antigravity, …" for error messages.
pub fn codes_list() -> String {
    PROVIDERS.map(|p| p.code).join(", ")
}

pub fn levels_list() -> String {
    EFFORT_LEVELS.join(", ")
}

impl Provider {
    /// The provider's row of [`PROVIDERS`].
    pub fn spec(self) -> &'static ProviderSpec {
        PROVIDERS
            .iter()
            .find(|s| s.provider == self)
            .expect("every provider has a row in PROVIDERS")
    }

    /// The code used in settings and the API.
    pub fn code(self) -> &'static str {
        self.spec().code
    }

    pub fn from_code(code: &str) -> Option<Provider> {
        find(code).map(|s| s.provider)
    }

    /// Whether a turn without a model cannot run (`MODEL_REQUIRED`).
    pub fn needs_model(self) -> bool {
        self.spec().needs_model
    }
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
            assert_eq!(a.provider.spec(), a);
            assert_eq!(Provider::from_code(a.code), Some(a.provider));
        }
        assert_eq!(Provider::from_code("gemini"), None);
        assert!(Provider::Ollama.needs_model());
        assert!(!Provider::Codex.needs_model());
    }

    #[test]
    fn only_codex_below_full_access_keeps_commands_from_the_page_tools() {
        for p in PROVIDERS.iter().map(|s| s.provider) {
            assert!(shell_reaches_page_tools(p, true), "{p:?}");
            assert_eq!(
                shell_reaches_page_tools(p, false),
                p != Provider::Codex,
                "{p:?}"
            );
        }
    }
}
