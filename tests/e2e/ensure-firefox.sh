#!/usr/bin/env bash
# The Firefox half of the browser suite (docs/testing.md, "Firefox"): Debian's
# firefox-esr, installed only when missing. The suite drives it through the
# WebDriver BiDi server Firefox carries itself (firefox.mjs): no driver to install.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x "${PEDELEC_FIREFOX:-/usr/bin/firefox-esr}" ]; then
  echo "firefox-esr missing: installing Debian's package" >&2
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq firefox-esr >/dev/null
fi
