import { describe, expect, it } from "vitest";
import { installBridge } from "../src/content.js";
import { BRIDGE_NAMESPACE, EXTENSION_ID, SDK_PORT_NAME } from "../../sdk/src/protocol/bridge.js";
import { FakePort, settle } from "./fake-chrome.js";

type Listener = (e: MessageEvent) => void;
class FakeWindow {
  listeners: Listener[] = [];
  toPage: unknown[] = [];
  postMessage(data: unknown): void {
    const event = { data: structuredClone(data), source: this } as unknown as MessageEvent;
    if ((data as { dir?: string }).dir === "to-page") this.toPage.push(data);
    setTimeout(() => this.listeners.forEach((l) => l(event)), 0);
  }
  fromOtherFrame(data: unknown): void {
    const event = { data, source: {} } as unknown as MessageEvent;
    setTimeout(() => this.listeners.forEach((l) => l(event)), 0);
  }
  addEventListener(_t: string, l: Listener): void {
    this.listeners.push(l);
  }
  removeEventListener(): void {}
}

function setup() {
  const win = new FakeWindow();
  const workerEnds: FakePort[] = [];
  const runtime = {
    lastError: undefined as { message?: string } | undefined,
    invalidated: false,
    connect(info: { name: string }) {
      if (runtime.invalidated) throw new Error("Extension context invalidated.");
      const [cs, worker] = FakePort.pair(info.name, { origin: "https://app.example" });
      workerEnds.push(worker);
      return cs;
    },
  };
  installBridge(win as unknown as Window, runtime);
  const send = (clientId: string, msg: unknown) => win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-extension", clientId, msg });
  const all = (clientId: string) => win.toPage.filter((e) => (e as { clientId: string }).clientId === clientId).map((e) => (e as { msg: unknown }).msg);
  // Everything but the capabilities message every connect starts with (checked on its own).
  const received = (clientId: string) => all(clientId).filter((m) => (m as { kind: string }).kind !== "capabilities");
  return { win, runtime, workerEnds, send, received, all };
}

describe("content script bridge", () => {
  it("answers a probe without opening a port", async () => {
    const { send, received, workerEnds } = setup();
    send("c1", { kind: "probe" });
    await settle();
    expect(received("c1")).toEqual([{ kind: "probe_ack" }]);
    expect(workerEnds).toEqual([]);
  });

  it("opens one pedelec-sdk port per client and forwards both ways", async () => {
    const { send, received, workerEnds } = setup();
    send("c1", { kind: "connect" });
    send("c1", { kind: "connect" });
    send("c2", { kind: "connect" });
    await settle();
    expect(workerEnds.map((p) => p.name)).toEqual([SDK_PORT_NAME, SDK_PORT_NAME]);
    send("c1", { kind: "request", requestId: 1, call: { method: "status", params: {} } });
    await settle();
    expect(workerEnds[0]!.received).toEqual([{ kind: "request", requestId: 1, call: { method: "status", params: {} } }]);
    expect(workerEnds[1]!.received).toEqual([]);
    workerEnds[0]!.postMessage({ kind: "welcome", origin: "https://app.example" });
    await settle();
    expect(received("c1")).toEqual([{ kind: "welcome", origin: "https://app.example" }]);
    expect(received("c2")).toEqual([]);
  });

  it("tells the page on connect whether it can move asset bodies; without a transfer frame a transfer is unavailable", async () => {
    const { send, all } = setup();
    send("c1", { kind: "connect" });
    await settle();
    // The fake runtime has no getURL: no extension page to embed.
    expect(all("c1")).toEqual([{ kind: "capabilities", transfer: false }]);
    send("c1", { kind: "transfer", transferId: 7, method: "GET", url: "http://127.0.0.1:1/assets/download/t", token: "x", contentType: "", body: null });
    await settle();
    expect(all("c1")[1]).toEqual({ kind: "transfer_result", transferId: 7, ok: false, unavailable: true, message: "no transfer frame in this browser" });
  });

  it("ignores messages from other frames/windows and without the namespace", async () => {
    const { win, send, workerEnds, received } = setup();
    win.fromOtherFrame({ ns: BRIDGE_NAMESPACE, dir: "to-extension", clientId: "c1", msg: { kind: "connect" } });
    win.postMessage({ ns: "someone-else", dir: "to-extension", clientId: "c1", msg: { kind: "connect" } });
    win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-extension", clientId: 5, msg: { kind: "connect" } });
    await settle();
    expect(workerEnds).toEqual([]);
    send("c1", { kind: "probe" });
    await settle();
    expect(received("c1")).toEqual([{ kind: "probe_ack" }]);
  });

  it("tells the page when the worker closes the port, and when the extension was reloaded", async () => {
    const { send, received, workerEnds, runtime } = setup();
    send("c1", { kind: "connect" });
    await settle();
    workerEnds[0]!.disconnect();
    await settle();
    expect(received("c1")).toEqual([{ kind: "disconnected", reason: "the extension closed the connection" }]);
    runtime.invalidated = true;
    send("c2", { kind: "connect" });
    await settle();
    expect(received("c2")).toEqual([{ kind: "disconnected", reason: "Extension context invalidated." }]);
  });

  it("a page disconnect closes the port; a request without a port is answered with disconnected", async () => {
    const { send, received, workerEnds } = setup();
    send("c1", { kind: "connect" });
    await settle();
    send("c1", { kind: "disconnect" });
    await settle();
    expect(workerEnds[0]!.closed).toBe(true);
    send("c1", { kind: "request", requestId: 2, call: { method: "status", params: {} } });
    await settle();
    expect(received("c1")).toEqual([{ kind: "disconnected", reason: "not connected" }]);
  });
});

describe("manifest", () => {
  it("has the fixed key (giving EXTENSION_ID), the bridge content script and the native permission", async () => {
    const { readFileSync } = await import("node:fs");
    const { createHash } = await import("node:crypto");
    const manifest = JSON.parse(readFileSync(new URL("../static/manifest.json", import.meta.url), "utf8"));
    const digest = createHash("sha256").update(Buffer.from(manifest.key, "base64")).digest("hex").slice(0, 32);
    const id = [...digest].map((c) => String.fromCharCode("a".charCodeAt(0) + parseInt(c, 16))).join("");
    expect(id).toBe(EXTENSION_ID);
    expect(manifest.manifest_version).toBe(3);
    expect(manifest.permissions).toEqual(expect.arrayContaining(["nativeMessaging", "storage"]));
    expect(manifest.content_scripts).toEqual([{ matches: ["http://*/*", "https://*/*"], js: ["content.js"], all_frames: true, run_at: "document_start" }]);
    expect(manifest.externally_connectable.matches).toEqual(["http://localhost/*", "http://127.0.0.1/*"]);
  });
});
