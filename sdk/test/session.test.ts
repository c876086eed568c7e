import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Pedelec, PedelecError, type PedelecSession } from "../src/index.js";
import { fail, installPage, settle, snapshot, standardHandlers, type FakeExtension } from "./fake-bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let pedelec: Pedelec;
let session: PedelecSession;
let seq: number;
const ev = (event: Parameters<FakeExtension["event"]>[2], toolOwner?: boolean) => ext.event("thr_1", ++seq, event, toolOwner);

beforeEach(async () => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  pedelec = new Pedelec();
  session = await pedelec.createSession({ provider: "codex" });
  seq = 0;
});
afterEach(() => {
  page.uninstall();
  vi.useRealTimers();
});

async function rejection(p: Promise<unknown>): Promise<PedelecError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PedelecError);
    return e as PedelecError;
  }
  throw new Error("expected a rejection");
}

function state<T>(p: Promise<T>): { value?: T; error?: PedelecError; done: boolean } {
  const s: { value?: T; error?: PedelecError; done: boolean } = { done: false };
  p.then(
    (v) => Object.assign(s, { value: v, done: true }),
    (e: PedelecError) => Object.assign(s, { error: e, done: true }),
  );
  return s;
}

describe("callbacks", () => {
  it("deliver chat, deltas, status and core errors with their context; disposers stop them", async () => {
    const got: unknown[] = [];
    const offChat = session.onChat((t, ctx) => got.push(["chat", t, ctx]));
    session.onChatDelta((d, ctx) => got.push(["delta", d, ctx.operationId, ctx.seq]));
    session.onStatus((s, ctx) => got.push(["status", s, ctx.type]));
    session.onError((e, ctx) => got.push(["error", e.code, e.message, e.details, ctx.source, ctx.type, ctx.operationId]));
    ev({ type: "status", status: "running" });
    ev({ type: "chat_delta", operationId: "op_1", messageId: "m1", text: "Hel" });
    ev({ type: "chat", operationId: "op_1", messageId: "m1", text: "Hello" });
    ev({ type: "error", code: "PROVIDER_FAILED", message: "codex exited", details: { exit: 1 }, source: "provider", operationId: "op_1" });
    await settle();
    expect(got).toEqual([
      ["status", "running", "status"],
      ["delta", "Hel", "op_1", 2],
      ["chat", "Hello", { type: "chat", sessionId: "thr_1", seq: 3, at: 1764524403003, operationId: "op_1" }],
      // A provider error is "core" to the page: it came through Core's events.
      ["error", "PROVIDER_FAILED", "codex exited", { exit: 1 }, "core", "error", "op_1"],
    ]);
    offChat();
    ev({ type: "chat", operationId: "op_1", messageId: "m2", text: "again" });
    await settle();
    expect(got.filter((g) => (g as unknown[])[0] === "chat")).toHaveLength(1);
  });

  it("take a merged chat_delta (firstSeq..seq) as its deltas' text once, and drop its replay", async () => {
    const got: unknown[] = [];
    session.onChatDelta((d, ctx) => got.push([d, ctx.seq]));
    const merged = { type: "chat_delta", operationId: "op_1", messageId: "m1", text: "Hello, wor" } as const;
    ext.broadcast({ kind: "event", frame: { type: "event", sessionId: "thr_1", firstSeq: 1, seq: 3, at: 1764524403003, event: merged }, toolOwner: false });
    ext.event("thr_1", 4, { type: "chat_delta", operationId: "op_1", messageId: "m1", text: "ld" });
    // The same frames again (a replay after a re-attach): duplicates.
    ext.broadcast({ kind: "event", frame: { type: "event", sessionId: "thr_1", firstSeq: 1, seq: 3, at: 1764524403003, event: merged }, toolOwner: false });
    ext.event("thr_1", 4, { type: "chat_delta", operationId: "op_1", messageId: "m1", text: "ld" });
    await settle();
    expect(got).toEqual([
      ["Hello, wor", 3],
      ["ld", 4],
    ]);
  });

  it("drop events already seen (by seq), e.g. replayed after a re-attach", async () => {
    const chats: string[] = [];
    session.onChat((t) => chats.push(t));
    ext.event("thr_1", 1, { type: "chat", operationId: "op_1", messageId: "a", text: "one" });
    ext.event("thr_1", 2, { type: "chat", operationId: "op_1", messageId: "b", text: "two" });
    ext.event("thr_1", 1, { type: "chat", operationId: "op_1", messageId: "a", text: "one" });
    ext.event("thr_1", 2, { type: "chat", operationId: "op_1", messageId: "b", text: "two" });
    ext.event("thr_1", 3, { type: "chat", operationId: "op_1", messageId: "c", text: "three" });
    await settle();
    expect(chats).toEqual(["one", "two", "three"]);
  });

  it("a throwing callback does not stop the others", async () => {
    const chats: string[] = [];
    const onError = vi.fn();
    process.once("uncaughtException", onError);
    session.onChat(() => {
      throw new Error("page bug");
    });
    session.onChat((t) => chats.push(t));
    ev({ type: "chat", operationId: "op_1", messageId: "a", text: "hi" });
    await settle();
    expect(chats).toEqual(["hi"]);
  });

  it("usage follows usage events and a missing usage never resets it", async () => {
    ev({ type: "usage", totalTokens: 50, inputTokens: 40, outputTokens: 10 });
    await settle();
    expect(session.usage.totalTokens).toBe(50);
    ev({ type: "snapshot", snapshot: snapshot({ usage: null, lastSeq: 10, replayGap: true }) });
    await settle();
    expect(session.usage.totalTokens).toBe(50);
  });
});

describe("sendText", () => {
  it("resolves only when its operation completes (not on the reply, not on idle)", async () => {
    const s = state(session.sendText("hello"));
    await settle();
    expect(ext.callsOf("send_text")).toEqual([{ sessionId: "thr_1", text: "hello" }]);
    ev({ type: "operation_started", operationId: "op_1", kind: "send_text" });
    ev({ type: "status", status: "idle" });
    await settle();
    expect(s.done).toBe(false);
    ev({ type: "operation_finished", operationId: "op_1", kind: "send_text", outcome: "completed", error: null });
    await settle();
    expect(s).toMatchObject({ done: true, value: { operationId: "op_1", kind: "send_text", outcome: "completed", error: null } });
  });

  it("getStatus() right after it resolves is the status Core moves to; onStatus fires once", async () => {
    const statuses: string[] = [];
    session.onStatus((s) => statuses.push(s));
    const turn = session.sendText("x");
    await settle();
    ev({ type: "status", status: "running" });
    ev({ type: "operation_finished", operationId: "op_1", kind: "send_text", outcome: "completed", error: null });
    await turn;
    expect(session.getStatus()).toBe("idle");
    ev({ type: "status", status: "idle" }); // Core's own status event, right after
    await settle();
    expect(statuses).toEqual(["running", "idle"]);
    const failing = session.sendText("y");
    failing.catch(() => undefined);
    await settle();
    ev({ type: "status", status: "running" });
    ev({ type: "operation_finished", operationId: "op_2", kind: "send_text", outcome: "failed", error: { code: "PROVIDER_FAILED", message: "x", details: null, source: "provider" } });
    await failing.catch(() => undefined);
    expect(session.getStatus()).toBe("error");
  });

  it("rejects with the operation's error; a cancelled one with CANCELLED", async () => {
    const a = session.sendText("a");
    await settle();
    ev({ type: "operation_finished", operationId: "op_1", kind: "send_text", outcome: "failed", error: { code: "PROVIDER_FAILED", message: "boom", details: null, source: "provider" } });
    const e = await rejection(a);
    expect([e.code, e.message]).toEqual(["PROVIDER_FAILED", "boom"]);
    const b = session.sendText("b");
    await settle();
    ev({ type: "operation_finished", operationId: "op_2", kind: "send_text", outcome: "cancelled", error: null });
    expect((await rejection(b)).code).toBe("CANCELLED");
  });

  it("settles when operation_finished arrived before the send_text reply", async () => {
    ext.on("send_text", async () => {
      ev({ type: "operation_finished", operationId: "op_5", kind: "send_text", outcome: "completed", error: null });
      await settle();
      return { operationId: "op_5" };
    });
    await session.sendText("fast");
  });

  it("settles from a replay-gap snapshot's recentOperations when the events were missed", async () => {
    const s = state(session.sendText("x"));
    await settle();
    ev({
      type: "snapshot",
      snapshot: snapshot({
        lastSeq: 40,
        replayGap: true,
        recentOperations: [{ operationId: "op_1", kind: "send_text", outcome: "completed", error: null }],
        lastOperation: { operationId: "op_1", kind: "send_text", outcome: "completed", error: null },
      }),
    });
    await settle();
    expect(s).toMatchObject({ done: true });
    expect(s.error).toBeUndefined();
  });

  it("a second call while the first is being accepted is SESSION_BUSY; Core's SESSION_BUSY passes too", async () => {
    ext.answer = false;
    const first = session.sendText("one");
    first.catch(() => undefined);
    expect((await rejection(session.sendText("two"))).code).toBe("SESSION_BUSY");
    ext.answer = true;
    ext.on("send_text", () => {
      throw fail("SESSION_BUSY");
    });
    const other = await new Pedelec().createSession();
    expect((await rejection(other.sendText("x"))).code).toBe("SESSION_BUSY");
  });

  it("send during prepare: SESSION_BUSY", async () => {
    let release!: () => void;
    ext.on("prepare", () => new Promise((r) => (release = () => r({ operationId: "op_p" }))));
    const prep = state(session.prepare());
    await settle();
    expect((await rejection(session.sendText("now"))).code).toBe("SESSION_BUSY");
    release();
    await settle();
    ext.on("send_text", () => {
      throw fail("SESSION_BUSY", "prepare running");
    });
    expect((await rejection(session.sendText("now"))).code).toBe("SESSION_BUSY");
    ev({ type: "operation_finished", operationId: "op_p", kind: "prepare", outcome: "completed", error: null });
    await settle();
    expect(prep).toMatchObject({ done: true });
  });

  it("rejects with SESSION_ENDED after end(); INVALID_INPUT for a non-string", async () => {
    expect((await rejection(session.sendText(3 as never))).code).toBe("INVALID_INPUT");
    await session.end();
    expect((await rejection(session.sendText("x"))).code).toBe("SESSION_ENDED");
    expect((await rejection(session.prepare())).code).toBe("SESSION_ENDED");
    expect(ext.callsOf("send_text")).toEqual([]);
  });

  it("cancel() sends cancel; the running sendText then rejects with CANCELLED", async () => {
    const s = session.sendText("long");
    await settle();
    await session.cancel();
    expect(ext.callsOf("cancel")).toEqual([{ sessionId: "thr_1" }]);
    ev({ type: "operation_finished", operationId: "op_1", kind: "send_text", outcome: "cancelled", error: null });
    expect((await rejection(s)).code).toBe("CANCELLED");
  });
});

describe("end", () => {
  it("is idempotent: one request, onEnded once, status ended", async () => {
    const ended = vi.fn();
    const statuses: string[] = [];
    session.onEnded(ended);
    session.onStatus((s) => statuses.push(s));
    await Promise.all([session.end(), session.end()]);
    await session.end();
    ev({ type: "status", status: "ended" });
    ev({ type: "ended", reason: "requested" });
    await settle();
    expect(ext.callsOf("end")).toEqual([{ sessionId: "thr_1" }]);
    expect(ended).toHaveBeenCalledTimes(1);
    expect(ended.mock.calls[0]![0]).toMatchObject({ type: "ended", sessionId: "thr_1", reason: "requested" });
    expect(statuses).toEqual(["ended"]);
    expect(session.getStatus()).toBe("ended");
  });

  it("an ended event (auto_end elsewhere, shutdown) ends the handle once with its reason", async () => {
    const ended = vi.fn();
    session.onEnded(ended);
    ev({ type: "status", status: "ended" });
    ev({ type: "ended", reason: "shutdown" });
    await settle();
    expect(ended).toHaveBeenCalledTimes(1);
    expect(ended.mock.calls[0]![0]).toMatchObject({ reason: "shutdown", seq: 2 });
    await session.end();
    expect(ext.callsOf("end")).toEqual([]);
  });

  it("a failed end rejects, reports an sdk error and leaves the handle usable", async () => {
    ext.on("end", () => {
      throw fail("CORE_UNAVAILABLE");
    });
    const errors: unknown[] = [];
    session.onError((e, ctx) => errors.push([e.code, ctx.source, ctx.type]));
    expect((await rejection(session.end())).code).toBe("CORE_UNAVAILABLE");
    expect(errors).toEqual([["CORE_UNAVAILABLE", "sdk", "sdk_error"]]);
    expect(session.getStatus()).toBe("idle");
    const s = state(session.sendText("still works"));
    await settle();
    expect(ext.callsOf("send_text")).toHaveLength(1);
    expect(s.done).toBe(false);
  });

  it("end during a tool call: the handler's signal aborts and its result is never submitted", async () => {
    let signal!: AbortSignal;
    let finish!: (v: unknown) => void;
    session.onTool("slow", (_args, ctx) => {
      signal = ctx.signal;
      return new Promise((r) => (finish = r));
    });
    const turn = session.sendText("go");
    turn.catch(() => undefined);
    await settle();
    ev({ type: "tool_request", toolRequestId: "tr_1", tool: "slow", args: {}, operationId: "op_1", timeoutMs: 60000, deadlineAt: 2 });
    await settle();
    expect(signal.aborted).toBe(false);
    await session.end();
    ev({ type: "tool_request_cleared", toolRequestId: "tr_1", reason: "dropped" });
    ev({ type: "operation_finished", operationId: "op_1", kind: "send_text", outcome: "cancelled", error: null });
    await settle();
    expect(signal.aborted).toBe(true);
    finish({ late: true });
    await settle();
    expect(ext.callsOf("submit_tool_result")).toEqual([]);
    expect((await rejection(turn)).code).toMatch(/CANCELLED|SESSION_ENDED/);
  });
});

describe("resume (same handle)", () => {
  it("resolves without a request while active", async () => {
    await session.resume();
    expect(ext.callsOf("reactivate")).toEqual([]);
  });

  it("double resume shares one request; ended → idle; onEnded fires again on the next end", async () => {
    const ended = vi.fn();
    session.onEnded(ended);
    await session.end();
    await Promise.all([session.resume(), session.resume()]);
    expect(ext.callsOf("reactivate")).toHaveLength(1);
    expect(session.getStatus()).toBe("idle");
    const s = state(session.sendText("continue"));
    await settle();
    expect(ext.callsOf("send_text")).toHaveLength(1);
    expect(s.done).toBe(false);
    await session.end();
    expect(ended).toHaveBeenCalledTimes(2);
  });

  it.each(["WORKSPACE_OPEN_FAILED", "THREAD_NOT_FOUND"])("%s rejects and the handle stays ended", async (code) => {
    await session.end();
    ext.on("reactivate", () => {
      throw fail(code);
    });
    expect((await rejection(session.resume())).code).toBe(code);
    expect(session.getStatus()).toBe("ended");
    expect((await rejection(session.sendText("x"))).code).toBe("SESSION_ENDED");
  });
});

describe("disconnect", () => {
  it("detaches every handle: EXTENSION_DISCONNECTED once, pending calls and turns reject, every later call rejects", async () => {
    const errors: unknown[] = [];
    session.onError((e, ctx) => errors.push([e.code, ctx.source]));
    const turn = session.sendText("running"); // has its operation id
    await settle();
    ext.answer = false;
    const pendingCancel = session.cancel(); // no answer yet
    await settle();
    ext.dropAll();
    expect((await rejection(turn)).code).toBe("EXTENSION_DISCONNECTED");
    expect((await rejection(pendingCancel)).code).toBe("EXTENSION_DISCONNECTED");
    for (const p of [session.sendText("x"), session.prepare(), session.cancel(), session.end(), session.resume(), session.listAssets(), session.readAsset("/a"), session.uploadAsset("x")]) {
      expect((await rejection(p)).code).toBe("EXTENSION_DISCONNECTED");
    }
    await settle();
    expect(errors).toEqual([["EXTENSION_DISCONNECTED", "sdk"]]);
  });

  it("a detached handle stays detached when the client reconnects; resumeSession gives a new handle", async () => {
    ext.dropAll();
    await settle();
    const again = await pedelec.resumeSession("thr_1");
    expect(again).not.toBe(session);
    expect((await rejection(session.resume())).code).toBe("EXTENSION_DISCONNECTED");
    const chats: string[] = [];
    again.onChat((t) => chats.push(t));
    session.onChat(() => chats.push("old handle"));
    ev({ type: "chat", operationId: "op_1", messageId: "m", text: "to the new one" });
    await settle();
    expect(chats).toEqual(["to the new one"]);
  });

  it("an ended handle is detached by a lost route too: its resume() rejects", async () => {
    await session.end();
    ext.dropAll();
    await settle();
    expect((await rejection(session.resume())).code).toBe("EXTENSION_DISCONNECTED");
    expect(ext.callsOf("reactivate")).toEqual([]);
  });

  it("a session lost at re-attach (THREAD_NOT_FOUND) is reported and detached", async () => {
    const errors: string[] = [];
    session.onError((e) => errors.push(e.code));
    ext.broadcast({ kind: "session_lost", sessionId: "thr_1", error: { code: "THREAD_NOT_FOUND", message: "gone", details: null } });
    await settle();
    expect(errors).toEqual(["THREAD_NOT_FOUND"]);
    // Core lost the thread: calls say so (not "detached, resume it"), resume() included.
    expect((await rejection(session.sendText("x"))).code).toBe("THREAD_NOT_FOUND");
    expect((await rejection(session.resume())).code).toBe("THREAD_NOT_FOUND");
    expect(session.detached).toBe(true);
  });
});
