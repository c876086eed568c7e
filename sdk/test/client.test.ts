import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Pedelec, PedelecError, defineTool } from "../src/index.js";
import { fail, installPage, settle, snapshot, standardHandlers, type FakeExtension, type FakeWindow } from "./fake-bridge.js";
import { BRIDGE_NAMESPACE } from "../src/protocol/bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let win: FakeWindow;
beforeEach(() => {
  page = installPage();
  ext = page.ext;
  win = page.win;
  standardHandlers(ext);
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

describe("outside a browser page", () => {
  it("the constructor never throws and every method rejects with EXTENSION_UNAVAILABLE", async () => {
    page.uninstall();
    const pedelec = new Pedelec(null as never);
    for (const p of [
      pedelec.getApprovalStatus(),
      pedelec.listProviders(),
      pedelec.getSettings(),
      pedelec.createSession(),
      pedelec.createSession({ provider: 7 as never }),
      pedelec.resumeSession("thr_1"),
      pedelec.resumeSession(""),
    ]) {
      expect((await rejection(p)).code).toBe("EXTENSION_UNAVAILABLE");
    }
  });
});

describe("getApprovalStatus", () => {
  it("reports not installed when nothing answers the probe within 500 ms", async () => {
    ext.installed = false;
    vi.useFakeTimers();
    const p = new Pedelec().getApprovalStatus();
    await vi.advanceTimersByTimeAsync(499);
    let done = false;
    void p.then(() => (done = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(2);
    expect(await p).toEqual({ installed: false, approved: false, origin: "https://app.example", appConnected: false });
  });

  it("asks the worker's status (never an approval) when installed", async () => {
    ext.on("status", () => ({ approved: false, origin: "https://app.example", appConnected: true }));
    const status = await new Pedelec().getApprovalStatus();
    expect(status).toEqual({ installed: true, approved: false, origin: "https://app.example", appConnected: true });
    expect(ext.calls.map((c) => c.method)).toEqual(["status"]);
  });

  it("reports only installed, approved, origin and appConnected, whatever else the worker says", async () => {
    ext.on("status", () => ({ approved: true, origin: "https://app.example", appConnected: true, access: "full", providers: ["codex"], folders: ["/home/u"] }) as never);
    const status = await new Pedelec().getApprovalStatus();
    expect(status).toEqual({ installed: true, approved: true, origin: "https://app.example", appConnected: true });
  });
});

describe("listProviders and getSettings", () => {
  it("listProviders returns exactly the documented fields", async () => {
    ext.on("list_providers", () => ({
      providers: [{ name: "Codex", code: "codex", available: true, isDefault: true, error: null, secret: "x" } as never],
    }));
    expect(await new Pedelec().listProviders()).toEqual([{ name: "Codex", code: "codex", available: true, isDefault: true, error: null }]);
  });

  it("getSettings returns only defaultProvider", async () => {
    ext.on("get_settings", () => ({ defaultProvider: "claude", profiles: {} }) as never);
    expect(await new Pedelec().getSettings()).toEqual({ defaultProvider: "claude" });
  });

  it.each(["APPROVAL_REJECTED", "APPROVAL_TIMEOUT", "OPEN_POPUP_FAILED", "NATIVE_HOST_UNAVAILABLE", "CORE_UNAVAILABLE", "PROTOCOL_MISMATCH"])(
    "passes %s from the extension through unchanged",
    async (code) => {
      ext.on("list_providers", () => {
        throw fail(code, `because ${code}`, { why: code });
      });
      const e = await rejection(new Pedelec().listProviders());
      expect([e.code, e.message, e.details]).toEqual([code, `because ${code}`, { why: code }]);
    },
  );
});

describe("bridge timeout", () => {
  it("is at least 15 s and rejects with SDK_BRIDGE_TIMEOUT", async () => {
    vi.useFakeTimers();
    const pedelec = new Pedelec({ timeoutMs: 10 });
    const opening = pedelec.getApprovalStatus(); // opens the route
    await vi.advanceTimersByTimeAsync(10);
    await opening;
    ext.answer = false;
    const p = pedelec.getSettings();
    let settled = false;
    p.catch(() => (settled = true));
    await vi.advanceTimersByTimeAsync(14_900);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect((await rejection(p)).code).toBe("SDK_BRIDGE_TIMEOUT");
  });

  it("pauses while the approval UI is open", async () => {
    vi.useFakeTimers();
    const pedelec = new Pedelec();
    const opening = pedelec.getApprovalStatus();
    await vi.advanceTimersByTimeAsync(10);
    await opening;
    ext.answer = false;
    const p = pedelec.listProviders();
    let error: PedelecError | null = null;
    p.catch((e: PedelecError) => (error = e));
    await vi.advanceTimersByTimeAsync(20_000);
    ext.broadcast({ kind: "approval", state: "pending" });
    await vi.advanceTimersByTimeAsync(100_000); // the user takes their time
    expect(error).toBeNull();
    ext.broadcast({ kind: "approval", state: "settled" });
    await vi.advanceTimersByTimeAsync(9_000);
    expect(error).toBeNull();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(error!.code).toBe("SDK_BRIDGE_TIMEOUT");
  });

  it("a worker that never welcomes the route times out too", async () => {
    vi.useFakeTimers();
    ext.welcome = false;
    const p = new Pedelec().listProviders();
    p.catch(() => undefined);
    await vi.advanceTimersByTimeAsync(31_000);
    expect((await rejection(p)).code).toBe("SDK_BRIDGE_TIMEOUT");
  });
});

describe("createSession", () => {
  it("sends provider absent when absent (Core resolves the default) and autoEndOnDisconnect true", async () => {
    await new Pedelec().createSession();
    expect(ext.callsOf("create_session")).toEqual([{ autoEndOnDisconnect: true }]);
  });

  it("a provider alone goes with effortLevel default; explicit values pass", async () => {
    const pedelec = new Pedelec();
    await pedelec.createSession({ provider: "codex" });
    await pedelec.createSession({ provider: "opencode", effortLevel: "high", autoEndOnDisconnect: false, workspace: { path: "/w" } });
    expect(ext.callsOf("create_session")).toEqual([
      { provider: "codex", effortLevel: "default", autoEndOnDisconnect: true },
      { provider: "opencode", effortLevel: "high", autoEndOnDisconnect: false, workspace: { path: "/w" } },
    ]);
  });

  it("strips handlers from the manifest and keeps everything else", async () => {
    const session = await new Pedelec().createSession({
      provider: "codex",
      effortLevel: "high",
      skills: {
        guidance: "Use get_current_page.",
        tools: [
          defineTool({
            name: "get_current_page",
            description: "Read the page.",
            argsSchema: { type: "object", properties: {}, required: [] },
            timeoutMs: 5000,
            handler: () => ({ url: "https://app.example/" }),
          }),
          defineTool({ name: "update_counter", description: "d", argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number" } } } }),
        ],
      },
    });
    expect(ext.callsOf("create_session")[0]!.skills).toEqual({
      guidance: "Use get_current_page.",
      tools: [
        { name: "get_current_page", description: "Read the page.", argsSchema: { type: "object", properties: {}, required: [] }, timeoutMs: 5000 },
        { name: "update_counter", description: "d", argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number" } } } },
      ],
    });
    expect(session.sessionId).toBe("thr_1");
    expect(session.provider).toBe("codex");
    expect(session.effortLevel).toBe("high");
    expect(session.getStatus()).toBe("idle");
    expect(session.usage.totalTokens).toBe(0);
    expect(Math.abs(session.sessionCreatedAt - Date.now())).toBeLessThan(5000);
  });

  it.each(["DEFAULT_PROVIDER_NOT_SET", "DEFAULT_PROVIDER_UNAVAILABLE", "MODEL_REQUIRED", "PROVIDER_NOT_FOUND", "TOOLS_MANIFEST_INVALID", "WORKSPACE_OPEN_FAILED"])(
    "Core's %s reaches the page",
    async (code) => {
      ext.on("create_session", () => {
        throw fail(code);
      });
      expect((await rejection(new Pedelec().createSession())).code).toBe(code);
    },
  );

  it("refuses malformed options with INVALID_INPUT before any request", async () => {
    const pedelec = new Pedelec();
    for (const options of [{ provider: "" }, { autoEndOnDisconnect: "yes" }, { workspace: {} }, { skills: { tools: {} } }, { skills: { tools: [{ name: "t", handler: 3 }] } }]) {
      expect((await rejection(pedelec.createSession(options as never))).code).toBe("INVALID_INPUT");
    }
    expect(ext.calls).toEqual([]);
  });
});

describe("resumeSession", () => {
  it("an empty id is INVALID_INPUT before anything reaches the extension", async () => {
    const pedelec = new Pedelec();
    for (const id of ["", "  ", undefined, 3]) expect((await rejection(pedelec.resumeSession(id as never))).code).toBe("INVALID_INPUT");
    expect(ext.probes).toBe(0);
    expect(ext.calls).toEqual([]);
  });

  it("reconciles the snapshot, provider and effort level included", async () => {
    ext.on("resume_session", (p) => ({
      sessionId: p.sessionId,
      snapshot: snapshot({
        sessionId: p.sessionId,
        status: "running",
        activeOperation: { operationId: "op_7", kind: "send_text", outcome: null, error: null },
        usage: { totalTokens: 122, inputTokens: 120, outputTokens: 2 },
        lastSeq: 17,
      }),
      toolOwner: true,
    }));
    const session = await new Pedelec().resumeSession("thr_9");
    expect(session.sessionId).toBe("thr_9");
    expect(session.getStatus()).toBe("running");
    expect(session.usage.totalTokens).toBe(122);
    expect(session.provider).toBe("codex");
    expect(session.effortLevel).toBe("high");
    expect(session.activeOperation).toEqual({ operationId: "op_7", kind: "send_text", outcome: null, error: null });
    // Events the snapshot reflects are duplicates; later ones are delivered.
    const chats: string[] = [];
    session.onChat((t) => chats.push(t));
    ext.event("thr_9", 17, { type: "chat", operationId: "op_7", messageId: "m1", text: "old" });
    ext.event("thr_9", 18, { type: "chat", operationId: "op_7", messageId: "m2", text: "new" });
    await settle();
    expect(chats).toEqual(["new"]);
  });

  it("resuming a session this client already holds returns the same live handle (handlers run once)", async () => {
    const pedelec = new Pedelec();
    const [a, b] = await Promise.all([pedelec.resumeSession("thr_1"), pedelec.resumeSession("thr_1")]);
    expect(a).toBe(b);
    const c = await pedelec.resumeSession("thr_1");
    expect(c).toBe(a);
    const runs: string[] = [];
    a.onTool("t", () => runs.push("a"));
    c.onTool("t", () => runs.push("c"));
    ext.event("thr_1", 1, { type: "tool_request", toolRequestId: "tr_1", tool: "t", args: {}, operationId: "op_1", timeoutMs: 1, deadlineAt: 1 });
    await settle();
    expect(runs).toHaveLength(1);
    expect(ext.callsOf("submit_tool_result")).toHaveLength(1);
  });

  it("an ended session stays ended (no reactivation)", async () => {
    ext.on("resume_session", (p) => ({ sessionId: p.sessionId, snapshot: snapshot({ status: "ended" }), toolOwner: true }));
    const session = await new Pedelec().resumeSession("thr_1");
    expect(session.getStatus()).toBe("ended");
    expect(ext.callsOf("reactivate")).toEqual([]);
    expect((await rejection(session.sendText("x"))).code).toBe("SESSION_ENDED");
  });

  it.each(["THREAD_NOT_FOUND", "THREAD_ACCESS_DENIED", "APPROVAL_REJECTED"])("%s rejects", async (code) => {
    ext.on("resume_session", () => {
      throw fail(code);
    });
    expect((await rejection(new Pedelec().resumeSession("thr_x"))).code).toBe(code);
  });

  it("a pending tool request at resume goes to handlers registered right after the await", async () => {
    ext.on("resume_session", (p) => ({
      sessionId: p.sessionId,
      snapshot: snapshot({
        status: "waiting_tool_result",
        pendingToolRequest: { toolRequestId: "tr_9", tool: "update_counter", args: { delta: 2 }, operationId: "op_2", timeoutMs: 60000, deadlineAt: 1 },
        lastSeq: 4,
      }),
      toolOwner: true,
    }));
    const session = await new Pedelec().resumeSession("thr_1");
    const seen: unknown[] = [];
    session.onTool("update_counter", (args, ctx) => {
      seen.push([args, ctx.toolRequestId, ctx.operationId]);
      return { counter: 2 };
    });
    await settle();
    expect(seen).toEqual([[{ delta: 2 }, "tr_9", "op_2"]]);
    expect(ext.callsOf("submit_tool_result")).toEqual([{ sessionId: "thr_1", toolRequestId: "tr_9", result: { counter: 2 } }]);
  });
});

describe("the route", () => {
  it("ignores window messages from other windows and other namespaces", async () => {
    const pedelec = new Pedelec();
    const session = await pedelec.createSession();
    const chats: string[] = [];
    session.onChat((t) => chats.push(t));
    const clientId = [...ext.clients][0]!;
    const frame = { type: "event", sessionId: "thr_1", seq: 1, at: 1, event: { type: "chat", operationId: "op_1", messageId: "m", text: "spoof" } };
    win.postFromElsewhere({ ns: BRIDGE_NAMESPACE, dir: "to-page", clientId, msg: { kind: "event", frame, toolOwner: false } });
    win.postMessage({ ns: "other", dir: "to-page", clientId, msg: { kind: "event", frame, toolOwner: false } }, "*");
    await settle();
    expect(chats).toEqual([]);
  });

  it("a route the extension refuses before its welcome is EXTENSION_UNAVAILABLE", async () => {
    ext.welcome = false;
    const p = new Pedelec().listProviders();
    await settle();
    ext.dropAll("origin null is not allowed");
    const e = await rejection(p);
    expect([e.code, e.details]).toEqual(["EXTENSION_UNAVAILABLE", { reason: "origin null is not allowed" }]);
  });

  it("a lost route is re-opened for the client's next call", async () => {
    const pedelec = new Pedelec();
    await pedelec.createSession();
    const first = [...ext.clients][0];
    ext.dropAll();
    await settle();
    await pedelec.createSession();
    expect([...ext.clients]).toHaveLength(1);
    expect([...ext.clients][0]).not.toBe(first);
  });

  it("the route's listener is removed when it closes", async () => {
    const pedelec = new Pedelec();
    await pedelec.createSession();
    const before = win.listenerCount;
    ext.dropAll();
    await settle();
    expect(win.listenerCount).toBe(before - 1);
  });
});
