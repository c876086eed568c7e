import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BADGE_COLORS, Hub } from "../src/hub/index.js";
import { EXTENSION_ID, NATIVE_PROTOCOL_VERSION, POPUP_PORT_NAME, SITES_CACHE_KEY, TRANSFER_PORT_NAME, type PopupState } from "../../sdk/src/protocol/bridge.js";
import { CLIENT_NAME } from "../src/native-link.js";
import { embedderOrigin, withEmbedder, withoutEmbedder, type SessionSummary, type Site, type SiteInput } from "../src/sites.js";
import { call, FakeChrome, HostFailure, NO_REPLY, settle, site, snapshot, start, type FakePort } from "./fake-chrome.js";

const ORIGIN = "https://app.example";
let chrome: FakeChrome;
let hub: Hub;

function startHub(approved: string[] = [ORIGIN], approvalTimeoutMs = 5_000): void {
  chrome = new FakeChrome();
  for (const origin of approved) chrome.services.set(origin, site(origin));
  hub = new Hub(chrome, { approvalTimeoutMs, backoffMs: [5, 10] });
  hub.start();
}

const OWN = `chrome-extension://${EXTENSION_ID}`;
/** Frames of `type` the worker sent to any host. */
const sent = (type: string) => chrome.hosts.flatMap((h) => h.of(type));
const prompts = () => hub.state().prompts;

afterEach(() => {
  // Every frame the worker wrote to any host followed the schema.
  for (const h of chrome?.hosts ?? []) expect(h.invalid).toEqual([]);
});

async function page(origin = ORIGIN): Promise<FakePort> {
  const p = chrome.connectPage(origin);
  await settle();
  return p;
}

async function createSession(p: FakePort, params: Record<string, unknown> = {}): Promise<string> {
  const r = await call(p, "create_session", params);
  expect(r.ok).toBe(true);
  return r.result.sessionId as string;
}

describe("routes", () => {
  beforeEach(() => startHub());

  it.each([undefined, "null", "chrome-extension://abcdefghijklmnopabcdefghijklmnop", "file://", "ftp://x.example"])("refuses a port from origin %s", async (origin) => {
    const p = chrome.connectPage(origin);
    await settle();
    expect(p.closed).toBe(true);
    expect(p.of("welcome")).toEqual([]);
  });

  it("welcomes an http(s) page with the origin Chrome gave the port", async () => {
    for (const origin of ["https://app.example", "http://127.0.0.1:8080"]) {
      const p = await page(origin);
      expect(p.of("welcome")).toEqual([{ kind: "welcome", origin }]);
      expect(p.closed).toBe(false);
    }
  });

  it("sends the options page's settings requests with the extension's own origin; a web page cannot use that port", async () => {
    const settings = {
      defaultProvider: "codex",
      profiles: {},
      ollamaEndpoint: "",
      ollamaApiKey: { set: true, masked: "••••1234" },
      tavilyApiKey: { set: false, masked: "" },
      shellToolsOnly: [],
    };
    chrome.hostHandlers.get_full_settings = () => settings;
    chrome.hostHandlers.update_settings = (f) => ({ ...settings, defaultProvider: f.payload!.defaultProvider });
    const options = chrome.connectOptions();
    options.postMessage({ kind: "request", requestId: 1, method: "get_full_settings", params: {} });
    options.postMessage({ kind: "request", requestId: 2, method: "update_settings", params: { defaultProvider: "ollama", tavilyApiKey: { action: "clear" } } });
    await settle(20);
    const replies = options.of("response");
    expect(replies).toEqual([
      { kind: "response", requestId: 1, ok: true, result: settings },
      { kind: "response", requestId: 2, ok: true, result: { ...settings, defaultProvider: "ollama" } },
    ]);
    const own = `chrome-extension://${EXTENSION_ID}`;
    expect(chrome.host.of("get_full_settings").map((f) => f.origin)).toEqual([own]);
    expect(chrome.host.of("update_settings").map((f) => [f.origin, f.payload])).toEqual([[own, { defaultProvider: "ollama", tavilyApiKey: { action: "clear" } }]]);

    // A web page naming the options port, or another extension's page, is cut off unanswered.
    for (const sender of [
      { origin: "https://evil.example", url: "https://evil.example/app", tab: { id: 1 } },
      { id: "abcdefghijklmnopabcdefghijklmnop", origin: "chrome-extension://abcdefghijklmnopabcdefghijklmnop", url: "chrome-extension://abcdefghijklmnopabcdefghijklmnop/options.html" },
    ]) {
      const fake = chrome.connectOptions(sender);
      await settle();
      expect(fake.closed).toBe(true);
    }
    // ...and the settings requests are no bridge methods for a page's route.
    const p = await page();
    expect((await call(p, "get_full_settings")).error.code).toBe("SDK_PROTOCOL_ERROR");
    expect((await call(p, "update_settings", { defaultProvider: "ollama" })).error.code).toBe("SDK_PROTOCOL_ERROR");
    expect(sent("get_full_settings")).toHaveLength(1);
    expect(sent("update_settings")).toHaveLength(1);
  });

  it("accepts the popup port only from the extension's own pages", async () => {
    const popup = chrome.connectPopup();
    await settle();
    expect(popup.of("state")).toHaveLength(1);
    const fake = chrome.connectPage("https://evil.example", POPUP_PORT_NAME);
    await settle();
    expect(fake.closed).toBe(true);
  });

  it("a session call on a session this route did not attach is INVALID_INPUT", async () => {
    const p = await page();
    const r = await call(p, "send_text", { sessionId: "thr_other", text: "x" });
    expect(r.error.code).toBe("INVALID_INPUT");
    expect(chrome.hosts.flatMap((h) => h.of("send_text"))).toEqual([]);
  });

  it("get_history goes to the host with the route's origin and paging; only for a session the route attached", async () => {
    startHub([ORIGIN, "https://other.example"]);
    const entry = { type: "user_text", id: 2, seq: 3, at: 5, operationId: "op_1", text: "hi", truncated: false };
    chrome.hostHandlers.get_history = () => ({ entries: [entry], hasMore: true, coveredSeq: 9 });
    const p = await page();
    const sessionId = await createSession(p);
    const r = await call(p, "get_history", { sessionId, before: 7, limit: 50 });
    expect(r.result).toEqual({ entries: [entry], hasMore: true, coveredSeq: 9 });
    expect(chrome.host.of("get_history").map((f) => [f.origin, f.payload])).toEqual([[ORIGIN, { sessionId, before: 7, limit: 50 }]]);
    // Another page (origin) never reads it through a route that did not attach the session.
    const other = await page("https://other.example");
    expect((await call(other, "get_history", { sessionId })).error.code).toBe("INVALID_INPUT");
    expect(sent("get_history")).toHaveLength(1);
  });
});

describe("transfer frame", () => {
  beforeEach(() => startHub());

  async function check(frame: FakePort, url: string, origin: string): Promise<{ ok: boolean; message: string }> {
    const id = Math.floor(Math.random() * 1e9);
    frame.postMessage({ kind: "check", id, url, origin });
    await settle();
    return frame.received.find((m) => (m as { id?: number }).id === id) as { ok: boolean; message: string };
  }

  it("confirms a ticket URL only to the origin it was issued to, once", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    const up = await call(p, "create_upload_ticket", { sessionId, name: "a.txt", sizeBytes: 1, contentType: "" });
    const down = await call(p, "create_download_ticket", { sessionId, path: "/a.txt" });
    const frame = chrome.connectTransfer();
    await settle();
    expect(frame.closed).toBe(false);
    expect((await check(frame, up.result.url, "https://evil.example")).ok).toBe(false);
    expect(await check(frame, up.result.url, ORIGIN)).toEqual({ kind: "check_result", id: expect.any(Number), ok: true, message: "" });
    // Single use: the same URL again is refused.
    expect((await check(frame, up.result.url, ORIGIN)).message).toMatch(/^ASSET_TICKET_INVALID: not a ticket/);
    expect((await check(frame, down.result.url, ORIGIN)).ok).toBe(true);
    // Any other loopback URL: the frame is no proxy.
    expect((await check(frame, "http://127.0.0.1:4999/anything", ORIGIN)).ok).toBe(false);
  });

  it("accepts the transfer port only from the extension's own page", async () => {
    const fake = chrome.connectPage("https://evil.example", TRANSFER_PORT_NAME);
    await settle();
    expect(fake.closed).toBe(true);
  });
});

describe("native port", () => {
  beforeEach(() => startHub());

  it("hello goes first; status pings without ever opening the approval UI", async () => {
    startHub([]);
    const p = await page();
    const r = await call(p, "status");
    expect(r.result).toEqual({ approved: false, origin: ORIGIN, appConnected: true });
    // The grants are asked for only because Core runs.
    expect(chrome.host.frames.map((f) => f.type)).toEqual(["hello", "ping", "list_sites"]);
    expect(chrome.host.frames[0]!.payload).toEqual({ protocolVersion: NATIVE_PROTOCOL_VERSION, client: CLIENT_NAME });
    expect(chrome.openPopupCalls + chrome.windowsCreated.length).toBe(0);
  });

  it("status says appConnected false when the host is not installed", async () => {
    chrome.hostInstalled = false;
    const p = await page();
    // The grants live in the services: unreachable, nothing is approved.
    expect((await call(p, "status")).result).toEqual({ approved: false, origin: ORIGIN, appConnected: false });
  });

  it("a host that is not installed is NATIVE_HOST_UNAVAILABLE", async () => {
    chrome.hostInstalled = false;
    const p = await page();
    const r = await call(p, "list_providers");
    expect(r.error.code).toBe("NATIVE_HOST_UNAVAILABLE");
    expect(r.error.message).toContain("not found");
    expect(hub.native.state.lastError).toContain("not found");
    expect(hub.native.state.lastErrorCode).toBe("NATIVE_HOST_UNAVAILABLE");
    // The popup's state carries both, so it can say how to install Pedelec.
    expect(hub.state().host).toMatchObject({ connected: false, hostVersion: null, lastErrorCode: "NATIVE_HOST_UNAVAILABLE" });
  });

  it("PROTOCOL_MISMATCH on hello fails the request and is not retried in a loop", async () => {
    chrome.hostHandlers.hello = () => {
      throw new HostFailure("PROTOCOL_MISMATCH", "host speaks 3");
    };
    const p = await page();
    const r = await call(p, "list_providers");
    expect(r.error.code).toBe("PROTOCOL_MISMATCH");
    await new Promise((res) => setTimeout(res, 40));
    expect(chrome.hosts).toHaveLength(1);
    expect(hub.state().host.lastErrorCode).toBe("PROTOCOL_MISMATCH");
  });

  it("a host answering hello with another protocolVersion is PROTOCOL_MISMATCH", async () => {
    chrome.hostHandlers.hello = () => ({ hostVersion: "9", protocolVersion: 3, capabilities: [], coreRunning: true, userName: "ada" });
    const p = await page();
    expect((await call(p, "get_settings")).error.code).toBe("PROTOCOL_MISMATCH");
  });

  it("the origin in every frame is the port's, never the page's", async () => {
    const p = await page();
    await call(p, "create_session", { provider: "codex", origin: "https://evil.example" });
    // Only the extension's own site requests carry its own origin.
    for (const f of chrome.host.frames.filter((f) => f.type !== "hello" && f.type !== "list_sites")) expect(f.origin).toBe(ORIGIN);
  });

  it("queues above 64 requests in flight and sends the rest as replies come", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    chrome.host.autoReply = false;
    const pending = Array.from({ length: 70 }, () => start(p, "get_session", { sessionId }));
    await settle();
    expect(chrome.host.of("get_session")).toHaveLength(64);
    chrome.host.autoReply = true;
    for (const f of chrome.host.of("get_session")) chrome.host.reply(f);
    await settle(20);
    expect(chrome.host.of("get_session")).toHaveLength(70);
    expect(pending.every((get) => get()?.ok)).toBe(true);
  });

  it("reassembles chunked messages; a broken chunk sequence is dropped without harm", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    const big = "x".repeat(3000);
    const text = JSON.stringify({ type: "event", sessionId, seq: 1, at: 1, event: { type: "chat", operationId: "op_1", messageId: "m", text: big } });
    const parts = [text.slice(0, 1000), text.slice(1000, 2000), text.slice(2000)];
    parts.forEach((data, index) => chrome.host.send({ type: "chunk", chunkId: 1, index, count: 3, data }));
    // chunk 2 of 3 missing its first part: dropped
    chrome.host.send({ type: "chunk", chunkId: 2, index: 1, count: 3, data: "zzz" });
    chrome.host.event(sessionId, 2, { type: "chat", operationId: "op_1", messageId: "n", text: "after" });
    await settle();
    const events = p.of("event").map((m) => (m.frame as { event: { text: string } }).event.text);
    expect(events).toEqual([big, "after"]);
  });
});

describe("approval", () => {
  beforeEach(() => startHub([]));

  it("opens the action popup once with a site prompt; approving grants through the services and the request proceeds", async () => {
    chrome.hostHandlers.list_providers = () => ({
      providers: [
        { name: "Codex", code: "codex", available: true, isDefault: true, error: null },
        { name: "Claude Code", code: "claude", available: true, isDefault: false, error: null },
      ],
    });
    const p = await page();
    const popup = chrome.connectPopup();
    const get = start(p, "list_providers");
    await settle();
    expect(chrome.openPopupCalls).toBe(1);
    expect(p.of("approval")).toEqual([{ kind: "approval", state: "pending" }]);
    const [prompt] = prompts();
    expect(prompt).toMatchObject({ kind: "site", origin: ORIGIN, tab: `${ORIGIN}/app`, loopback: false });
    expect(prompt!.providers).toEqual([
      { code: "codex", name: "Codex", available: true, preselected: true },
      { code: "claude", name: "Claude Code", available: true, preselected: false },
    ]);
    expect(get()).toBeUndefined();
    popup.postMessage({ kind: "approve", promptId: prompt!.id, access: "tools", providers: ["codex"] });
    await settle();
    expect(get()?.ok).toBe(true);
    expect(p.of("approval").at(-1)).toEqual({ kind: "approval", state: "settled" });
    expect(sent("grant_site").map((f) => [f.origin, f.payload])).toEqual([
      [OWN, { site: { origin: ORIGIN, access: "tools", providers: ["codex"], folders: [], anyModel: false, embedders: [] } }],
    ]);
    // Cached for the browser session only.
    expect((chrome.stored[SITES_CACHE_KEY] as { sites: Array<{ origin: string }> }).sites.map((x) => x.origin)).toEqual([ORIGIN]);
    await call(p, "get_settings");
    expect(chrome.openPopupCalls).toBe(1);
    const last = popup.of("state").at(-1)!.state as PopupState;
    expect(last.sites.map((x) => [x.origin, x.access])).toEqual([[ORIGIN, "tools"]]);
    expect(last.prompts).toEqual([]);
  });

  it("a popup open while a prompt is being made is shown it only with its agents (an approval then grants the one the page named)", async () => {
    // The providers answer late: the prompt exists before its view is complete.
    chrome.hostHandlers.list_providers = (frame, host) => {
      const result = { providers: [{ name: "Codex", code: "codex", available: true, isDefault: false, error: null }] };
      setTimeout(() => host.send({ id: frame.id, ok: true, result }), 30);
      return NO_REPLY;
    };
    const p = await page();
    const popup = chrome.connectPopup();
    const created = start(p, "create_session", { provider: "codex" });
    await new Promise((r) => setTimeout(r, 10));
    popup.postMessage({ kind: "get_state" });
    await new Promise((r) => setTimeout(r, 60));
    await settle();
    const shown = popup.of("state").flatMap((m) => (m.state as PopupState).prompts);
    expect(shown.length).toBeGreaterThan(0);
    for (const prompt of shown) expect(prompt.providers).toEqual([{ code: "codex", name: "Codex", available: true, preselected: true }]);
    popup.postMessage({ kind: "approve", promptId: shown[0]!.id, access: "edit", providers: ["codex"] });
    await settle();
    expect(created()?.ok).toBe(true);
  });

  it("one prompt per origin, shared by its routes", async () => {
    const a = await page();
    const b = await page();
    const ra = start(a, "list_providers");
    const rb = start(b, "create_session");
    await settle();
    expect(chrome.openPopupCalls).toBe(1);
    expect(prompts()).toHaveLength(1);
    await hub.approve(ORIGIN);
    await settle();
    expect(ra()?.ok).toBe(true);
    expect(rb()?.ok).toBe(true);
  });

  it("requests arriving while the approval UI is still opening share it", async () => {
    // This test's own fake: a timer late on a busy machine then counts here, not in the next test's.
    const fake = chrome;
    fake.action.openPopup = () => new Promise<void>((r) => setTimeout(() => (fake.openPopupCalls++, r()), 20));
    const a = await page();
    const b = await page();
    const ra = start(a, "list_providers");
    const rb = start(b, "get_settings");
    const rc = start(a, "create_session");
    await vi.waitFor(() => expect(fake.openPopupCalls).toBe(1));
    expect(prompts().map((x) => x.origin)).toEqual([ORIGIN]);
    await hub.approve(ORIGIN);
    await settle();
    expect([ra()?.ok, rb()?.ok, rc()?.ok]).toEqual([true, true, true]);
    await new Promise((r) => setTimeout(r, 40));
    expect(fake.openPopupCalls).toBe(1);
  });

  it("reject → APPROVAL_REJECTED, nothing reaches the host, and no new prompt for that site", async () => {
    const p = await page();
    const popup = chrome.connectPopup();
    const r = start(p, "create_session");
    await settle();
    popup.postMessage({ kind: "reject", promptId: prompts()[0]!.id });
    await settle();
    expect(r()?.error.code).toBe("APPROVAL_REJECTED");
    expect(sent("create_session")).toEqual([]);
    expect((await call(p, "list_providers")).error.code).toBe("APPROVAL_REJECTED");
    expect(chrome.openPopupCalls).toBe(1);
    expect(hub.state().rejected).toEqual([ORIGIN]);
  });

  it("block → block_site; the site gets no prompt again, also after a worker restart in a new browser session", async () => {
    const p = await page();
    const popup = chrome.connectPopup();
    const r = start(p, "list_providers");
    await settle();
    popup.postMessage({ kind: "block", promptId: prompts()[0]!.id });
    await settle();
    expect(r()?.error.code).toBe("APPROVAL_REJECTED");
    expect(sent("block_site").map((f) => [f.origin, f.payload])).toEqual([[OWN, { origin: ORIGIN }]]);
    // A new worker with nothing cached (chrome.storage.session is empty in a new browser session): the services remember.
    const services = chrome.services;
    chrome = new FakeChrome();
    chrome.services = services;
    hub = new Hub(chrome);
    hub.start();
    const q = await page();
    expect((await call(q, "create_session")).error.code).toBe("APPROVAL_REJECTED");
    expect(chrome.openPopupCalls).toBe(0);
  });

  it("no decision in time → APPROVAL_TIMEOUT", async () => {
    startHub([], 30);
    const p = await page();
    const r = start(p, "list_providers");
    await new Promise((res) => setTimeout(res, 60));
    await settle();
    expect(r()?.error.code).toBe("APPROVAL_TIMEOUT");
  });

  it("falls back to a popup window when openPopup fails; closing it rejects", async () => {
    chrome.openPopupFails = true;
    const p = await page();
    const r = start(p, "list_providers");
    await settle();
    expect(chrome.windowsCreated).toEqual([{ url: `chrome-extension://${EXTENSION_ID}/popup.html?approve=${encodeURIComponent(ORIGIN)}`, id: 100 }]);
    chrome.windows.onRemoved.fire(100);
    await settle();
    expect(r()?.error.code).toBe("APPROVAL_REJECTED");
  });

  it("approving closes the window it opened", async () => {
    chrome.openPopupFails = true;
    const p = await page();
    const r = start(p, "list_providers");
    await settle();
    await hub.approve(ORIGIN);
    await settle();
    expect(r()?.ok).toBe(true);
    expect(chrome.windowsRemoved).toEqual([100]);
  });

  it("OPEN_POPUP_FAILED when neither the popup nor a window opens", async () => {
    chrome.openPopupFails = true;
    chrome.windowsCreateFails = true;
    const p = await page();
    expect((await call(p, "list_providers")).error.code).toBe("OPEN_POPUP_FAILED");
  });

  it("grants come from the services: a worker restart reads the session cache, a new browser session asks list_sites", async () => {
    const p = await page();
    const r = start(p, "get_settings");
    await settle();
    await hub.approve(ORIGIN);
    await settle();
    expect(r()?.ok).toBe(true);
    const { stored, services } = chrome;
    chrome = new FakeChrome();
    chrome.stored = stored;
    chrome.services = services;
    hub = new Hub(chrome);
    hub.start();
    const q = await page();
    expect((await call(q, "get_settings")).ok).toBe(true);
    expect(sent("list_sites")).toEqual([]);
    chrome = new FakeChrome();
    chrome.services = services;
    hub = new Hub(chrome);
    hub.start();
    const n = await page();
    expect((await call(n, "get_settings")).ok).toBe(true);
    expect(sent("list_sites")).toHaveLength(1);
    expect(chrome.openPopupCalls).toBe(0);
  });

  it("a plain http:// page other than localhost is ORIGIN_NOT_SECURE at once, no prompt; a localhost page's prompt says it is loopback", async () => {
    const insecure = await page("http://shop.example");
    expect((await call(insecure, "create_session")).error.code).toBe("ORIGIN_NOT_SECURE");
    expect(chrome.openPopupCalls).toBe(0);
    for (const origin of ["http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:9"]) {
      const local = await page(origin);
      start(local, "list_providers");
      await settle();
      expect(prompts().find((x) => x.origin === origin)?.loopback).toBe(true);
    }
  });

  it("the settings page allows an embedding site and any model through grant_site; the framed page may then ask", async () => {
    chrome.services.set(ORIGIN, site(ORIGIN));
    const framed = () => chrome.connectPage(ORIGIN, undefined, { frameId: 3, tabUrl: "https://host.example/page" });
    const before = framed();
    await settle();
    expect((await call(before, "list_providers")).error.code).toBe("FRAME_NOT_ALLOWED");
    const options = chrome.connectOptions();
    options.postMessage({ kind: "request", requestId: 1, method: "list_sites", params: {} });
    await settle(20);
    const listed = (options.of("response")[0] as { result: { sites: Site[] } }).result.sites.find((x) => x.origin === ORIGIN)!;
    const embedder = embedderOrigin("https://host.example/some/page");
    expect(embedder).toEqual({ origin: "https://host.example" });
    options.postMessage({ kind: "request", requestId: 2, method: "grant_site", params: { site: { ...withEmbedder(listed, "https://host.example"), anyModel: true } } });
    await settle(20);
    expect(options.of("response")[1]).toMatchObject({ requestId: 2, ok: true, result: { site: { origin: ORIGIN, embedders: ["https://host.example"], anyModel: true, access: "edit", providers: ["codex"] } } });
    expect(sent("grant_site").map((f) => [f.origin, (f.payload as { site: SiteInput }).site.embedders, (f.payload as { site: SiteInput }).site.anyModel])).toEqual([[OWN, ["https://host.example"], true]]);
    expect(chrome.services.get(ORIGIN)).toMatchObject({ embedders: ["https://host.example"], anyModel: true });
    const after = framed();
    await settle();
    expect((await call(after, "list_providers")).ok).toBe(true);
    // Removing it refuses the frame again.
    options.postMessage({ kind: "request", requestId: 3, method: "grant_site", params: { site: withoutEmbedder(chrome.services.get(ORIGIN)!, "https://host.example") } });
    await settle(20);
    expect(chrome.services.get(ORIGIN)).toMatchObject({ embedders: [], anyModel: true });
    const again = framed();
    await settle();
    expect((await call(again, "list_providers")).error.code).toBe("FRAME_NOT_ALLOWED");
  });

  it("a frame is FRAME_NOT_ALLOWED, naming the site that embeds it, unless the grant lists that site; it never prompts", async () => {
    chrome.services.set(ORIGIN, site(ORIGIN, { embedders: ["https://host.example"] }));
    const framed = chrome.connectPage(ORIGIN, undefined, { frameId: 3, tabUrl: "https://elsewhere.example/page" });
    await settle();
    const r = await call(framed, "list_providers");
    expect(r.error.code).toBe("FRAME_NOT_ALLOWED");
    expect(r.error.details).toEqual({ origin: ORIGIN, embeddedIn: "https://elsewhere.example" });
    // Unknown site, unapproved frame: refused as well, without a prompt.
    const other = chrome.connectPage("https://unknown.example", undefined, { frameId: 2 });
    await settle();
    expect((await call(other, "create_session")).error.code).toBe("FRAME_NOT_ALLOWED");
    expect(chrome.openPopupCalls).toBe(0);
    // The content script names the embedder where Chrome gives the worker no tab address.
    const told = chrome.connectPage(ORIGIN, undefined, { frameId: 4 });
    told.postMessage({ kind: "frame", topOrigin: "https://host.example" });
    await settle();
    expect((await call(told, "list_providers")).ok).toBe(true);
  });

  it("revoke → revoke_site; the page keeps its route and must ask again", async () => {
    startHub([ORIGIN]);
    const p = await page();
    await createSession(p);
    await hub.revoke(ORIGIN);
    await settle();
    expect(sent("revoke_site").map((f) => [f.origin, f.payload])).toEqual([[OWN, { origin: ORIGIN }]]);
    expect(p.closed).toBe(false);
    const r = start(p, "list_providers");
    await settle();
    expect(chrome.openPopupCalls).toBe(1);
    expect(r()).toBeUndefined();
  });

  it("revoke: a page is unapproved before the services answer (they end its sessions first, and the page sees them end)", async () => {
    startHub([ORIGIN]);
    const p = await page();
    chrome.hostHandlers.revoke_site = () => NO_REPLY;
    const revoked = hub.revoke(ORIGIN);
    await settle();
    expect(sent("revoke_site")).toHaveLength(1);
    const status = start(p, "status");
    await settle(20);
    expect(status()?.result).toMatchObject({ approved: false });
    delete chrome.hostHandlers.revoke_site;
    chrome.host.reply(sent("revoke_site")[0]!);
    await revoked;
    expect(hub.state().sites).toEqual([]);
  });

  it("a grant given while a revoke is still unanswered stays: the settings page lists it, the page is approved", async () => {
    startHub([ORIGIN]);
    const p = await page();
    chrome.hostHandlers.revoke_site = () => NO_REPLY;
    const revoked = hub.revoke(ORIGIN);
    await settle();
    // The services have taken the grant away and ended the sessions; their answer is slow.
    chrome.services.delete(ORIGIN);
    await hub.approve(ORIGIN, { access: "tools", providers: ["codex"] });
    const options = chrome.connectOptions();
    options.postMessage({ kind: "request", requestId: 1, method: "list_sites", params: {} });
    await settle(20);
    expect((options.of("response")[0] as { result: { sites: Site[] } }).result.sites.map((s) => [s.origin, s.access])).toEqual([[ORIGIN, "tools"]]);
    expect((await call(p, "status")).result).toMatchObject({ approved: true });
    delete chrome.hostHandlers.revoke_site;
    chrome.host.reply(sent("revoke_site")[0]!);
    await revoked;
    expect(hub.state().sites.map((s) => [s.origin, s.access])).toEqual([[ORIGIN, "tools"]]);
  });

  it("a revoke the host refuses leaves the grant as the services have it", async () => {
    startHub([ORIGIN]);
    const p = await page();
    chrome.hostHandlers.revoke_site = () => {
      throw new HostFailure("CORE_UNAVAILABLE");
    };
    await expect(hub.revoke(ORIGIN)).rejects.toMatchObject({ code: "CORE_UNAVAILABLE" });
    expect((await call(p, "status")).result).toMatchObject({ approved: true });
  });

  it("browser start-up revokes loopback grants only", async () => {
    startHub([ORIGIN, "http://localhost:3000", "http://127.0.0.1:5173"]);
    chrome.runtime.onStartup.fire();
    await settle(40);
    expect(sent("revoke_site").map((f) => f.payload!.origin).sort()).toEqual(["http://127.0.0.1:5173", "http://localhost:3000"]);
    expect(hub.state().sites.map((x) => x.origin)).toEqual([ORIGIN]);
  });

  it("SITE_NOT_APPROVED from the services drops the cached grant", async () => {
    startHub([ORIGIN]);
    const p = await page();
    expect((await call(p, "get_settings")).ok).toBe(true);
    chrome.services.clear();
    chrome.hostHandlers.get_settings = () => {
      throw new HostFailure("SITE_NOT_APPROVED");
    };
    expect((await call(p, "get_settings")).error.code).toBe("SITE_NOT_APPROVED");
    await settle();
    expect(hub.state().sites).toEqual([]);
  });
});

describe("provider and folder prompts", () => {
  beforeEach(() => startHub([ORIGIN]));

  it("a provider outside the grant: yes adds it, then the session is created", async () => {
    chrome.hostHandlers.list_providers = () => ({ providers: [{ name: "Claude Code", code: "claude", available: true, isDefault: false, error: null }] });
    const p = await page();
    const popup = chrome.connectPopup();
    const r = start(p, "create_session", { provider: "claude" });
    await settle();
    expect(prompts()).toEqual([expect.objectContaining({ kind: "provider", origin: ORIGIN, provider: { code: "claude", name: "Claude Code" } })]);
    expect(sent("create_session")).toEqual([]);
    popup.postMessage({ kind: "answer", promptId: prompts()[0]!.id, answer: "yes" });
    await settle(20);
    expect(r()?.ok).toBe(true);
    expect(sent("grant_site").map((f) => (f.payload!.site as { providers: string[] }).providers)).toEqual([["codex", "claude"]]);
  });

  it("a provider outside the grant: no forwards the request as it is (the services refuse)", async () => {
    chrome.hostHandlers.create_session = () => {
      throw new HostFailure("PROVIDER_NOT_GRANTED");
    };
    const p = await page();
    const r = start(p, "create_session", { provider: "claude" });
    await settle();
    await hub.state(); // the prompt is up
    const popup = chrome.connectPopup();
    popup.postMessage({ kind: "answer", promptId: prompts()[0]!.id, answer: "no" });
    await settle(20);
    expect(r()?.error.code).toBe("PROVIDER_NOT_GRANTED");
    expect(sent("grant_site")).toEqual([]);
  });

  it.each([
    ["once", [{ path: "/home/ann/proj", once: true }]],
    ["always", [{ path: "/home/ann/proj", once: false }]],
    ["no", null],
  ] as const)("a folder outside the grant, answered %s", async (answer, folders) => {
    const p = await page();
    const popup = chrome.connectPopup();
    const r = start(p, "create_session", { workspace: { path: "/home/ann/proj" } });
    await settle();
    expect(prompts()).toEqual([expect.objectContaining({ kind: "folder", folder: { path: "/home/ann/proj", shown: "~/proj" } })]);
    popup.postMessage({ kind: "answer", promptId: prompts()[0]!.id, answer });
    await settle(20);
    expect(r()?.ok).toBe(true); // the fake host creates it either way; the services refuse a folder not granted
    expect(sent("grant_site").map((f) => (f.payload!.site as { folders: unknown }).folders)).toEqual(folders ? [folders] : []);
    expect(sent("create_session")).toHaveLength(1);
  });
});

describe("folders allowed once", () => {
  it("the create that uses the folder up makes the next one ask again", async () => {
    startHub([]);
    chrome.services.set(ORIGIN, site(ORIGIN, { folders: [{ path: "/home/ann/proj", once: true }] }));
    const p = await page();
    expect((await call(p, "create_session", { workspace: { path: "/home/ann/proj" } })).ok).toBe(true);
    expect(prompts()).toEqual([]);
    const again = start(p, "create_session", { workspace: { path: "/home/ann/proj" } });
    await settle(20);
    expect(prompts()).toEqual([expect.objectContaining({ kind: "folder", folder: { path: "/home/ann/proj", shown: "~/proj" } })]);
    expect(again()).toBeUndefined();
    expect(sent("create_session")).toHaveLength(1);
  });
});

describe("badge", () => {
  it("counts the sessions running or waiting for a tool result in the page's tab", async () => {
    startHub([ORIGIN]);
    const p = chrome.connectPage(ORIGIN, undefined, { tabId: 7 });
    await settle();
    const sessionId = await createSession(p);
    await settle();
    chrome.host.event(sessionId, 1, { type: "status", status: "running" });
    await settle();
    expect(chrome.badges.get(7)).toBe("1");
    chrome.host.event(sessionId, 2, { type: "status", status: "idle" });
    await settle();
    expect(chrome.badges.get(7)).toBe("");
  });

  it("is blue while agents work and amber while one waits for the page; the icon's title says which in words", async () => {
    startHub([ORIGIN]);
    const p = chrome.connectPage(ORIGIN, undefined, { tabId: 7 });
    await settle();
    const a = await createSession(p);
    const b = await createSession(p);
    chrome.host.event(a, 1, { type: "status", status: "running" });
    await settle();
    expect([chrome.badges.get(7), chrome.badgeColors.get(7), chrome.titles.get(7)]).toEqual(["1", BADGE_COLORS.working, "Pedelec — 1 agent working"]);
    chrome.host.event(b, 1, { type: "status", status: "waiting_tool_result" });
    await settle();
    expect([chrome.badges.get(7), chrome.badgeColors.get(7), chrome.titles.get(7)]).toEqual(["2", BADGE_COLORS.waiting, "Pedelec — 1 agent working, 1 agent waiting for this page"]);
    chrome.host.event(a, 2, { type: "status", status: "idle" });
    await settle();
    expect([chrome.badges.get(7), chrome.badgeColors.get(7), chrome.titles.get(7)]).toEqual(["1", BADGE_COLORS.waiting, "Pedelec — 1 agent waiting for this page"]);
    chrome.host.event(b, 2, { type: "status", status: "running" });
    await settle();
    expect([chrome.badges.get(7), chrome.badgeColors.get(7), chrome.titles.get(7)]).toEqual(["1", BADGE_COLORS.working, "Pedelec — 1 agent working"]);
    chrome.host.event(b, 3, { type: "status", status: "idle" });
    await settle();
    expect([chrome.badges.get(7), chrome.titles.get(7)]).toEqual(["", "Pedelec"]);
  });
});

describe("sessions, fan-out and tool owners", () => {
  beforeEach(() => startHub());

  it("create_session then attach; the route gets the attach snapshot and owns tools", async () => {
    const p = await page();
    const r = await call(p, "create_session", { provider: "codex", autoEndOnDisconnect: true });
    expect(chrome.host.frames.map((f) => f.type)).toEqual(["hello", "list_sites", "create_session", "attach"]);
    expect(chrome.host.of("attach")[0]!.payload).toEqual({ sessionId: r.result.sessionId, mergeDeltas: true });
    expect(r.result).toMatchObject({ sessionId: "thr_1", provider: "codex", effortLevel: "default", toolOwner: true });
  });

  it("a second route of the session joins the one stream (get_session, no second attach) and both get events", async () => {
    const a = await page();
    const b = await page();
    const sessionId = await createSession(a);
    const r = await call(b, "resume_session", { sessionId });
    expect(r.result).toMatchObject({ sessionId, toolOwner: false });
    expect(chrome.host.of("attach")).toHaveLength(1);
    chrome.host.event(sessionId, 1, { type: "chat", operationId: "op_1", messageId: "m", text: "hi" });
    await settle();
    expect(a.of("event")).toHaveLength(1);
    expect(b.of("event")).toHaveLength(1);
  });

  it("resuming a session of another origin is Core's THREAD_ACCESS_DENIED", async () => {
    startHub([ORIGIN, "https://other.example"]);
    chrome.hostHandlers.get_session = (f) => {
      if (f.origin !== ORIGIN) throw new HostFailure("THREAD_ACCESS_DENIED");
      return { snapshot: snapshot() };
    };
    const a = await page();
    const sessionId = await createSession(a);
    const other = await page("https://other.example");
    expect((await call(other, "resume_session", { sessionId })).error.code).toBe("THREAD_ACCESS_DENIED");
  });

  it("THREAD_NOT_FOUND on resume leaves nothing behind", async () => {
    chrome.hostHandlers.attach = () => {
      throw new HostFailure("THREAD_NOT_FOUND");
    };
    const p = await page();
    expect((await call(p, "resume_session", { sessionId: "thr_gone" })).error.code).toBe("THREAD_NOT_FOUND");
    expect(hub.state().sessions).toEqual([]);
  });

  it("a tool request goes to the route that started the operation; when it leaves, the other route takes over", async () => {
    const a = await page();
    const b = await page();
    const sessionId = await createSession(a);
    await call(b, "resume_session", { sessionId });
    const sent = await call(b, "send_text", { sessionId, text: "go" });
    const operationId = sent.result.operationId as string;
    chrome.host.event(sessionId, 1, { type: "tool_request", toolRequestId: "tr_1", tool: "t", args: {}, operationId, timeoutMs: 1000, deadlineAt: 5 });
    await settle();
    expect(a.of("event").map((m) => m.toolOwner)).toEqual([false]);
    expect(b.of("event").map((m) => m.toolOwner)).toEqual([true]);
    b.disconnect();
    await settle();
    expect(a.of("tool_handover")).toEqual([
      { kind: "tool_handover", sessionId, request: { toolRequestId: "tr_1", tool: "t", args: {}, operationId, timeoutMs: 1000, deadlineAt: 5 } },
    ]);
    expect(chrome.host.of("end")).toEqual([]);
  });

  it("a created session whose attach fails is ended (the page never got a handle) and the error reaches the page", async () => {
    chrome.hostHandlers.attach = () => {
      throw new HostFailure("CORE_UNAVAILABLE", "session service restarting");
    };
    const p = await page();
    const r = await call(p, "create_session");
    expect(r.error.code).toBe("CORE_UNAVAILABLE");
    await settle();
    expect(chrome.host.of("end").map((f) => f.payload)).toEqual([{ sessionId: "thr_1", reason: "auto_end" }]);
    expect(hub.state().sessions).toEqual([]);
  });

  it("a page that leaves while its session is being created: the session is ended, not leaked", async () => {
    let releaseAttach!: () => void;
    chrome.hostHandlers.attach = (f, h) => {
      releaseAttach = () => h.send({ id: f.id, ok: true, result: { sessionId: f.payload!.sessionId, snapshot: snapshot({ sessionId: f.payload!.sessionId as string }) } });
      return NO_REPLY;
    };
    const p = await page();
    start(p, "create_session");
    await settle();
    p.disconnect();
    await settle();
    releaseAttach();
    await settle();
    expect(chrome.host.of("end").map((f) => f.payload)).toEqual([{ sessionId: "thr_1", reason: "auto_end" }]);
    expect(hub.state().sessions).toEqual([]);
  });

  it("events for a session are held while its attach is in flight and delivered after", async () => {
    chrome.hostHandlers.attach = (f, h) => {
      h.event(f.payload!.sessionId as string, 1, { type: "status", status: "running" });
      setTimeout(() => h.send({ id: f.id, ok: true, result: { sessionId: f.payload!.sessionId, snapshot: snapshot({ sessionId: f.payload!.sessionId as string }) } }), 5);
      return NO_REPLY;
    };
    const p = await page();
    const r = await call(p, "resume_session", { sessionId: "thr_9" });
    expect(r.ok).toBe(true);
    await settle();
    const respIdx = p.received.findIndex((m) => (m as { kind: string }).kind === "response");
    const evIdx = p.received.findIndex((m) => (m as { kind: string }).kind === "event");
    expect(evIdx).toBeGreaterThan(respIdx);
  });
});

describe("auto-end and the native port's life", () => {
  beforeEach(() => startHub());

  it("the last route going ends an auto-end session at once (reason auto_end), detaches, and closes the native port", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    const host = chrome.host;
    p.disconnect();
    await settle();
    expect(host.of("end").map((f) => f.payload)).toEqual([{ sessionId, reason: "auto_end" }]);
    expect(host.of("detach").map((f) => f.payload)).toEqual([{ sessionId }]);
    expect(host.port.closed).toBe(true);
    expect(hub.native.open).toBe(false);
  });

  it("autoEndOnDisconnect false: only detach", async () => {
    const p = await page();
    const sessionId = await createSession(p, { autoEndOnDisconnect: false });
    p.disconnect();
    await settle();
    expect(chrome.host.of("end")).toEqual([]);
    expect(chrome.host.of("detach").map((f) => f.payload)).toEqual([{ sessionId }]);
  });

  it("not the last route: nothing is ended", async () => {
    const a = await page();
    const b = await page();
    const sessionId = await createSession(a);
    await call(b, "resume_session", { sessionId });
    a.disconnect();
    await settle();
    expect(chrome.host.of("end")).toEqual([]);
    expect(chrome.host.of("detach")).toEqual([]);
    expect(hub.native.open).toBe(true);
  });

  it("a page that leaves while its resume is attaching never ends a session whose setting is unknown", async () => {
    chrome.hostHandlers.attach = () => NO_REPLY;
    const p = await page();
    start(p, "resume_session", { sessionId: "thr_kept" });
    await settle();
    expect(chrome.host.of("attach")).toHaveLength(1);
    p.disconnect();
    await settle();
    expect(chrome.host.of("end")).toEqual([]);
  });

  it("an ended session is not ended again when its page goes", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    await call(p, "end", { sessionId });
    expect(chrome.host.of("end").map((f) => f.payload)).toEqual([{ sessionId, reason: "requested" }]);
    p.disconnect();
    await settle();
    expect(chrome.host.of("end")).toHaveLength(1);
  });

  it("the port stays while any route exists, even without sessions", async () => {
    const p = await page();
    await call(p, "list_providers");
    expect(hub.native.open).toBe(true);
    p.disconnect();
    await settle();
    expect(hub.native.open).toBe(false);
  });
});

describe("native port loss", () => {
  beforeEach(() => startHub());

  it("in-flight requests fail with NATIVE_HOST_UNAVAILABLE and are never resent; reconnect, hello, re-attach with the last seq", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    const first = chrome.host;
    first.event(sessionId, 1, { type: "status", status: "running" });
    first.event(sessionId, 2, { type: "chat", operationId: "op_1", messageId: "m", text: "a" });
    await settle();
    first.autoReply = false;
    const sent = start(p, "send_text", { sessionId, text: "ambiguous" });
    await settle();
    first.crash(chrome);
    await settle();
    expect(sent()?.error.code).toBe("NATIVE_HOST_UNAVAILABLE");
    await new Promise((r) => setTimeout(r, 30));
    await settle();
    expect(chrome.hosts).toHaveLength(2);
    const second = chrome.host;
    expect(second.frames.map((f) => f.type)).toEqual(["hello", "attach"]);
    expect(second.of("attach")[0]!.payload).toEqual({ sessionId, afterSeq: 2, mergeDeltas: true });
    // replayed duplicates are dropped, new events delivered
    second.event(sessionId, 2, { type: "chat", operationId: "op_1", messageId: "m", text: "a" });
    second.event(sessionId, 3, { type: "chat", operationId: "op_1", messageId: "m2", text: "b" });
    await settle();
    expect(p.of("event").map((m) => (m.frame as { seq: number }).seq)).toEqual([1, 2, 3]);
    expect(chrome.hosts.flatMap((h) => h.of("send_text"))).toHaveLength(1);
    expect(p.closed).toBe(false);
  });

  it("a re-attach that gets THREAD_NOT_FOUND tells the routes", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    chrome.hostHandlers.attach = () => {
      throw new HostFailure("THREAD_NOT_FOUND", "gone");
    };
    chrome.host.crash(chrome);
    await new Promise((r) => setTimeout(r, 30));
    await settle();
    expect(p.of("session_lost")).toEqual([{ kind: "session_lost", sessionId, error: { code: "THREAD_NOT_FOUND", message: "gone", details: null } }]);
    expect(hub.state().sessions).toEqual([]);
  });

  it("a detached frame (stream ended by Core) re-attaches that session with its last seq", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    chrome.host.event(sessionId, 1, { type: "status", status: "running" });
    await settle();
    chrome.host.send({ type: "detached", sessionId, reason: "stream_failed", error: { code: "CORE_UNAVAILABLE", message: "restarting", details: null } });
    await new Promise((r) => setTimeout(r, 20));
    await settle();
    expect(chrome.host.of("attach").map((f) => f.payload)).toEqual([{ sessionId, mergeDeltas: true }, { sessionId, afterSeq: 1, mergeDeltas: true }]);
  });

  it("a replay-gap snapshot event reaches the routes", async () => {
    const p = await page();
    const sessionId = await createSession(p);
    chrome.host.event(sessionId, 50, { type: "snapshot", snapshot: snapshot({ sessionId, lastSeq: 50, replayGap: true }) });
    await settle();
    expect(p.of("event").map((m) => (m.frame as { event: { type: string } }).event.type)).toEqual(["snapshot"]);
  });

  it("routes without sessions: no reconnect until the next request, which reconnects", async () => {
    const p = await page();
    await call(p, "list_providers");
    chrome.host.crash(chrome);
    await new Promise((r) => setTimeout(r, 30));
    expect(chrome.hosts).toHaveLength(1);
    expect((await call(p, "get_settings")).ok).toBe(true);
    expect(chrome.hosts).toHaveLength(2);
    expect(chrome.host.frames.map((f) => f.type)).toEqual(["hello", "get_settings"]);
  });

  it("no route left: no reconnect", async () => {
    const p = await page();
    await call(p, "list_providers");
    p.disconnect();
    await settle();
    await new Promise((r) => setTimeout(r, 30));
    expect(chrome.hosts).toHaveLength(1);
  });
});

describe("popup state", () => {
  it("shows host and Core state, the sites, live sessions per origin, the site of the popup's tab", async () => {
    startHub([ORIGIN]);
    const p = await page();
    await createSession(p);
    const s = hub.state(1);
    expect(s.host).toMatchObject({ connected: true, hostVersion: "0.1.0", protocolVersion: 2, coreRunning: true, userName: "ada" });
    expect(s.sites.map((x) => x.origin)).toEqual([ORIGIN]);
    expect(s.activeOrigin).toBe(ORIGIN);
    expect(s.sessions).toEqual([{ sessionId: "thr_1", origin: ORIGIN, status: "idle", routes: 1, autoEndOnDisconnect: true }]);
  });
});

describe("popup sessions", () => {
  it("lists every web origin's open sessions from the services, also those no page here follows", async () => {
    startHub([ORIGIN]);
    const p = await page();
    await createSession(p);
    const listed = (sessionId: string, origin: string, status: SessionSummary["status"]): SessionSummary => ({ sessionId, origin, status, provider: "codex", effortLevel: "default", createdAt: 1, attachedRoutes: 0 });
    chrome.sessionsListed = [listed("thr_1", ORIGIN, "running"), listed("thr_kept", ORIGIN, "idle"), listed("thr_cli", "cli", "idle"), listed("thr_old", ORIGIN, "ended")];
    const popup = chrome.connectPopup();
    popup.postMessage({ kind: "get_state" });
    await settle(20);
    expect(sent("list_sessions").map((f) => f.origin)).toEqual([OWN]);
    const last = popup.of("state").at(-1)!.state as PopupState;
    // thr_1 as this extension follows it (idle, one route); the kept one from the services; not the local caller's nor the ended one.
    expect(last.sessions).toEqual([
      { sessionId: "thr_1", origin: ORIGIN, status: "idle", routes: 1, autoEndOnDisconnect: true },
      { sessionId: "thr_kept", origin: ORIGIN, status: "idle", routes: 0, autoEndOnDisconnect: false },
    ]);
  });
});

describe("popup updates", () => {
  it("opening the popup pings the host for its state, without keeping the port when no page uses it", async () => {
    startHub([]);
    chrome.hostHandlers.ping = () => ({ pong: true, version: "0.1.0", protocolVersion: 2, coreRunning: false });
    const popup = chrome.connectPopup();
    await settle();
    popup.postMessage({ kind: "get_state" });
    await settle();
    // Core is not running: the grants are not asked for (that would start it).
    expect(chrome.host.frames.map((f) => f.type)).toEqual(["hello", "ping"]);
    const last = popup.of("state").at(-1)!.state as { host: { coreRunning: boolean | null; hostVersion: string | null; connected: boolean } };
    expect(last.host).toMatchObject({ hostVersion: "0.1.0", coreRunning: false, connected: false });
    expect(chrome.host.port.closed).toBe(true);
  });

  it("an open popup is told about new sessions and routes as they come", async () => {
    startHub([ORIGIN]);
    const popup = chrome.connectPopup();
    const a = await page();
    const sessionId = await createSession(a);
    await settle();
    const latest = () => (popup.of("state").at(-1)!.state as { sessions: Array<{ sessionId: string; routes: number }> }).sessions;
    expect(latest()).toEqual([expect.objectContaining({ sessionId, routes: 1 })]);
    const b = await page();
    await call(b, "resume_session", { sessionId });
    await settle();
    expect(latest()).toEqual([expect.objectContaining({ sessionId, routes: 2 })]);
  });
});
