// A fake of the chrome.* slice the worker uses (src/chrome-api.ts), with a fake
// native host behind connectNative that checks every frame against the schema.
import { readFileSync } from "node:fs";
import type { ChromeApi, ChromeEvent, MessageSender, Port } from "../src/chrome-api.js";
// @ts-expect-error plain ESM script without types
import { validate } from "../../sdk/scripts/schema-check.mjs";
import type { EventFrame, Snapshot } from "../../sdk/src/protocol/native.js";
import type { SessionSummary, Site, SiteInput } from "../src/sites.js";
import { EXTENSION_ID, NATIVE_HOST_NAME, OPTIONS_PORT_NAME, POPUP_PORT_NAME, SDK_PORT_NAME, TRANSFER_PAGE, TRANSFER_PORT_NAME } from "../../sdk/src/protocol/bridge.js";

const schema = JSON.parse(readFileSync(new URL("../../protocol/native-messaging.schema.json", import.meta.url), "utf8"));

export const tick = () => new Promise<void>((r) => setTimeout(r, 0));
export async function settle(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) await tick();
}

export class FakeEvent<F extends (...args: never[]) => void> implements ChromeEvent<F> {
  listeners: F[] = [];
  addListener(f: F): void {
    this.listeners.push(f);
  }
  removeListener(f: F): void {
    this.listeners = this.listeners.filter((l) => l !== f);
  }
  fire(...args: Parameters<F>): void {
    for (const l of [...this.listeners]) l(...args);
  }
}

/** One end of a port; messages are delivered to the peer as tasks, like Chrome. */
export class FakePort implements Port {
  peer!: FakePort;
  received: unknown[] = [];
  closed = false;
  onMessage = new FakeEvent<(message: unknown, port: Port) => void>();
  onDisconnect = new FakeEvent<(port: Port) => void>();
  constructor(
    readonly name: string,
    readonly sender?: MessageSender,
  ) {}
  static pair(name: string, sender?: MessageSender): [FakePort, FakePort] {
    const a = new FakePort(name);
    const b = new FakePort(name, sender);
    a.peer = b;
    b.peer = a;
    return [a, b];
  }
  postMessage(message: unknown): void {
    if (this.closed) throw new Error("Attempting to use a disconnected port object");
    const copy = JSON.parse(JSON.stringify(message)) as unknown; // Chrome serialises as JSON
    const peer = this.peer;
    setTimeout(() => {
      if (peer.closed) return;
      peer.received.push(copy);
      peer.onMessage.fire(copy, peer);
    }, 0);
  }
  disconnect(): void {
    if (this.closed) return;
    this.closed = true;
    const peer = this.peer;
    setTimeout(() => {
      if (peer.closed) return;
      peer.closed = true;
      peer.onDisconnect.fire(peer);
    }, 0);
  }
  /** Messages of one kind this end received. */
  of(kind: string): Array<Record<string, unknown>> {
    return this.received.filter((m) => (m as { kind?: string }).kind === kind) as Array<Record<string, unknown>>;
  }
}

type Frame = { id: number; type: string; origin?: string; payload?: Record<string, unknown> };
type HostHandler = (frame: Frame, host: FakeHost) => unknown;

export function snapshot(over: Partial<Snapshot> = {}): Snapshot {
  return {
    sessionId: "thr_1",
    status: "idle",
    activeOperation: null,
    lastOperation: null,
    recentOperations: [],
    pendingToolRequest: null,
    usage: null,
    provider: "codex",
    effortLevel: "default",
    model: "",
    autoEndOnDisconnect: true,
    workspacePath: null,
    createdAt: 1,
    lastSeq: 0,
    replayGap: false,
    ...over,
  };
}

export class HostFailure {
  constructor(readonly code: string, readonly message = code) {}
}

/** The native host behind one connectNative port. */
export class FakeHost {
  frames: Frame[] = [];
  invalid: string[] = [];
  /** When false, requests get no reply (they stay in flight). */
  autoReply = true;
  port: FakePort;
  handlers: Record<string, HostHandler>;
  #nextSession = 1;
  /** autoEndOnDisconnect of each session this host created, as Core remembers it. */
  autoEnd = new Map<string, boolean>();
  #op = 0;

  constructor(port: FakePort, handlers: Record<string, HostHandler>) {
    this.port = port;
    this.handlers = handlers;
    port.onMessage.addListener((m) => this.#onFrame(m as Frame));
  }

  #onFrame(frame: Frame): void {
    const errors = validate(schema, frame, "Request") as string[];
    if (errors.length) this.invalid.push(`${JSON.stringify(frame)}: ${errors.join("; ")}`);
    this.frames.push(frame);
    if (!this.autoReply && frame.type !== "hello") return;
    this.reply(frame);
  }

  reply(frame: Frame): void {
    const handler = this.handlers[frame.type] ?? defaultHandlers[frame.type];
    try {
      if (!handler) throw new HostFailure("INVALID_INPUT", `unknown type ${frame.type}`);
      const result = handler(frame, this);
      if (result === NO_REPLY) return;
      this.send({ id: frame.id, ok: true, result });
    } catch (e) {
      const f = e instanceof HostFailure ? e : new HostFailure("INTERNAL", String(e));
      this.send({ id: frame.id, ok: false, error: { code: f.code, message: f.message, details: null } });
    }
  }

  send(message: unknown): void {
    this.port.postMessage(message);
  }

  event(sessionId: string, seq: number, event: EventFrame["event"]): void {
    this.send({ type: "event", sessionId, seq, at: 1000 + seq, event } satisfies EventFrame);
  }

  /** The host process dies (Chrome reports it with lastError). */
  crash(chrome: FakeChrome, message = "Native host has exited."): void {
    chrome.runtime.lastError = { message };
    this.port.disconnect();
    setTimeout(() => (chrome.runtime.lastError = undefined), 1);
  }

  of(type: string): Frame[] {
    return this.frames.filter((f) => f.type === type);
  }
  newSessionId(): string {
    return `thr_${this.#nextSession++}`;
  }
  newOp(): string {
    return `op_${++this.#op}`;
  }
}

export const NO_REPLY = Symbol("no reply");

/** A grant as the services would answer it. */
export function site(origin: string, over: Partial<Site> = {}): Site {
  return { origin, access: "edit", providers: ["codex"], folders: [], anyModel: false, grantedAt: 1, lastUsedAt: null, expiresAt: null, blocked: false, embedders: [], ...over };
}

/** The site requests against `chrome.services` (the services' sites.json: it outlives hosts and workers). */
function siteHandlers(chrome: FakeChrome): Record<string, HostHandler> {
  const own = `chrome-extension://${EXTENSION_ID}`;
  const mine = (f: Frame) => {
    if (f.origin !== own) throw new HostFailure("SETTINGS_ACCESS_DENIED");
  };
  return {
    list_sites: (f) => (mine(f), { sites: [...chrome.services.values()] }),
    grant_site: (f) => {
      mine(f);
      const input = f.payload!.site as SiteInput;
      const granted = site(input.origin, { ...input, expiresAt: input.expiresAt ?? null, grantedAt: 2 });
      chrome.services.set(input.origin, granted);
      return { site: granted };
    },
    block_site: (f) => {
      mine(f);
      const origin = f.payload!.origin as string;
      const blocked = site(origin, { access: null, providers: [], blocked: true });
      chrome.services.set(origin, blocked);
      return { site: blocked };
    },
    revoke_site: (f) => (mine(f), chrome.services.delete(f.payload!.origin as string), { endedSessionIds: [] }),
    end_site_sessions: (f) => (mine(f), { endedSessionIds: [] }),
    list_sessions: (f) => (mine(f), { sessions: chrome.sessionsListed }),
    // As SessionService does: a folder granted once is used up by the create that names it.
    create_session: (f, h) => {
      const path = (f.payload?.workspace as { path?: string } | undefined)?.path;
      const granted = f.origin ? chrome.services.get(f.origin) : undefined;
      if (path && granted) chrome.services.set(granted.origin, { ...granted, folders: granted.folders.filter((x) => !(x.path === path && x.once)) });
      return defaultHandlers.create_session!(f, h);
    },
  };
}

const defaultHandlers: Record<string, HostHandler> = {
  hello: () => ({ hostVersion: "0.1.0", protocolVersion: 2, capabilities: ["chunks"], coreRunning: true, userName: "ada" }),
  ping: () => ({ pong: true, version: "0.1.0", protocolVersion: 2, coreRunning: true }),
  list_providers: () => ({ providers: [{ name: "Codex", code: "codex", available: true, isDefault: true, error: null }] }),
  get_settings: () => ({ defaultProvider: "codex" }),
  create_session: (f, h) => {
    const sessionId = h.newSessionId();
    const auto = (f.payload?.autoEndOnDisconnect as boolean | undefined) ?? true;
    h.autoEnd.set(sessionId, auto);
    return { sessionId, provider: "codex", effortLevel: "default", snapshot: snapshot({ sessionId, autoEndOnDisconnect: auto }) };
  },
  attach: (f, h) => {
    const sessionId = f.payload!.sessionId as string;
    return { sessionId, snapshot: snapshot({ sessionId, lastSeq: (f.payload!.afterSeq as number) ?? 0, autoEndOnDisconnect: h.autoEnd.get(sessionId) ?? true }) };
  },
  get_session: (f, h) => {
    const sessionId = f.payload!.sessionId as string;
    return { snapshot: snapshot({ sessionId, autoEndOnDisconnect: h.autoEnd.get(sessionId) ?? true }) };
  },
  detach: (f) => ({ sessionId: f.payload!.sessionId, detached: true }),
  send_text: (_f, h) => ({ operationId: h.newOp() }),
  prepare: (_f, h) => ({ operationId: h.newOp() }),
  cancel: () => ({ operationId: null }),
  end: (f) => ({ snapshot: snapshot({ sessionId: f.payload!.sessionId as string, status: "ended" }) }),
  reactivate: (f) => ({ snapshot: snapshot({ sessionId: f.payload!.sessionId as string }) }),
  submit_tool_result: () => ({}),
  list_assets: () => ({ assets: [] }),
  get_history: () => ({ entries: [], hasMore: false, coveredSeq: 0 }),
  create_upload_ticket: (f) => ({ url: `http://127.0.0.1:4999/assets/upload/t-${f.id}`, token: "tok", expiresAt: Date.now() + 60_000, path: `/${String(f.payload!.name)}` }),
  create_download_ticket: (f) => ({ url: `http://127.0.0.1:4999/assets/download/t-${f.id}`, token: "tok", expiresAt: Date.now() + 60_000, path: String(f.payload!.path) }),
};

export class FakeChrome implements ChromeApi {
  /** chrome.storage.session */
  stored: Record<string, unknown> = {};
  /** The services' grants, by origin. */
  services = new Map<string, Site>();
  /** What list_sessions answers (every origin's sessions, as SessionService lists them). */
  sessionsListed: SessionSummary[] = [];
  badges = new Map<number, string>();
  badgeColors = new Map<number, string>();
  titles = new Map<number, string>();
  hosts: FakeHost[] = [];
  hostHandlers: Record<string, HostHandler> = {};
  /** false: connectNative's port closes at once ("host not found"). */
  hostInstalled = true;
  openPopupCalls = 0;
  openPopupFails = false;
  windowsCreated: Array<{ url: string; id: number }> = [];
  windowsRemoved: number[] = [];
  windowsCreateFails = false;

  runtime = {
    id: EXTENSION_ID,
    lastError: undefined as { message?: string } | undefined,
    onConnect: new FakeEvent<(port: Port) => void>(),
    onConnectExternal: new FakeEvent<(port: Port) => void>(),
    connectNative: (name: string): Port => {
      if (name !== NATIVE_HOST_NAME) throw new Error(`unexpected host ${name}`);
      const [worker, host] = FakePort.pair("native");
      if (!this.hostInstalled) {
        this.runtime.lastError = { message: "Specified native messaging host not found." };
        host.disconnect();
        setTimeout(() => (this.runtime.lastError = undefined), 1);
      } else {
        this.hosts.push(new FakeHost(host, new Proxy(this.hostHandlers, { get: (t, k: string) => t[k] ?? siteHandlers(this)[k] })));
      }
      return worker;
    },
    getURL: (path: string) => `chrome-extension://${EXTENSION_ID}/${path}`,
    onStartup: new FakeEvent<() => void>(),
  };
  storage = {
    session: {
      get: async (key: string) => (key in this.stored ? { [key]: structuredClone(this.stored[key]) } : {}),
      set: async (items: Record<string, unknown>) => void Object.assign(this.stored, structuredClone(items)),
    },
  };
  action = {
    openPopup: async () => {
      this.openPopupCalls++;
      if (this.openPopupFails) throw new Error("Could not find an active browser window.");
    },
    setBadgeText: async (d: { text: string; tabId?: number }) => void this.badges.set(d.tabId ?? -1, d.text),
    setBadgeBackgroundColor: async (d: { color: string; tabId?: number }) => void this.badgeColors.set(d.tabId ?? -1, d.color),
    setTitle: async (d: { title: string; tabId?: number }) => void this.titles.set(d.tabId ?? -1, d.title),
  };
  windows = {
    create: async (data: { url: string }) => {
      if (this.windowsCreateFails) throw new Error("no windows here");
      const id = 100 + this.windowsCreated.length;
      this.windowsCreated.push({ url: data.url, id });
      return { id };
    },
    remove: async (id: number) => void this.windowsRemoved.push(id),
    onRemoved: new FakeEvent<(windowId: number) => void>(),
  };

  get host(): FakeHost {
    const h = this.hosts[this.hosts.length - 1];
    if (!h) throw new Error("no native host started");
    return h;
  }

  /** A page frame (content script) connects; returns the page's end. */
  connectPage(origin: string | undefined, name = SDK_PORT_NAME, where: { tabId?: number; frameId?: number; tabUrl?: string } = {}): FakePort {
    const tab = { id: where.tabId ?? 1, ...(where.tabUrl ? { url: where.tabUrl } : {}) };
    const [page, worker] = FakePort.pair(name, { origin, url: origin ? `${origin}/app` : "about:blank", tab, frameId: where.frameId ?? 0 });
    this.runtime.onConnect.fire(worker);
    return page;
  }

  /** The transfer frame (transfer.html), or something else claiming its port name. */
  connectTransfer(url = `chrome-extension://${EXTENSION_ID}/${TRANSFER_PAGE}`, id: string = EXTENSION_ID): FakePort {
    const [frame, worker] = FakePort.pair(TRANSFER_PORT_NAME, { id, origin: new URL(url).origin, url });
    this.runtime.onConnect.fire(worker);
    return frame;
  }

  /** The options page (options.html), or a web page claiming its port name. */
  connectOptions(sender: MessageSender = { id: EXTENSION_ID, origin: `chrome-extension://${EXTENSION_ID}`, url: `chrome-extension://${EXTENSION_ID}/options.html` }): FakePort {
    const [options, worker] = FakePort.pair(OPTIONS_PORT_NAME, sender);
    this.runtime.onConnect.fire(worker);
    return options;
  }

  connectPopup(): FakePort {
    const [popup, worker] = FakePort.pair(POPUP_PORT_NAME, { id: EXTENSION_ID, origin: `chrome-extension://${EXTENSION_ID}`, url: `chrome-extension://${EXTENSION_ID}/popup.html` });
    this.runtime.onConnect.fire(worker);
    return popup;
  }
}

let nextRequestId = 1;
/** Sends a bridge request from a page port and waits for its response. */
export async function call(page: FakePort, method: string, params: Record<string, unknown> = {}): Promise<{ ok: boolean; result?: any; error?: any }> {
  const requestId = nextRequestId++;
  page.postMessage({ kind: "request", requestId, call: { method, params } });
  for (let i = 0; i < 200; i++) {
    await tick();
    const r = page.received.find((m) => (m as { kind?: string; requestId?: number }).kind === "response" && (m as { requestId: number }).requestId === requestId);
    if (r) return r as { ok: boolean; result?: unknown; error?: unknown };
  }
  throw new Error(`no response to ${method}`);
}

/** Starts a request without waiting; returns a getter for its response. */
export function start(page: FakePort, method: string, params: Record<string, unknown> = {}): () => { ok: boolean; result?: any; error?: any } | undefined {
  const requestId = nextRequestId++;
  page.postMessage({ kind: "request", requestId, call: { method, params } });
  return () => page.received.find((m) => (m as { kind?: string; requestId?: number }).kind === "response" && (m as { requestId: number }).requestId === requestId) as never;
}
