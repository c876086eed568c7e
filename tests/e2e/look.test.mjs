// What a person sees, in Debian's Chromium with the unpacked extension, the
// real native host, pedelecd on temp dirs and the real codex CLI against the
// mock model server (harness.mjs): the popup in plain words (a site's sessions,
// End, Pedelec running — and, before Pedelec is installed, the command that
// installs it), the action badge turning amber while an agent waits for the
// page, and the demo rendering the agent's Markdown without letting HTML
// through, at the effort level chosen. The screenshots the docs show
// (docs/img) are taken here: docShot, PEDELEC_E2E_DOC_SHOTS=1 copies them.
// And the complete example of the README and docs/sdk-extension.md, run as written.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { checkBuilt, codexTool, docShot, inPage, POPUP_URL, repo, sdkDist, servePages, startWorld, STEP_MS, suiteParts, until } from "./harness.mjs";

let mock;
let site;
suiteParts({ sites: 1 }, (m, a) => ([mock, site] = [m, a]));

const T = { timeout: 240_000 };

/**
 * Opens popup.html as a page the size of the toolbar popup. `overTab`: the id of
 * the tab it was opened over (the toolbar popup asks chrome.tabs for the active
 * tab, which for a popup opened as a page is itself).
 */
async function openPopup(w, overTab = null) {
  const popup = await w.context.newPage();
  await popup.setViewportSize({ width: 400, height: 600 });
  if (overTab !== null) await popup.addInitScript((id) => (chrome.tabs.query = async () => [{ id }]), overTab);
  await popup.goto(POPUP_URL);
  return popup;
}

/** The id of the tab showing `origin`. */
async function tabOf(w, origin) {
  const worker = await w.currentWorker();
  return worker.evaluate(async (o) => (await chrome.tabs.query({})).find((tab) => tab.url?.startsWith(o))?.id ?? null, origin);
}

/** What the action icon shows on each tab: badge text, colour and title. */
async function actionLooks(w) {
  const worker = await w.currentWorker();
  return worker.evaluate(async () =>
    Promise.all(
      (await chrome.tabs.query({})).map(async (tab) => ({
        url: tab.url,
        text: await chrome.action.getBadgeText({ tabId: tab.id }),
        color: await chrome.action.getBadgeBackgroundColor({ tabId: tab.id }),
        title: await chrome.action.getTitle({ tabId: tab.id }),
      })),
    ),
  );
}

test("the popup says in plain words what a site runs; End ends its sessions and keeps its permission; Pedelec is running", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script({ mode: "reply", text: "A slow answer arriving in many small pieces so the turn runs for a while.", chunks: 30, delay_ms: 300 });
  const ids = await inPage(page, async (d) => {
    const running = await d.client.createSession({ provider: "codex" });
    const idle = await d.client.createSession({ provider: "codex" });
    window.h = { running, idle, turn: running.sendText("Tell me slowly").catch((e) => e.code) };
    return [running.sessionId, idle.sessionId];
  });
  assert.ok(ids.ok, JSON.stringify(ids));
  await page.waitForFunction(() => window.h.running.getStatus() === "running", null, { timeout: STEP_MS });

  const popup = await openPopup(w, await tabOf(w, site.origin));
  // The site of the tab it was opened over: its permission and its sessions, in words.
  const here = popup.locator("#this-site");
  await here.waitFor({ timeout: STEP_MS });
  assert.equal(await here.locator(".chip").first().textContent(), "Allowed");
  assert.equal(await here.locator("#this-site-state").textContent(), "Edit files in its workspace. Agents: codex, claude.");
  const row = popup.locator(`#sessions .row[data-origin="${site.origin}"]`);
  await row.waitFor({ timeout: STEP_MS });
  await until("the running session counted", async () => ((await row.textContent()).includes("2 sessions: 1 working") ? "yes" : null));
  assert.match(await here.textContent(), /2 sessions: 1 working/);
  assert.deepEqual(await here.locator("button").evaluateAll((bs) => bs.map((b) => b.dataset.action)), ["end", "revoke"]);
  assert.equal(await row.locator(".chip").textContent(), "working");
  const allowed = popup.locator(`#sites .row[data-origin="${site.origin}"]`);
  assert.match(await allowed.textContent(), /Edit files in its workspace\. Agents: codex, claude\./);
  await until("Pedelec running", async () => ((await popup.locator("#host-state").getAttribute("data-state")) === "running" ? "yes" : null));
  assert.match(await popup.locator("#host").textContent(), /Pedelec is running on this computer/);
  // No field names, ids or code words in what the popup says.
  assert.doesNotMatch(await popup.locator("#root").textContent(), /Native host|Core:|protocol|thr_/);
  await docShot(popup, "popup", { fullPage: true });

  await row.locator('button[data-action="end"]').click();
  await page.waitForFunction(() => window.h.running.getStatus() === "ended" && window.h.idle.getStatus() === "ended", null, { timeout: STEP_MS });
  assert.equal((await inPage(page, (d) => d.client.getApprovalStatus())).ok.approved, true, "End keeps the site's permission");
  await popup.locator("#sessions").getByText("No site has a session open.").waitFor({ timeout: STEP_MS });
});

test("the popup before Pedelec is installed: it says so and gives the command that installs it", T, async (t) => {
  const w = await startWorld(t, mock, { registerHost: false });
  const popup = await openPopup(w);
  const host = popup.locator('#host-state[data-state="not_installed"]');
  await host.waitFor({ timeout: STEP_MS });
  assert.equal(await host.locator("strong").textContent(), "Pedelec is not installed on this computer");
  assert.deepEqual(await popup.locator("#host .command code").allTextContents(), ["./start.sh", "./build-release.sh && target/release/pedelecd install"]);
  await docShot(popup, "popup-not-installed", { fullPage: true });
  // A page learns the same through the SDK: the extension answers, the app does not.
  const page = await w.openDemo(site.origin);
  assert.deepEqual((await inPage(page, (d) => d.client.getApprovalStatus())).ok, { installed: true, approved: false, origin: site.origin, appConnected: false });
});

test("the badge is amber while an agent waits for the page's tool, blue while it works; the icon's title says which", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script(codexTool("slow_lookup", {}, "The page said: {output}"));
  const started = await inPage(page, async (d) => {
    const s = await d.client.createSession({
      provider: "codex",
      skills: { tools: [d.defineTool({ name: "slow_lookup", description: "Looks something up in the page (slowly).", argsSchema: { type: "object", properties: {} } })] },
    });
    let release;
    window.released = new Promise((r) => (release = r));
    window.release = () => release({ found: "it" });
    s.onTool("slow_lookup", () => window.released);
    window.h = { s, turn: s.sendText("Look it up").then((op) => op.outcome, (e) => e.code) };
    return s.sessionId;
  });
  assert.ok(started.ok, JSON.stringify(started));
  await page.waitForFunction(() => window.h.s.getStatus() === "waiting_tool_result", null, { timeout: STEP_MS });
  const demoTab = (looks) => looks.find((l) => l.url?.startsWith(site.origin));
  const waiting = await until("the amber badge", async () => {
    const l = demoTab(await actionLooks(w));
    return l?.text === "1" && l.color.join() === "178,107,0,255" ? l : null;
  });
  assert.equal(waiting.title, "Pedelec — 1 agent waiting for this page");

  await page.evaluate(() => window.release());
  assert.equal(await page.evaluate(() => window.h.turn), "completed");
  const done = await until("the badge cleared", async () => {
    const l = demoTab(await actionLooks(w));
    return l?.text === "" ? l : null;
  });
  assert.equal(done.title, "Pedelec");
});

test("the demo renders the agent's Markdown (HTML in it stays text) and runs the effort level chosen", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await page.waitForFunction(() => document.querySelectorAll("#provider option").length > 1, null, { timeout: STEP_MS });
  assert.deepEqual(await page.$$eval("#effort option", (os) => os.map((o) => o.value)), ["default", "low", "medium", "high"]);
  await page.selectOption("#provider", "codex");
  await page.selectOption("#effort", "high");
  await page.click("#create");
  await page.waitForFunction(() => document.getElementById("session-id")?.textContent.startsWith("thr_"), null, { timeout: STEP_MS });
  assert.equal(await page.textContent("#session-agent"), "codex · high");

  const reply = [
    "## The counter",
    "",
    "I looked at **the page**: the counter is `0` and the list is *empty*.",
    "",
    "- add 3 with `update_counter`",
    "- then read the [SDK guide](https://example.com/docs)",
    "",
    "| tool | calls |",
    "|---|---|",
    "| update_counter | 1 |",
    "",
    "```js",
    'session.onTool("update_counter", ({ delta }) => add(delta));',
    "```",
    "",
    'Not HTML: <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> [no](javascript:window.pwned=3)',
  ].join("\n");
  await mock.clear();
  await mock.script({ mode: "reply", text: reply, chunks: 12, delay_ms: 40 });
  await page.fill("#prompt", "What does the page show?");
  await page.press("#prompt", "Enter");
  const bubble = page.locator(".msg-row.assistant .bubble.done").last();
  await bubble.waitFor({ timeout: STEP_MS });

  assert.equal(await bubble.locator("h4").textContent(), "The counter");
  assert.equal(await bubble.locator("strong").first().textContent(), "the page");
  assert.deepEqual(await bubble.locator("ul > li").allTextContents(), ["add 3 with update_counter", "then read the SDK guide"]);
  assert.equal(await bubble.locator('a[href="https://example.com/docs"]').getAttribute("rel"), "noopener noreferrer");
  assert.deepEqual(await bubble.locator("table td").allTextContents(), ["update_counter", "1"]);
  assert.equal(await bubble.locator("pre code").textContent(), 'session.onTool("update_counter", ({ delta }) => add(delta));');
  // The HTML stayed text; nothing ran; the javascript: link is no link.
  assert.equal(await page.locator("#chat img, #chat script").count(), 0);
  assert.equal(await bubble.locator("a").count(), 1);
  assert.match(await bubble.textContent(), /Not HTML: <img src=x onerror="window\.pwned=1"> <script>window\.pwned=2<\/script> no/);
  assert.equal(await page.evaluate(() => window.pwned), undefined);

  // The level chosen reached codex: its request to the model asks for high reasoning effort.
  const requests = await mock.modelRequests("/v1/responses");
  assert.ok(requests.length > 0, "codex asked the model");
  assert.equal(requests.at(-1).body.reasoning?.effort, "high", JSON.stringify(requests.at(-1).body.reasoning));
  await docShot(page, "demo");
});

test("the complete example of the README and docs/sdk-extension.md runs as written: the agent changes the page's counter, the answer and the operation arrive", T, async (t) => {
  const example = (file) => /```html\n(.*?)```\n/s.exec(readFileSync(join(repo, file), "utf8"))?.[1];
  const html = example("docs/sdk-extension.md");
  assert.ok(html, "docs/sdk-extension.md has the example");
  assert.equal(example("README.md"), html, "the README shows the same example");
  // As a page without a bundler would load it: an import map names the SDK's build.
  const page = html.replace('<script type="module">', '<script type="importmap">{"imports":{"@pedelec/sdk":"/sdk/index.js"}}</script>\n<script type="module">');
  const served = await servePages({ root: sdkDist, under: "/sdk/", index: page });
  t.after(() => served.close());
  checkBuilt({ sdk: true });
  const w = await startWorld(t, mock);
  await w.approve(served.origin);
  await mock.script(codexTool("update_counter", { delta: 3 }, "Done: the counter is {output}."));
  const tab = await w.context.newPage();
  const logs = [];
  tab.on("console", (m) => logs.push(m.text()));
  await tab.goto(`${served.origin}/`);
  await tab.waitForFunction(() => document.getElementById("counter")?.value === "3", null, { timeout: STEP_MS });
  await until("the operation logged", () => logs.find((l) => /^done \S+ completed$/.test(l)));
  assert.match(await tab.textContent("#answer"), /^Done: the counter is \{"counter":3\}\.$/);
  assert.equal(await tab.textContent("#problem"), "");
});
