// Conversation history in the browser: a kept session's talk (with a page
// tool call) comes back after a reload — the demo shows the same transcript
// from session.getHistory(), then continues live without showing anything
// twice. Debian's Chromium, the unpacked extension, the real native host,
// pedelecd and the real codex CLI against the mock model server (harness.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { codexTool, inPage, shot, startWorld, STEP_MS, suiteParts } from "./harness.mjs";
import { createInDemo, demoErrors, sendInDemo } from "./demo-steps.mjs";

let mock;
let site;
suiteParts({ sites: 1 }, (m, a) => ([mock, site] = [m, a]));

/** The demo's chat as [kind, text] rows: the user's texts, the agent's messages, the tool calls. */
function transcript(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll("#chat .msg-row")]
      .map((row) => [["user", "assistant", "tool"].find((k) => row.classList.contains(k)), row.textContent])
      .filter(([kind]) => kind !== undefined),
  );
}

test("a reload with a kept session shows the same transcript (a tool call with its result), then continues live without duplicates", { timeout: 240_000 }, async (t) => {
  const w = await startWorld(t, mock);
  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);

  // A talk: a turn with a page tool call, then a plain one.
  const id = await createInDemo(page, { provider: "codex", persistent: true });
  await mock.script(codexTool("update_counter", { delta: 3 }, "The counter is now {output}."));
  await sendInDemo(page, "Add 3 to the counter");
  assert.equal(await page.textContent("#counter"), "3");
  await mock.script({ mode: "reply", text: "Plain **second** answer." });
  await sendInDemo(page, "And a plain question");
  const before = await transcript(page);
  assert.deepEqual(before, [
    ["user", "Add 3 to the counter"],
    ["tool", 'tool update_counter({"delta":3}) → {"counter":3,"delta":3}'],
    ["assistant", 'The counter is now {"counter":3,"delta":3}.'],
    ["user", "And a plain question"],
    ["assistant", "Plain second answer."],
  ]);
  assert.deepEqual(await demoErrors(page), []);

  // Reload: the page starts empty; resuming the saved session shows the conversation as it was.
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  assert.deepEqual(await transcript(page), []);
  await page.click("#resume-saved");
  await page.waitForFunction(() => [...document.querySelectorAll("#chat .msg-row.system")].some((r) => r.textContent.startsWith("Resumed ")), null, { timeout: STEP_MS });
  assert.deepEqual(await transcript(page), before, "the same transcript after the reload");
  assert.equal(await page.textContent("#session-id"), id);

  // What the page read: the SDK's typed entries, every kind of a turn with a tool call, joined by coveredSeq.
  const read = await inPage(page, async (d) => {
    const h = await d.session.getHistory();
    return { types: h.entries.map((e) => e.type), hasMore: h.hasMore, coveredSeq: h.coveredSeq, outcome: h.entries.find((e) => e.type === "tool_outcome") };
  });
  assert.equal(read.error, undefined, JSON.stringify(read.error));
  assert.deepEqual(read.ok.types, [
    "operation_started", "user_text", "tool_request", "tool_outcome", "agent_message", "operation_finished",
    "operation_started", "user_text", "agent_message", "operation_finished",
  ]);
  assert.equal(read.ok.hasMore, false);
  assert.ok(read.ok.coveredSeq > 0);
  assert.equal(read.ok.outcome.reason, "resolved");
  assert.deepEqual(read.ok.outcome.result, { counter: 3, delta: 3 });

  // Live again: the next turn (with a tool call the resumed handle answers) appends, nothing repeats.
  await mock.script(codexTool("update_counter", { delta: 4 }, "Now {output}."));
  await sendInDemo(page, "Add 4");
  assert.deepEqual(await transcript(page), [
    ...before,
    ["user", "Add 4"],
    ["tool", 'tool update_counter({"delta":4}) → {"counter":4,"delta":4}'],
    ["assistant", 'Now {"counter":4,"delta":4}.'],
  ]);
  assert.deepEqual(await demoErrors(page), []);
  await shot(page, "history-after-reload");

  // Once more after a second reload: the whole conversation, all three turns.
  const all = await transcript(page);
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  await page.click("#resume-saved");
  await page.waitForFunction(() => [...document.querySelectorAll("#chat .msg-row.system")].some((r) => r.textContent.startsWith("Resumed ")), null, { timeout: STEP_MS });
  assert.deepEqual(await transcript(page), all);
  assert.deepEqual(await demoErrors(page), []);
});
