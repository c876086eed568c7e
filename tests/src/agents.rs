//! The real agent CLIs pinned in `tests/agents` and the mock model server they
//! are pointed at (`tests/agents/mock-model-server.mjs`): where they are and
//! the configuration each CLI reads, for the suite's `agents_real` tests and
//! the bench's provider rows alike.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// `tests/agents`: package.json pinning the CLIs, the mock server, the configs.
pub fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents")
}

/// The folder with the real CLIs: `$PEDELEC_AGENTS_BIN`, else where
/// `tests/setup.sh` installs them (`tests/agents/node_modules/.bin`).
pub fn agents_bin() -> PathBuf {
    std::env::var_os("PEDELEC_AGENTS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| agents_dir().join("node_modules/.bin"))
}

/// The mock model server's script (run with `node`).
pub fn mock_model_server() -> PathBuf {
    agents_dir().join("mock-model-server.mjs")
}

/// The mock's OpenAI-style base URL on `port`.
fn mock_base_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/v1")
}

/// Writes `codex_home/config.toml`: `tests/agents/codex-mock-config.toml`
/// (the one copy, which the browser suite reads too) pointed at the mock on
/// `port`.
pub fn write_codex_mock_config(codex_home: &Path, port: u16) -> std::io::Result<()> {
    let template = std::fs::read_to_string(agents_dir().join("codex-mock-config.toml"))?;
    std::fs::write(
        codex_home.join("config.toml"),
        template.replace("MOCK_BASE_URL", &mock_base_url(port)),
    )
}

/// opencode's `opencode.json` (read from `$HOME/.config/opencode`) for the
/// mock on `port`: its one model as `mock/mock-model`, no update or share.
pub fn opencode_mock_config(port: u16) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": "mock/mock-model",
        "provider": {
            "mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock",
                "options": { "baseURL": mock_base_url(port), "apiKey": "x" },
                "models": {
                    "mock-model": { "name": "Mock model", "tool_call": true, "reasoning": true }
                }
            }
        }
    })
}
