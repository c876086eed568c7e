import { describe, expect, it } from "vitest";
import { HopCounts, hops } from "../src/hop-counts.js";
import { installBridge } from "../src/content.js";
import { BRIDGE_NAMESPACE } from "../../sdk/src/protocol/bridge.js";

describe("hop counts", () => {
  it("counts messages and JSON characters per hop", () => {
    const h = new HopCounts();
    h.count("host", { type: "event", n: 1 });
    expect(h.snapshot().host).toMatchObject({ messages: 1, chars: 0 }); // characters are opt-in
    h.reset(true);
    h.count("host", { type: "event", n: 1 });
    h.count("host", { type: "event", n: 22 });
    h.count("page https://a.test", { kind: "x" }, "0123456789");
    expect(h.snapshot()).toMatchObject({
      host: { messages: 2, chars: JSON.stringify({ type: "event", n: 1 }).length + JSON.stringify({ type: "event", n: 22 }).length },
      "page https://a.test": { messages: 1, chars: 10 },
    });
    const { first, last } = h.snapshot().host!;
    expect(last).toBeGreaterThanOrEqual(first);
    const before = h.snapshot();
    h.count("host", {});
    expect(before.host?.messages).toBe(2);
    h.reset();
    expect(h.snapshot()).toEqual({});
  });

  it("is the context's global pedelecHops, and the content script counts what it posts to the page", () => {
    expect((globalThis as { pedelecHops?: HopCounts }).pedelecHops).toBe(hops);
    hops.reset(true);
    const listeners: ((e: MessageEvent) => void)[] = [];
    const win = {
      postMessage(): void {},
      addEventListener: (_t: string, l: (e: MessageEvent) => void) => listeners.push(l),
      removeEventListener(): void {},
    };
    installBridge(win as unknown as Window, { connect: () => { throw new Error("no"); } } as never);
    const probe = { ns: BRIDGE_NAMESPACE, dir: "to-extension", clientId: "c1", msg: { kind: "probe" } };
    listeners.forEach((l) => l({ data: probe, source: win } as unknown as MessageEvent));
    const ack = { ns: BRIDGE_NAMESPACE, dir: "to-page", clientId: "c1", msg: { kind: "probe_ack" } };
    expect(hops.snapshot()["to-page"]).toMatchObject({ messages: 1, chars: JSON.stringify(ack.msg).length });
  });
});

describe("hop counts in the worker", () => {
  it("counts every frame from the native host and every message posted toward each page", async () => {
    const { Hub } = await import("../src/hub/index.js");
    const { FakeChrome, call, settle, site } = await import("./fake-chrome.js");
    const origin = "https://app.example";
    const chrome = new FakeChrome();
    chrome.services.set(origin, site(origin));
    new Hub(chrome, { approvalTimeoutMs: 5_000, backoffMs: [5, 10] }).start();
    hops.reset(true);
    const p = chrome.connectPage(origin);
    await settle();
    const r = await call(p, "create_session", {});
    expect(r.ok).toBe(true);
    const sessionId = r.result.sessionId as string;
    await settle();
    const before = hops.snapshot();
    chrome.host.event(sessionId, 1, { type: "status", status: "running" });
    await settle();
    const after = hops.snapshot();
    const host = after.host!;
    const page = after[`page ${origin}`]!;
    expect(host.messages).toBe((before.host?.messages ?? 0) + 1);
    expect(page.messages).toBe((before[`page ${origin}`]?.messages ?? 0) + 1);
    // Every reply and event from the host that reached the page was counted on both hops.
    expect(host.messages).toBeGreaterThanOrEqual(page.messages - 1);
    expect(host.chars).toBeGreaterThan(0);
    expect(page.chars).toBeGreaterThan(0);
  });
});
