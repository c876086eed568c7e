// The browser suite of issue 13: the seeds' behaviour end to end in Debian's
// Chromium with the unpacked extension, the real native host, pedelecd on temp
// dirs and the real codex / claude CLIs against the mock model server. Each
// test is one scenario of the issue and starts its own world (harness.mjs).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { answerApproval, approvalUiOpen, checkBuilt, inPage, servePages, shot, sleep, startMock, startWorld, toolCommand, until, withTimeout, STEP_MS } from "./harness.mjs";

let mock;
let site;
let site2;
before(async () => {
  checkBuilt();
  mock = await startMock();
  site = await servePages();
  site2 = await servePages();
});
after(() => {
  mock?.stop();
  site?.close();
  site2?.close();
});

const T = { timeout: 240_000 };

/** Creates a session on the demo page through its UI (provider picker, workspace, keep-after-reload). */
async function createInDemo(page, { provider, workspace = "", persistent = false }) {
  if (provider) await page.selectOption("#provider", provider);
  await page.fill("#workspace", workspace);
  await page.setChecked("#persistent", persistent);
  const before = await page.textContent("#session-id");
  await page.click("#create");
  await page.waitForFunction((b) => {
    const id = document.getElementById("session-id")?.textContent ?? "";
    return (id.startsWith("thr_") && id !== b) || document.querySelector("#errors .error");
  }, before, { timeout: STEP_MS });
  const err = await page.$("#errors .error");
  if (err) throw new Error(`createSession in the demo failed: ${await err.textContent()}`);
  return page.textContent("#session-id");
}

/** Records what a handle reports, in the page (window.rec). */
function record(page) {
  return inPage(page, (d) => {
    const s = d.session;
    window.rec = { deltas: [], chats: [], statuses: [], errors: [], ended: [] };
    s.onChatDelta((x) => window.rec.deltas.push(x));
    s.onChat((x) => window.rec.chats.push(x));
    s.onStatus((x) => window.rec.statuses.push(x));
    s.onError((e) => window.rec.errors.push(e.code));
    s.onEnded((c) => window.rec.ended.push(c.reason));
    return true;
  });
}

/** Types a prompt into the demo and waits until its sendText() settled. */
async function sendInDemo(page, text) {
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
  await page.waitForFunction(() => window.pedelecDemo.state.busy === true, null, { timeout: 5_000 }).catch(() => undefined);
  await page.waitForFunction(() => window.pedelecDemo.state.busy === false, null, { timeout: STEP_MS });
}

async function demoErrors(page) {
  return page.$$eval("#errors .error", (els) => els.map((e) => e.dataset.code));
}

// 1 ------------------------------------------------------------------------
test("1 first use: not approved, approval on createSession, rejection, listProviders asks too", T, async (t) => {
  const w = await startWorld(t, mock);
  const page = await w.openDemo(site.origin);
  await shot(page, "01-first-use-not-approved");
  assert.equal(await page.getAttribute("#approval", "data-state"), "pending");

  const status = await inPage(page, (d) => d.client.getApprovalStatus());
  assert.deepEqual(status.ok, { installed: true, approved: false, origin: site.origin, appConnected: true });
  assert.equal(await approvalUiOpen(w, page), false, "getApprovalStatus opens no approval UI");

  // createSession opens the approval UI; rejecting it rejects the call.
  await page.evaluate(() => {
    window.created = window.pedelecDemo.client.createSession({ provider: "codex" }).then(
      (s) => ({ ok: s.sessionId }),
      (e) => ({ error: e.code }),
    );
  });
  let popup = await answerApproval(w, page, site.origin, "reject");
  assert.deepEqual(await withTimeout(page.evaluate(() => window.created), "rejected createSession"), { error: "APPROVAL_REJECTED" });
  await popup.close();

  // listProviders before approval asks for approval too; approve this time (through the demo's Connect).
  await page.click("#connect");
  popup = await answerApproval(w, page, site.origin, "approve");
  await popup.close();
  await page.waitForFunction(() => document.getElementById("approval")?.dataset.state === "approved", null, { timeout: STEP_MS });
  const options = await page.$$eval("#provider option", (os) => os.map((o) => ({ value: o.value, disabled: o.disabled, text: o.textContent })));
  assert.deepEqual(options.filter((o) => !o.disabled).map((o) => o.value).sort(), ["", "claude", "codex"]);
  assert.ok(options.find((o) => o.value === "opencode")?.disabled, "a missing CLI is listed as unavailable");
  assert.match(await page.textContent("#provider-note"), /OpenCode \(/, "the reason a provider is missing is shown");

  // Approved now: createSession goes straight through.
  const id = await createInDemo(page, { provider: "codex" });
  assert.match(id, /^thr_/);
  assert.equal(await page.textContent("#status"), "idle");
  await shot(page, "01-first-use-approved-session");
});

// 2 ------------------------------------------------------------------------
test("2 a turn: deltas stream into the page (claude), chat, running → idle, sendText resolves, usage (codex and claude)", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);

  // codex exec --json gives no deltas: the completed message, status and usage.
  await mock.script({ mode: "reply", text: "Codex here: the answer is 42." });
  await createInDemo(page, { provider: "codex" });
  await record(page);
  await sendInDemo(page, "What is the answer?");
  let rec = await page.evaluate(() => window.rec);
  assert.deepEqual(rec.chats, ["Codex here: the answer is 42."]);
  assert.deepEqual(rec.errors, []);
  assert.equal(rec.statuses[0], "running");
  assert.equal(rec.statuses.at(-1), "idle");
  assert.equal(await page.textContent("#status"), "idle");
  assert.ok(Number((await page.textContent("#usage")).replace(/,/g, "")) > 0, "usage shown");
  assert.equal(await page.locator(".msg-row.assistant .bubble").last().textContent(), "Codex here: the answer is 42.");

  // claude streams: a slow reply in many deltas, seen growing in the page.
  const reply = "Claude streams this answer word by word so that the page can show it growing while it arrives, without any layout jumps.";
  await mock.script({ mode: "reply", text: reply, chunks: 20, delay_ms: 120 });
  await createInDemo(page, { provider: "claude" });
  await record(page);
  const layout = () => page.evaluate(() => ["#composer", ".counter-box", "#h-session"].map((s) => document.querySelector(s).getBoundingClientRect().top));
  const layoutBefore = await layout();
  await page.fill("#prompt", "Stream something");
  await page.press("#prompt", "Enter");
  await page.waitForFunction(() => window.rec.deltas.length >= 3, null, { timeout: STEP_MS });
  const partial = await page.locator(".bubble.streaming").textContent();
  assert.ok(partial.length > 0 && partial.length < reply.length, `mid-stream text: ${partial}`);
  assert.equal(await page.textContent("#status"), "running");
  assert.deepEqual(await layout(), layoutBefore, "nothing moves while text streams");
  await shot(page, "02-turn-streaming");
  await page.waitForFunction(() => window.pedelecDemo.state.busy === false, null, { timeout: STEP_MS });
  rec = await page.evaluate(() => window.rec);
  assert.ok(rec.deltas.length >= 10, `deltas: ${rec.deltas.length}`);
  assert.equal(rec.deltas.join("").trim(), reply);
  assert.deepEqual(rec.chats.map((c) => c.trim()), [reply]);
  assert.deepEqual(rec.errors, []);
  assert.equal(rec.statuses[0], "running");
  assert.equal(rec.statuses.at(-1), "idle");
  assert.equal((await page.locator(".msg-row.assistant .bubble").last().textContent()).trim(), reply);
  const usage = await inPage(page, (d) => d.session.usage.totalTokens);
  assert.ok(usage.ok > 0);
  assert.equal(await page.textContent("#usage"), usage.ok.toLocaleString("en"));
  await shot(page, "02-turn-done");
});

// 3 ------------------------------------------------------------------------
test("3 a tool call: the agent calls a page tool through pedelec-cli, the DOM changes, the answer carries the result; TOOL_HANDLER_NOT_FOUND", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);

  // codex: update_counter(+3)
  await mock.script({ mode: "tool", command: toolCommand("update_counter", { delta: 3 }), final: "Done. The tool said: {output}" });
  await createInDemo(page, { provider: "codex" });
  await record(page);
  await sendInDemo(page, "Add 3 to the counter");
  assert.equal(await page.textContent("#counter"), "3");
  let rec = await page.evaluate(() => window.rec);
  assert.deepEqual(rec.errors, []);
  assert.ok(rec.statuses.includes("waiting_tool_result"), JSON.stringify(rec.statuses));
  assert.deepEqual(rec.chats, ['Done. The tool said: {"ok":true,"result":{"counter":3,"delta":3}}']);
  await shot(page, "03-after-tool-call-codex");

  // claude: add_todo
  await mock.script({ mode: "tool", command: toolCommand("add_todo", { text: "buy milk" }), final: "Added. {output}" });
  await createInDemo(page, { provider: "claude" });
  await record(page);
  await sendInDemo(page, "Put buy milk on the list");
  assert.deepEqual(await page.$$eval("#todos li", (lis) => lis.map((l) => l.textContent)), ["buy milk"]);
  rec = await page.evaluate(() => window.rec);
  assert.deepEqual(rec.chats.map((c) => c.trim()), ['Added. {"ok":true,"result":{"todos":["buy milk"]}}']);
  await shot(page, "03-after-tool-call-claude");

  // A tool in the manifest without a handler in the page.
  await mock.script({ mode: "tool", command: toolCommand("nobody_home", {}), final: "Result: {output}" });
  const r = await inPage(page, async (d) => {
    const s = await d.client.createSession({
      provider: "codex",
      skills: { tools: [d.defineTool({ name: "nobody_home", description: "A tool the page never handles.", argsSchema: { type: "object", properties: {} } })] },
    });
    const chats = [];
    const errors = [];
    s.onChat((x) => chats.push(x));
    s.onError((e) => errors.push(e.code));
    await s.sendText("call it");
    return { chats, errors };
  });
  assert.ok(r.ok, JSON.stringify(r.error));
  assert.equal(r.ok.chats.length, 1);
  assert.match(r.ok.chats[0], /^Result: \{"ok":false,"error":\{"code":"TOOL_HANDLER_NOT_FOUND"/);
});
