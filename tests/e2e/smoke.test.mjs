// The browser smoke test (issue 12): a page on 127.0.0.1 served here, the
// unpacked built extension in Debian's Chromium, the real pedelec-native-host
// registered in the temp profile by `pedelecd install`, and the real pedelecd (started by the host,
// as in production) on temp dirs. Approve in the popup, listProviders,
// createSession, a native host restart under a live session, end, auto-end
// when the last page of a session closes, revoke.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { chmodSync, copyFileSync, existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../..");
const sdkDist = join(repo, "sdk/dist");
const extensionDir = join(repo, "extension/dist");
const buildDir = resolve(process.env.PEDELEC_BIN_DIR ?? join(repo, "target/debug"));
const chromiumPath = process.env.PEDELEC_CHROMIUM ?? "/usr/bin/chromium";
const EXTENSION_ID = "ekeclpceddngodnkncegoclkkeknaacb";
// Generous ceilings for hangs, not performance assertions (TESTING.md §4).
const STEP_MS = 45_000;

const PAGE = `<!doctype html><html><head><title>Pedelec smoke</title></head><body>
<p id="status">loading</p>
<script type="module">
  import { Pedelec, defineTool } from "/sdk/index.js";
  window.Pedelec = Pedelec;
  window.defineTool = defineTool;
  document.getElementById("status").textContent = "ready";
</script></body></html>`;

function serve() {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    if (url.pathname === "/") {
      res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
      return;
    }
    if (url.pathname.startsWith("/sdk/")) {
      const file = normalize(join(sdkDist, url.pathname.slice("/sdk/".length)));
      if (file.startsWith(sdkDist) && existsSync(file)) {
        const type = extname(file) === ".js" ? "text/javascript" : "application/json";
        res.writeHead(200, { "content-type": type }).end(readFileSync(file));
        return;
      }
    }
    res.writeHead(404).end();
  });
  return new Promise((r) => server.listen(0, "127.0.0.1", () => r(server)));
}

/**
 * A private bin dir: the built binaries (hard links, else copies) plus a stub
 * `pedelec-agent`, because ProviderService looks for the agent beside its own
 * executable first. Made beside the build dir so hard links work.
 */
function privateBinDir(buildDir) {
  let dir;
  try {
    dir = mkdtempSync(join(dirname(buildDir), ".e2e-bin-"));
  } catch {
    dir = mkdtempSync(join(tmpdir(), "pdl-e2e-bin-"));
  }
  for (const name of readdirSync(buildDir)) {
    if (!(name === "pedelecd" || name.startsWith("pedelec-")) || name.includes(".") || name === "pedelec-agent") continue;
    try {
      linkSync(join(buildDir, name), join(dir, name));
    } catch {
      copyFileSync(join(buildDir, name), join(dir, name));
      chmodSync(join(dir, name), 0o755);
    }
  }
  // The Ollama provider's agent, scripted: on "@@tool" it calls the page's
  // get_current_page tool through pedelec-cli and reports the answer.
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

/** Pids of the native hosts this test's Chromium started (told apart by their runtime dir). */
function ourHosts(runtimeDir) {
  const pids = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0")[0];
      if (!cmd.endsWith("/pedelec-native-host")) continue;
      if (readFileSync(`/proc/${entry}/environ`, "utf8").split("\0").includes(`PEDELEC_RUNTIME_DIR=${runtimeDir}`)) pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

async function until(what, check, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function withTimeout(promise, what, ms = STEP_MS) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))),
  ]);
}

test("a page approves, lists providers, creates and ends a session through the real host", { timeout: 180_000 }, async (t) => {
  for (const bin of ["pedelec-native-host", "pedelecd", "pedelec-cli"]) {
    assert.ok(existsSync(join(buildDir, bin)), `${bin} missing in ${buildDir}: cargo build --workspace --bins`);
  }
  const binDir = privateBinDir(buildDir);
  assert.ok(existsSync(join(extensionDir, "manifest.json")), "extension not built");
  assert.ok(existsSync(join(sdkDist, "index.js")), "sdk not built");

  // Short base: the runtime dir holds Unix sockets (path length limit).
  const base = mkdtempSync(join(tmpdir(), "pdl-e2e-"));
  const env = {
    PEDELEC_RUNTIME_DIR: join(base, "run"),
    PEDELEC_HOME: join(base, "home"),
    HOME: join(base, "user"),
    PEDELEC_BIN_DIR: binDir,
    PEDELEC_LOG: "info",
  };
  for (const d of [env.PEDELEC_HOME, env.HOME]) mkdirSync(d, { recursive: true });
  const profile = join(base, "profile");
  // Registered the one way there is (docs/install.md): `pedelecd install` into the temp HOME.
  const installed = spawnSync(join(binDir, "pedelecd"), ["install", "--no-login-start", "--user-data-dir", profile], { env: { ...process.env, ...env }, encoding: "utf8", timeout: 60_000 });
  assert.equal(installed.status, 0, `pedelecd install: ${installed.stdout}${installed.stderr}`);

  const server = await serve();
  const origin = `http://127.0.0.1:${server.address().port}`;
  let context;
  t.after(async () => {
    await context?.close().catch(() => undefined);
    server.close();
    // The host started pedelecd detached (setsid): stop it by its own command.
    spawnSync(join(binDir, "pedelecd"), ["stop"], { env: { ...process.env, ...env }, stdio: "inherit", timeout: 20_000 });
    if (process.env.PEDELEC_E2E_KEEP) console.log(`kept ${base} ${binDir}`);
    else for (const d of [base, binDir]) rmSync(d, { recursive: true, force: true });
  });

  context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    env: { ...process.env, ...env },
    ignoreDefaultArgs: ["--disable-extensions"],
    args: [
      "--no-sandbox",
      "--disable-gpu",
      `--disable-extensions-except=${extensionDir}`,
      `--load-extension=${extensionDir}`,
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  const worker = context.serviceWorkers()[0] ?? (await withTimeout(context.waitForEvent("serviceworker"), "extension service worker"));
  assert.equal(new URL(worker.url()).host, EXTENSION_ID, "the manifest key gives the fixed extension id");

  const page = await context.newPage();
  page.on("console", (m) => console.log(`[page] ${m.type()}: ${m.text()}`));
  await page.goto(`${origin}/`);
  await page.waitForFunction(() => document.getElementById("status")?.textContent === "ready");

  const status = await withTimeout(page.evaluate(async () => new window.Pedelec().getApprovalStatus()), "getApprovalStatus");
  assert.deepEqual({ ...status, appConnected: typeof status.appConnected }, { installed: true, approved: false, origin, appConnected: "boolean" });

  // The first request that needs approval opens the approval UI. Headless
  // Chromium opens chrome.action.openPopup()'s popup as a DevTools target that
  // Playwright does not list as a page (TESTING.md §1): see that it opened, then
  // approve in the same popup page opened the way a user opens it from the
  // toolbar. (A chrome.windows.create fallback window would be a normal page.)
  const cdp = await context.newCDPSession(page);
  const popupUrl = `chrome-extension://${EXTENSION_ID}/popup.html`;
  await page.evaluate(() => {
    window.pedelec = new window.Pedelec();
    window.providersPromise = window.pedelec.listProviders().then(
      (v) => ({ ok: v }),
      (e) => ({ error: { code: e.code, message: e.message } }),
    );
  });
  const opened = await withTimeout(
    (async () => {
      for (;;) {
        const { targetInfos } = await cdp.send("Target.getTargets");
        const ui = targetInfos.find((i) => i.url.startsWith(popupUrl));
        if (ui) return ui;
        await new Promise((r) => setTimeout(r, 100));
      }
    })(),
    "the extension opening its approval UI",
  );
  console.log(`approval UI opened as a ${opened.type} target: ${opened.url}`);
  const popup = context.pages().find((p) => p.url().startsWith(popupUrl)) ?? (await context.newPage());
  if (!popup.url().startsWith(popupUrl)) await popup.goto(popupUrl);
  const approve = popup.locator(`#pending .row[data-origin="${origin}"] button[data-action="approve"]`);
  await withTimeout(approve.waitFor(), "approve button");
  await approve.click();

  const providers = await withTimeout(page.evaluate(() => window.providersPromise), "listProviders");
  assert.ok(providers.ok, `listProviders failed: ${JSON.stringify(providers.error)}`);
  assert.deepEqual(providers.ok.map((p) => p.code).sort(), ["antigravity", "claude", "codex", "cursor", "ollama", "opencode"]);
  for (const p of providers.ok) assert.deepEqual(Object.keys(p).sort(), ["available", "code", "error", "isDefault", "name"]);

  const after = await page.evaluate(() => window.pedelec.getApprovalStatus());
  assert.deepEqual(after, { installed: true, approved: true, origin, appConnected: true });

  // pedelecd runs now (the host started it for listProviders): give the Ollama
  // provider a model so the scripted agent can run a turn.
  const cli = spawnSync(join(binDir, "pedelec-cli"), ["settings", "set", "profile", "ollama", "default", "--model", "stub-model"], {
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: 20_000,
  });
  assert.equal(cli.status, 0, cli.stderr);

  const created = await withTimeout(
    page.evaluate(async () => {
      try {
        const session = await window.pedelec.createSession({
          provider: "codex",
          skills: {
            guidance: "Use get_current_page for page context.",
            tools: [
              window.defineTool({
                name: "get_current_page",
                description: "Read the page title and URL.",
                argsSchema: { type: "object", properties: {}, required: [] },
                handler: () => ({ url: location.href, title: document.title }),
              }),
            ],
          },
        });
        window.session = session;
        window.endedEvents = [];
        session.onEnded((ctx) => window.endedEvents.push(ctx.reason));
        return { sessionId: session.sessionId, provider: session.provider, effortLevel: session.effortLevel, status: session.getStatus() };
      } catch (e) {
        return { error: { code: e.code, message: e.message } };
      }
    }),
    "createSession",
  );
  assert.ok(!created.error, `createSession failed: ${JSON.stringify(created.error)}`);
  assert.match(created.sessionId, /^thr_/);
  assert.deepEqual({ provider: created.provider, effortLevel: created.effortLevel, status: created.status }, { provider: "codex", effortLevel: "default", status: "idle" });

  // A second session whose agent (the scripted pedelec-agent) calls the page's tool.
  const tooled = await withTimeout(
    page.evaluate(async () => {
      const s = await window.pedelec.createSession({
        provider: "ollama",
        skills: {
          guidance: "Use get_current_page for page context.",
          tools: [
            window.defineTool({
              name: "get_current_page",
              description: "Read the page title and URL.",
              argsSchema: { type: "object", properties: {}, required: [] },
              handler: (_args, ctx) => {
                window.toolCalls = (window.toolCalls ?? 0) + 1;
                return { url: location.href, title: document.title, tool: ctx.tool };
              },
            }),
          ],
        },
      });
      window.tooled = s;
      window.turn = { chats: [], deltas: [], statuses: [], errors: [] };
      s.onChat((t, ctx) => window.turn.chats.push([t, typeof ctx.operationId]));
      s.onChatDelta((d) => window.turn.deltas.push(d));
      s.onStatus((st) => window.turn.statuses.push(st));
      s.onError((e) => window.turn.errors.push(e.code));
      return s.sessionId;
    }),
    "createSession(ollama)",
  );
  assert.match(tooled, /^thr_/);

  // The popup lists the live session under its origin.
  await withTimeout(popup.locator("#sessions li", { hasText: created.sessionId }).waitFor(), "session in popup");
  assert.match(await popup.locator("#host-state").textContent(), /Native host 0\.1\.0 \(protocol 2\)/);

  // The native host dies: the extension reconnects, says hello and re-attaches;
  // the page's handle stays attached and usable (no EXTENSION_DISCONNECTED).
  const [hostPid] = ourHosts(env.PEDELEC_RUNTIME_DIR);
  assert.ok(hostPid, "the native host Chromium started");
  process.kill(hostPid, "SIGKILL");
  await until("a new native host", () => ourHosts(env.PEDELEC_RUNTIME_DIR).find((p) => p !== hostPid));
  await until("the worker reconnected", () => worker.evaluate(() => globalThis.pedelecHub.native.state.connected));
  const afterRestart = await withTimeout(
    page.evaluate(async () => {
      const errors = [];
      window.session.onError((e) => errors.push(e.code));
      await window.session.cancel(); // a real request on the re-attached session
      return { detached: window.session.detached, status: window.session.getStatus(), errors };
    }),
    "the session after a host restart",
  );
  assert.deepEqual(afterRestart, { detached: false, status: "idle", errors: [] });

  // A turn with a tool call on the re-attached stream: the page's handler
  // answers, sendText resolves when the operation completes.
  const turn = await withTimeout(
    page.evaluate(async () => {
      await window.tooled.sendText("@@tool: what page is this?");
      return { ...window.turn, toolCalls: window.toolCalls, usage: window.tooled.usage.totalTokens, status: window.tooled.getStatus() };
    }),
    "a turn with a tool call",
  );
  assert.equal(turn.toolCalls, 1);
  assert.equal(turn.chats.length, 1, JSON.stringify(turn));
  assert.match(turn.chats[0][0], /^Page: \{"ok":true,"result":\{.*"title":"Pedelec smoke".*\}\}$/);
  assert.equal(turn.chats[0][1], "string", "chat context carries the operation id");
  assert.deepEqual(turn.deltas, ["Page: "]);
  assert.deepEqual(turn.errors, []);
  assert.equal(turn.usage, 15);
  assert.equal(turn.status, "idle");
  assert.ok(turn.statuses.includes("running") && turn.statuses.includes("waiting_tool_result"), JSON.stringify(turn.statuses));

  const ended = await withTimeout(
    page.evaluate(async () => {
      await window.session.end();
      await window.session.end(); // idempotent
      await new Promise((r) => setTimeout(r, 300));
      return { status: window.session.getStatus(), endedEvents: window.endedEvents };
    }),
    "end",
  );
  assert.deepEqual(ended, { status: "ended", endedEvents: ["requested"] });

  // autoEndOnDisconnect (the default): closing the last page of a session ends it.
  const other = await context.newPage();
  await other.goto(`${origin}/`);
  await other.waitForFunction(() => document.getElementById("status")?.textContent === "ready");
  const pageScoped = await withTimeout(other.evaluate(async () => (await new window.Pedelec().createSession({ provider: "codex" })).sessionId), "second session");
  await other.close();
  // The worker drops the session when the port of the closed page goes (and sends end then).
  await until("the worker saw the page go", () =>
    worker.evaluate((id) => !globalThis.pedelecHub.state().sessions.some((x) => x.sessionId === id), pageScoped),
  );
  const autoEnded = await until("the closed page's session ended", () =>
    page.evaluate(async (id) => {
      const s = await window.pedelec.resumeSession(id);
      return s.getStatus() === "ended" ? s.getStatus() : null;
    }, pageScoped),
  );
  assert.equal(autoEnded, "ended");

  // Revoking in the popup detaches the page's route.
  await popup.locator(`#approved .row[data-origin="${origin}"] button[data-action="revoke"]`).click();
  const revoked = await withTimeout(
    page.evaluate(async () => {
      for (let i = 0; i < 50 && !window.session.detached; i++) await new Promise((r) => setTimeout(r, 100));
      const status = await window.pedelec.getApprovalStatus();
      return { detached: window.session.detached, approved: status.approved };
    }),
    "revoke",
  );
  assert.deepEqual(revoked, { detached: true, approved: false });
});
