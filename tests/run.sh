#!/usr/bin/env bash
# The whole test suite, from a plain checkout: installs what the tests need,
# checks formatting and lints, builds the debug and the release builds, runs
# every test and the benchmarks' quick mode (docs/testing.md).
#
# Work that waits (downloads, tests that wait for processes) overlaps with
# work that computes: the installs run while the debug build compiles, and the
# release build compiles at the lowest CPU priority (nice 19) from the start,
# on whatever the debug build, the tests and the browser suite leave idle. A
# job that runs beside another writes to its own log, printed when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
threads=${PEDELEC_TEST_THREADS:-2}

# Background jobs get process groups of their own (job control), so each can
# be stopped whole if the run ends early.
set -m
logs=$(mktemp -d)
declare -A job_pid=()
finished_jobs=()
stop_jobs() {
  for name in "${!job_pid[@]}"; do kill -- "-${job_pid[$name]}" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap stop_jobs EXIT

started=$SECONDS
step() { printf '\n== %s  [%ss]\n' "$*" "$((SECONDS - started))"; }
# start NAME COMMAND...: runs COMMAND in the background, its output in NAME's
# log; it notes how long it took when it ends.
start() {
  local name=$1
  shift
  (
    trap 'echo "$((SECONDS - job_started))" >"$logs/$name.took"' EXIT
    job_started=$SECONDS
    "$@"
  ) >"$logs/$name.log" 2>&1 &
  job_pid[$name]=$!
}
# finish NAME: waits for NAME, prints its log, and fails when NAME failed.
finish() {
  local name=$1 rc=0 took
  wait "${job_pid[$name]}" || rc=$?
  unset "job_pid[$name]"
  took=$(cat "$logs/$name.took" 2>/dev/null || echo '?')
  printf '\n-- %s (%ss, exit %s)\n' "$name" "$took" "$rc"
  cat "$logs/$name.log"
  finished_jobs+=("$name ${took}s")
  return "$rc"
}

status=0
failed=()
fail() {
  status=1
  failed+=("$1")
}

# --- installs and builds ---
step "test tools and the web folders' dependencies (in the background)"
# grpcurl, grpcio, the pinned agent CLIs, systemd-analyze and bubblewrap
# (tests/setup.sh), Debian's chromium and firefox-esr, then each web folder's
# npm packages: network and disk, so they run while the debug build compiles.
prepare() {
  tests/setup.sh
  tests/e2e/ensure-chromium.sh
  tests/e2e/ensure-firefox.sh
  for dir in sdk extension demo tests/e2e; do
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  done
}
start prepare prepare

step "format"
cargo fmt --all -- --check

step "release build (in the background, nice 19)"
# build-release.sh: what `pedelecd install` copies and the benchmarks measure;
# here only the programs the release-build tests and the quick benchmarks run
# (pedelec-agent and the bench harness come from the debug build).
start release nice -n 19 ./build-release.sh --static-only

step "debug build: binaries and tests"
# Every cargo command here selects the whole workspace: features are unified
# over the packages a command selects, so `-p` on one package would build the
# dependencies again with other features.
cargo build --workspace --bins
cargo test --workspace --no-run
export PEDELEC_BIN_DIR="$root/target/debug"

step "clippy"
cargo clippy --workspace --all-targets -- -D warnings

finish prepare

# --- tests on the debug build ---
# The SDK's, the extension's and the demo's own tests (vitest, tsc, esbuild;
# no Pedelec binary) run beside the Rust tests, which mostly wait on the
# processes they start. The demo builds against the SDK's build.
web_unit() {
  local rc=0
  (cd sdk && npm test) || rc=1
  (cd demo && npm test) || rc=1
  return "$rc"
}
start web-sdk-demo web_unit
start web-extension bash -c 'cd extension && npm test'

step "tests (debug build)"
rust_log=$logs/rust.log
# The real agent CLIs' tests run once, on the release build below: what is
# installed, and each of their turns starts a Node program of a few seconds.
cargo test --workspace --no-fail-fast -- --test-threads="$threads" --skip agents_real:: \
  2>&1 | tee "$rust_log" || fail "tests (debug build)"

finish web-sdk-demo || fail sdk/demo
finish web-extension || fail extension

# The real-Chromium browser suite (docs/sdk-extension.md): the extension, the
# real native host and the debug binaries, the real codex and claude CLIs
# against the mock model server.
step "browser suite (tests/e2e)"
(cd tests/e2e && npm test) 2>&1 | tee "$logs/e2e.log" || fail "browser suite"

# --- the release build ---
step "waiting for the release build"
finish release || {
  fail "release build"
  exit 1
}

# What is installed is the release build: the one static executable, and
# pedelec-cli on musl with its own allocator. The tool tests and the real
# agent CLIs' tests run on it; the benchmarks' quick mode runs beside them
# (every measurement must run; the numbers are not checked).
step "benchmarks, quick (in the background) and tests on the release build: tools, real agent CLIs"
start bench ./tests/bench/run.sh --quick
PEDELEC_BIN_DIR="$root/target/release" cargo test --workspace --test suite \
  -- --test-threads="$threads" tools:: agents_real:: 2>&1 | tee -a "$rust_log" ||
  fail "tests (release build)"
finish bench || fail benchmarks

# --- totals ---
step "summary"
printf 'took: %s\n' "$(IFS=,; echo "${finished_jobs[*]}" | sed 's/,/, /g')"
# cargo: "test result: ok. N passed; M failed; K ignored; ..."
read -r rust_passed rust_failed rust_skipped < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "%d %d %d\n", p, f, g }' "$rust_log")
printf 'rust: %d passed, %d failed, %d skipped\n' "$rust_passed" "$rust_failed" "$rust_skipped"
# vitest colours its summary when CI is set (even without a terminal); the
# counts are read from plain text. vitest: "Tests  N passed | M failed (T)";
# node --test: "ℹ pass N" / "ℹ fail N".
web_text=$(cat "$logs/web-sdk-demo.log" "$logs/web-extension.log" "$logs/e2e.log" | sed 's/\x1b\[[0-9;]*m//g')
grep -E '^ +Tests +[0-9]|^ℹ (pass|fail|skipped) [0-9]' <<<"$web_text" || true
read -r web_passed web_failed < <(awk '
  /^ +Tests +[0-9]/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
  /^ℹ pass [0-9]/ { p += $3 } /^ℹ fail [0-9]/ { f += $3 }
  END { printf "%d %d\n", p, f }' <<<"$web_text")
if [ "$((rust_failed + web_failed))" -gt 0 ]; then
  status=1
  # The failed tests by name, so the last lines of a run say which failed.
  # cargo: "test NAME ... FAILED"; node --test lists "✖ NAME (T ms)" under
  # "✖ failing tests:"; vitest: " FAIL  FILE > NAME".
  printf 'failed tests:\n'
  {
    sed -n -E 's/^test (.*) \.\.\. FAILED$/  rust: \1/p' "$rust_log"
    awk '/^✖ failing tests:/ { listed = 1; next } listed && /^✖ / { sub(/^✖ /, "  browser: "); print }' <<<"$web_text"
    sed -n -E 's/^ FAIL +(.*)$/  vitest: \1/p' <<<"$web_text"
  } | sort -u
fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "$(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
fi
printf 'tests: %d passed, %d failed, %d skipped  [%ss]\n' \
  "$((rust_passed + web_passed))" "$((rust_failed + web_failed))" "$rust_skipped" "$((SECONDS - started))"
exit "$status"
