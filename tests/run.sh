#!/usr/bin/env bash
# The whole test suite, from a clean checkout: installs what the tests need,
# builds the workspace once, checks formatting and lints, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n== %s\n' "$*"; }

step "test tools"
# grpcurl, grpcio, the pinned agent CLIs, systemd-analyze and bubblewrap, each
# only when missing; the tests find them where it puts them.
tests/setup.sh

step "format"
cargo fmt --all -- --check

step "build (once; tests use these binaries)"
cargo build --workspace --bins
export PEDELEC_BIN_DIR="$root/target/debug"

step "clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "benchmarks (quick: they run; the numbers are not checked)"
./tests/bench/run.sh --quick

step "tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast -- --test-threads="${PEDELEC_TEST_THREADS:-2}" 2>&1 | tee "$log" || status=$?
# What is installed is the release build (build-release.sh, made by the
# benchmark step above: the one static executable, and pedelec-cli on musl
# with its own allocator), not the debug build the tests above ran: the tests
# that run pedelec-cli, the real agent CLIs' among them, run again on it.
step "tests on the release build: tools, real agent CLIs"
PEDELEC_BIN_DIR="$root/target/release" cargo test -p pedelec-tests --test suite \
  -- --test-threads="${PEDELEC_TEST_THREADS:-2}" tools:: agents_real:: 2>&1 | tee -a "$log" || status=$?
# Totals of the Rust tests; the closing line adds the web suites' (below).
read -r rust_passed rust_failed rust_skipped < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "%d %d %d\n", p, f, g }' "$log")
printf 'rust: %d passed, %d failed, %d skipped\n' "$rust_passed" "$rust_failed" "$rust_skipped"
# --- web (sdk, extension, demo, browser suite) ---
# The TypeScript SDK, the Chrome extension, the demo and the real-Chromium
# browser suite (docs/sdk-extension.md, docs/demo.md): the smoke test and the
# 16 scenarios of issue 13 with the real codex/claude CLIs installed above
# ($PEDELEC_AGENTS_BIN) against the mock model server, using the binaries built
# above ($PEDELEC_BIN_DIR). About 3 minutes on the 2-core machine.
step "web: sdk, extension, demo, browser suite"
tests/e2e/ensure-chromium.sh
web_log=$(mktemp)
web_rc=$(mktemp)
trap 'rm -f "$log" "$web_log" "$web_rc"' EXIT
web_failed=()
web_started=$SECONDS
for dir in sdk extension demo tests/e2e; do
  printf '\n-- %s\n' "$dir"
  # The outcome goes through a file: a pipeline's status would be tee's.
  { if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error && npm test); then echo ok >"$web_rc"; else echo failed >"$web_rc"; fi; } 2>&1 | tee -a "$web_log"
  [ "$(cat "$web_rc")" = ok ] || web_failed+=("$dir")
done
printf '\n-- web summary (%ss)\n' "$((SECONDS - web_started))"
# vitest colours its summary when CI is set (even without a terminal); the
# counts below are read from plain text.
sed -i 's/\x1b\[[0-9;]*m//g' "$web_log"
# vitest: "Tests  N passed (N)"; node --test: "ℹ pass N" / "ℹ fail N".
grep -E '^ +Tests +[0-9]|^ℹ (pass|fail|skipped) [0-9]' "$web_log" || true
if [ "${#web_failed[@]}" -gt 0 ]; then
  printf 'web: FAILED in %s\n' "${web_failed[*]}"
  status=1
else
  printf 'web: all passed\n'
fi
# --- end web ---
# One closing line for the whole suite: Rust tests plus vitest ("Tests  N
# passed | M failed (T)") and node's test runner ("ℹ pass N", "ℹ fail N").
read -r web_passed web_failed_count < <(awk '
  /^ +Tests +[0-9]/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  /^ℹ pass [0-9]/ { p += $3 } /^ℹ fail [0-9]/ { f += $3 }
  END { printf "%d %d\n", p, f }' "$web_log")
printf 'tests: %d passed, %d failed, %d skipped\n' \
  "$((rust_passed + web_passed))" "$((rust_failed + web_failed_count))" "$rust_skipped"
exit "$status"
