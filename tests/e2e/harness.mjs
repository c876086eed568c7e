// The browser suite's one set of helpers (docs/testing.md): real Chromium
// (Debian's), the unpacked built extension, the real native host registered in
// the temp profile by `pedelecd install` (into a temp HOME), the real pedelecd
// on temp dirs, and the real codex/claude CLIs (tests/agents) against the mock
// model server. Only the model is mocked. Every test file and script here
// imports what it needs from this file.
import { spawn, spawnSync } from "node:child_process";
import { after, before } from "node:test";
import { createServer } from "node:http";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, "../..");
export const demoDist = join(repo, "demo/dist");
export const sdkDist = join(repo, "sdk/dist");
export const extensionDir = join(repo, "extension/dist");
export const buildDir = resolve(process.env.PEDELEC_BIN_DIR ?? join(repo, "target/debug"));
export const agentsBin = resolve(process.env.PEDELEC_AGENTS_BIN ?? join(repo, "tests/agents/node_modules/.bin"));
export const chromiumPath = process.env.PEDELEC_CHROMIUM ?? "/usr/bin/chromium";
export const artifacts = join(repo, "target/e2e");
/**
 * Where each world's codex home goes: outside the temporary folder, wherever
 * the checkout lies (codex makes no sandbox-helper aliases under $TMPDIR or
 * /tmp, and then runs no command below full access; docs/security.md).
 */
const codexHomes = "/var/tmp/pedelec-e2e-codex";
/**
 * The constants the page, the extension and the host agree on, from their one
 * home (sdk/src/protocol/bridge.ts) as the SDK's build has it; the demo this
 * suite serves is built from that same sdk/dist.
 */
const bridge = await import(pathToFileURL(join(sdkDist, "protocol/bridge.js")).href).catch((e) => {
  throw new Error(`not built: sdk/dist (npm --prefix sdk run build): ${e.message}`);
});
export const { EXTENSION_ID, FIREFOX_ADDON_ID, NATIVE_HOST_NAME, BRIDGE_NAMESPACE, SDK_PORT_NAME, OPTIONS_PORT_NAME, TRANSFER_PAGE } = bridge;
export const POPUP_URL = `chrome-extension://${EXTENSION_ID}/popup.html`;
export const CLI = join(buildDir, "pedelec-cli");
/** Ceilings for hangs, never performance assertions. Real CLIs on 2 shared cores are slow to start. */
export const STEP_MS = 90_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(what, check, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(100);
  }
}

export function withTimeout(promise, what, ms = STEP_MS) {
  let timer;
  return Promise.race([
    Promise.resolve(promise).finally(() => clearTimeout(timer)),
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))),
  ]);
}

/**
 * Throws, naming the command that builds it, when something the suite runs is
 * missing. By default the binaries, the extension, the demo and the agent CLIs;
 * `sdk`: the SDK's build too (pages that import it directly).
 */
export function checkBuilt({ demo = true, agents = true, sdk = false } = {}) {
  const missing = [];
  for (const bin of ["pedelec-native-host", "pedelecd", "pedelec-cli", "pedelec-session", "pedelec-provider", "pedelec-asset", "pedelec-toolbridge"]) {
    if (!existsSync(join(buildDir, bin))) missing.push(`${bin} in ${buildDir} (cargo build --workspace --bins)`);
  }
  if (!existsSync(join(extensionDir, "manifest.json"))) missing.push("extension/dist (npm --prefix extension run build)");
  if (demo && !existsSync(join(demoDist, "app.js"))) missing.push("demo/dist (npm --prefix demo run build)");
  if (sdk && !existsSync(join(sdkDist, "index.js"))) missing.push("sdk/dist (npm --prefix sdk run build)");
  if (agents) for (const cli of ["codex", "claude"]) if (!existsSync(join(agentsBin, cli))) missing.push(`${cli} in ${agentsBin} (npm install in tests/agents)`);
  if (missing.length) throw new Error(`not built: ${missing.join("; ")}`);
}

// ---- the mock model server (tests/agents/mock-model-server.mjs) ----

/**
 * Writes codex's config.toml into `codexHome` for a run against the mock on
 * `port`: tests/agents/codex-mock-config.toml, the one copy, with its
 * MOCK_BASE_URL filled in.
 */
export function writeCodexConfig(codexHome, port) {
  const template = readFileSync(join(repo, "tests/agents/codex-mock-config.toml"), "utf8");
  mkdirSync(codexHome, { recursive: true });
  writeFileSync(join(codexHome, "config.toml"), template.replaceAll("MOCK_BASE_URL", `http://127.0.0.1:${port}/v1`));
}

export async function startMock() {
  const child = spawn("/usr/bin/node", [join(repo, "tests/agents/mock-model-server.mjs")], { stdio: ["ignore", "pipe", "inherit"], detached: true });
  const port = await withTimeout(
    new Promise((res, rej) => {
      let buf = "";
      child.stdout.on("data", (d) => {
        buf += d;
        const nl = buf.indexOf("\n");
        if (nl >= 0) res(JSON.parse(buf.slice(0, nl)).port);
      });
      child.on("exit", (code) => rej(new Error(`mock exited ${code}`)));
    }),
    "mock model server port",
    20_000,
  );
  const url = `http://127.0.0.1:${port}`;
  const call = async (method, path, body) => {
    const r = await fetch(url + path, { method, headers: { "content-type": "application/json" }, body: body ? JSON.stringify(body) : undefined });
    if (!r.ok) throw new Error(`mock ${method} ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  return {
    port,
    script: (s) => call("POST", "/_script", s),
    requests: () => call("GET", "/_requests"),
    clear: () => call("DELETE", "/_requests"),
    /** The agent's main model requests (they offer tools; auxiliary ones do not). */
    async modelRequests(pathPrefix) {
      return (await call("GET", "/_requests")).filter((r) => r.path.startsWith(pathPrefix) && !r.path.includes("count_tokens") && Array.isArray(r.body?.tools) && r.body.tools.length > 0);
    },
    stop() {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    },
  };
}

/**
 * A test file's shared parts: before its tests, `check()` (what it runs is
 * built) and the mock model server and `sites` pages (each its own origin)
 * started and handed to `use(mock, ...sites)`; after them, all stopped.
 */
export function suiteParts({ sites = 1, check = () => checkBuilt() }, use) {
  let mock;
  const pages = [];
  before(async () => {
    check();
    mock = await startMock();
    for (let i = 0; i < sites; i++) pages.push(await servePages());
    use(mock, ...pages);
  });
  after(() => {
    mock?.stop();
    for (const page of pages) page.close();
  });
}

// ---- pages on 127.0.0.1 ----

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css", ".map": "application/json", ".json": "application/json" };

/**
 * Serves files on a fresh 127.0.0.1 port; each call is another origin. By
 * default the demo (demo/dist, which bundles the SDK); `root` served under the
 * path `under` otherwise, and `index`, when given, as the HTML at "/".
 */
export function servePages({ root = demoDist, under = "/", index = null } = {}) {
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (index !== null && path === "/") {
      res.writeHead(200, { "content-type": TYPES[".html"], "cache-control": "no-store" }).end(index);
      return;
    }
    if (path.startsWith(under)) {
      const rel = path.slice(under.length);
      const file = normalize(join(root, rel === "" ? "index.html" : rel));
      if (file.startsWith(root + "/") && existsSync(file) && statSync(file).isFile()) {
        res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" }).end(readFileSync(file));
        return;
      }
    }
    res.writeHead(404).end();
  });
  return new Promise((r) =>
    server.listen(0, "127.0.0.1", () => r({ server, port: server.address().port, origin: `http://127.0.0.1:${server.address().port}`, close: () => server.close() })),
  );
}

// ---- binaries, the host's registration, Chromium ----

/**
 * A private bin dir: the built binaries (hard links, else copies) plus a stub
 * `pedelec-agent`, because ProviderService looks for the agent beside its own
 * executable first. Made beside the build dir so hard links work. The stub
 * answers "hello", or on a prompt with "@@tool" calls the page's
 * get_current_page tool through pedelec-cli and reports the answer.
 */
export function privateBinDir(from = buildDir) {
  let dir;
  try {
    dir = mkdtempSync(join(dirname(from), ".e2e-bin-"));
  } catch {
    dir = mkdtempSync(join(tmpdir(), "pdl-e2e-bin-"));
  }
  for (const name of readdirSync(from)) {
    if (!(name === "pedelecd" || name.startsWith("pedelec-")) || name.includes(".") || name === "pedelec-agent") continue;
    try {
      linkSync(join(from, name), join(dir, name));
    } catch {
      copyFileSync(join(from, name), join(dir, name));
      chmodSync(join(dir, name), 0o755);
    }
  }
  const agent = join(dir, "pedelec-agent");
  writeFileSync(
    agent,
    `#!/bin/sh
[ "$1" = "--version" ] && echo "pedelec-agent 0.0.0-stub" && exit 0
prompt=$(/bin/cat)
echo '{"type":"session","id":"stub-session"}'
case "$prompt" in
  *"@@tool"*)
    out=$("${join(dir, "pedelec-cli")}" --thread-id "$PEDELEC_THREAD_ID" tool-call get_current_page '{}')
    esc=$(printf '%s' "$out" | /bin/sed 's/\\\\/\\\\\\\\/g; s/"/\\\\"/g' | /usr/bin/tr -d '\\n')
    echo '{"type":"chat_delta","text":"Page: "}'
    printf '{"type":"chat","text":"Page: %s"}\\n' "$esc"
    echo '{"type":"usage","input":10,"output":5}'
    ;;
  *) echo '{"type":"chat","text":"hello"}' ;;
esac
`,
  );
  chmodSync(agent, 0o755);
  return dir;
}

/**
 * Registers the native host in the Chromium profile `profile` the one way
 * there is (docs/install.md): `pedelecd install` from `bin`, into the HOME of
 * `env` (merged over this process's environment).
 */
export function installHost(bin, env, profile) {
  const args = ["install", "--no-login-start", ...(profile ? ["--user-data-dir", profile] : [])];
  const r = spawnSync(join(bin, "pedelecd"), args, { env: { ...process.env, ...env }, encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`pedelecd install: ${r.stdout}${r.stderr}`);
}

/**
 * Debian's Chromium, headless, on the persistent profile `profile` with the
 * environment `env` (complete: the browser and the native hosts it starts see
 * exactly this); with the unpacked extension unless `extension` is false;
 * `args`: extra flags.
 */
export function launchBrowser(profile, env, { extension = true, args = [] } = {}) {
  return chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    env,
    viewport: { width: 1280, height: 800 },
    ignoreDefaultArgs: ["--disable-extensions"],
    args: [
      "--no-sandbox",
      "--disable-gpu",
      ...(extension ? [`--disable-extensions-except=${extensionDir}`, `--load-extension=${extensionDir}`] : []),
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      ...args,
    ],
  });
}

/** The extension's service worker in `context` (waits for it); checks the manifest key gave the fixed id. */
export async function extensionWorker(context) {
  const worker = context.serviceWorkers()[0] ?? (await withTimeout(context.waitForEvent("serviceworker"), "extension service worker"));
  if (new URL(worker.url()).host !== EXTENSION_ID) throw new Error(`unexpected extension id: ${worker.url()}`);
  return worker;
}

// ---- one world: temp dirs, pedelecd, Chromium with the extension ----

/**
 * Starts pedelecd on temp dirs (with the agent CLIs configured against the
 * mock), registers the native host in a temp Chromium profile and launches
 * Chromium with the unpacked extension. Everything is undone in t.after.
 *   options.extension (default true): load the extension and register the host
 *   options.registerHost (default: options.extension): register the native
 *     host; false leaves the extension without Pedelec, as before an install
 *   options.args: extra Chromium flags
 *   options.defaultProvider: set in the settings
 *   options.installedOnly (default false): start no pedelecd and give the
 *     browser no PEDELEC_* variable, so the native host runs on what
 *     `pedelecd install` wrote alone (host config, manifest) and starts the
 *     daemon itself, as for a user whose browser was not started by a script
 *   options.firefox: a Firefox instead of Chromium (firefox.mjs): the host
 *     registered for Firefox in the temp HOME (as after Firefox's first run),
 *     the Firefox build installed as a temporary add-on; `world.firefox`
 */
export async function startWorld(t, mock, options = {}) {
  const extension = options.extension ?? true;
  const registerHost = options.registerHost ?? extension;
  // Short base: the runtime dir holds Unix sockets (path length limit).
  const base = mkdtempSync(join(tmpdir(), "pdl-e2e-"));
  const home = join(base, "user");
  const agentPath = join(base, "agents");
  mkdirSync(codexHomes, { recursive: true });
  const codexHome = mkdtempSync(join(codexHomes, "codex-"));
  mkdirSync(agentPath, { recursive: true });
  // Only codex and claude are on PATH: the others show as unavailable.
  for (const cli of ["codex", "claude"]) symlinkSync(join(agentsBin, cli), join(agentPath, cli));
  const env = {
    PEDELEC_RUNTIME_DIR: join(base, "run"),
    PEDELEC_HOME: join(base, "home"),
    HOME: home,
    PEDELEC_BIN_DIR: buildDir,
    PEDELEC_LOG: "info",
    PATH: `${agentPath}:/usr/local/bin:/usr/bin:/bin`,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local/share"),
    XDG_STATE_HOME: join(home, ".local/state"),
    XDG_CACHE_HOME: join(home, ".cache"),
    // codex (tests/agents/README.md): its own home with the mock as provider,
    // outside the temporary folder as a user's ~/.codex is: below full access
    // codex runs commands in its own sandbox, which cannot start from a home
    // under /tmp (docs/security.md, "Access levels").
    CODEX_HOME: codexHome,
    // claude
    ANTHROPIC_BASE_URL: `http://127.0.0.1:${mock.port}`,
    ANTHROPIC_API_KEY: "x",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
  };
  for (const d of [env.PEDELEC_HOME, env.XDG_CONFIG_HOME, env.XDG_DATA_HOME, env.XDG_STATE_HOME, env.XDG_CACHE_HOME]) mkdirSync(d, { recursive: true });
  writeCodexConfig(env.CODEX_HOME, mock.port);
  const fullEnv = { ...process.env, ...env };
  for (const k of ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_AUTH_TOKEN"]) delete fullEnv[k];

  const run = (bin, args, timeout = 30_000) => {
    const r = spawnSync(join(buildDir, bin), args, { env: fullEnv, encoding: "utf8", timeout });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const world = { base, env, fullEnv, run, pedelecd: (...args) => run("pedelecd", args, 40_000), cli: (...args) => run("pedelec-cli", args) };

  let context;
  let stopped = false;
  const cleanup = async () => {
    if (stopped) return;
    stopped = true;
    await context?.close().catch(() => undefined);
    await world.firefox?.close();
    run("pedelecd", ["stop"], 20_000);
    if (process.env.PEDELEC_E2E_KEEP) console.log(`kept ${base} and ${codexHome}`);
    else for (const dir of [base, codexHome]) rmSync(dir, { recursive: true, force: true });
  };
  t.after(cleanup);

  if (!options.installedOnly) {
    // pedelecd first (the host would start it too, but settings go in before the page asks).
    const up = world.pedelecd("start");
    if (up.status !== 0) throw new Error(`pedelecd start: ${up.stderr}`);
    // claude needs a model name it knows; codex takes its model from config.toml.
    const prof = world.cli("settings", "set", "profile", "claude", "default", "--model", "claude-sonnet-4-5");
    if (prof.status !== 0) throw new Error(`settings: ${prof.stderr}`);
    if (options.defaultProvider) {
      const d = world.cli("settings", "set", "default-provider", options.defaultProvider);
      if (d.status !== 0) throw new Error(`settings: ${d.stderr}`);
    }
  }

  if (options.firefox) {
    // Firefox's own folder, as its first run leaves it: install registers the host beside it.
    mkdirSync(join(home, ".mozilla/firefox"), { recursive: true });
    world.installedBin = join(home, ".local/lib/pedelec/bin");
    installHost(buildDir, fullEnv, null);
    const { Firefox } = await import("./firefox.mjs");
    world.browserEnv = { ...fullEnv };
    world.firefox = await Firefox.launch(world.browserEnv, { addonId: FIREFOX_ADDON_ID });
    world.cleanup = cleanup;
    return world;
  }
  const profile = join(base, "profile");
  world.profile = profile;
  // The temp HOME's install (docs/install.md): the binaries under it, the host
  // registered in this profile. The one registration code path start.sh uses too.
  world.installedBin = join(home, ".local/lib/pedelec/bin");
  if (registerHost) installHost(buildDir, fullEnv, profile);
  else mkdirSync(profile, { recursive: true });
  const browserEnv = { ...fullEnv };
  if (options.installedOnly) for (const k of Object.keys(browserEnv)) if (k.startsWith("PEDELEC_")) delete browserEnv[k];
  world.browserEnv = browserEnv;
  context = await launchBrowser(profile, browserEnv, { extension, args: options.args });
  world.context = context;
  world.cleanup = cleanup;
  if (extension) world.worker = await extensionWorker(context);
  /** The current worker (a stopped or reloaded one is replaced). */
  world.currentWorker = async () => {
    const w = context.serviceWorkers().find((x) => x.url().startsWith(`chrome-extension://${EXTENSION_ID}/`));
    return w ?? withTimeout(context.waitForEvent("serviceworker"), "extension service worker");
  };
  /**
   * Grants an origin the way the prompt's Approve does (tests that are not
   * about the prompt): the default level (edit) and both agents on PATH, so a
   * session naming either asks nothing more.
   */
  world.approve = async (origin, grant = { access: "edit", providers: ["codex", "claude"] }) =>
    (await world.currentWorker()).evaluate(([o, g]) => globalThis.pedelecHub.approve(o, g), [origin, grant]);
  /** Opens the demo at origin; resolves when its start-up checks ran. */
  world.openDemo = async (origin, page) => {
    page ??= await context.newPage();
    page.on("console", (m) => {
      if (m.type() === "error" || process.env.PEDELEC_E2E_VERBOSE) console.log(`[page ${origin}] ${m.type()}: ${m.text()}`);
    });
    await page.goto(`${origin}/`);
    await page.waitForFunction(() => document.body.dataset.ready === "1", null, { timeout: STEP_MS });
    return page;
  };
  /** Pids of the native hosts this world's Chromium started (told apart by their runtime dir). */
  world.hosts = () => hostPids(env.PEDELEC_RUNTIME_DIR);
  return world;
}

/** Pids of the processes for which `match(pid)` is true; a process that goes meanwhile, or is not ours to read, is skipped. */
export function pidsWhere(match) {
  const pids = [];
  for (const entry of readdirSafe("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (match(entry)) pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours
    }
  }
  return pids;
}

/** Pids of the native hosts started for the runtime dir `runtimeDir` (how a world's hosts are told apart). */
export function hostPids(runtimeDir) {
  return pidsWhere((pid) => {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0];
    return cmd.endsWith("/pedelec-native-host") && readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`PEDELEC_RUNTIME_DIR=${runtimeDir}`);
  });
}

/** Pids of the processes running the executable `exe`. */
export function pidsOf(exe) {
  return pidsWhere((pid) => readlinkSync(`/proc/${pid}/exe`) === exe);
}

function readdirSafe(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/**
 * Answers a prompt of the extension as a user would. Waits for the approval UI
 * (headless Chromium opens openPopup()'s popup as a DevTools target Playwright
 * does not list as a page), then answers in popup.html opened as a page (or in
 * `popup`, one already open). `kind`: site (actions approve / reject / block;
 * `access` and `providers` choose before approving, and full access is
 * confirmed), provider (yes / no) or folder (once / always / no). Returns the
 * popup page (closed by the caller or left open).
 */
export async function answerPrompt(world, page, origin, action, { kind = "site", access = null, providers = null, popup = null } = {}) {
  if (!popup) {
    await until("the extension opening its approval UI", () => approvalUiOpen(world, page));
    popup = await world.context.newPage();
    await popup.goto(POPUP_URL);
  }
  const card = popup.locator(`#prompts .prompt[data-kind="${kind}"][data-origin="${origin}"]`);
  await card.waitFor({ timeout: STEP_MS });
  if (access) await card.locator(`input[type=radio][value="${access}"]`).check();
  if (providers) {
    for (const box of await card.locator("input[type=checkbox]").all()) await box.setChecked(providers.includes(await box.getAttribute("value")));
  }
  // Playwright waits for a button to be enabled: Approve is disabled for its first second.
  await card.locator(`button[data-action="${action}"]`).click();
  if (kind === "site" && action === "approve" && access === "full") await card.locator('button[data-action="confirm-full"]').click();
  return popup;
}

/** Whether any approval UI (popup target or window) is open. */
export async function approvalUiOpen(world, page) {
  const cdp = await world.context.newCDPSession(page);
  const { targetInfos } = await cdp.send("Target.getTargets");
  await cdp.detach();
  return targetInfos.some((i) => i.url.startsWith(POPUP_URL));
}

export async function shot(page, name) {
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, `${name}.png`) });
}

/**
 * A screenshot the documentation shows: `target` (a page or a locator) to
 * target/e2e/<name>.png and, with PEDELEC_E2E_DOC_SHOTS set, copied to
 * docs/img/<name>.png — how every image in docs/img is made, so they stay current.
 */
export async function docShot(target, name, options = {}) {
  mkdirSync(artifacts, { recursive: true });
  const path = join(artifacts, `${name}.png`);
  await target.screenshot({ path, ...options });
  if (process.env.PEDELEC_E2E_DOC_SHOTS) {
    mkdirSync(join(repo, "docs/img"), { recursive: true });
    copyFileSync(path, join(repo, "docs/img", `${name}.png`));
  }
  return path;
}

/** Runs f in the page with the demo's exports; errors come back as {code, message}. */
export function inPage(page, f, arg) {
  return page.evaluate(
    async ([src, a]) => {
      const fn = new Function(`return (${src})`)();
      try {
        return { ok: await fn(window.pedelecDemo, a) };
      } catch (e) {
        return { error: { code: e?.code ?? "JS_ERROR", message: String(e?.message ?? e) } };
      }
    },
    [f.toString(), arg],
  );
}

/**
 * The shell command the mock tells an agent to run: a page tool call through
 * the real pedelec-cli. With `thread`, the command as the agent's prompt
 * spells it (the thread id written out), the form an agent below full access
 * is allowed to run (claude's allowed-command rule); else through
 * $PEDELEC_THREAD_ID.
 */
export function toolCommand(tool, args, thread = null) {
  return `${CLI} --thread-id ${thread ?? '"$PEDELEC_THREAD_ID"'} tool-call ${tool} '${JSON.stringify(args)}'`;
}

/**
 * The mock script for codex calling the page tool `tool`: below full access
 * (a site's default grant is edit) codex's sandbox keeps its commands off
 * Unix sockets, so codex calls the page's tools natively (its MCP tools), not
 * through pedelec-cli in its shell (docs/security.md, "Access levels").
 */
export function codexTool(tool, args, final, extra = {}) {
  return { mode: "mcp", tool, tool_args: args, final, ...extra };
}
