import { describe, expect, it } from "vitest";
import type { HistoryEntry } from "@pedelec/sdk";
import { historyRows, LiveJoin, resultText, settledCalls, toolNote } from "../src/history.js";

const base = { at: 1764524403000, operationId: "op_1" };

describe("the demo's history", () => {
  it("shows a talk with a tool call in the rows the live chat makes", () => {
    const entries: HistoryEntry[] = [
      { ...base, type: "operation_started", id: 1, seq: 3, kind: "send_text" },
      { ...base, type: "user_text", id: 2, seq: 3, text: "Add 3 to the counter", truncated: false },
      { ...base, type: "tool_request", id: 3, seq: 6, toolRequestId: "tr_1", tool: "update_counter", args: { delta: 3 }, timeoutMs: 60000, deadlineAt: 1 },
      // Keys in another order than the handler returned them: the note reads the same.
      { ...base, type: "tool_outcome", id: 4, seq: 8, toolRequestId: "tr_1", reason: "resolved", result: { delta: 3, counter: 3 }, error: null, truncated: false, resultPreview: null },
      { ...base, type: "agent_message", id: 5, seq: 12, messageId: "m1", text: "The counter is **3**." },
      { ...base, type: "operation_finished", id: 6, seq: 14, kind: "send_text", outcome: "completed", error: null, usage: null },
    ];
    expect(historyRows(entries)).toEqual([
      { kind: "user", text: "Add 3 to the counter" },
      // What the live handler notes for the same call (main.ts: toolNote(ctx.tool, args, resultText(result))).
      { kind: "tool", text: toolNote("update_counter", { delta: 3 }, resultText({ counter: 3, delta: 3 })) },
      { kind: "assistant", text: "The counter is **3**." },
    ]);
    expect(historyRows(entries)[1]!.text).toBe('tool update_counter({"delta":3}) → {"counter":3,"delta":3}');
  });

  it("notes errors, cancellations, unanswered and truncated tool calls, dropped entries; a pending call is left to the handler", () => {
    const call = (id: string, tool = "add_todo"): HistoryEntry => ({ ...base, type: "tool_request", id: 2, seq: 2, toolRequestId: id, tool, args: { text: "milk" }, timeoutMs: 1, deadlineAt: 1 });
    const rows = historyRows([
      { ...base, type: "dropped", id: 1, seq: 1, operationId: null, count: 40 },
      call("tr_1"),
      { ...base, type: "tool_outcome", id: 3, seq: 3, toolRequestId: "tr_1", reason: "timeout", result: null, error: null, truncated: false, resultPreview: null },
      call("tr_2"),
      { ...base, type: "tool_outcome", id: 5, seq: 5, toolRequestId: "tr_2", reason: "resolved", result: null, error: { code: "TOOL_HANDLER_ERROR", message: "no list" }, truncated: false, resultPreview: null },
      call("tr_3"),
      { ...base, type: "tool_outcome", id: 7, seq: 7, toolRequestId: "tr_3", reason: "resolved", result: null, error: null, truncated: true, resultPreview: '{"todos":["a' },
      { ...base, type: "error", id: 8, seq: 8, code: "PROVIDER_FAILED", message: "codex exited with status 1", details: null, source: "provider" },
      { ...base, type: "operation_finished", id: 9, seq: 9, kind: "send_text", outcome: "cancelled", error: null, usage: null },
      call("tr_4", "update_counter"),
    ]);
    expect(rows).toEqual([
      { kind: "system", text: "40 earlier entries are no longer kept." },
      { kind: "tool", text: 'tool add_todo({"text":"milk"}) → timeout' },
      { kind: "tool", text: 'tool add_todo({"text":"milk"}) → error TOOL_HANDLER_ERROR: no list' },
      { kind: "tool", text: 'tool add_todo({"text":"milk"}) → {"todos":["a… (truncated)' },
      { kind: "system", text: "PROVIDER_FAILED: codex exited with status 1" },
      { kind: "system", text: "Cancelled." },
    ]);
  });

  it("joins live events: they wait while the history loads, then only those after coveredSeq run, in order", () => {
    const shown: string[] = [];
    const join = new LiveJoin();
    join.live(11, () => shown.push("chat 11"));
    join.afterHistory(() => shown.push("tool note"));
    join.live(12, () => shown.push("chat 12"));
    join.live(13, () => shown.push("chat 13"));
    expect(shown).toEqual([]);
    shown.push("history");
    join.shown(12);
    expect(shown).toEqual(["history", "tool note", "chat 13"]);
    join.live(12, () => shown.push("late duplicate"));
    join.live(14, () => shown.push("chat 14"));
    join.live(undefined, () => shown.push("sdk error"));
    expect(shown).toEqual(["history", "tool note", "chat 13", "chat 14", "sdk error"]);
  });

  it("knows the calls whose outcome it shows, so a pending call answered meanwhile is not noted twice", () => {
    const entries: HistoryEntry[] = [
      { ...base, type: "tool_request", id: 1, seq: 1, toolRequestId: "tr_1", tool: "update_counter", args: { delta: 5 }, timeoutMs: 1, deadlineAt: 1 },
      { ...base, type: "tool_outcome", id: 2, seq: 2, toolRequestId: "tr_1", reason: "resolved", result: { counter: 5 }, error: null, truncated: false, resultPreview: null },
      { ...base, type: "tool_request", id: 3, seq: 3, toolRequestId: "tr_2", tool: "add_todo", args: { text: "x" }, timeoutMs: 1, deadlineAt: 1 },
    ];
    expect([...settledCalls(entries)]).toEqual(["tr_1"]);
    expect(historyRows(entries).filter((r) => r.kind === "tool")).toHaveLength(1);
  });
});
