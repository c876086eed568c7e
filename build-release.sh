#!/usr/bin/env bash
# The release build of every Pedelec binary into target/release (what
# `pedelecd install` copies and the benchmarks measure; docs/decisions.md,
# "Release build" and "One executable for the long-running processes").
# Used by start.sh and tests/bench/run.sh.
#
# - pedelecd, the four services and the native host are one executable,
#   pedelec-multicall, put in target/release once under each program's name
#   (hard links): the six processes then share its code pages.
# - On Linux with glibc's static library (libc.a) it is statically linked,
#   and so is pedelec-cli (against musl where it can, below): no dynamic
#   loader to run at each start (pedelec-cli starts once per tool call) and
#   no shared C library mapped into each process. Rust applies +crt-static
#   to proc-macro crates too unless the build names a --target, so these two
#   are built for a named triple into target/<triple>/release. pedelec-agent,
#   the bench and the test programs stay dynamic (pedelec-agent resolves host
#   names, which static glibc can only do through the shared NSS modules of
#   the same glibc version).
# - pedelec-cli is built against musl where Rust's musl target is installed
#   (or rustup can add it): glibc's start-up probes the CPU with dozens of
#   `cpuid` instructions, each a trap to the hypervisor on a VM, at every one
#   of the CLI's starts (docs/decisions.md, "pedelec-cli on musl"). Without
#   it, pedelec-cli is a static glibc program as above.
#
# --static-only builds only pedelec-multicall and pedelec-cli, not
# pedelec-agent and the bench: what the test suite's release-build tests
# run (tests/run.sh; its quick benchmark run takes those two from the debug
# build), saving the third set of dependency compiles and LTO links.
set -euo pipefail
cd "$(dirname "$0")"

static_only=no
case "${1:-}" in
  --static-only) static_only=yes ;;
  "") ;;
  *)
    echo "usage: $0 [--static-only]" >&2
    exit 2
    ;;
esac

release=target/release
triple=$(rustc -vV | sed -n 's/^host: //p')
static=no
case "$triple" in
  *-linux-gnu)
    if libc_a=$(cc -print-file-name=libc.a 2>/dev/null) && [ -f "$libc_a" ]; then
      static=yes
    else
      echo "note: no static C library (libc.a); every binary stays dynamically linked" >&2
    fi
    ;;
esac # musl, macOS and the rest keep the default

# pedelec-cli's target: the host's musl twin where its standard library is
# there or can be added; otherwise the host, static when libc.a is there.
cli_triple=$triple
cli_static=$static
case "$triple" in
  *-linux-gnu)
    musl=${triple%-gnu}-musl
    if [ -d "$(rustc --print sysroot)/lib/rustlib/$musl/lib" ] ||
      { command -v rustup >/dev/null &&
        timeout 300 rustup target add "$musl" >/dev/null 2>&1; }; then
      cli_triple=$musl
      cli_static=yes
    else
      echo "note: no Rust target $musl, and rustup could not add it; pedelec-cli links glibc" >&2
    fi
    ;;
esac

# Puts $1 in target/release as $2, without its symbol table: a new directory
# entry, never a write into cargo's own file (hard-linked to deps/, rewritten
# by the next build).
place() {
  if ! strip -o "$release/.$2.new" "$1" 2>/dev/null; then
    cp "$1" "$release/.$2.new"
  fi
  mv -f "$release/.$2.new" "$release/$2"
}

# Checks a binary's hot-function list ($2) against its new build ($1, with
# symbols; docs/decisions.md, "Hot functions first"): warns when most of the
# list's names are gone (the list no longer orders the binary and must be
# written again), and fails when the functions it found are not laid out
# together at the start (the linker did not apply the list).
check_hot_list() {
  nm -S -t d "$1" | awk -v list="$2" '
    FNR == NR { if (NF == 4) { addr[$4] = $1 + 0; size[$4] = $2 + 0 } next }
    /^#/ || NF == 0 { next }
    {
      total++
      if (!($1 in addr)) next
      found++; code += size[$1]
      if (lo == "" || addr[$1] < lo) lo = addr[$1]
      if (addr[$1] + size[$1] > hi) hi = addr[$1] + size[$1]
    }
    END {
      if (total == 0) exit
      printf "%s: %d of %d hot functions found, %.2f MiB of code over %.2f MiB\n", list, found, total, code / 1048576, (hi - lo) / 1048576
      if (found * 10 < total * 8)
        printf "warning: %s is out of date; regenerate it with tools/hot-functions.py\n", list
      else if ((hi - lo) * 4 > code * 5) {
        printf "error: the linker did not lay out the functions of %s first\n", list
        exit 1
      }
    }' - "$2" >&2
}

# pedelec-cli builds beside the rest, in a target folder of its own (cargo
# builds in one target folder one at a time): its dependencies then compile
# while the services' executable is optimised as a whole, on one core for
# about two minutes, and the other way round. pedelec-cli is linked non-PIE by
# cli/build.rs (no relocations to apply at each of its many starts), which
# needs code built for fixed addresses. It keeps its symbols in
# target/cli/<triple> (place strips the copy): cli/hot-functions.txt names
# them, and tools/hot-functions.py profiles that very file. `-p` makes cargo
# resolve features for pedelec-cli alone (a bare `--bin` unifies them over the
# whole workspace), so its tokio comes without the services' signal driver.
cli_dir=target/cli
cli_pid=
trap '[ -z "$cli_pid" ] || kill "$cli_pid" 2>/dev/null || true' EXIT
if [ "$cli_static" = yes ]; then
  mkdir -p "$cli_dir"
  CARGO_TARGET_DIR=$cli_dir CARGO_PROFILE_RELEASE_STRIP=false \
    RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
    cargo build --release --target "$cli_triple" -p pedelec-cli --bin pedelec-cli >"$cli_dir.log" 2>&1 &
  cli_pid=$!
fi

if [ "$static" = yes ]; then
  # Everything else, dynamic. pedelec-multicall and the packages of its
  # programs (its path dependencies, as its Cargo.toml names them) are
  # excluded only to save their own binaries' link time (one left out here
  # is built and then replaced by the link below).
  multicall_packages=$(cargo tree -p pedelec-multicall -e normal --depth 1 \
    --prefix none --format '{p}' | awk '/ \(\// { print $1 }')
  excludes=(--exclude pedelec-cli)
  for package in $multicall_packages; do excludes+=(--exclude "$package"); done
  if [ "$static_only" = no ]; then
    cargo build --release --workspace --bins "${excludes[@]}"
  fi
  # The services keep position-independent code (static-pie: their addresses
  # still change with every start). The executable keeps its symbols in
  # target/<triple> (place strips the copies): multicall/hot-functions.txt
  # names them, and tools/hot-functions.py profiles this very file.
  CARGO_PROFILE_RELEASE_STRIP=false RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --target "$triple" --bin pedelec-multicall
  multicall="target/$triple/release/pedelec-multicall"
  check_hot_list "$multicall" multicall/hot-functions.txt
elif [ "$static_only" = no ]; then
  cargo build --release --workspace --bins
  multicall="$release/pedelec-multicall"
else
  cargo build --release --bin pedelec-multicall --bin pedelec-cli
  multicall="$release/pedelec-multicall"
fi

if [ "$cli_static" = yes ]; then
  cli_rc=0
  wait "$cli_pid" || cli_rc=$?
  cli_pid=
  cat "$cli_dir.log" >&2
  [ "$cli_rc" = 0 ] || exit "$cli_rc"
  check_hot_list "$cli_dir/$cli_triple/release/pedelec-cli" cli/hot-functions.txt
  place "$cli_dir/$cli_triple/release/pedelec-cli" pedelec-cli
fi

# One copy, then each name a hard link to it (the executable lists its
# programs' names, pedelecd first).
names=$("$multicall" --list)
first=
for name in $names; do
  if [ -z "$first" ]; then
    place "$multicall" "$name"
    first=$name
  else
    ln -f "$release/$first" "$release/.$name.new"
    mv -f "$release/.$name.new" "$release/$name"
  fi
done
