// Consent in the real browser: the approval prompt, blocking, the pages that
// may not ask (plain http, frames), the provider and folder prompts, the badge,
// revoking from the popup, and the settings page's Sites section (screenshots
// in target/e2e/; docs/img holds copies). What
// docs/sdk-extension.md ("Approval") documents; the services enforce the same
// grants (tests/tests/suite).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { execFileSync } from "node:child_process";
import {
  answerPrompt,
  approvalUiOpen,
  docShot,
  EXTENSION_ID,
  inPage,
  POPUP_URL,
  servePages,
  startWorld,
  suiteParts,
  STEP_MS,
  until,
  withTimeout,
} from "./harness.mjs";

let mock;
let site;
let site2;
suiteParts({ sites: 2 }, (m, a, b) => ([mock, site, site2] = [m, a, b]));

const T = { timeout: 240_000 };

/** Starts createSession in the page; `window.created` settles to {ok: id} or {error: code}. */
function startCreate(page, options) {
  return page.evaluate((o) => {
    window.created = window.pedelecDemo.client.createSession(o).then(
      (s) => ({ ok: s.sessionId, provider: s.provider }),
      (e) => ({ error: e.code, message: e.message }),
    );
  }, options);
}
const created = (page) => withTimeout(page.evaluate(() => window.created), "createSession");

test("the approval prompt: three levels, edit by default, Approve held for a moment, full access confirmed twice, loopback said", T, async (t) => {
  const w = await startWorld(t, mock, { defaultProvider: "codex" });
  const page = await w.openDemo(site.origin);
  await startCreate(page, { provider: "codex" });
  await until("the approval UI", () => approvalUiOpen(w, page));
  const popup = await w.context.newPage();
  // The size of the approval window the extension opens when it cannot open its popup.
  await popup.setViewportSize({ width: 460, height: 640 });
  await popup.goto(POPUP_URL);
  const card = popup.locator(`#prompts .prompt[data-kind="site"][data-origin="${site.origin}"]`);
  await card.waitFor({ timeout: STEP_MS });
  const approve = card.locator('button[data-action="approve"]');
  assert.equal(await approve.isDisabled(), true, "Approve is disabled when the prompt shows");

  assert.deepEqual(await card.locator("input[type=radio]").evaluateAll((rs) => rs.map((r) => [r.value, r.checked])), [
    ["tools", false],
    ["edit", true],
    ["full", false],
  ]);
  const levels = await card.locator(".level strong").allTextContents();
  assert.deepEqual(levels, ["Answer and use this page's tools", "Edit files in its workspace", `Full access — run any command as ${userName()}`]);
  assert.deepEqual(await card.locator("input[type=checkbox]:checked").evaluateAll((bs) => bs.map((b) => b.value)), ["codex"], "the user's default provider preselected");
  assert.match(await card.locator(".loopback").textContent(), /every program and every user on this computer.*this browser session/s);
  assert.match(await card.locator(".tab").textContent(), /127\.0\.0\.1/);
  await until("Approve enabled", async () => !(await approve.isDisabled()), 10_000);
  await docShot(card, "approval-prompt");

  // Full access: a warning, then a second confirmation; Back leaves nothing granted.
  await card.locator('input[type=radio][value="full"]').check();
  assert.equal(await card.locator(".full-warning").isVisible(), true);
  await approve.click();
  assert.equal(await card.locator(".confirm-full").isVisible(), true);
  await docShot(card, "approval-prompt-full");
  await card.locator('button[data-action="back"]').click();
  assert.equal(await page.evaluate(() => Promise.race([window.created, new Promise((r) => setTimeout(() => r("waiting"), 300))])), "waiting");

  await card.locator('input[type=radio][value="edit"]').check();
  await approve.click();
  const r = await created(page);
  assert.ok(r.ok, `createSession: ${JSON.stringify(r)}`);
  const row = popup.locator(`#sites .row[data-origin="${site.origin}"]`);
  await row.waitFor({ timeout: STEP_MS });
  assert.match(await row.textContent(), /Edit files in its workspace\. Agents: codex\./);
});

test("block: APPROVAL_REJECTED at once, no prompt, also after the worker restarts", T, async (t) => {
  const w = await startWorld(t, mock);
  const page = await w.openDemo(site2.origin);
  await startCreate(page, { provider: "codex" });
  const popup = await answerPrompt(w, page, site2.origin, "block");
  assert.equal((await created(page)).error, "APPROVAL_REJECTED");
  await popup.close();
  const cdp = await w.context.newCDPSession(page);
  await cdp.send("ServiceWorker.enable");
  await cdp.send("ServiceWorker.stopAllWorkers");
  await cdp.detach();
  const again = await inPage(page, (d) => d.client.createSession({ provider: "codex" }));
  assert.equal(again.error?.code, "APPROVAL_REJECTED");
  assert.equal(await approvalUiOpen(w, page), false, "no prompt for a blocked site");
});

test("a plain http:// page that is not localhost is ORIGIN_NOT_SECURE at once; a frame is FRAME_NOT_ALLOWED naming the page that embeds it", T, async (t) => {
  const w = await startWorld(t, mock, { args: ["--host-resolver-rules=MAP insecure.test 127.0.0.1", "--disable-features=HttpsUpgrades"] });
  const insecure = `http://insecure.test:${site.port}`;
  const page = await w.openDemo(insecure);
  const r = await inPage(page, (d) => d.client.createSession({ provider: "codex" }));
  assert.equal(r.error?.code, "ORIGIN_NOT_SECURE");
  assert.equal(await approvalUiOpen(w, page), false);

  // site is approved, but inside another site's page it may not ask.
  await w.approve(site.origin);
  const top = await servePages({ index: `<!doctype html><iframe src="${site.origin}/" width="800" height="600"></iframe>` });
  t.after(() => top.close());
  const outer = await w.context.newPage();
  await outer.goto(`${top.origin}/`);
  const frame = await until("the framed demo", () => outer.frames().find((f) => f.url().startsWith(site.origin)));
  await frame.waitForFunction(() => document.body.dataset.ready === "1", null, { timeout: STEP_MS });
  const framed = await inPage(frame, (d) => d.client.createSession({ provider: "codex" }));
  assert.equal(framed.error?.code, "FRAME_NOT_ALLOWED");
  assert.ok(framed.error.message.includes(top.origin), framed.error.message);
});

test("provider and folder prompts on createSession: yes adds to the grant; once is used up; no leaves the services' refusal", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin, { access: "edit", providers: ["codex"] });
  const page = await w.openDemo(site.origin);

  await startCreate(page, { provider: "claude" });
  const popup = await answerPrompt(w, page, site.origin, "yes", { kind: "provider" });
  assert.equal((await created(page)).provider, "claude");

  const folder = join(w.base, "project");
  mkdirSync(folder);
  const inFolder = async (answer) => {
    await startCreate(page, { provider: "codex", workspace: { path: folder } });
    const card = popup.locator(`#prompts .prompt[data-kind="folder"][data-origin="${site.origin}"]`);
    await card.waitFor({ timeout: STEP_MS });
    assert.equal(await card.locator(".folder").textContent(), folder);
    await answerPrompt(w, page, site.origin, answer, { kind: "folder", popup });
    return created(page);
  };
  assert.ok((await inFolder("once")).ok, "allowed once");
  const refused = await inFolder("no");
  assert.equal(refused.error, "FOLDER_NOT_GRANTED", "the once grant was used up; no leaves it to the services");
  assert.ok((await inFolder("always")).ok, "always allowed");
  await startCreate(page, { provider: "codex", workspace: { path: folder } });
  assert.ok((await created(page)).ok, "no prompt for a folder always allowed");
});

test("the badge counts a running turn; Revoke in the popup ends the site's sessions, also one kept after its page goes; the Sites section lists the grant, allows an embedding site and any model", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script({ mode: "reply", text: "A slow answer arriving in many small pieces so the turn runs for a while.", chunks: 30, delay_ms: 300 });
  const ids = await inPage(page, async () => {
    const scoped = await window.pedelecDemo.client.createSession({ provider: "claude" });
    const kept = await window.pedelecDemo.client.createSession({ provider: "codex", autoEndOnDisconnect: false });
    window.h = { scoped, kept, turn: scoped.sendText("Tell me slowly").catch((e) => e.code) };
    return { scoped: scoped.sessionId, kept: kept.sessionId };
  });
  assert.ok(ids.ok, JSON.stringify(ids));
  await page.waitForFunction(() => window.h.scoped.getStatus() === "running", null, { timeout: STEP_MS });
  const worker = await w.currentWorker();
  const badges = () => worker.evaluate(async () => Promise.all((await chrome.tabs.query({})).map((tab) => chrome.action.getBadgeText({ tabId: tab.id }))));
  assert.ok((await until("the badge shows the running turn", async () => ((await badges()).includes("1") ? "yes" : null))) === "yes");

  const popup = await w.context.newPage();
  await popup.goto(POPUP_URL);
  const row = popup.locator(`#sessions .row[data-origin="${site.origin}"]`);
  await row.waitFor({ timeout: STEP_MS });
  assert.match(await row.textContent(), /2 sessions: 1 working/);
  await row.locator('button[data-action="revoke"]').click();
  const ended = await withTimeout(
    page.waitForFunction(() => window.h.scoped.getStatus() === "ended" && window.h.kept.getStatus() === "ended", null, { timeout: STEP_MS }).then(() => true),
    "the page sees its sessions end",
  );
  assert.equal(ended, true);
  assert.equal((await inPage(page, (d) => d.client.getApprovalStatus())).ok.approved, false);

  // The Sites section shows a grant (given again, with a folder).
  const folder = join(w.base, "shown");
  mkdirSync(folder);
  await w.approve(site.origin, { access: "tools", providers: ["codex", "claude"], folders: [{ path: folder, once: false }] });
  const options = await w.context.newPage();
  await options.goto(`chrome-extension://${EXTENSION_ID}/options.html`);
  const card = options.locator(`#sites-root .site[data-origin="${site.origin}"]`);
  await card.waitFor({ timeout: STEP_MS });
  assert.equal(await card.locator("select[data-field=access]").inputValue(), "tools");
  assert.deepEqual(await card.locator("input[data-field=provider]:checked").evaluateAll((bs) => bs.map((b) => b.value).sort()), ["claude", "codex"]);
  assert.match(await card.locator("li[data-folder]").textContent(), new RegExp(folder.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));

  // Allowed inside another site, and any model: saved with grant_site; the services hold them.
  const status = options.locator("#sites-status");
  assert.equal(await card.locator("input[data-field=any-model]").isChecked(), false);
  await card.locator("input[data-field=embedder]").fill("http://host.example");
  await card.locator('button[data-action="add-embedder"]').click();
  await until("the refusal", async () => ((await status.textContent()).includes("not secure") ? "yes" : null));
  await card.locator("input[data-field=embedder]").fill("https://host.example/some/page");
  await card.locator('button[data-action="add-embedder"]').click();
  await until("the embedder saved", async () => ((await status.textContent()) === `Allowed inside https://host.example: ${site.origin}` ? "yes" : null));
  assert.deepEqual(await card.locator("li[data-embedder]").evaluateAll((ls) => ls.map((l) => l.dataset.embedder)), ["https://host.example"]);
  await card.locator("input[data-field=any-model]").check();
  await card.locator('button[data-action="save-site"]').click();
  await until("the grant saved", async () => ((await status.textContent()) === `Saved: ${site.origin}` ? "yes" : null));
  assert.equal(await card.locator("input[data-field=any-model]").isChecked(), true, "the reloaded card shows the services' answer");
  const shown = w.cli("sites", "show", site.origin, "--json");
  assert.equal(shown.status, 0, shown.stderr);
  const held = JSON.parse(shown.stdout);
  assert.deepEqual([held.access, held.providers.sort(), held.anyModel, held.embedders], ["tools", ["claude", "codex"], true, ["https://host.example"]]);
  await docShot(card, "settings-sites");
  await card.locator('li[data-embedder="https://host.example"] button[data-action="remove-embedder"]').click();
  await until("the embedder removed", async () => ((await status.textContent()) === `No longer allowed inside https://host.example: ${site.origin}` ? "yes" : null));
  assert.deepEqual(JSON.parse(w.cli("sites", "show", site.origin, "--json").stdout).embedders, []);
  await card.locator('button[data-action="revoke"]').click();
  await options.locator("#sites-root").getByText("No site has asked yet.").waitFor({ timeout: STEP_MS });
});

/** The account the browser, the host and the agents run as (`id -un`). */
function userName() {
  return execFileSync("id", ["-un"], { encoding: "utf8" }).trim();
}
