// The browser suite: what docs/sdk-extension.md documents, end to end in
// Debian's Chromium with the unpacked extension, the real native host,
// pedelecd on temp dirs and the real codex / claude CLIs against the mock
// model server. Each test is one numbered scenario (the list is in
// docs/sdk-extension.md, "Tests") and starts its own world (harness.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  answerPrompt,
  approvalUiOpen,
  BRIDGE_NAMESPACE,
  docShot,
  EXTENSION_ID,
  inPage,
  servePages,
  shot,
  sleep,
  startWorld,
  suiteParts,
  codexTool,
  toolCommand,
  TRANSFER_PAGE,
  until,
  withTimeout,
  STEP_MS,
} from "./harness.mjs";
import { createInDemo, demoErrors, record, sendInDemo } from "./demo-steps.mjs";

let mock;
let site;
let site2;
suiteParts({ sites: 2 }, (m, a, b) => ([mock, site, site2] = [m, a, b]));

const T = { timeout: 240_000 };

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
  const popup = await answerPrompt(w, page, site.origin, "reject");
  assert.deepEqual(await withTimeout(page.evaluate(() => window.created), "rejected createSession"), { error: "APPROVAL_REJECTED" });

  // Just rejected: the site gets no new prompt in this browser session.
  const again = await inPage(page, (d) => d.client.listProviders());
  assert.equal(again.error?.code, "APPROVAL_REJECTED");
  assert.equal(await approvalUiOpen(w, page), true, "only the popup page the test opened");

  // The popup lets it ask again; listProviders before approval asks too; approve this time (through the demo's Connect).
  await popup.locator(`#sites .row[data-origin="${site.origin}"] button[data-action="forget-rejection"]`).click();
  await page.click("#connect");
  // No default agent is set: the user ticks the one the page will use.
  await answerPrompt(w, page, site.origin, "approve", { popup, providers: ["codex"] });
  await popup.close();
  await page.waitForFunction(() => document.getElementById("approval")?.dataset.state === "approved", null, { timeout: STEP_MS });
  const options = await page.$$eval("#provider option", (os) => os.map((o) => ({ value: o.value, disabled: o.disabled, text: o.textContent })));
  // codex and claude are on PATH, opencode/cursor/antigravity are not (ollama depends on whether
  // pedelec-agent was built beside the binaries, so it is not asserted).
  const enabled = (code) => options.find((o) => o.value === code) && !options.find((o) => o.value === code).disabled;
  assert.deepEqual(["", "codex", "claude", "opencode", "cursor", "antigravity"].map(enabled), [true, true, true, false, false, false]);
  assert.ok(options.find((o) => o.value === "opencode")?.disabled, "a missing CLI is listed as unavailable");
  assert.match(await page.textContent("#provider-note"), /OpenCode — opencode not found on PATH/, "the reason a provider is missing is shown");

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
test("3 a tool call at the default level: codex calls a page tool natively, claude through pedelec-cli; the DOM changes, the answer carries the result; TOOL_HANDLER_NOT_FOUND", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);

  // codex: update_counter(+3)
  await mock.script(codexTool("update_counter", { delta: 3 }, "Done. The tool said: {output}"));
  await createInDemo(page, { provider: "codex" });
  await record(page);
  await sendInDemo(page, "Add 3 to the counter");
  assert.equal(await page.textContent("#counter"), "3");
  let rec = await page.evaluate(() => window.rec);
  assert.deepEqual(rec.errors, []);
  assert.ok(rec.statuses.includes("waiting_tool_result"), JSON.stringify(rec.statuses));
  assert.deepEqual(rec.chats, ['Done. The tool said: {"counter":3,"delta":3}']);
  await shot(page, "03-after-tool-call-codex");

  // claude: add_todo
  const claudeThread = await createInDemo(page, { provider: "claude" });
  await mock.script({ mode: "tool", command: toolCommand("add_todo", { text: "buy milk" }, claudeThread), final: "Added. {output}" });
  await record(page);
  await sendInDemo(page, "Put buy milk on the list");
  assert.deepEqual(await page.$$eval("#todos li", (lis) => lis.map((l) => l.textContent)), ["buy milk"]);
  rec = await page.evaluate(() => window.rec);
  assert.deepEqual(rec.chats.map((c) => c.trim()), ['Added. {"ok":true,"result":{"todos":["buy milk"]}}']);
  await shot(page, "03-after-tool-call-claude");
  // A narrow window: one column, nothing cut off sideways.
  await page.setViewportSize({ width: 420, height: 900 });
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true, "no horizontal scrolling");
  await shot(page, "03-narrow-window");
  await page.setViewportSize({ width: 1280, height: 800 });

  // A tool in the manifest without a handler in the page.
  await mock.script(codexTool("nobody_home", {}, "Result: {output}"));
  const r = await inPage(page, async (d) => {
    const s = await d.client.createSession({
      provider: "codex",
      skills: { tools: [d.defineTool({ name: "nobody_home", description: "A tool the page never handles.", argsSchema: { type: "object", properties: {} } })] },
    });
    const chats = [];
    const errors = [];
    s.onChat((x) => chats.push(x));
    // The page hears it too, not only the agent: source sdk, the tool and the operation.
    s.onError((e, ctx) => errors.push({ code: e.code, source: ctx.source, tool: e.details?.tool, operationId: ctx.operationId, same: e.operationId === ctx.operationId }));
    const op = await s.sendText("call it");
    return { chats, errors, op, last: s.lastOperation, active: s.activeOperation };
  });
  assert.ok(r.ok, JSON.stringify(r.error));
  assert.equal(r.ok.chats.length, 1);
  assert.match(r.ok.chats[0], /^Result: TOOL_HANDLER_NOT_FOUND: No handler for nobody_home/);
  // sendText() resolved with the operation it ran; the handle shows it as the last one.
  assert.equal(r.ok.op.outcome, "completed");
  assert.deepEqual(r.ok.last, r.ok.op);
  assert.equal(r.ok.active, null);
  assert.deepEqual(r.ok.errors, [{ code: "TOOL_HANDLER_NOT_FOUND", source: "sdk", tool: "nobody_home", operationId: r.ok.op.operationId, same: true }]);
});

/** Wraps the worker's native link so the test sees every request the extension sends to the host. */
async function tapNative(worker) {
  await worker.evaluate(() => {
    const n = globalThis.pedelecHub.native;
    if (n.__tapped) return;
    n.__tapped = true;
    globalThis.sentToHost = [];
    const orig = n.request.bind(n);
    n.request = (type, origin, payload) => {
      globalThis.sentToHost.push({ type, origin, payload });
      return orig(type, origin, payload);
    };
  });
}

// 4 ------------------------------------------------------------------------
test("4 page-scoped session: closing the tab ends it at once (auto_end); another page's resumeSession sees ended", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  await tapNative(w.worker);
  const a = await w.openDemo(site.origin);
  const b = await w.openDemo(site.origin);
  const id = await createInDemo(a, { provider: "codex" });
  const closedAt = Date.now();
  await a.close();
  // The extension ends it when the page's route goes, not after SessionService's 5 s grace.
  await until("the extension sent end(auto_end)", () =>
    w.worker.evaluate((sid) => globalThis.sentToHost.some((r) => r.type === "end" && r.payload.sessionId === sid && r.payload.reason === "auto_end"), id),
  );
  const r = await inPage(b, async (d, sid) => {
    const s = await d.client.resumeSession(sid);
    return { status: s.getStatus(), provider: s.provider };
  }, id);
  // The resumed handle names the session's provider, from its snapshot.
  assert.deepEqual(r.ok, { status: "ended", provider: "codex" });
  assert.ok(Date.now() - closedAt < 5_000, "ended before SessionService's own 5 s grace period would have");
  const shown = JSON.parse(w.cli("sessions", "show", "--origin", site.origin, id).stdout);
  assert.equal(shown.status, "ended");
});

// 5 ------------------------------------------------------------------------
test("5 persistent session: reload, resumeSession(savedId), handlers re-registered, the next turn resumes the provider session", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script({ mode: "reply", replies: ["First answer about ALPHA-7731.", "Second answer, I remember ALPHA-7731."] });
  await mock.clear();
  const id = await createInDemo(page, { provider: "codex", persistent: true });
  await sendInDemo(page, "Remember ALPHA-7731");
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  assert.equal(await page.isVisible("#saved"), true, "the demo offers the saved session");
  assert.equal(await page.textContent("#saved-id"), id);
  await page.click("#resume-saved");
  await page.waitForFunction((sid) => document.getElementById("session-id")?.textContent === sid, id, { timeout: STEP_MS });
  const after = await inPage(page, (d) => ({ status: d.session.getStatus(), provider: d.session.provider, effortLevel: d.session.effortLevel ?? null }));
  // The resumed handle's provider and level come from the session's snapshot.
  assert.deepEqual(after.ok, { status: "idle", provider: "codex", effortLevel: "default" });
  // The demo registered its tools on the resumed handle; a tool call in this turn reaches them.
  await mock.script(codexTool("update_counter", { delta: 7 }, "Second answer, I remember ALPHA-7731. {output}"));
  await sendInDemo(page, "And now?");
  assert.equal(await page.textContent("#counter"), "7");
  const last = await page.locator(".msg-row.assistant .bubble").last().textContent();
  assert.equal(last, 'Second answer, I remember ALPHA-7731. {"counter":7,"delta":7}');
  assert.deepEqual(await demoErrors(page), []);
  // codex was resumed (exec resume): the second turn's request carries the first turn.
  const reqs = await mock.modelRequests("/v1/responses");
  const history = JSON.stringify(reqs.at(-1).body.input);
  assert.ok(history.includes("Remember ALPHA-7731") && history.includes("First answer about ALPHA-7731."), "the mock model sees the history");
  await shot(page, "05-resumed-after-reload");
});

// 6 ------------------------------------------------------------------------
test("6 reload while a tool request is pending: after resumeSession and handler registration it is dispatched exactly once and the turn completes", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script(codexTool("update_counter", { delta: 5 }, "Counter tool answered: {output}"));
  // The first page's handler takes the request and never answers (the page is reloaded meanwhile).
  const created = await inPage(page, async (d) => {
    const s = await d.client.createSession({
      provider: "codex",
      autoEndOnDisconnect: false,
      skills: { tools: [d.defineTool({ name: "update_counter", description: "Change the counter by delta.", argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number" } } } })] },
    });
    localStorage.setItem("pedelec-demo-session", JSON.stringify({ sessionId: s.sessionId, provider: "codex" }));
    window.calls = 0;
    s.onTool("update_counter", () => {
      window.calls++;
      return new Promise(() => {});
    });
    void s.sendText("Add 5").catch(() => undefined);
    return s.sessionId;
  });
  const id = created.ok;
  await until("the first page got the tool request", () => page.evaluate(() => window.calls === 1 && window.pedelecDemo.client && true));
  assert.equal(JSON.parse(w.cli("sessions", "show", "--origin", site.origin, id).stdout).status, "waiting_tool_result");
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  await page.click("#resume-saved");
  // The demo's update_counter handler answers the pending request; the turn completes.
  await page.waitForFunction(() => [...document.querySelectorAll(".msg-row.assistant .bubble")].some((b) => b.textContent.startsWith("Counter tool answered")), null, { timeout: STEP_MS });
  assert.equal(await page.textContent("#counter"), "5", "dispatched once: +5, not +10");
  assert.equal(await page.locator(".msg-row.tool").count(), 1);
  assert.match(await page.locator(".msg-row.assistant .bubble").last().textContent(), /^Counter tool answered: \{"counter":5,"delta":5\}$/);
  await until("idle", async () => (await page.textContent("#status")) === "idle");
  assert.deepEqual(await demoErrors(page), []);
});

// 7 ------------------------------------------------------------------------
test("7 the same handle: end() → resume() → sendText", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script({ mode: "reply", replies: ["Before the end.", "After the resume."] });
  const id = await createInDemo(page, { provider: "codex" });
  await sendInDemo(page, "one");
  await page.click("#end");
  await until("ended", async () => (await page.textContent("#status")) === "ended");
  assert.equal(await page.isEnabled("#resume"), true);
  assert.equal(await page.isEnabled("#send"), false);
  await page.click("#resume");
  await until("idle again", async () => (await page.textContent("#status")) === "idle");
  await sendInDemo(page, "two");
  const texts = await page.$$eval(".msg-row.assistant .bubble", (bs) => bs.map((b) => b.textContent));
  assert.deepEqual(texts, ["Before the end.", "After the resume."]);
  assert.equal(await page.textContent("#session-id"), id, "the same thread");
  const same = await inPage(page, (d) => ({ detached: d.session.detached, status: d.session.getStatus(), provider: d.session.provider }));
  assert.deepEqual(same.ok, { detached: false, status: "idle", provider: "codex" });
  assert.deepEqual(await demoErrors(page), []);
  await shot(page, "07-end-resume-send");
});

// 8 ------------------------------------------------------------------------
test("8 two tabs of one origin on one session: both see the chat, SESSION_BUSY in the second, the tool handler runs once", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const a = await w.openDemo(site.origin);
  const b = await w.openDemo(site.origin);
  await mock.script(codexTool("update_counter", { delta: 1 }, "Shared answer: {output}", { delay_ms: 50 }));
  const id = await createInDemo(a, { provider: "codex" });
  const joined = await inPage(b, async (d, sid) => {
    const s = await d.client.resumeSession(sid);
    window.second = s;
    window.rec = { chats: [], calls: 0, statuses: [] };
    s.onChat((x) => window.rec.chats.push(x));
    s.onStatus((x) => window.rec.statuses.push(x));
    s.onTool("update_counter", () => {
      window.rec.calls++;
      return { counter: -1 };
    });
    return s.getStatus();
  }, id);
  assert.equal(joined.ok, "idle");
  await a.fill("#prompt", "Count one");
  await a.press("#prompt", "Enter");
  await until("the second tab sees the turn running", () => b.evaluate(() => window.rec.statuses.includes("running")));
  const busy = await inPage(b, (d) => window.second.sendText("me too"));
  assert.equal(busy.error?.code, "SESSION_BUSY");
  await a.waitForFunction(() => window.pedelecDemo.state.busy === false, null, { timeout: STEP_MS });
  await until("the second tab got the chat", () => b.evaluate(() => window.rec.chats.length === 1));
  const rec = await b.evaluate(() => window.rec);
  const expected = 'Shared answer: {"counter":1,"delta":1}';
  assert.deepEqual(rec.chats, [expected]);
  assert.equal(rec.calls, 0, "the second tab's handler never ran");
  assert.equal(await a.textContent("#counter"), "1", "the first tab's handler ran once");
  assert.equal(await a.locator(".msg-row.tool").count(), 1);
  assert.equal(await a.locator(".msg-row.assistant .bubble").last().textContent(), expected);
});

// 9 ------------------------------------------------------------------------
test("9 a second origin cannot resume or drive the first origin's session (THREAD_ACCESS_DENIED)", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  await w.approve(site2.origin);
  const a = await w.openDemo(site.origin);
  const id = await createInDemo(a, { provider: "codex", persistent: true });
  const other = await w.openDemo(site2.origin);
  const r = await inPage(other, (d, sid) => d.client.resumeSession(sid), id);
  assert.equal(r.error?.code, "THREAD_ACCESS_DENIED");
  // Nor drive it: a raw bridge request (what a hostile page could post) for send_text and end.
  const raw = await other.evaluate(async ({ sid, ns }) => {
    const clientId = "raw-" + Math.random();
    const replies = [];
    window.addEventListener("message", (e) => {
      const d = e.data;
      if (d?.ns === ns && d.dir === "to-page" && d.clientId === clientId && d.msg.kind === "response") replies.push(d.msg);
    });
    const post = (msg) => window.postMessage({ ns, dir: "to-extension", clientId, msg }, "*");
    post({ kind: "connect" });
    post({ kind: "request", requestId: 1, call: { method: "send_text", params: { sessionId: sid, text: "hijack" } } });
    post({ kind: "request", requestId: 2, call: { method: "end", params: { sessionId: sid } } });
    for (let i = 0; i < 100 && replies.length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    return replies.map((r) => [r.requestId, r.ok, r.error?.code]).sort();
  }, { sid: id, ns: BRIDGE_NAMESPACE });
  assert.deepEqual(raw, [[1, false, "INVALID_INPUT"], [2, false, "INVALID_INPUT"]]);
  // The demo shows the error with its code.
  await other.evaluate((sid) => localStorage.setItem("pedelec-demo-session", JSON.stringify({ sessionId: sid, provider: "codex" })), id);
  await other.reload();
  await other.waitForFunction(() => document.body.dataset.ready === "1");
  await other.click("#resume-saved");
  await other.waitForSelector('#errors .error[data-code="THREAD_ACCESS_DENIED"]', { timeout: STEP_MS });
  await shot(other, "09-other-origin-denied");
  // The first origin still drives it.
  await mock.script({ mode: "reply", text: "Still mine." });
  await sendInDemo(a, "hello");
  assert.equal(await a.locator(".msg-row.assistant .bubble").last().textContent(), "Still mine.");
});

// 10 -----------------------------------------------------------------------
test("10 cancel() of a long turn; DEFAULT_PROVIDER_NOT_SET; INVALID_INPUT for an empty id", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  await mock.script({ mode: "hang" });
  await createInDemo(page, { provider: "codex" });
  await record(page);
  await mock.clear();
  await page.fill("#prompt", "take forever");
  await page.press("#prompt", "Enter");
  await page.waitForFunction(() => window.rec.statuses.includes("running"), null, { timeout: STEP_MS });
  // The model request is open (codex is waiting on the hanging stream).
  await until("codex asked the model", async () => (await mock.modelRequests("/v1/responses")).length > 0);
  await page.click("#cancel");
  // The demo's sendText rejected with CANCELLED (it notes that instead of showing an error).
  await page.waitForFunction(() => window.pedelecDemo.state.busy === false, null, { timeout: STEP_MS });
  assert.equal(await page.locator(".msg-row.system .bubble").last().textContent(), "Cancelled.");
  assert.deepEqual(await demoErrors(page), []);
  await until("idle after cancel", async () => (await page.textContent("#status")) === "idle");
  await shot(page, "10-cancelled");
  // The session takes the next turn.
  await mock.script({ mode: "reply", text: "Back again." });
  await sendInDemo(page, "again");
  assert.equal(await page.locator(".msg-row.assistant .bubble").last().textContent(), "Back again.");

  // No default provider in the settings: the demo's "Default" choice fails with the code shown.
  await page.selectOption("#provider", "");
  await page.click("#create");
  await page.waitForSelector('#errors .error[data-code="DEFAULT_PROVIDER_NOT_SET"]', { timeout: STEP_MS });
  const direct = await inPage(page, (d) => d.client.createSession({}));
  assert.equal(direct.error?.code, "DEFAULT_PROVIDER_NOT_SET");
  const empty = await inPage(page, (d) => d.client.resumeSession(""));
  assert.equal(empty.error?.code, "INVALID_INPUT");
  await shot(page, "10-errors-shown");
});

// 11 -----------------------------------------------------------------------
test("11 the native host killed mid-turn: subscription restored, status reconciled, no delta lost or doubled, sendText resolves", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  const words = Array.from({ length: 40 }, (_, i) => `w${i}`);
  const reply = words.join(" ");
  await mock.script({ mode: "reply", text: reply, chunks: 40, delay_ms: 150 });
  await createInDemo(page, { provider: "claude" });
  await record(page);
  await page.evaluate(() => {
    window.turn = window.pedelecDemo.session.sendText("long answer please").then(() => "resolved", (e) => e.code);
  });
  await page.waitForFunction(() => window.rec.deltas.length >= 5, null, { timeout: STEP_MS });
  const [hostPid] = w.hosts();
  assert.ok(hostPid, "the native host Chromium started");
  process.kill(hostPid, "SIGKILL");
  const seenAtKill = await page.evaluate(() => window.rec.deltas.length);
  assert.ok(seenAtKill < words.length, "killed mid-stream");
  await until("a new native host", () => w.hosts().find((p) => p !== hostPid));
  assert.equal(await withTimeout(page.evaluate(() => window.turn), "sendText across the host restart"), "resolved");
  const rec = await page.evaluate(() => window.rec);
  assert.equal(rec.deltas.join("").trim(), reply, "every delta once, in order");
  assert.deepEqual(rec.chats.map((c) => c.trim()), [reply]);
  assert.equal(rec.statuses.at(-1), "idle");
  assert.deepEqual(rec.errors, []);
  const s = await inPage(page, (d) => ({ status: d.session.getStatus(), detached: d.session.detached }));
  assert.deepEqual(s.ok, { status: "idle", detached: false });
  assert.equal((await page.locator(".msg-row.assistant .bubble").last().textContent()).trim(), reply);
});

// 12 -----------------------------------------------------------------------
test("12 pedelecd stop and start: resumeSession and resume() give THREAD_NOT_FOUND", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  const made = await inPage(page, async (d) => {
    const kept = await d.client.createSession({ provider: "codex", autoEndOnDisconnect: false });
    const ended = await d.client.createSession({ provider: "codex" });
    await ended.end();
    window.endedHandle = ended;
    return kept.sessionId;
  });
  assert.ok(made.ok, JSON.stringify(made.error));
  assert.equal(w.pedelecd("stop").status, 0);
  assert.equal(w.pedelecd("start").status, 0);
  const fresh = await w.openDemo(site.origin);
  const r = await inPage(fresh, (d, sid) => d.client.resumeSession(sid), made.ok);
  assert.equal(r.error?.code, "THREAD_NOT_FOUND");
  const again = await inPage(page, () => window.endedHandle.resume());
  assert.equal(again.error?.code, "THREAD_NOT_FOUND");
});

// 13 -----------------------------------------------------------------------
test("13 the service worker stopped, and the extension reloaded: handles detach with EXTENSION_DISCONNECTED, page-scoped sessions end", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  const open = () =>
    inPage(page, async (d) => {
      const scoped = await d.client.createSession({ provider: "codex" });
      const kept = await d.client.createSession({ provider: "codex", autoEndOnDisconnect: false });
      window.h = { scoped, kept, errors: [] };
      scoped.onError((e) => window.h.errors.push(e.code));
      return { scoped: scoped.sessionId, kept: kept.sessionId };
    });
  const check = async (ids, what) => {
    await until(`${what}: handles detached`, () => page.evaluate(() => window.h.scoped.detached && window.h.kept.detached));
    const r = await inPage(page, async () => {
      try {
        await window.h.scoped.sendText("x");
        return "sent";
      } catch (e) {
        return e.code;
      }
    });
    assert.equal(r.ok, "EXTENSION_DISCONNECTED", what);
    assert.ok((await page.evaluate(() => window.h.errors)).includes("EXTENSION_DISCONNECTED"), what);
    // SessionService ends the page-scoped one (its last route went with the host); the other stays.
    await until(`${what}: the page-scoped session ended`, () => JSON.parse(w.cli("sessions", "show", "--origin", site.origin, ids.scoped).stdout).status === "ended", 30_000);
    assert.equal(JSON.parse(w.cli("sessions", "show", "--origin", site.origin, ids.kept).stdout).status, "idle", what);
  };

  // (a) the MV3 worker is stopped (as Chrome does to idle workers).
  const ids = (await open()).ok;
  const cdp = await w.context.newCDPSession(page);
  await cdp.send("ServiceWorker.enable");
  await cdp.send("ServiceWorker.stopAllWorkers");
  await check(ids, "worker stopped");
  // The page's next client call brings the worker back.
  const status = await inPage(page, (d) => d.client.getApprovalStatus());
  assert.equal(status.ok?.approved, true);

  // (b) the extension is reloaded (an update, or chrome://extensions).
  const ids2 = (await open()).ok;
  const worker = await w.currentWorker();
  await worker.evaluate(() => chrome.runtime.reload()).catch(() => undefined);
  await check(ids2, "extension reloaded");
});

// 14 -----------------------------------------------------------------------
async function assetsScenario(t, w, origin, prefix) {
  const page = await w.openDemo(origin);
  const workspace = join(w.base, "app-workspace");
  mkdirSync(workspace);
  // A folder the page names must be granted (the folder prompt is consent.test.mjs's).
  await w.approve(origin, { access: "edit", providers: ["codex", "claude"], folders: [{ path: workspace, once: false }] });
  const id = await createInDemo(page, { provider: "codex", workspace });
  const doc = { project: "Pedelec", items: [1, 2, 3], note: "uploaded from the page" };
  await page.setInputFiles("#file", { name: "notes.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(doc)) });
  await page.click("#upload");
  await page.waitForSelector('#assets .asset[data-path="/notes.json"], #errors .error', { timeout: STEP_MS });
  assert.deepEqual(await page.$$eval("#errors .error", (es) => es.map((e) => e.textContent)), [], "upload without errors");
  assert.ok(existsSync(join(workspace, `.pedelec-runtime/assets/${id}/notes.json`)), "the file is in the session's own assets folder in the workspace");
  // The viewer: JSON, text, download.
  await page.click('#assets .asset[data-path="/notes.json"] button[data-as="json"]');
  await page.waitForSelector("#viewer:not([hidden])");
  assert.deepEqual(JSON.parse(await page.textContent("#viewer-body")), doc);
  await shot(page, `${prefix}-assets-viewer`);
  await page.click('#assets .asset[data-path="/notes.json"] button[data-as="text"]');
  await until("text view", async () => (await page.textContent("#viewer-body")) === JSON.stringify(doc));
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('#assets .asset[data-path="/notes.json"] button[data-as="file"]')]);
  assert.equal(download.suggestedFilename(), "notes.json");
  // Through the API as well: list, text, JSON, file.
  const api = await inPage(page, async (d) => {
    const s = d.session;
    const list = await s.listAssets();
    const file = await s.readAsset("/notes.json", "file");
    return { list: list.map((a) => [a.path, a.sizeBytes]), text: await s.readAsset("/notes.json", "text"), json: await s.readAsset("/notes.json", "json"), file: [file.name, file.size, await file.text()] };
  });
  assert.ok(api.ok, JSON.stringify(api.error));
  const bytes = JSON.stringify(doc).length;
  assert.deepEqual(api.ok, { list: [["/notes.json", bytes]], text: JSON.stringify(doc), json: doc, file: ["notes.json", bytes, JSON.stringify(doc)] });
  assert.deepEqual(await demoErrors(page), []);
  return { page, id, workspace, doc };
}

test("14 assets: upload, list, read as text/JSON/file, the agent reads it; SESSION_ENDED after end; WORKSPACE_OPEN_FAILED for a deleted workspace", T, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const { page, id, doc } = await assetsScenario(t, w, site.origin, "14");
  // The agent reads the uploaded file in its thread's assets folder, under its working directory (the workspace).
  await mock.script({ mode: "tool", command: `cat .pedelec-runtime/assets/${id}/notes.json`, final: "The file says: {output}" });
  await sendInDemo(page, "What is in notes.json?");
  assert.equal(await page.locator(".msg-row.assistant .bubble").last().textContent(), `The file says: ${JSON.stringify(doc)}`);
  await shot(page, "14-agent-read-file");
  // After end: SESSION_ENDED for every asset call.
  await page.click("#end");
  await until("ended", async () => (await page.textContent("#status")) === "ended");
  const ended = await inPage(page, async (d) => {
    const codes = [];
    for (const f of [() => d.session.uploadAsset("x"), () => d.session.listAssets(), () => d.session.readAsset("/notes.json")]) {
      try {
        await f();
        codes.push("ok");
      } catch (e) {
        codes.push(e.code);
      }
    }
    return codes;
  });
  assert.deepEqual(ended.ok, ["SESSION_ENDED", "SESSION_ENDED", "SESSION_ENDED"]);
  assert.equal(await page.isDisabled('#assets .asset[data-path="/notes.json"] button[data-as="text"]'), true, "the demo disables reads of an ended session's files");
  // The explicit workspace is deleted: resume() cannot reopen it.
  rmSync(join(w.base, "app-workspace"), { recursive: true, force: true });
  await page.click("#resume");
  await page.waitForSelector('#errors .error[data-code="WORKSPACE_OPEN_FAILED"]', { timeout: STEP_MS });
  assert.equal(await page.textContent("#status"), "ended");
  await shot(page, "14-workspace-deleted");
});

/** A page's own request into the loopback interface: answered, refused, or held (an LNA prompt nobody answers). */
function directLoopbackFetch(page, port) {
  return page.evaluate(
    (p) =>
      Promise.race([
        fetch(`http://127.0.0.1:${p}/`, { mode: "no-cors", cache: "no-store" }).then(
          () => "answered",
          (e) => `refused: ${e.message}`,
        ),
        new Promise((r) => setTimeout(() => r("held"), 4_000)),
      ]),
    port,
  );
}

test("14 (public origin) assets with the page marked public: upload and read work without a Local Network Access prompt", T, async (t) => {
  const pub = await servePages();
  t.after(() => pub.close());
  const w = await startWorld(t, mock, { args: [`--ip-address-space-overrides=127.0.0.1:${pub.port}=public`] });
  await w.approve(pub.origin);
  // The override is in force: this page's own fetch into 127.0.0.1 is stopped by
  // Local Network Access, while the same fetch from a local page is answered.
  const control = await w.openDemo(site.origin);
  assert.equal(await directLoopbackFetch(control, mock.port), "answered");
  const { page } = await assetsScenario(t, w, pub.origin, "14-public");
  assert.notEqual(await directLoopbackFetch(page, mock.port), "answered", "a public page's direct loopback fetch is subject to LNA");
  // The bodies went through the extension's transfer frame.
  assert.ok(page.frames().some((f) => f.url() === `chrome-extension://${EXTENSION_ID}/${TRANSFER_PAGE}`), "the transfer frame is in the page");
});

// 15 -----------------------------------------------------------------------
test("15 a profile without the extension: installed false, calls reject with EXTENSION_UNAVAILABLE; the demo says how to install it", T, async (t) => {
  const w = await startWorld(t, mock, { extension: false });
  const page = await w.openDemo(site.origin);
  assert.equal(await page.textContent("#approval"), "Extension not installed");
  assert.equal(await page.isVisible("#install"), true, "the install steps are shown");
  const steps = await page.$$eval("#install li", (lis) => lis.map((l) => l.textContent));
  assert.match(steps[0], /\.\/start\.sh/);
  assert.match(steps[1], /chrome:\/\/extensions.*Developer mode.*Load unpacked.*extension\/dist/);
  await docShot(page, "demo-no-extension");
  const r = await inPage(page, async (d) => {
    const status = await d.client.getApprovalStatus();
    const codes = [];
    for (const f of [() => d.client.listProviders(), () => d.client.createSession({ provider: "codex" }), () => d.client.resumeSession("thr_x"), () => d.client.getSettings()]) {
      try {
        await f();
        codes.push("ok");
      } catch (e) {
        codes.push(e.code);
      }
    }
    return { status, codes };
  });
  assert.deepEqual(r.ok, { status: { installed: false, approved: false, origin: site.origin, appConnected: false }, codes: Array(4).fill("EXTENSION_UNAVAILABLE") });
  await page.click("#create");
  await page.waitForSelector('#errors .error[data-code="EXTENSION_UNAVAILABLE"]', { timeout: STEP_MS });
  await shot(page, "15-no-extension");
});

export { assetsScenario };
