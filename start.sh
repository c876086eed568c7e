#!/usr/bin/env bash
# Builds Pedelec and starts it in the foreground (Ctrl-C stops everything).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --workspace --bins
exec target/release/pedelecd up "$@"
