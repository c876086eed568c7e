// The browser smoke test: a page on 127.0.0.1 served here that imports the
// built SDK directly, the unpacked built extension in Debian's Chromium, the
// real pedelec-native-host registered in the temp profile by `pedelecd
// install`, and the real pedelecd (started by the host, as in production) on
// temp dirs. Approve in the popup, listProviders, createSession, a native host
// restart under a live session, end, auto-end when the last page of a session
// closes, revoke. The helpers are harness.mjs's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  answerPrompt,
  buildDir,
  checkBuilt,
  extensionWorker,
  hostPids,
  installHost,
  launchBrowser,
  privateBinDir,
  sdkDist,
  servePages,
  until,
  withTimeout,
} from "./harness.mjs";

const PAGE = `<!doctype html><html><head><title>Pedelec smoke</title></head><body>
<p id="status">loading</p>
<script type="module">
  import { Pedelec, defineTool } from "/sdk/index.js";
  window.Pedelec = Pedelec;
  window.defineTool = defineTool;
  document.getElementById("status").textContent = "ready";
</script></body></html>`;

test("a page approves, lists providers, creates and ends a session through the real host", { timeout: 180_000 }, async (t) => {
  checkBuilt({ demo: false, agents: false, sdk: true });
  const binDir = privateBinDir(buildDir);

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
  installHost(binDir, env, profile);

  const site = await servePages({ root: sdkDist, under: "/sdk/", index: PAGE });
  const origin = site.origin;
  let context;
  t.after(async () => {
    await context?.close().catch(() => undefined);
    site.close();
    // The host started pedelecd detached (setsid): stop it by its own command.
    spawnSync(join(binDir, "pedelecd"), ["stop"], { env: { ...process.env, ...env }, stdio: "inherit", timeout: 20_000 });
    if (process.env.PEDELEC_E2E_KEEP) console.log(`kept ${base} ${binDir}`);
    else for (const d of [base, binDir]) rmSync(d, { recursive: true, force: true });
  });

  context = await launchBrowser(profile, { ...process.env, ...env });
  const worker = await extensionWorker(context);

  const page = await context.newPage();
  page.on("console", (m) => console.log(`[page] ${m.type()}: ${m.text()}`));
  await page.goto(`${origin}/`);
  await page.waitForFunction(() => document.getElementById("status")?.textContent === "ready");

  const status = await withTimeout(page.evaluate(async () => new window.Pedelec().getApprovalStatus()), "getApprovalStatus");
  assert.deepEqual({ ...status, appConnected: typeof status.appConnected }, { installed: true, approved: false, origin, appConnected: "boolean" });

  // The first request that needs approval opens the approval UI; approve it in
  // the popup page (harness.mjs's answerPrompt says how headless Chromium shows it),
  // with the agents this test uses.
  await page.evaluate(() => {
    window.pedelec = new window.Pedelec();
    window.providersPromise = window.pedelec.listProviders().then(
      (v) => ({ ok: v }),
      (e) => ({ error: { code: e.code, message: e.message } }),
    );
  });
  const popup = await answerPrompt({ context }, page, origin, "approve", { access: "edit", providers: ["codex", "ollama"] });

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

  // The popup lists the site with its two live sessions.
  await withTimeout(popup.locator(`#sessions .row[data-origin="${origin}"]`, { hasText: "2 sessions" }).waitFor(), "the site's sessions in the popup");
  assert.equal(await popup.locator("#host-state").getAttribute("data-state"), "running");
  assert.match(await popup.locator("#host").textContent(), /Pedelec is running on this computer.*Version 0\.1\.0\./);

  // The native host dies: the extension reconnects, says hello and re-attaches;
  // the page's handle stays attached and usable (no EXTENSION_DISCONNECTED).
  const [hostPid] = hostPids(env.PEDELEC_RUNTIME_DIR);
  assert.ok(hostPid, "the native host Chromium started");
  process.kill(hostPid, "SIGKILL");
  await until("a new native host", () => hostPids(env.PEDELEC_RUNTIME_DIR).find((p) => p !== hostPid));
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
  await worker.evaluate(() => globalThis.pedelecHops.reset(true));
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
  // The worker's per-hop counters saw the turn: every message it posted toward the page came from a host frame.
  const hops = await worker.evaluate(() => globalThis.pedelecHops.snapshot());
  const toPage = hops[`page ${origin}`];
  assert.ok(hops.host && toPage, JSON.stringify(hops));
  assert.ok(hops.host.messages >= toPage.messages && toPage.messages > 0, JSON.stringify(hops));
  assert.ok(hops.host.chars > 0 && toPage.chars > 0, JSON.stringify(hops));

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

  // Revoking in the popup ends the site's sessions, also one kept after its page goes; the page sees it end.
  await withTimeout(
    page.evaluate(async () => {
      window.kept = await window.pedelec.createSession({ provider: "codex", autoEndOnDisconnect: false });
    }),
    "a kept session",
  );
  await popup.locator(`#sites .row[data-origin="${origin}"] button[data-action="revoke"]`).click();
  const revoked = await withTimeout(
    page.evaluate(async () => {
      for (let i = 0; i < 100 && window.kept.getStatus() !== "ended"; i++) await new Promise((r) => setTimeout(r, 100));
      const status = await window.pedelec.getApprovalStatus();
      return { kept: window.kept.getStatus(), approved: status.approved };
    }),
    "revoke",
  );
  assert.deepEqual(revoked, { kept: "ended", approved: false });
});
