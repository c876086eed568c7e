#!/usr/bin/env bash
# Debian's chromium (unbranded, so --load-extension works); never Playwright's
# own browser download (docs/testing.md). Installs it when missing.
set -euo pipefail
if [ -x "${PEDELEC_CHROMIUM:-/usr/bin/chromium}" ]; then exit 0; fi
echo "chromium missing: installing Debian's package" >&2
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
