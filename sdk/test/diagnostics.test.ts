// What a web developer can learn when something goes wrong, and the values an
// application needs: onError for a tool the page has no handler for and for a
// throwing handler; the operation sendText()/prepare() ran; a handle's active and
// last operation; a resumed handle's provider and effort level; the exported
// constants (error codes, provider codes, effort levels).
import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, expectTypeOf, it } from "vitest";
import {
  EFFORT_LEVELS,
  ErrorCodes,
  PROVIDER_CODES,
  Pedelec,
  PedelecError,
  type CompletedOperation,
  type EffortLevel,
  type ErrorEventContext,
  type KnownErrorCode,
  type PedelecOperation,
  type PedelecSession,
  type ProviderCode,
} from "../src/index.js";
import { ALL_CODES } from "../src/protocol/codes.js";
import { installPage, settle, snapshot, standardHandlers, type FakeExtension } from "./fake-bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let seq: number;
const ev = (event: Parameters<FakeExtension["event"]>[2], toolOwner?: boolean) => ext.event("thr_1", ++seq, event, toolOwner);
const toolRequest = (id: string, tool: string, operationId = "op_1") =>
  ev({ type: "tool_request", toolRequestId: id, tool, args: {}, operationId, timeoutMs: 60000, deadlineAt: 9 });

beforeEach(() => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  seq = 0;
});
afterEach(() => page.uninstall());

function errorsOf(session: PedelecSession): Array<{ error: PedelecError; ctx: ErrorEventContext }> {
  const got: Array<{ error: PedelecError; ctx: ErrorEventContext }> = [];
  session.onError((error, ctx) => got.push({ error, ctx }));
  return got;
}

/** The fake agent's turn for the next sendText/prepare: started, then finished with `outcome`. */
function turn(operationId: string, outcome: "completed" | "failed" | "cancelled", error: { code: string; message: string } | null = null): void {
  ev({ type: "operation_started", operationId, kind: "send_text" });
  ev({ type: "status", status: "running" });
  ev({ type: "operation_finished", operationId, kind: "send_text", outcome, error: error && { ...error, details: null, source: "core" } });
}

describe("onError hears about the page's tool handlers", () => {
  it("a tool the page registered no handler for: TOOL_HANDLER_NOT_FOUND, source sdk, with the tool, request and operation", async () => {
    const session = await new Pedelec().createSession();
    const errors = errorsOf(session);
    toolRequest("tr_1", "update_counter", "op_7");
    await settle();
    expect(errors).toHaveLength(1);
    const [{ error, ctx }] = errors as [{ error: PedelecError; ctx: ErrorEventContext }];
    expect(error).toBeInstanceOf(PedelecError);
    expect(error.code).toBe("TOOL_HANDLER_NOT_FOUND");
    expect(error.message).toBe("No handler for update_counter in the page");
    expect(error.details).toEqual({ tool: "update_counter", toolRequestId: "tr_1", operationId: "op_7" });
    expect(error.operationId).toBe("op_7");
    expect(ctx).toEqual({ type: "sdk_error", source: "sdk", sessionId: "thr_1", operationId: "op_7" });
    // The agent is told the same.
    expect(ext.callsOf("submit_tool_result")).toEqual([
      { sessionId: "thr_1", toolRequestId: "tr_1", error: { code: "TOOL_HANDLER_NOT_FOUND", message: error.message, details: error.details } },
    ]);
  });

  it("a throwing handler: TOOL_HANDLER_ERROR, source sdk, the thrown value as the cause", async () => {
    const session = await new Pedelec().createSession();
    const errors = errorsOf(session);
    const thrown = new TypeError("counter is not a number");
    session.onTool("update_counter", () => {
      throw thrown;
    });
    session.onTool("rejects", async () => Promise.reject("plain string"));
    toolRequest("tr_1", "update_counter", "op_3");
    toolRequest("tr_2", "rejects", "op_3");
    await settle();
    expect(errors.map(({ error, ctx }) => [error.code, error.message, error.details, error.operationId, ctx.source, ctx.type, ctx.operationId])).toEqual([
      ["TOOL_HANDLER_ERROR", "handler for update_counter threw: counter is not a number", { tool: "update_counter", toolRequestId: "tr_1", operationId: "op_3" }, "op_3", "sdk", "sdk_error", "op_3"],
      ["TOOL_HANDLER_ERROR", "handler for rejects threw: plain string", { tool: "rejects", toolRequestId: "tr_2", operationId: "op_3" }, "op_3", "sdk", "sdk_error", "op_3"],
    ]);
    expect(errors[0]!.error.cause).toBe(thrown);
    expect(errors[1]!.error.cause).toBe("plain string");
  });

  it("a handler that stops because its request was cleared is no error of the page", async () => {
    const session = await new Pedelec().createSession();
    const errors = errorsOf(session);
    session.onTool("slow", (_args, ctx) => new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))));
    toolRequest("tr_1", "slow");
    await settle();
    ev({ type: "tool_request_cleared", toolRequestId: "tr_1", reason: "timeout" });
    await settle();
    expect(errors).toEqual([]);
    expect(ext.callsOf("submit_tool_result")).toEqual([]);
  });

  it("a handler that answers reports nothing", async () => {
    const session = await new Pedelec().createSession();
    const errors = errorsOf(session);
    session.onTool("ok", () => ({ fine: true }));
    toolRequest("tr_1", "ok");
    await settle();
    expect(errors).toEqual([]);
    expect(ext.callsOf("submit_tool_result")).toEqual([{ sessionId: "thr_1", toolRequestId: "tr_1", result: { fine: true } }]);
  });
});

describe("the operation sendText() and prepare() ran", () => {
  it("sendText() resolves with its operation: id, kind and outcome", async () => {
    const session = await new Pedelec().createSession();
    const sent = session.sendText("hello");
    await settle();
    turn("op_1", "completed");
    const op = await sent;
    expect(op).toEqual({ operationId: "op_1", kind: "send_text", outcome: "completed", error: null });
    expectTypeOf(op).toEqualTypeOf<CompletedOperation>();
  });

  it("prepare() resolves with its operation, also when its operation_finished came before the reply", async () => {
    const session = await new Pedelec().createSession();
    ext.on("prepare", () => {
      ev({ type: "operation_started", operationId: "op_p", kind: "prepare" });
      ev({ type: "operation_finished", operationId: "op_p", kind: "prepare", outcome: "completed", error: null });
      return { operationId: "op_p" };
    });
    expect(await session.prepare()).toEqual({ operationId: "op_p", kind: "prepare", outcome: "completed", error: null });
  });

  it("code written for the old Promise<void> keeps compiling and running", async () => {
    const session = await new Pedelec().createSession();
    const send: (text: string) => Promise<void> = (text) => session.sendText(text).then(() => undefined);
    const legacy: { sendText(text: string): Promise<unknown> } = session;
    const sent = legacy.sendText("x");
    await settle();
    turn("op_1", "completed");
    await sent;
    void send;
  });

  it("a failed or cancelled operation rejects with an error naming it", async () => {
    const session = await new Pedelec().createSession();
    const failed = session.sendText("one").then(() => null, (e: PedelecError) => e);
    await settle();
    turn("op_1", "failed", { code: "PROVIDER_FAILED", message: "codex exited with status 1" });
    const e1 = (await failed)!;
    expect([e1.code, e1.message, e1.operationId]).toEqual(["PROVIDER_FAILED", "codex exited with status 1", "op_1"]);
    const cancelled = session.sendText("two").then(() => null, (e: PedelecError) => e);
    await settle();
    turn("op_2", "cancelled");
    const e2 = (await cancelled)!;
    expect([e2.code, e2.operationId]).toEqual(["CANCELLED", "op_2"]);
  });
});

describe("a handle's active and last operation", () => {
  it("follow the operation's events, this page's and another page's", async () => {
    const session = await new Pedelec().createSession();
    expect(session.activeOperation).toBeNull();
    expect(session.lastOperation).toBeNull();
    const sent = session.sendText("hi");
    await settle();
    // Known from the reply, before any event.
    expect(session.activeOperation).toEqual({ operationId: "op_1", kind: "send_text", outcome: null, error: null });
    turn("op_1", "completed");
    await sent;
    expect(session.activeOperation).toBeNull();
    expect(session.lastOperation).toEqual({ operationId: "op_1", kind: "send_text", outcome: "completed", error: null });
    // Another page of the session runs one: seen through the events alone.
    ev({ type: "operation_started", operationId: "op_other", kind: "prepare" });
    await settle();
    expect(session.activeOperation).toEqual({ operationId: "op_other", kind: "prepare", outcome: null, error: null });
    ev({ type: "operation_finished", operationId: "op_other", kind: "prepare", outcome: "failed", error: { code: "PROVIDER_UNREACHABLE", message: "down", details: null, source: "provider" } });
    await settle();
    expect(session.activeOperation).toBeNull();
    const last = session.lastOperation as PedelecOperation;
    expect([last.operationId, last.kind, last.outcome, last.error?.code, last.error?.operationId]).toEqual(["op_other", "prepare", "failed", "PROVIDER_UNREACHABLE", "op_other"]);
  });

  it("a resumed handle starts from the snapshot's; an older reply snapshot does not undo newer events", async () => {
    ext.on("resume_session", (p) => ({
      sessionId: p.sessionId,
      snapshot: snapshot({
        sessionId: p.sessionId,
        status: "running",
        activeOperation: { operationId: "op_5", kind: "send_text", outcome: null, error: null },
        lastOperation: { operationId: "op_4", kind: "prepare", outcome: "cancelled", error: null },
        recentOperations: [{ operationId: "op_4", kind: "prepare", outcome: "cancelled", error: null }],
        lastSeq: 10,
      }),
      toolOwner: true,
    }));
    const session = await new Pedelec().resumeSession("thr_1");
    expect(session.activeOperation).toEqual({ operationId: "op_5", kind: "send_text", outcome: null, error: null });
    expect(session.lastOperation).toMatchObject({ operationId: "op_4", kind: "prepare", outcome: "cancelled" });
    expect(session.lastOperation?.error?.code).toBe("CANCELLED");
    ext.event("thr_1", 11, { type: "operation_finished", operationId: "op_5", kind: "send_text", outcome: "completed", error: null });
    await settle();
    expect(session.activeOperation).toBeNull();
    expect(session.lastOperation).toEqual({ operationId: "op_5", kind: "send_text", outcome: "completed", error: null });
    // end()'s reply carries a snapshot taken before op_5 finished (lastSeq 10).
    ext.on("end", (p) => ({
      snapshot: snapshot({ sessionId: p.sessionId, status: "ended", activeOperation: { operationId: "op_5", kind: "send_text", outcome: null, error: null }, lastSeq: 10 }),
    }));
    await session.end();
    expect(session.activeOperation).toBeNull();
    expect(session.lastOperation?.operationId).toBe("op_5");
  });
});

describe("a resumed handle's provider and effort level", () => {
  it("come from the session's snapshot", async () => {
    ext.on("resume_session", (p) => ({ sessionId: p.sessionId, snapshot: snapshot({ sessionId: p.sessionId, provider: "claude", effortLevel: "medium" }), toolOwner: true }));
    const session = await new Pedelec().resumeSession("thr_1");
    expect(session.provider).toBe("claude");
    expect(session.effortLevel).toBe("medium");
  });

  it("stay empty when the snapshot names none (as the user documentation allows)", async () => {
    ext.on("resume_session", (p) => ({ sessionId: p.sessionId, snapshot: snapshot({ sessionId: p.sessionId, provider: "", effortLevel: "" }), toolOwner: true }));
    const session = await new Pedelec().resumeSession("thr_1");
    expect(session.provider).toBe("");
    expect(session.effortLevel).toBeUndefined();
  });

  it("a created handle keeps what create_session answered", async () => {
    const session = await new Pedelec().createSession({ provider: "opencode", effortLevel: "low" });
    expect([session.provider, session.effortLevel]).toEqual(["opencode", "low"]);
  });
});

describe("constants for applications", () => {
  const schema = JSON.parse(readFileSync(new URL("../../protocol/native-messaging.schema.json", import.meta.url), "utf8"));

  it("ErrorCodes names every known code as its own value", () => {
    expect(ErrorCodes.TOOL_HANDLER_NOT_FOUND).toBe("TOOL_HANDLER_NOT_FOUND");
    expect(Object.values(ErrorCodes)).toEqual([...ALL_CODES]);
    expectTypeOf(ErrorCodes.SESSION_BUSY).toEqualTypeOf<"SESSION_BUSY">();
    expectTypeOf<KnownErrorCode>().toMatchTypeOf<string>();
  });

  it("PROVIDER_CODES and EFFORT_LEVELS are the schema's, frozen", () => {
    expect([...PROVIDER_CODES]).toEqual(schema.$defs.ProviderCode.enum);
    expect([...EFFORT_LEVELS]).toEqual(schema.$defs.EffortLevel.enum);
    expect(Object.isFrozen(PROVIDER_CODES) && Object.isFrozen(EFFORT_LEVELS)).toBe(true);
    expectTypeOf<(typeof PROVIDER_CODES)[number]>().toEqualTypeOf<ProviderCode>();
    expectTypeOf<(typeof EFFORT_LEVELS)[number]>().toEqualTypeOf<EffortLevel>();
  });

  it("createSession takes an EffortLevel (and still any string the runtime may add)", async () => {
    const level: EffortLevel = "high";
    const session = await new Pedelec().createSession({ provider: "codex", effortLevel: level });
    expectTypeOf(session.effortLevel).toEqualTypeOf<EffortLevel | (string & {}) | undefined>();
    expect(ext.callsOf("create_session")[0]).toMatchObject({ provider: "codex", effortLevel: "high" });
  });
});
