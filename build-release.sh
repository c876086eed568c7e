#!/usr/bin/env bash
# The release build of every Pedelec binary into target/release (what
# `pedelecd install` copies and the benchmarks measure; docs/decisions.md,
# "Release build"). Used by start.sh and tests/bench/run.sh.
#
# On Linux with glibc's static library (libc.a), the processes that matter for
# start-up and memory are statically linked: the six long-running ones
# (pedelecd, the four services, the native host) and pedelec-cli, which starts
# once per tool call. A static process has no dynamic loader to run at start
# and no shared C library mapped, whose resident pages count in every
# process's RSS. Rust applies +crt-static to proc-macro crates too unless the
# build names a --target, so these are built for the host triple into
# target/<triple>/release and then take their place in target/release.
# pedelec-agent, the bench and the test programs stay dynamic (pedelec-agent
# resolves host names, which static glibc can only do through the shared NSS
# modules of the same glibc version).
set -euo pipefail
cd "$(dirname "$0")"

# package:binary of each statically linked program
static=(
  pedelec-launcher:pedelecd
  pedelec-session:pedelec-session
  pedelec-toolbridge:pedelec-toolbridge
  pedelec-provider:pedelec-provider
  pedelec-asset:pedelec-asset
  pedelec-native-host:pedelec-native-host
  pedelec-cli:pedelec-cli
)

triple=$(rustc -vV | sed -n 's/^host: //p')
can_link_static=no
case "$triple" in
  *-linux-gnu)
    if libc_a=$(cc -print-file-name=libc.a 2>/dev/null) && [ -f "$libc_a" ]; then
      can_link_static=yes
    else
      echo "note: no static C library (libc.a); every binary stays dynamically linked" >&2
    fi
    ;;
esac # musl, macOS and the rest keep the default

if [ "$can_link_static" = no ]; then
  exec cargo build --release --workspace --bins
fi

excluded=()
for entry in "${static[@]}"; do excluded+=(--exclude "${entry%%:*}"); done
cargo build --release --workspace --bins "${excluded[@]}"

# The services keep position-independent code (static-pie: their addresses
# still change with every start). pedelec-cli is linked non-PIE by
# cli/build.rs (no relocations to apply at each of its many starts), which
# needs code built for fixed addresses; cargo keeps the two flag sets'
# artifacts apart (RUSTFLAGS is part of their file names).
bins=()
for entry in "${static[@]}"; do
  [ "${entry#*:}" = pedelec-cli ] || bins+=(--bin "${entry#*:}")
done
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --target "$triple" "${bins[@]}"
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
  cargo build --release --target "$triple" --bin pedelec-cli

for entry in "${static[@]}"; do
  bin=${entry#*:}
  # A new directory entry, not a write into cargo's file (hard-linked to deps/).
  cp "target/$triple/release/$bin" "target/release/.$bin.static"
  mv -f "target/release/.$bin.static" "target/release/$bin"
done
