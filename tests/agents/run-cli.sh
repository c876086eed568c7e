#!/usr/bin/env bash
# Run one of the real agent CLIs against mock-model-server.mjs, offline, in a fresh home.
#
#   MOCK_PORT=N [AGENT_HOME=DIR] [WORKDIR=DIR] [MODEL=M] run-cli.sh codex|claude|opencode [ARGS...] < prompt
#
# - MOCK_PORT  (required) the port the mock printed ({"port":N}).
# - AGENT_HOME the per-run home; created with mktemp when unset. Reuse the same AGENT_HOME for a
#              resume run: the CLIs keep their sessions there.
# - WORKDIR    the workspace (default $AGENT_HOME/workspace, created).
# - MODEL      codex default gpt-5.5, claude default claude-sonnet-4-5, opencode default mock/mock-model.
# - ARGS       extra CLI arguments, placed where each CLI wants them:
#     codex:    between `--json` and the final `-`  (e.g. `resume ID`, `-c model_reasoning_effort="high"`;
#               put -c options first: `-c k=v resume ID`)
#     claude:   appended (e.g. `--resume ID`, `--effort high`; --effort is silently dropped for
#               claude-sonnet-4-5, use MODEL=claude-sonnet-4-6 to see output_config.effort)
#     opencode: appended (e.g. `--session ID`, `--variant high`); with no message argument
#               `opencode run` reads the prompt from stdin
# The prompt is read from stdin. The CLI is exec'd, so this script's pid is the CLI's pid: start it
# with `setsid` and stop it with SIGTERM to the process group, then SIGKILL to the group after a
# grace period (opencode can ignore a SIGTERM in its first seconds).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/node_modules/.bin"
cli="${1:?usage: run-cli.sh codex|claude|opencode [ARGS...]}"
shift
: "${MOCK_PORT:?set MOCK_PORT to the mock server port}"
AGENT_HOME="${AGENT_HOME:-$(mktemp -d "${TMPDIR:-/tmp}/pedelec-agent-home.XXXXXX")}"
mkdir -p "$AGENT_HOME"
WORKDIR="${WORKDIR:-$AGENT_HOME/workspace}"
mkdir -p "$WORKDIR"

# Common: a private home and XDG folders, nothing from the real user.
export HOME="$AGENT_HOME"
export XDG_CONFIG_HOME="$AGENT_HOME/.config"
export XDG_DATA_HOME="$AGENT_HOME/.local/share"
export XDG_STATE_HOME="$AGENT_HOME/.local/state"
export XDG_CACHE_HOME="$AGENT_HOME/.cache"
mkdir -p "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_STATE_HOME" "$XDG_CACHE_HOME"
unset OPENAI_API_KEY OPENAI_BASE_URL ANTHROPIC_AUTH_TOKEN CLAUDE_CODE_USE_BEDROCK CLAUDE_CODE_USE_VERTEX || true

case "$cli" in
codex)
  export CODEX_HOME="$AGENT_HOME/.codex"
  mkdir -p "$CODEX_HOME"
  # The one copy of codex's mock config, pointed at the mock (and MODEL).
  sed -e "s|MOCK_BASE_URL|http://127.0.0.1:${MOCK_PORT}/v1|" \
    -e "s|^model = .*|model = \"${MODEL:-gpt-5.5}\"|" \
    "$here/codex-mock-config.toml" >"$CODEX_HOME/config.toml"
  exec "$bin/codex" exec --cd "$WORKDIR" --sandbox danger-full-access --skip-git-repo-check --json "$@" -
  ;;
claude)
  export ANTHROPIC_BASE_URL="http://127.0.0.1:${MOCK_PORT}"
  export ANTHROPIC_API_KEY="x"
  export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1
  [ "$(id -u)" = 0 ] && export IS_SANDBOX=1
  cd "$WORKDIR"
  exec "$bin/claude" -p --output-format stream-json --verbose --dangerously-skip-permissions \
    --model "${MODEL:-claude-sonnet-4-5}" "$@"
  ;;
opencode)
  mkdir -p "$XDG_CONFIG_HOME/opencode"
  m="${MODEL:-mock/mock-model}"
  cat >"$XDG_CONFIG_HOME/opencode/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "$m",
  "provider": {
    "mock": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Mock",
      "options": { "baseURL": "http://127.0.0.1:${MOCK_PORT}/v1", "apiKey": "x" },
      "models": {
        "${m#mock/}": {
          "name": "Mock model",
          "tool_call": true,
          "reasoning": true
        }
      }
    }
  }
}
EOF
  export OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1
  exec "$bin/opencode" run --format json --dir "$WORKDIR" --dangerously-skip-permissions --model "$m" "$@"
  ;;
*)
  echo "run-cli.sh: unknown CLI '$cli' (codex, claude or opencode)" >&2
  exit 2
  ;;
esac
