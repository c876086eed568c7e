// The browser suite in Firefox (docs/testing.md, "Firefox"): Debian's
// firefox-esr through its own WebDriver BiDi server, the Firefox build of the extension as a
// temporary add-on, the real native host registered for Firefox by
// `pedelecd install` in the test's HOME, pedelecd on temp dirs and the real
// codex CLI against the mock model server. The same page (the demo, the same
// SDK) as in Chromium: approve, create, stream, a page tool call, end, resume
// after a reload, a second origin refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { checkBuilt, codexTool, FIREFOX_ADDON_ID, inPage, NATIVE_HOST_NAME, startWorld, suiteParts, until } from "./harness.mjs";
import { assistantTexts, createInDemo, demoErrors, record, sendInDemo } from "./demo-steps.mjs";
import { checkFirefox } from "./firefox.mjs";

let mock;
let site;
let site2;
suiteParts({ sites: 2, check: () => (checkBuilt(), checkFirefox()) }, (m, a, b) => ([mock, site, site2] = [m, a, b]));

const T = { timeout: 300_000 };

/** Opens the demo at `origin` in the current tab; resolves when its start-up checks ran. */
async function openDemo(ff, origin) {
  await ff.goto(`${origin}/`);
  await ff.waitForFunction(() => document.body.dataset.ready === "1", null, { what: "the demo ready" });
}

/**
 * Answers `origin`'s site prompt with `action` in the extension's popup page
 * (opened in a tab, as the Chromium suite does), then closes it and switches
 * back to the tab `back`; `providers`: the agents to tick (as the user does
 * when no default agent is set).
 */
async function answerInFirefox(ff, back, origin, action, { providers = [] } = {}) {
  const popup = await ff.openExtensionPage("popup.html");
  const card = `#prompts .prompt[data-kind="site"][data-origin="${origin}"]`;
  await ff.waitForFunction((c) => !!document.querySelector(c), card, { what: "the site prompt" });
  for (const code of providers) await ff.setChecked(`${card} input[type=checkbox][value="${code}"]`, true);
  await ff.screenshot("firefox-approval-prompt", { docs: true });
  // Approve is disabled for its first second (a click-jacking guard).
  const button = `${card} button[data-action="${action}"]`;
  await ff.waitForFunction((b) => document.querySelector(b)?.disabled === false, button, { what: "the prompt's button enabled" });
  await ff.click(button);
  // Answered, the card goes; an approval window the extension opened itself closes.
  await until("the prompt answered", () => ff.evaluate((c) => !document.querySelector(c), card).catch(() => true));
  if ((await ff.windows()).includes(popup)) await ff.closeWindow();
  await ff.switchTo(back);
}

test("Firefox: approve, the settings page, create, a streamed turn, a page tool call, an asset, resume after a reload, a second origin refused, end", T, async (t) => {
  const w = await startWorld(t, mock, { firefox: true });
  const ff = w.firefox;
  assert.equal(ff.addonId, FIREFOX_ADDON_ID, "the Firefox build installs under Pedelec's add-on id");
  // Install registered the host for Firefox: the manifest (Rust's add-on id) names the add-on the build carries (the SDK's).
  const manifest = JSON.parse(readFileSync(join(w.env.HOME, `.mozilla/native-messaging-hosts/${NATIVE_HOST_NAME}.json`), "utf8"));
  assert.deepEqual(manifest.allowed_extensions, [FIREFOX_ADDON_ID]);

  // Approve: the page asks (the demo's Connect), the user answers in the extension's popup.
  await openDemo(ff, site.origin);
  const tab = await ff.window();
  const status = await inPage(ff, (d) => d.client.getApprovalStatus());
  assert.deepEqual(status.ok, { installed: true, approved: false, origin: site.origin, appConnected: true });
  await ff.click("#connect");
  await answerInFirefox(ff, tab, site.origin, "approve", { providers: ["codex"] });
  await ff.waitForFunction(() => document.getElementById("approval")?.dataset.state === "approved", null, { what: "approved" });

  // The settings page lists the grant just given.
  await ff.openExtensionPage("options.html");
  await ff.waitForFunction((o) => !!document.querySelector(`.card.site[data-origin="${o}"]`), site.origin, { what: "the site in the settings page" });
  await ff.closeWindow();
  await ff.switchTo(tab);

  // Create (kept after a reload) and stream a turn: deltas arrive in order and make the chat.
  const id = await createInDemo(ff, { provider: "codex", persistent: true });
  assert.match(id, /^thr_/);
  await record(ff);
  const reply = "Firefox streams this answer from the mock model in many small pieces, one after another.";
  await mock.script({ mode: "reply", text: reply, chunks: 12 });
  await sendInDemo(ff, "Say something long");
  const rec = await ff.evaluate(() => window.rec);
  assert.ok(rec.deltas.length > 1, `streamed in deltas (${rec.deltas.length})`);
  assert.equal(rec.deltas.join("").trim(), reply);
  assert.deepEqual(rec.chats.map((c) => c.trim()), [reply]);
  assert.deepEqual(rec.statuses.slice(-2), ["running", "idle"]);

  // A page tool call: codex calls the demo's update_counter; the DOM changes and the answer carries the result.
  await mock.script(codexTool("update_counter", { delta: 3 }, "Done. The tool said: {output}"));
  await sendInDemo(ff, "Add 3 to the counter");
  assert.equal(await ff.textContent("#counter"), "3");
  assert.equal((await assistantTexts(ff)).at(-1), 'Done. The tool said: {"counter":3,"delta":3}');
  await ff.screenshot("firefox-demo", { docs: true });

  // An asset round trip: the bytes go through the Firefox extension's transfer frame (a
  // moz-extension:// page) to AssetService and back.
  const doc = { firefox: true, items: [1, 2, 3] };
  const assets = await inPage(ff, async (d, text) => {
    const s = d.session;
    await s.uploadAsset(new Blob([text], { type: "application/json" }), { path: "/notes.json" });
    return { list: (await s.listAssets()).map((a) => [a.path, a.sizeBytes]), json: await s.readAsset("/notes.json", "json") };
  }, JSON.stringify(doc));
  assert.deepEqual(assets.ok, { list: [["/notes.json", JSON.stringify(doc).length]], json: doc }, JSON.stringify(assets));
  assert.ok(
    await ff.evaluate((o) => [...document.querySelectorAll("iframe")].some((f) => f.src.startsWith(`${o}/`)), ff.extensionOrigin),
    "the transfer frame is the Firefox extension's page",
  );

  // Reload: the demo offers the kept session; resumed, the next turn (with a tool call) works.
  await ff.reload();
  await ff.waitForFunction(() => document.body.dataset.ready === "1", null, { what: "the demo ready after the reload" });
  assert.equal(await ff.textContent("#saved-id"), id);
  await ff.click("#resume-saved");
  await ff.waitForFunction((sid) => document.getElementById("session-id")?.textContent === sid, id, { what: "resumed" });
  await mock.script(codexTool("update_counter", { delta: 4 }, "After the reload: {output}"));
  await sendInDemo(ff, "Add 4");
  assert.equal((await assistantTexts(ff)).at(-1), 'After the reload: {"counter":4,"delta":4}');

  // A second origin, approved too, cannot resume the first one's session.
  await ff.newTab();
  await openDemo(ff, site2.origin);
  const tab2 = await ff.window();
  await ff.click("#connect");
  await answerInFirefox(ff, tab2, site2.origin, "approve", { providers: ["codex"] });
  const denied = await inPage(ff, (d, sid) => d.client.resumeSession(sid), id);
  assert.equal(denied.error?.code, "THREAD_ACCESS_DENIED");

  // End from the first origin.
  await ff.switchTo(tab);
  await ff.click("#end");
  await until("ended", async () => (await ff.textContent("#status")) === "ended");
  assert.deepEqual(await demoErrors(ff), []);
});
