#!/usr/bin/env bash
# The release build of every Pedelec binary into target/release (what
# `pedelecd install` copies and the benchmarks measure; docs/decisions.md,
# "Release build"). Used by start.sh and tests/bench/run.sh.
#
# pedelec-cli starts once per tool call, and a statically linked one starts
# about 0.6 ms sooner (no dynamic loader, no shared libraries to map). Rust
# applies +crt-static to proc-macro crates too unless the build names a
# --target, so the static CLI is built on its own, for the host triple, into
# target/<triple>/release, and then takes the dynamic one's place. Where no
# static C library is installed (libc.a), the dynamic CLI stays.
set -euo pipefail
cd "$(dirname "$0")"

cargo build --release --workspace --bins

triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
  *-linux-gnu) ;;
  *) exit 0 ;; # static glibc only: musl, macOS and the rest keep the default
esac
if ! libc_a=$(cc -print-file-name=libc.a 2>/dev/null) || [ ! -f "$libc_a" ]; then
  echo "note: no static C library (libc.a); pedelec-cli stays dynamically linked" >&2
  exit 0
fi
# relocation-model=static: a static non-PIE binary, as cli/build.rs links it
# non-PIE (no load-time relocations at all).
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
  cargo build --release -p pedelec-cli --bin pedelec-cli --target "$triple"
# A new directory entry, not a write into cargo's file (hard-linked to deps/).
cp "target/$triple/release/pedelec-cli" target/release/.pedelec-cli.static
mv -f target/release/.pedelec-cli.static target/release/pedelec-cli
