#!/usr/bin/env bash
# Try Pedelec in one command: builds the Rust binaries (release), the SDK, the
# extension and the demo (each only when its sources changed), installs them for
# this user (`pedelecd install --no-login-start`: the binaries copied, the native
# host registered with every browser found and the dedicated profile), starts
# pedelecd, serves the demo on 127.0.0.1 and says what to do next. Ctrl-C stops
# what it started; `pedelecd uninstall` undoes the install.
#
#   ./start.sh [--browser] [--port N] [--debug]
#     --browser  also start Debian's chromium (or the first Chromium-family
#                browser found; $PEDELEC_BROWSER overrides) with a dedicated
#                profile under the data dir, the extension loaded, the demo open
#     --port N   the demo's port (default 4280; fixed, because approvals are
#                per origin and an origin includes the port)
#     --debug    debug build (target/debug): quicker to build, slower to run
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD

browser=0
port=${PEDELEC_DEMO_PORT:-4280}
profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --browser) browser=1 ;;
    --port) port=${2:?--port needs a number}; shift ;;
    --port=*) port=${1#--port=} ;;
    --debug) profile=debug ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "start.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "start.sh: $1 is needed ($2)" >&2; exit 1; }; }
need cargo "a Rust toolchain: https://rustup.rs"
need node "Node.js 20 or newer"
need npm "Node.js's npm"

data_dir=${PEDELEC_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/pedelec}
bin="$root/target/$profile"

# ---- build ------------------------------------------------------------------
say "building the Rust binaries ($profile)"
if [ "$profile" = release ]; then ./build-release.sh; else cargo build --workspace --bins; fi

# Is OUT missing or older than any file under the given sources?
stale() {
  local out=$1; shift
  [ -e "$out" ] || return 0
  [ -n "$(find "$@" -newer "$out" -type f -not -path '*/node_modules/*' -print -quit 2>/dev/null)" ]
}
# npm ci only when node_modules is missing or older than the lock file.
deps() {
  local dir=$1
  if stale "$dir/node_modules/.package-lock.json" "$dir/package-lock.json"; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
say "building the SDK, the extension and the demo (skipped when unchanged)"
deps sdk
if stale sdk/dist/index.js sdk/src sdk/package.json sdk/tsconfig.build.json; then (cd sdk && npm run --silent build); fi
deps extension
if stale extension/dist/manifest.json extension/src extension/static extension/build.mjs extension/firefox.mjs sdk/src/protocol; then (cd extension && npm run --silent build); fi
deps demo
if stale demo/dist/app.js demo/src demo/static demo/build.mjs sdk/dist; then (cd demo && npm run --silent build); fi

# ---- install: binaries per user, the native host registered -------------------
# ONE code path with the e2e harness: `pedelecd install` writes
# dev.pedelec.host.json into every installed browser's NativeMessagingHosts
# folder and into the dedicated profile (--user-data-dir). No login start here:
# this script starts pedelecd itself; `pedelecd install` alone adds it.
browser_profile="$data_dir/browser-profile"
register_native_host() {
  "$bin/pedelecd" install --no-login-start --user-data-dir "$browser_profile"
}
say "installing for this user (undo: pedelecd uninstall)"
register_native_host
installed_bin=$("$bin/pedelecd" paths install-bin-dir)

# ---- pedelecd ---------------------------------------------------------------
started=()
cleanup() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "${pedelecd_started:-0}" = 1 ]; then "$installed_bin/pedelecd" stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting pedelecd"
if "$installed_bin/pedelecd" status >/dev/null 2>&1; then
  echo "pedelecd is already running (left running on exit)"
else
  "$installed_bin/pedelecd" start
  pedelecd_started=1
fi

# ---- serve the demo -------------------------------------------------------------
say "serving the demo"
demo_url=http://127.0.0.1:$port/
serve_log=$(mktemp)
node demo/serve.mjs --port "$port" >"$serve_log" 2>&1 &
started+=($!)
for _ in $(seq 50); do
  grep -q '"url"' "$serve_log" 2>/dev/null && break
  if ! kill -0 "${started[-1]}" 2>/dev/null; then
    echo "start.sh: could not serve the demo on port $port:" >&2
    cat "$serve_log" >&2
    echo "(another program uses it? try --port N)" >&2
    exit 1
  fi
  sleep 0.1
done

# ---- --browser ------------------------------------------------------------------
find_browser() {
  if [ -n "${PEDELEC_BROWSER:-}" ]; then echo "$PEDELEC_BROWSER"; return; fi
  local b
  for b in chromium chromium-browser google-chrome-stable google-chrome brave-browser microsoft-edge vivaldi; do
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return; fi
  done
}
if [ "$browser" = 1 ]; then
  say "starting a browser with a dedicated profile"
  exe=$(find_browser || true)
  if [ -z "$exe" ]; then
    echo "no Chromium-family browser found (Debian/Ubuntu: sudo apt-get install chromium; or set PEDELEC_BROWSER)" >&2
  else
    case "$(basename "$exe")" in
      google-chrome*|microsoft-edge*) echo "note: branded Chrome/Edge ignore --load-extension; load the extension by hand as below" ;;
    esac
    # Its own --user-data-dir: the user's own profiles are never touched.
    "$exe" --user-data-dir="$browser_profile" --no-first-run --no-default-browser-check \
      --load-extension="$root/extension/dist" "$demo_url" >"$data_dir/browser.log" 2>&1 &
    started+=($!)
    echo "$(basename "$exe") (pid ${started[-1]}), profile $browser_profile, log $data_dir/browser.log"
  fi
fi

# ---- what next -------------------------------------------------------------------
agents=$("$installed_bin/pedelec-cli" providers 2>/dev/null || true)
cat <<EOF

Pedelec is running.

  Demo:       $demo_url
  Extension:  $root/extension/dist (Firefox: $root/extension/dist-firefox)
EOF
if [ "$browser" = 0 ]; then
  cat <<EOF

Next:
  1. Open chrome://extensions in Chromium or Chrome, turn on "Developer mode",
     click "Load unpacked" and choose $root/extension/dist
     (Firefox: about:debugging#/runtime/this-firefox, "Load Temporary Add-on…",
     choose $root/extension/dist-firefox/manifest.json)
  2. The native host is registered with every browser found (\`pedelecd install\`
     above); a browser installed later: run \`$installed_bin/pedelecd install\` again
     (or run ./start.sh --browser for a dedicated profile with everything set up)
  3. Open $demo_url, click Connect and approve the site in the Pedelec popup.
EOF
else
  cat <<EOF

Next: in the browser that opened, click Connect on the demo and approve the
site in the Pedelec popup, create a session and ask for something, e.g.
"add 3 to the counter and put 'buy milk' on the list".
EOF
fi
cat <<EOF

Agent CLIs (a session needs one of them installed and logged in):
${agents:-  (pedelec-cli providers did not answer)}

  Add one: npm install -g @openai/codex   (then: codex login)
           npm install -g @anthropic-ai/claude-code   (then: claude)
           npm install -g opencode-ai
  Then pick it in the demo's provider list (reload the page to refresh).

Ctrl-C stops the demo server${pedelecd_started:+ and pedelecd}.
Installed in $installed_bin; \`$installed_bin/pedelecd doctor\` checks it,
\`$installed_bin/pedelecd uninstall\` removes it (--purge: your data too).
EOF
wait "${started[0]}"
