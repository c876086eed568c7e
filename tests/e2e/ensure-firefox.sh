#!/usr/bin/env bash
# The Firefox half of the browser suite (docs/testing.md, "Firefox"): Debian's
# firefox-esr, and geckodriver built from crates.io into .tools/cargo (nothing
# downloaded from elsewhere). Each only when missing, so a second run takes
# a moment.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x "${PEDELEC_FIREFOX:-/usr/bin/firefox-esr}" ]; then
  echo "firefox-esr missing: installing Debian's package" >&2
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq firefox-esr >/dev/null
fi
# Pinned: the WebDriver extensions the suite uses (moz/addon/install of an
# unpacked folder, --allow-system-access) are geckodriver's of this version.
geckodriver_version=0.37.1
have=$(.tools/cargo/bin/geckodriver --version 2>/dev/null || true)
if [ -z "${PEDELEC_GECKODRIVER:-}" ] && [ "${have%%$'\n'*}" != "geckodriver $geckodriver_version" ]; then
  echo "geckodriver $geckodriver_version missing: building it from crates.io (a few minutes)" >&2
  nice -n 10 cargo install --quiet --force --locked --version "$geckodriver_version" --root .tools/cargo geckodriver
fi
