//! The six providers Pedelec knows and the effort level names (DESIGN.md §3, §8).

/// One provider: its code on the wire, its display name and the CLI it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    /// `codex`, `antigravity`, `opencode`, `cursor`, `claude` or `ollama`.
    pub code: &'static str,
    /// Display name, e.g. "Claude Code".
    pub name: &'static str,
    /// The program looked up on PATH.
    pub program: &'static str,
    /// Look for the program beside the running executable before PATH: Pedelec
    /// ships `pedelec-agent` next to its services, and it need not be on PATH.
    pub beside_exe: bool,
}

/// All providers, in the order ListProviders reports them.
pub const PROVIDERS: [ProviderSpec; 6] = [
    ProviderSpec {
        code: "codex",
        name: "Codex",
        program: "codex",
        beside_exe: false,
    },
    ProviderSpec {
        code: "antigravity",
        name: "Antigravity",
        program: "agy",
        beside_exe: false,
    },
    ProviderSpec {
        code: "opencode",
        name: "OpenCode",
        program: "opencode",
        beside_exe: false,
    },
    ProviderSpec {
        code: "cursor",
        name: "Cursor",
        program: "cursor-agent",
        beside_exe: false,
    },
    ProviderSpec {
        code: "claude",
        name: "Claude Code",
        program: "claude",
        beside_exe: false,
    },
    ProviderSpec {
        code: "ollama",
        name: "Ollama",
        program: "pedelec-agent",
        beside_exe: true,
    },
];

/// The provider whose runs need an explicit model (Pedelec's own agent has no default).
pub const OLLAMA: &str = "ollama";

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

/// "codex, antigravity, …" for error messages.
pub fn codes_list() -> String {
    PROVIDERS.map(|p| p.code).join(", ")
}

pub fn levels_list() -> String {
    EFFORT_LEVELS.join(", ")
}
