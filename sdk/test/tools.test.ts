import { afterEach, beforeEach, describe, expect, expectTypeOf, it, vi } from "vitest";
import { Pedelec, defineTool, type InferArgs, type PedelecSession } from "../src/index.js";
import { fail, installPage, settle, standardHandlers, type FakeExtension } from "./fake-bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let seq = 0;
const toolRequest = (id: string, tool: string, args: unknown = {}, toolOwner = true) =>
  ext.event("thr_1", ++seq, { type: "tool_request", toolRequestId: id, tool, args, operationId: "op_1", timeoutMs: 60000, deadlineAt: 9 }, toolOwner);

beforeEach(() => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  seq = 0;
});
afterEach(() => page.uninstall());

const inlineTool = defineTool({
  name: "update_counter",
  description: "Update the counter.",
  argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number", description: "Counter delta." } } },
  handler: (args) => ({ from: "inline", delta: args.delta }),
});

async function sessionWith(tools = [inlineTool]): Promise<PedelecSession> {
  return new Pedelec().createSession({ skills: { guidance: "g", tools } });
}

describe("tool dispatch", () => {
  it("named handler first, then inline, then generic, else TOOL_HANDLER_NOT_FOUND to the agent", async () => {
    const session = await sessionWith();
    const offNamed = session.onTool("update_counter", (args) => ({ from: "named", args }));
    session.onTool((tool, args) => ({ from: "generic", tool, args }));
    toolRequest("tr_1", "update_counter", { delta: 1 });
    await settle();
    offNamed();
    toolRequest("tr_2", "update_counter", { delta: 2 });
    toolRequest("tr_3", "other_tool", { x: 1 });
    await settle();
    const bare = await new Pedelec().createSession();
    void bare;
    await settle();
    expect(ext.callsOf("submit_tool_result")).toEqual([
      { sessionId: "thr_1", toolRequestId: "tr_1", result: { from: "named", args: { delta: 1 } } },
      { sessionId: "thr_1", toolRequestId: "tr_2", result: { from: "inline", delta: 2 } },
      { sessionId: "thr_1", toolRequestId: "tr_3", result: { from: "generic", tool: "other_tool", args: { x: 1 } } },
    ]);
  });

  it("no handler at all: TOOL_HANDLER_NOT_FOUND is sent to the agent (and to the page's onError, test/diagnostics.test.ts)", async () => {
    await new Pedelec().createSession();
    toolRequest("tr_1", "missing");
    await settle();
    expect(ext.callsOf("submit_tool_result")).toEqual([
      { sessionId: "thr_1", toolRequestId: "tr_1", error: { code: "TOOL_HANDLER_NOT_FOUND", message: "No handler for missing in the page", details: { tool: "missing", toolRequestId: "tr_1", operationId: "op_1" } } },
    ]);
  });

  it("a throwing handler returns TOOL_HANDLER_ERROR; undefined is sent as null", async () => {
    const session = await sessionWith([]);
    session.onTool("boom", () => {
      throw new Error("kaput");
    });
    session.onTool("nothing", () => undefined);
    toolRequest("tr_1", "boom");
    toolRequest("tr_2", "nothing");
    await settle();
    const [a, b] = ext.callsOf("submit_tool_result");
    expect(a).toMatchObject({ toolRequestId: "tr_1", error: { code: "TOOL_HANDLER_ERROR" } });
    expect((a as { error: { message: string } }).error.message).toContain("kaput");
    expect(b).toEqual({ sessionId: "thr_1", toolRequestId: "tr_2", result: null });
  });

  it("a result over 2 MiB or too deep or not JSON is refused in the SDK with a clear error to the agent and the page", async () => {
    const session = await sessionWith([]);
    const errors: string[] = [];
    session.onError((e, ctx) => errors.push(`${ctx.source}:${e.code}:${e.message}`));
    session.onTool("big", () => ({ text: "x".repeat(2 * 1024 * 1024) }));
    session.onTool("deep", () => {
      let v: unknown = 1;
      for (let i = 0; i < 31; i++) v = [v];
      return v;
    });
    session.onTool("ok_deep", () => {
      let v: unknown = 1;
      for (let i = 0; i < 30; i++) v = [v];
      return v;
    });
    session.onTool("cyclic", () => {
      const o: Record<string, unknown> = {};
      o.self = o;
      return o;
    });
    toolRequest("tr_big", "big");
    toolRequest("tr_deep", "deep");
    toolRequest("tr_ok", "ok_deep");
    toolRequest("tr_cyc", "cyclic");
    await settle();
    const byId = Object.fromEntries(ext.callsOf("submit_tool_result").map((c) => [c.toolRequestId, c]));
    expect(byId.tr_big).toMatchObject({ error: { code: "TOOL_HANDLER_ERROR", details: { limitBytes: 2 * 1024 * 1024 } } });
    expect(byId.tr_deep).toMatchObject({ error: { code: "TOOL_HANDLER_ERROR", details: { limitDepth: 30 } } });
    expect(byId.tr_ok).toHaveProperty("result");
    expect(byId.tr_cyc).toMatchObject({ error: { code: "TOOL_HANDLER_ERROR" } });
    expect(errors).toHaveLength(3);
    expect(errors.every((e) => e.startsWith("sdk:TOOL_HANDLER_ERROR:"))).toBe(true);
    expect(errors.join()).toMatch(/above the 2097152-byte limit/);
  });

  it("a handler never runs twice for one request (replayed event, handover, snapshot)", async () => {
    const session = await sessionWith([]);
    const runs = vi.fn(() => "done");
    session.onTool("t", runs);
    toolRequest("tr_1", "t");
    ext.event("thr_1", seq, { type: "tool_request", toolRequestId: "tr_1", tool: "t", args: {}, operationId: "op_1", timeoutMs: 1, deadlineAt: 1 }, true);
    ext.broadcast({ kind: "tool_handover", sessionId: "thr_1", request: { toolRequestId: "tr_1", tool: "t", args: {}, operationId: "op_1", timeoutMs: 1, deadlineAt: 1 } });
    await settle();
    expect(runs).toHaveBeenCalledTimes(1);
    expect(ext.callsOf("submit_tool_result")).toHaveLength(1);
  });

  it("a route that is not the tool owner does not run the handler; a handover makes it run", async () => {
    const session = await sessionWith([]);
    const runs = vi.fn(() => "mine");
    session.onTool("t", runs);
    toolRequest("tr_1", "t", {}, false);
    await settle();
    expect(runs).not.toHaveBeenCalled();
    ext.broadcast({ kind: "tool_handover", sessionId: "thr_1", request: { toolRequestId: "tr_1", tool: "t", args: {}, operationId: "op_1", timeoutMs: 1, deadlineAt: 1 } });
    await settle();
    expect(runs).toHaveBeenCalledTimes(1);
    expect(ext.callsOf("submit_tool_result")).toEqual([{ sessionId: "thr_1", toolRequestId: "tr_1", result: "mine" }]);
  });

  it("ctx.signal aborts when the request is cleared (timeout) and no result is submitted", async () => {
    const session = await sessionWith([]);
    let ctxSignal!: AbortSignal;
    let finish!: () => void;
    session.onTool("t", (_a, ctx) => {
      ctxSignal = ctx.signal;
      return new Promise<string>((r) => (finish = () => r("late")));
    });
    toolRequest("tr_1", "t");
    await settle();
    ext.event("thr_1", ++seq, { type: "tool_request_cleared", toolRequestId: "tr_1", reason: "timeout" });
    await settle();
    expect(ctxSignal.aborted).toBe(true);
    finish();
    await settle();
    expect(ext.callsOf("submit_tool_result")).toEqual([]);
  });

  it("a request cleared before its handler was chosen never runs it", async () => {
    const session = await sessionWith([]);
    const runs = vi.fn();
    session.onTool("t", runs);
    toolRequest("tr_1", "t");
    ext.event("thr_1", ++seq, { type: "tool_request_cleared", toolRequestId: "tr_1", reason: "resolved" });
    await settle();
    expect(runs).not.toHaveBeenCalled();
  });

  it("a result is never resubmitted after a disconnect; TOOL_REQUEST_NOT_PENDING is quiet", async () => {
    const session = await sessionWith([]);
    const errors: string[] = [];
    session.onError((e) => errors.push(e.code));
    ext.on("submit_tool_result", () => {
      throw fail("TOOL_REQUEST_NOT_PENDING");
    });
    session.onTool("t", () => 1);
    toolRequest("tr_1", "t");
    await settle();
    expect(errors).toEqual([]);
    let finish!: () => void;
    session.onTool("slow", () => new Promise<number>((r) => (finish = () => r(2))));
    toolRequest("tr_2", "slow");
    await settle();
    ext.dropAll();
    await settle();
    finish();
    await settle();
    expect(ext.callsOf("submit_tool_result").map((c) => c.toolRequestId)).toEqual(["tr_1"]);
  });

  it("handler context carries ids, seq and at", async () => {
    const session = await sessionWith([]);
    const seen: unknown[] = [];
    session.onTool("t", (_a, ctx) => {
      const { signal, ...rest } = ctx;
      seen.push(rest, signal instanceof AbortSignal);
      return null;
    });
    toolRequest("tr_1", "t");
    await settle();
    expect(seen).toEqual([
      { type: "tool_request", sessionId: "thr_1", seq: 1, at: 1764524403001, operationId: "op_1", toolRequestId: "tr_1", tool: "t" },
      true,
    ]);
  });

  it("onTool rejects bad arguments with INVALID_INPUT", async () => {
    const session = await sessionWith([]);
    expect(() => session.onTool("x", 3 as never)).toThrow(/onTool/);
  });
});

describe("defineTool types", () => {
  it("derives the handler's argument type from argsSchema", () => {
    const tool = defineTool({
      name: "t",
      description: "d",
      argsSchema: {
        type: "object",
        required: ["delta", "mode"],
        properties: {
          delta: { type: "number" },
          mode: { type: "string", enum: ["add", "set"] },
          note: { type: "string" },
          tags: { type: "array", items: { type: "string" } },
          target: { oneOf: [{ type: "string" }, { type: "integer" }] },
          nested: { type: "object", properties: { on: { type: "boolean" } }, required: ["on"] },
        },
      },
      handler: (args) => args.delta,
    });
    type Args = Parameters<NonNullable<typeof tool.handler>>[0];
    expectTypeOf<Args>().toEqualTypeOf<{
      delta: number;
      mode: "add" | "set";
      note?: string;
      tags?: string[];
      target?: string | number;
      nested?: { on: boolean };
    }>();
    expectTypeOf<InferArgs<{ type: "object"; properties: {}; required: [] }>>().toEqualTypeOf<{}>();
    expect(tool.name).toBe("t");
  });
});
