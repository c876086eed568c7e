#!/usr/bin/env bash
# Pedelec's benchmarks (docs/benchmarks.md):
#   ./tests/bench/run.sh [--quick]
# Builds the workspace's binaries in release, builds the static no-op program
# for the spawn floor, then runs the harness, which prints the table and
# writes target/bench/results.json. --quick only checks that every
# measurement runs (few samples); it exits non-zero if one could not run.
set -euo pipefail
cd "$(dirname "$0")/../.."

# --quick (the test suite's run): only checks that every measurement runs,
# so the harness itself and pedelec-agent come from the debug build, and only
# the release programs under measurement are built (build-release.sh
# --static-only). A full run measures release builds of everything.
quick=no
for arg in "$@"; do [ "$arg" = --quick ] && quick=yes; done

# The pinned agent CLIs (the provider rows) and bubblewrap (turn_start).
tests/setup.sh
if [ "$quick" = yes ]; then
  ./build-release.sh --static-only
  # The whole workspace, as tests/run.sh builds it: a narrower selection
  # would unify features differently and build the dependencies again.
  cargo build --workspace --bins
  harness=target/debug
  agent=(--agent target/debug/pedelec-agent)
else
  ./build-release.sh
  harness=target/release
  agent=()
fi

mkdir -p target/bench
noop=target/bench/noop-static
# The floor wants a static binary (no dynamic loader work); fall back to the
# Rust no-op when no static C toolchain is installed.
if ! cc -static -O2 -o "$noop" tests/bench/noop.c 2>/dev/null; then
  echo "note: cc -static unavailable; spawn floor uses the Rust no-op (dynamically linked)" >&2
  noop=$harness/pedelec-bench-noop
fi

# The floor under any start: no C library at all (x86_64 and aarch64 only;
# the row is left out where it does not build).
bare=()
if cc -static -nostdlib -O2 -o target/bench/noop-bare tests/bench/noop-bare.c 2>/dev/null; then
  bare=(--noop-bare target/bench/noop-bare)
fi

exec "$harness/pedelec-bench" --release target/release "${agent[@]}" --noop "$noop" "${bare[@]}" \
  --out target/bench/results.json "$@"
