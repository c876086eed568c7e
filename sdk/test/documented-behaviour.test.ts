// Checks the behaviour docs/sdk-extension.md and sdk/README.md document for a
// page's use of the SDK, through usage examples written as a page would write
// them (minimal use, approval and providers, the generic onTool handler, the
// persistent lifecycle with resume, error handling), run against the fake
// bridge. They import the package by its name, i.e. the built dist/ through
// package.json "exports", as an application would.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Pedelec, defineTool, type PedelecSession } from "@pedelec/sdk";
import { fail, installPage, settle, standardHandlers, type FakeExtension } from "./fake-bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
const logs: unknown[] = [];
const console = { log: (...a: unknown[]) => logs.push(a), error: (...a: unknown[]) => logs.push(["error", ...a]) };
const location = { href: "https://app.example/page" };
const document = { title: "App" };
const counter = { value: 0 };

/** The fake agent: each send runs one turn that calls the first tool of the manifest, then answers. */
function agent(ext: FakeExtension): void {
  let op = 0;
  let seq = 100;
  let tool: string | undefined;
  ext.on("create_session", (p) => {
    tool = p.skills?.tools?.[0]?.name;
    return {
      sessionId: "thr_abc123",
      provider: p.provider ?? "codex",
      effortLevel: p.effortLevel ?? "default",
      snapshot: { ...baseSnapshot, autoEndOnDisconnect: p.autoEndOnDisconnect ?? true },
      toolOwner: true,
    };
  });
  ext.on("send_text", () => {
    const operationId = `op_${++op}`;
    const e = (event: Parameters<FakeExtension["event"]>[2]) => ext.event("thr_abc123", ++seq, event);
    setTimeout(() => {
      e({ type: "operation_started", operationId, kind: "send_text" });
      e({ type: "status", status: "running" });
      if (tool) {
        e({ type: "tool_request", toolRequestId: `tr_${op}`, tool, args: tool === "update_counter" ? { delta: 1 } : {}, operationId, timeoutMs: 60000, deadlineAt: 1 });
      }
    }, 1);
    const finish = () => {
      e({ type: "chat_delta", operationId, messageId: `msg_${operationId}_1`, text: "Hel" });
      e({ type: "chat", operationId, messageId: `msg_${operationId}_1`, text: "Hello from the agent" });
      e({ type: "usage", totalTokens: 10 * op, inputTokens: 8 * op, outputTokens: 2 * op });
      e({ type: "status", status: "idle" });
      e({ type: "operation_finished", operationId, kind: "send_text", outcome: "completed", error: null });
    };
    if (tool) pendingFinish = finish;
    else setTimeout(finish, 2);
    return { operationId };
  });
  ext.on("submit_tool_result", (p) => {
    toolResults.push(p);
    setTimeout(() => pendingFinish?.(), 1);
    return {};
  });
}
let pendingFinish: (() => void) | undefined;
const toolResults: unknown[] = [];
const baseSnapshot = {
  sessionId: "thr_abc123", status: "idle" as const, activeOperation: null, lastOperation: null, recentOperations: [], pendingToolRequest: null,
  usage: null, provider: "codex", effortLevel: "high", model: "", autoEndOnDisconnect: true, workspacePath: null, createdAt: 1, lastSeq: 0, replayGap: false,
};

beforeEach(() => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  agent(ext);
  logs.length = 0;
  toolResults.length = 0;
  pendingFinish = undefined;
});
afterEach(() => page.uninstall());

describe("the documented behaviour, used as a page would through @pedelec/sdk", () => {
  it("minimal use, as in sdk/README.md's quick start", async () => {
    const pedelec = new Pedelec();

    const session = await pedelec.createSession({
      provider: "codex",
      effortLevel: "high",
      skills: {
        guidance: "Use get_current_page when you need browser page context.",
        tools: [
          defineTool({
            name: "get_current_page",
            description: "Read the current browser page title and URL.",
            argsSchema: {
              type: "object",
              properties: {},
              required: [],
            },
            handler: () => ({
              url: location.href,
              title: document.title,
            }),
          }),
        ],
      },
    });

    session.onChat((text) => {
      // One completed logical assistant message.
      console.log(text);
    });

    session.onChatDelta((delta) => {
      // Optional best-effort incremental text for live UI.
      console.log(delta);
    });

    session.onStatus((status) => {
      // idle | running | waiting_tool_result | ended | error
      console.log("status", status);
    });

    session.onError((error) => {
      console.error(error.code, error.message, error.details);
    });

    await session.sendText("Please help me analyze the current page state");

    expect(toolResults).toEqual([{ sessionId: "thr_abc123", toolRequestId: "tr_1", result: { url: "https://app.example/page", title: "App" } }]);
    expect(logs).toEqual([["status", "running"], ["Hel"], ["Hello from the agent"], ["status", "idle"]]);
    expect(session.usage.totalTokens).toBe(10);
  });

  it("approval status, providers, settings", async () => {
    const pedelec = new Pedelec();
    ext.on("list_providers", () => ({
      providers: [
        { name: "Codex", code: "codex", available: true, isDefault: true, error: null },
        { name: "Ollama", code: "ollama", available: false, isDefault: false, error: "pedelec-agent not found" },
      ],
    }));
    ext.on("get_settings", () => ({ defaultProvider: "codex" }));

    const status = await pedelec.getApprovalStatus();
    console.log(status.installed, status.approved, status.origin);

    const providers = await pedelec.listProviders();
    for (const provider of providers) {
      console.log(provider.code, provider.available, provider.isDefault, provider.error);
    }

    const settings = await pedelec.getSettings();
    console.log(settings.defaultProvider);

    expect(logs).toEqual([[true, true, "https://app.example"], ["codex", true, true, null], ["ollama", false, false, "pedelec-agent not found"], ["codex"]]);
  });

  it("default provider with a tool answered by the generic onTool handler", async () => {
    const pedelec = new Pedelec();
    const session = await pedelec.createSession({
      skills: {
        guidance: "Use update_counter when the user asks to change the counter.",
        tools: [
          defineTool({
            name: "update_counter",
            description: "Update the visible counter by delta.",
            argsSchema: {
              type: "object",
              required: ["delta"],
              properties: {
                delta: {
                  type: "number",
                  description: "Counter delta.",
                },
              },
            },
          }),
        ],
      },
    });

    session.onTool(async (tool, args) => {
      if (tool === "get_current_page") {
        return { url: location.href, title: document.title, selectedText: "" };
      }

      if (tool === "update_counter") {
        const { delta } = args as { delta: number };
        counter.value += delta;
        return {
          counter: counter.value,
          delta,
        };
      }

      return {
        error: {
          code: "TOOL_NOT_FOUND",
          message: `Unknown tool: ${tool}`,
        },
      };
    });

    await session.sendText("Add one");
    expect(ext.callsOf("create_session")[0]).toEqual({
      autoEndOnDisconnect: true,
      skills: {
        guidance: "Use update_counter when the user asks to change the counter.",
        tools: [{ name: "update_counter", description: "Update the visible counter by delta.", argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number", description: "Counter delta." } } } }],
      },
    });
    expect(toolResults).toEqual([{ sessionId: "thr_abc123", toolRequestId: "tr_1", result: { counter: 1, delta: 1 } }]);
  });

  it("persistent lifecycle, resume with re-registered handlers, resumeOnce, end + resume, cleanup pattern", async () => {
    const pedelec = new Pedelec();
    const localStorage = new Map<string, string>();
    {
      const session = await pedelec.createSession({
        provider: "codex",
        autoEndOnDisconnect: false,
      });

      const record = {
        sessionId: session.sessionId,
        provider: session.provider,
        effortLevel: session.effortLevel,
      };
      localStorage.set("pedelec-session", JSON.stringify(record));
    }
    const record = JSON.parse(localStorage.get("pedelec-session")!) as { sessionId: string; provider: string; effortLevel: string };
    // After a reload: a new page, a new client.
    const reloaded = new Pedelec();

    let resumePromise: Promise<PedelecSession> | null = null;
    function resumeOnce(id: string) {
      resumePromise ??= reloaded.resumeSession(id);
      return resumePromise;
    }
    const [session, same] = await Promise.all([resumeOnce(record.sessionId), resumeOnce(record.sessionId)]);
    expect(session).toBe(same);
    expect(ext.callsOf("resume_session")).toHaveLength(1);
    // The documentation lets a resumed handle leave these unknown and has the application keep
    // them with the id; Pedelec fills them from the session's snapshot, so both ways work.
    expect(session.provider || record.provider).toBe("codex");
    expect(session.provider).toBe("codex");
    expect(session.effortLevel ?? record.effortLevel).toBe("high");

    const chats: string[] = [];
    let handlerDisposers = [
      session.onChat((t) => chats.push(t)),
      session.onChatDelta(() => undefined),
      session.onStatus(() => undefined),
      session.onError(() => undefined),
      session.onEnded(() => undefined),
      session.onTool("update_counter", () => ({ ok: true })),
    ];

    await session.sendText("Continue the previous work");
    expect(chats).toEqual(["Hello from the agent"]);

    await session.end();
    await session.resume();
    expect(session.getStatus()).toBe("idle");
    await session.sendText("Continue");

    let current: PedelecSession | null = session;
    async function disposeSession() {
      const s = current;
      current = null;
      try {
        if (s && s.getStatus() !== "ended") {
          await s.end();
        }
      } finally {
        for (const dispose of handlerDisposers) dispose();
        handlerDisposers = [];
        localStorage.delete("pedelec-session");
      }
    }
    await disposeSession();
    expect(session.getStatus()).toBe("ended");
    expect(localStorage.size).toBe(0);
  });

  it("error handling: try/catch around sendText and onError", async () => {
    const pedelec = new Pedelec();
    const session = await pedelec.createSession({ provider: "codex" });
    ext.on("send_text", () => {
      throw fail("SESSION_BUSY", "busy");
    });
    session.onError((error) => {
      console.error("session error", error);
    });
    try {
      await session.sendText("Please help me edit this content");
    } catch (error) {
      console.error("send failed", (error as { code: string }).code);
    }
    await settle();
    expect(logs.at(-1)).toEqual(["error", "send failed", "SESSION_BUSY"]);
  });
});
