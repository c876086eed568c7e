import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
// @ts-expect-error plain ESM scripts without types
import { schemaPath } from "../scripts/gen-protocol.mjs";
// @ts-expect-error plain ESM scripts without types
import { validate } from "../scripts/schema-check.mjs";
import { Pedelec, PedelecError, type HistoryEntry, type HistoryPage, type PedelecSession } from "../src/index.js";
import { fail, installPage, settle, standardHandlers, type FakeExtension } from "./fake-bridge.js";

const schema = JSON.parse(readFileSync(schemaPath as string, "utf8"));

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let pedelec: Pedelec;
let session: PedelecSession;

/** A talk with a tool call, as SessionService records it (ids 1..9, seqs of the events they came from). */
const TALK: HistoryEntry[] = [
  { type: "operation_started", id: 1, seq: 3, at: 1764524403003, operationId: "op_1", kind: "send_text" },
  { type: "user_text", id: 2, seq: 3, at: 1764524403003, operationId: "op_1", text: "What is the title?", truncated: false },
  { type: "tool_request", id: 3, seq: 6, at: 1764524403006, operationId: "op_1", toolRequestId: "tr_1", tool: "get_title", args: {}, timeoutMs: 60000, deadlineAt: 1764524463006 },
  { type: "tool_outcome", id: 4, seq: 8, at: 1764524403008, operationId: "op_1", toolRequestId: "tr_1", reason: "resolved", result: { title: "Home" }, error: null, truncated: false, resultPreview: null },
  { type: "agent_message", id: 5, seq: 12, at: 1764524403012, operationId: "op_1", messageId: "msg_1", text: "The title is Home." },
  { type: "operation_finished", id: 6, seq: 14, at: 1764524403014, operationId: "op_1", kind: "send_text", outcome: "completed", error: null, usage: { totalTokens: 30, inputTokens: 20, outputTokens: 10 } },
  { type: "operation_started", id: 7, seq: 16, at: 1764524403016, operationId: "op_2", kind: "send_text" },
  { type: "user_text", id: 8, seq: 16, at: 1764524403016, operationId: "op_2", text: "And now?", truncated: false },
  { type: "error", id: 9, seq: 18, at: 1764524403018, operationId: "op_2", code: "PROVIDER_FAILED", message: "codex exited with status 1", details: null, source: "provider" },
];
const COVERED = 19;

/** SessionService's paging: the newest `limit` entries below `before`, oldest first. */
function pageOf(entries: HistoryEntry[], before = 0, limit = 0): HistoryPage {
  const older = entries.filter((e) => before === 0 || e.id < before);
  const n = limit === 0 ? 100 : limit;
  const chosen = older.slice(Math.max(0, older.length - n));
  return { entries: chosen, hasMore: chosen.length < older.length, coveredSeq: COVERED };
}

beforeEach(async () => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  ext.on("get_history", (p) => pageOf(TALK, p.before, p.limit));
  pedelec = new Pedelec();
  session = await pedelec.createSession({ provider: "codex" });
});
afterEach(() => page.uninstall());

async function rejection(p: Promise<unknown>): Promise<PedelecError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PedelecError);
    return e as PedelecError;
  }
  throw new Error("expected a rejection");
}

describe("getHistory", () => {
  it("the entries this test hands out follow the schema's GetHistoryResult", () => {
    expect(validate(schema, pageOf(TALK), "GetHistoryResult")).toEqual([]);
    // A field the host never sends is refused: the fixture cannot drift from the contract.
    expect(validate(schema, { ...pageOf(TALK), entries: [{ ...TALK[1], extra: 1 }] }, "GetHistoryResult")).not.toEqual([]);
  });

  it("reads the newest entries of its own session, oldest first, with hasMore and coveredSeq", async () => {
    const h = await session.getHistory();
    expect(ext.callsOf("get_history")).toEqual([{ sessionId: "thr_1" }]);
    expect(h).toEqual({ entries: TALK, hasMore: false, coveredSeq: COVERED });
    // Typed by kind: narrowing on `type` gives each entry's own fields.
    const said = h.entries.flatMap((e) => (e.type === "user_text" ? [e.text] : e.type === "agent_message" ? [e.text] : []));
    expect(said).toEqual(["What is the title?", "The title is Home.", "And now?"]);
    const outcome = h.entries.find((e) => e.type === "tool_outcome");
    expect(outcome?.type === "tool_outcome" && outcome.result).toEqual({ title: "Home" });
  });

  it("pages backwards with before = entries[0].id until hasMore is false", async () => {
    const pages: HistoryPage[] = [];
    let before: number | undefined;
    for (;;) {
      const h = await session.getHistory({ before, limit: 4 });
      pages.push(h);
      if (!h.hasMore) break;
      before = h.entries[0]!.id;
    }
    expect(ext.callsOf("get_history")).toEqual([
      { sessionId: "thr_1", limit: 4 },
      { sessionId: "thr_1", before: 6, limit: 4 },
      { sessionId: "thr_1", before: 2, limit: 4 },
    ]);
    expect(pages.map((p) => p.entries.map((e) => e.id))).toEqual([[6, 7, 8, 9], [2, 3, 4, 5], [1]]);
    expect(pages.reverse().flatMap((p) => p.entries)).toEqual(TALK);
  });

  it("refuses a before or limit that is not a non-negative integer, without a request", async () => {
    for (const bad of [{ before: -1 }, { limit: 1.5 }, { limit: "10" }, { before: Number.NaN }, { limit: 2 ** 60 }]) {
      const e = await rejection(session.getHistory(bad as never));
      expect(e.code).toBe("INVALID_INPUT");
    }
    expect((await rejection(session.getHistory(null as never))).code).toBe("INVALID_INPUT");
    expect(ext.callsOf("get_history")).toEqual([]);
  });

  it("passes the runtime's refusal through (another origin's thread, a limit above 1000)", async () => {
    ext.on("get_history", (p) => {
      if ((p.limit ?? 0) > 1000) throw fail("INVALID_INPUT", "limit 1001 is above 1000");
      throw fail("THREAD_ACCESS_DENIED", "the session belongs to another origin");
    });
    expect((await rejection(session.getHistory({ limit: 1001 }))).code).toBe("INVALID_INPUT");
    expect((await rejection(session.getHistory())).code).toBe("THREAD_ACCESS_DENIED");
  });

  it("reads an ended session's history; a detached handle cannot", async () => {
    await session.end();
    expect((await session.getHistory()).entries).toHaveLength(TALK.length);
    ext.dropAll();
    await settle();
    expect((await rejection(session.getHistory())).code).toBe("EXTENSION_DISCONNECTED");
  });

  it("joins with live events: a resumed page skips the events history already covers", async () => {
    // What a page does after resumeSession (demo/src/main.ts does the same): show the
    // history, then only live events above coveredSeq.
    const shown: string[] = [];
    let covered: number | null = null;
    const early: Array<[string, number]> = [];
    session.onChat((text, ctx) => {
      if (covered === null) early.push([text, ctx.seq!]);
      else if (ctx.seq! > covered) shown.push(`agent: ${text}`);
    });
    ext.event("thr_1", 12, { type: "chat", operationId: "op_1", messageId: "msg_1", text: "The title is Home." });
    await settle();
    const h = await session.getHistory();
    covered = h.coveredSeq;
    for (const e of h.entries) {
      if (e.type === "user_text") shown.push(`user: ${e.text}`);
      if (e.type === "agent_message") shown.push(`agent: ${e.text}`);
    }
    for (const [text, seq] of early) if (seq > covered) shown.push(`agent: ${text}`);
    ext.event("thr_1", 20, { type: "chat", operationId: "op_3", messageId: "msg_3", text: "Live." });
    await settle();
    expect(shown).toEqual(["user: What is the title?", "agent: The title is Home.", "user: And now?", "agent: Live."]);
  });
});
