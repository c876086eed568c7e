// The extension's options page (its settings page) in Debian's Chromium with
// the unpacked extension, the real native host and pedelecd on temp dirs
// (harness.mjs): what the page saves is what the real
// `pedelec-cli settings get` reads back; effort is a choice of the CLI's
// values (list_providers' effortValues); the models a CLI lists are offered
// (ProviderService asks the Ollama server for its list), and a
// default Ollama without a model is refused before anything is sent; a save
// says in words what changed; keys are only ever shown masked; a web page
// cannot reach the settings through the worker.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { checkBuilt, docShot, EXTENSION_ID, OPTIONS_PORT_NAME, POPUP_URL, SDK_PORT_NAME, servePages, shot, startMock, startWorld, STEP_MS } from "./harness.mjs";

const OPTIONS_URL = `chrome-extension://${EXTENSION_ID}/options.html`;
const OLLAMA_KEY = "ollama-secret-key-1234";
const TAVILY_KEY = "tvly-typed-in-the-page-5678";

let mock;
let site;
/** A stand-in Ollama server: its /api/tags lists two models (what `ollama list` shows). */
let ollama;
before(async () => {
  checkBuilt();
  mock = await startMock();
  site = await servePages();
  const server = createServer((req, res) => {
    if (req.url === "/api/tags") {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ models: [{ name: "llama3.2:latest", model: "llama3.2:latest" }, { name: "qwen3:32b", model: "qwen3:32b" }] }));
    } else res.writeHead(404).end();
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  ollama = { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
});
after(() => {
  mock?.stop();
  site?.close();
  ollama?.close();
});

/** `pedelec-cli settings get [extra]`, parsed. */
function settingsGet(w, ...extra) {
  const r = w.cli("settings", "get", ...extra);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

/** Waits for the page's status line to reach `state`; returns its text. */
async function status(page, state) {
  await page.waitForFunction(
    (s) => {
      const el = document.getElementById("status");
      return el?.dataset.state === s || el?.dataset.state === "error";
    },
    state,
    { timeout: STEP_MS },
  );
  const text = await page.textContent("#status");
  assert.equal(await page.getAttribute("#status", "data-state"), state, text ?? "");
  return text;
}

test("options page: change the default provider, Ollama's models (offered from its list), an effort and the keys; pedelec-cli settings get sees them; keys stay masked", { timeout: 240_000 }, async (t) => {
  const w = await startWorld(t, mock);
  const set = w.cli("settings", "set", "ollama-api-key", OLLAMA_KEY);
  assert.equal(set.status, 0, set.stderr);
  const address = w.cli("settings", "set", "ollama-endpoint", ollama.url);
  assert.equal(address.status, 0, address.stderr);
  const before = settingsGet(w);
  assert.equal(before.defaultProvider ?? null, null, "no default provider to start with");

  const page = await w.context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") console.log(`[options] ${m.text()}`);
  });
  await page.goto(OPTIONS_URL);
  await status(page, "unchanged");

  // Every provider has a row with its availability; the harness puts only codex
  // and claude on PATH, so the others say why they are unavailable (list_providers' error).
  const rows = await page.$$eval(".provider", (cards) =>
    cards.map((c) => ({ code: c.dataset.provider, available: c.querySelector(".availability").dataset.available, text: c.querySelector(".availability").textContent })),
  );
  assert.deepEqual(rows.map((r) => r.code).sort(), ["antigravity", "claude", "codex", "cursor", "ollama", "opencode"]);
  const listed = JSON.parse(w.cli("providers", "--json").stdout);
  assert.equal(listed.length, rows.length);
  for (const row of rows) {
    const info = listed.find((p) => p.code === row.code);
    assert.equal(row.text, info.available ? "available" : `unavailable: ${info.error}`, row.code);
    if (row.code === "codex" || row.code === "claude") assert.equal(row.available, "true", row.code);
    if (row.code === "cursor" || row.code === "antigravity") assert.equal(row.available, "false", row.code);
  }
  // The profile pedelecd's harness set shows in its row.
  assert.equal(await page.inputValue('.provider[data-provider="claude"] tr[data-level="default"] [data-field="model"]'), "claude-sonnet-4-5");
  // The stored Ollama key only as its mask.
  assert.equal(await page.textContent("#ollama-key .masked"), "••••1234");
  assert.equal(await page.textContent("#tavily-key .masked"), "not set");
  assert.ok(!(await page.content()).includes(OLLAMA_KEY), "the key is not in the page");

  // Effort is a choice of the CLI's own values; Ollama has no effort setting.
  const effort = (code, level) => `.provider[data-provider="${code}"] tr[data-level="${level}"] [data-field="effort"]`;
  assert.deepEqual(await page.$$eval(`${effort("claude", "high")} option`, (os) => os.map((o) => o.value)), ["", "low", "medium", "high", "xhigh", "max"]);
  assert.equal(await page.isDisabled(effort("ollama", "high")), true);

  // Ollama as the default agent without a model is refused in the page, nothing sent.
  await page.check('input[name="default-provider"][value="ollama"]');
  await page.click("#save");
  await page.waitForSelector('#status[data-state="error"]', { timeout: STEP_MS });
  assert.equal(await page.getAttribute("#status", "data-code"), "MODEL_REQUIRED");
  assert.equal(await page.textContent("#status"), "Not saved: Ollama needs a model for its default level before it can be the default agent.");
  assert.equal(await page.getAttribute('.provider[data-provider="ollama"] tr[data-level="default"] [data-field="model"]', "aria-invalid"), "true");
  assert.equal(settingsGet(w).defaultProvider ?? null, null, "nothing was saved");

  // Ollama's models are what ProviderService listed from the Ollama server at
  // the saved address (list_providers' models; the page asks again while the
  // first listing runs).
  const ollamaNote = '.provider[data-provider="ollama"] .models-note';
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("2 models"), ollamaNote, { timeout: STEP_MS });
  assert.equal(await page.textContent(ollamaNote), "2 models listed by Ollama, offered as you type.");
  assert.deepEqual(await page.$$eval("#models-ollama option", (os) => os.map((o) => o.value)), ["llama3.2:latest", "qwen3:32b"]);
  assert.equal(await page.getAttribute('.provider[data-provider="ollama"] tr[data-level="default"] [data-field="model"]', "list"), "models-ollama");

  // Edit: two Ollama levels, OpenCode's high effort, a Tavily key typed in, the Ollama key cleared.
  const ollamaCard = '.provider[data-provider="ollama"]';
  await page.fill(`${ollamaCard} tr[data-level="default"] [data-field="model"]`, "llama3.2:latest");
  await page.fill(`${ollamaCard} tr[data-level="high"] [data-field="model"]`, "qwen3:32b");
  await page.selectOption(effort("opencode", "high"), "max");
  await page.click('#tavily-key button[data-action="replace"]');
  await page.fill("#tavily-key .new-key", TAVILY_KEY);
  assert.equal(await page.getAttribute("#tavily-key .new-key", "type"), "password", "a key is typed into a password field");
  await page.click('#ollama-key button[data-action="clear"]');
  assert.equal(await page.textContent("#ollama-key .masked"), "will be cleared");
  await page.click("#save");
  const saved = await status(page, "saved");
  assert.equal(
    saved,
    "Saved: the default agent is now Ollama; OpenCode's and Ollama's effort levels; Ollama key removed; the new web search key.",
  );

  // The real CLI reads what the page saved (keys masked unless asked).
  const after = settingsGet(w);
  assert.equal(after.defaultProvider, "ollama");
  assert.deepEqual(after.profiles.ollama.levels, { default: { model: "llama3.2:latest", effort: "" }, high: { model: "qwen3:32b", effort: "" } });
  assert.deepEqual(after.profiles.opencode.levels, { high: { model: "", effort: "max" } });
  assert.deepEqual(after.profiles.claude, before.profiles.claude, "another provider's profiles are kept");
  assert.equal(after.ollamaEndpoint, ollama.url);
  assert.deepEqual(after.tavilyApiKey, { set: true, masked: "••••5678" });
  assert.deepEqual(after.ollamaApiKey, { set: false, masked: "" });
  const secrets = settingsGet(w, "--show-secrets");
  assert.equal(secrets.tavilyApiKey, TAVILY_KEY);
  assert.equal(secrets.ollamaApiKey, "");

  // The page shows the stored state, the new key masked and gone from the form.
  assert.equal(await page.textContent("#tavily-key .masked"), "••••5678");
  assert.equal(await page.$("#tavily-key .new-key"), null);
  assert.equal(await page.textContent("#ollama-key .masked"), "not set");
  assert.equal(await page.isChecked('input[name="default-provider"][value="ollama"]'), true);
  assert.ok(!(await page.content()).includes(TAVILY_KEY), "the key is not in the page after saving");

  // The screenshot for the docs (docs/img/settings-page.png is this file).
  await page.setViewportSize({ width: 1100, height: 800 });
  await docShot(page, "settings-page", { fullPage: true });

  // A change made elsewhere meanwhile (pedelec-cli) is kept when the page saves another field.
  const cli = w.cli("settings", "set", "profile", "codex", "high", "--model", "gpt-5.5");
  assert.equal(cli.status, 0, cli.stderr);
  await page.check('input[name="default-provider"][value="claude"]');
  await page.click("#save");
  await status(page, "saved");
  const merged = settingsGet(w);
  assert.equal(merged.defaultProvider, "claude");
  assert.equal(merged.profiles.codex.levels.high.model, "gpt-5.5", "the page did not write back what it had read");

  // Invalid input: ProviderService's error is shown; nothing changes.
  await page.fill("#ollama-endpoint", "ftp://nope");
  await page.click("#save");
  await page.waitForSelector('#status[data-state="error"]', { timeout: STEP_MS });
  assert.equal(await page.getAttribute("#status", "data-code"), "INVALID_INPUT");
  assert.match(await page.textContent("#status"), /^Not saved: .* \(INVALID_INPUT\)$/);
  assert.equal(settingsGet(w).ollamaEndpoint, ollama.url);
  await page.click("#revert");
  assert.equal(await page.inputValue("#ollama-endpoint"), ollama.url);

  // The popup links to the page (Chrome focuses an options tab already open, so none is).
  await page.close();
  const popup = await w.context.newPage();
  await popup.goto(POPUP_URL);
  const opened = w.context.waitForEvent("page", { predicate: (p) => p.url() === OPTIONS_URL, timeout: STEP_MS });
  await popup.click("#open-settings");
  await opened;
});

test("a web page cannot reach the settings: the options port is refused, the bridge has no settings methods", { timeout: 240_000 }, async (t) => {
  const w = await startWorld(t, mock);
  const set = w.cli("settings", "set", "tavily-api-key", "tvly-secret-key-5678");
  assert.equal(set.status, 0, set.stderr);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  // 127.0.0.1 pages may connect to the worker directly (externally_connectable):
  // the options port name does not make it the options page.
  const outcome = await page.evaluate(
    ({ id, name }) =>
      new Promise((resolve) => {
        const port = chrome.runtime.connect(id, { name });
        const got = [];
        port.onMessage.addListener((m) => got.push(m));
        port.onDisconnect.addListener(() => resolve({ disconnected: true, got }));
        for (const [requestId, method, params] of [
          [1, "get_full_settings", {}],
          [2, "update_settings", { tavilyApiKey: { action: "clear" } }],
        ]) {
          try {
            port.postMessage({ kind: "request", requestId, method, params });
          } catch {
            // already cut off
          }
        }
        setTimeout(() => resolve({ disconnected: false, got }), 10_000);
      }),
    { id: EXTENSION_ID, name: OPTIONS_PORT_NAME },
  );
  assert.deepEqual(outcome, { disconnected: true, got: [] });
  // A route of its own (as the SDK's, same port name): no such bridge methods.
  const replies = await page.evaluate(
    ({ id, name }) =>
      new Promise((resolve) => {
        const port = chrome.runtime.connect(id, { name });
        const got = [];
        port.onMessage.addListener((m) => {
          if (m.kind !== "response") return;
          got.push({ requestId: m.requestId, ok: m.ok, code: m.error?.code });
          if (got.length === 2) resolve(got.sort((a, b) => a.requestId - b.requestId));
        });
        port.postMessage({ kind: "request", requestId: 1, call: { method: "get_full_settings", params: {} } });
        port.postMessage({ kind: "request", requestId: 2, call: { method: "update_settings", params: { tavilyApiKey: { action: "clear" } } } });
      }),
    { id: EXTENSION_ID, name: SDK_PORT_NAME },
  );
  assert.deepEqual(replies, [
    { requestId: 1, ok: false, code: "SDK_PROTOCOL_ERROR" },
    { requestId: 2, ok: false, code: "SDK_PROTOCOL_ERROR" },
  ]);
  // Whatever the page tried, the key is still set.
  assert.deepEqual(settingsGet(w).tavilyApiKey, { set: true, masked: "••••5678" });
  await shot(page, "settings-web-page-refused");
});
