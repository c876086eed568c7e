// The service worker's logic: SDK routes (one port per Pedelec client),
// origin approval, sessions and their routes, event fan-out, auto-end, and the
// native port's life (reconnect with backoff, hello, re-attach with the last seq).
// chrome.* comes in as `ChromeApi` so the tests can drive it with a fake.
import type { ChromeApi, Port } from "./chrome-api.js";
import { NativeError, NativeLink } from "./native-link.js";
import {
  APPROVAL_TIMEOUT_MS,
  APPROVED_ORIGINS_KEY,
  OPTIONS_PORT_NAME,
  POPUP_PORT_NAME,
  TRANSFER_PORT_NAME,
  type TransferCheck,
  type TransferCheckResult,
  SDK_PORT_NAME,
  SESSION_METHODS,
  type BridgeCall,
  type BridgeCalls,
  type BridgeError,
  type BridgeMethod,
  type OptionsToWorker,
  type PopupState,
  type PopupToWorker,
  type WorkerToOptions,
  type WorkerToPage,
  type WorkerToPopup,
} from "../../sdk/src/protocol/bridge.js";
import type { DetachedFrame, EventFrame, PendingToolRequest, SessionStatus, Snapshot } from "../../sdk/src/protocol/native.js";

export type HubOptions = {
  approvalTimeoutMs?: number;
  /** Delays between native reconnect attempts; the last one repeats. */
  backoffMs?: readonly number[];
};

type Route = { id: number; port: Port; origin: string; sessions: Set<string>; closed: boolean };

type HubSession = {
  sessionId: string;
  origin: string;
  /** Route ids, oldest first (the fallback tool owner). */
  routes: Set<number>;
  lastSeq: number;
  autoEnd: boolean;
  status: SessionStatus;
  /** operationId → the route that started it (tool requests go there first). */
  opOwner: Map<string, number>;
  pendingTool: { request: PendingToolRequest; owner: number } | null;
  /** Frames held while the attach reply is awaited (null: not attaching). */
  held: EventFrame[] | null;
  reattachTimer: ReturnType<typeof setTimeout> | null;
  reattachAttempt: number;
};

type PendingApproval = {
  origin: string;
  waiters: Array<{ route: Route; resolve: () => void; reject: (e: BridgeError) => void }>;
  timer: ReturnType<typeof setTimeout>;
  windowId: number | null;
};

const OP_OWNER_MEMORY = 32;

export function bridgeError(code: string, message: string, details: unknown = null): BridgeError {
  return { code, message, details };
}

function toBridgeError(e: unknown): BridgeError {
  if (e instanceof NativeError) return e.toBridge();
  if (typeof e === "object" && e !== null && "code" in e && "message" in e) {
    const x = e as { code: unknown; message: unknown; details?: unknown };
    if (typeof x.code === "string" && typeof x.message === "string") return { code: x.code, message: x.message, details: x.details ?? null };
  }
  return bridgeError("INTERNAL", e instanceof Error ? e.message : String(e));
}

/** Only http(s) pages may use Pedelec; opaque ("null") and other schemes are refused. */
export function isPageOrigin(origin: string | undefined): origin is string {
  return typeof origin === "string" && /^https?:\/\/[^/]+$/.test(origin);
}

export class Hub {
  readonly native: NativeLink;
  /** Resolves once the approved origins are loaded. */
  readonly ready: Promise<void>;
  #api: ChromeApi;
  #approvalTimeoutMs: number;
  #backoff: readonly number[];
  #routes = new Map<number, Route>();
  #nextRouteId = 1;
  #sessions = new Map<string, HubSession>();
  #approved = new Set<string>();
  #approvals = new Map<string, PendingApproval>();
  #popups = new Set<Port>();
  /** Ticket URLs handed to pages, by URL: what the transfer frame may fetch for which origin (single use). */
  #tickets = new Map<string, { origin: string; until: number }>();
  #reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  #reconnectAttempt = 0;

  constructor(api: ChromeApi, options: HubOptions = {}) {
    this.#api = api;
    this.#approvalTimeoutMs = options.approvalTimeoutMs ?? APPROVAL_TIMEOUT_MS;
    this.#backoff = options.backoffMs ?? [250, 500, 1000, 2000, 5000, 10000];
    this.native = new NativeLink(api, {
      event: (frame) => this.#onEvent(frame),
      detached: (frame) => this.#onDetached(frame),
      lost: (error, afterHello) => this.#onNativeLost(error, afterHello),
      stateChanged: () => this.#pushPopupState(),
    });
    this.ready = api.storage.local.get(APPROVED_ORIGINS_KEY).then(
      (items) => {
        const list = items[APPROVED_ORIGINS_KEY];
        if (Array.isArray(list)) for (const o of list) if (typeof o === "string") this.#approved.add(o);
      },
      (e: unknown) => console.error("pedelec: could not read approved origins", e),
    );
  }

  /** Registers the listeners (synchronously, as MV3 requires for a waking worker). */
  start(): void {
    this.#api.runtime.onConnect.addListener((port) => this.#onConnect(port));
    this.#api.runtime.onConnectExternal?.addListener((port) => this.#onConnect(port));
    this.#api.windows.onRemoved?.addListener((windowId) => this.#onWindowRemoved(windowId));
  }

  // ---- ports ----

  #onConnect(port: Port): void {
    if (port.name === SDK_PORT_NAME) return this.#addRoute(port);
    if (port.name === POPUP_PORT_NAME && this.#isOwnPage(port)) return this.#addPopup(port);
    if (port.name === TRANSFER_PORT_NAME && this.#isOwnPage(port)) return this.#addTransferFrame(port);
    if (port.name === OPTIONS_PORT_NAME && this.#isOwnPage(port)) return this.#addOptionsPage(port);
    port.disconnect();
  }

  /** The transfer frame asks, per body, whether a URL is a ticket this worker gave that origin. */
  #addTransferFrame(port: Port): void {
    port.onMessage.addListener((message) => {
      const m = message as TransferCheck;
      if (m?.kind !== "check" || typeof m.id !== "number") return;
      const ticket = typeof m.url === "string" ? this.#tickets.get(m.url) : undefined;
      let ok = false;
      let why = "not a ticket this extension issued";
      if (ticket && ticket.origin !== m.origin) why = "the ticket belongs to another origin";
      else if (ticket && ticket.until < Date.now()) why = "the ticket expired";
      else if (ticket) ok = true;
      if (ticket && ok) this.#tickets.delete(m.url); // tickets are single use
      const reply: TransferCheckResult = { kind: "check_result", id: m.id, ok, message: ok ? "" : `ASSET_TICKET_INVALID: ${why}` };
      try {
        port.postMessage(reply);
      } catch {
        // The frame went away.
      }
    });
  }

  #rememberTicket(url: string, origin: string, expiresAt: number | null): void {
    const now = Date.now();
    for (const [u, t] of this.#tickets) if (t.until < now) this.#tickets.delete(u);
    // Bounded: a page that asks for tickets and never uses them cannot grow this.
    while (this.#tickets.size >= 1024) this.#tickets.delete(this.#tickets.keys().next().value as string);
    this.#tickets.set(url, { origin, until: expiresAt ?? now + 10 * 60_000 });
  }

  #isOwnPage(port: Port): boolean {
    const own = this.#api.runtime.getURL("");
    return port.sender?.id === this.#api.runtime.id && typeof port.sender?.url === "string" && port.sender.url.startsWith(own);
  }

  #addRoute(port: Port): void {
    // The origin comes from Chrome (the frame's origin), never from the page.
    const origin = port.sender?.origin;
    if (!isPageOrigin(origin)) {
      port.disconnect();
      return;
    }
    const route: Route = { id: this.#nextRouteId++, port, origin, sessions: new Set(), closed: false };
    this.#routes.set(route.id, route);
    port.onMessage.addListener((message) => void this.#onRouteMessage(route, message));
    port.onDisconnect.addListener(() => this.#removeRoute(route));
    this.#post(route, { kind: "welcome", origin });
  }

  #post(route: Route, msg: WorkerToPage): void {
    if (route.closed) return;
    try {
      route.port.postMessage(msg);
    } catch {
      // The page went away between two events; onDisconnect cleans up.
    }
  }

  async #onRouteMessage(route: Route, message: unknown): Promise<void> {
    const m = message as { kind?: unknown; requestId?: unknown; call?: { method?: unknown; params?: unknown } };
    if (m?.kind !== "request" || typeof m.requestId !== "number" || typeof m.call?.method !== "string") return;
    const requestId = m.requestId;
    try {
      const result = await this.#dispatch(route, m.call as BridgeCall);
      this.#post(route, { kind: "response", requestId, ok: true, result });
    } catch (e) {
      this.#post(route, { kind: "response", requestId, ok: false, error: toBridgeError(e) });
    }
  }

  async #dispatch(route: Route, call: BridgeCall): Promise<unknown> {
    await this.ready;
    const params = (typeof call.params === "object" && call.params !== null ? call.params : {}) as Record<string, unknown>;
    const method = call.method as BridgeMethod;
    if (method === "status") return this.#status(route);
    await this.#requireApproval(route);
    if (route.closed) throw bridgeError("EXTENSION_DISCONNECTED", "the route closed");
    switch (method) {
      case "list_providers":
        return this.native.request("list_providers", route.origin, undefined);
      case "get_settings":
        return this.native.request("get_settings", route.origin, undefined);
      case "create_session":
        return this.#createSession(route, params as BridgeCalls["create_session"]["params"]);
      case "resume_session":
        return this.#resumeSession(route, params as BridgeCalls["resume_session"]["params"]);
      default:
        break;
    }
    if (!SESSION_METHODS.has(method)) throw bridgeError("SDK_PROTOCOL_ERROR", `unknown bridge method ${String(method)}`);
    const sessionId = params.sessionId;
    if (typeof sessionId !== "string" || !route.sessions.has(sessionId)) {
      throw bridgeError("INVALID_INPUT", "this page is not attached to that session", { sessionId });
    }
    const session = this.#sessions.get(sessionId)!;
    switch (method) {
      case "send_text":
      case "prepare": {
        const r = await this.native.request(method, route.origin, params as never);
        session.opOwner.set(r.operationId, route.id);
        if (session.opOwner.size > OP_OWNER_MEMORY) session.opOwner.delete(session.opOwner.keys().next().value as string);
        return r;
      }
      case "end": {
        const r = await this.native.request("end", route.origin, { sessionId, reason: "requested" });
        session.status = r.snapshot.status;
        return r;
      }
      case "create_upload_ticket":
      case "create_download_ticket": {
        const r = await this.native.request(method as "create_upload_ticket", route.origin, params as never);
        this.#rememberTicket(r.url, route.origin, r.expiresAt);
        return r;
      }
      default:
        return this.native.request(method as "get_session", route.origin, params as never);
    }
  }

  async #status(route: Route): Promise<BridgeCalls["status"]["result"]> {
    let appConnected = false;
    try {
      // ping never starts the services: a probe, not a launch.
      appConnected = (await this.native.request("ping", undefined, undefined)).coreRunning;
    } catch {
      appConnected = false;
    }
    this.#closeNativeIfIdle();
    return { approved: this.#approved.has(route.origin), origin: route.origin, appConnected };
  }

  // ---- sessions ----

  /** `autoEnd` until the attach snapshot says: never end a session whose setting is unknown. */
  #newSession(sessionId: string, origin: string, route: Route, autoEnd: boolean): HubSession {
    const session: HubSession = {
      sessionId,
      origin,
      routes: new Set([route.id]),
      lastSeq: 0,
      autoEnd,
      status: "idle",
      opOwner: new Map(),
      pendingTool: null,
      held: [],
      reattachTimer: null,
      reattachAttempt: 0,
    };
    this.#sessions.set(sessionId, session);
    route.sessions.add(sessionId);
    return session;
  }

  /** Attach reply in: adopt its snapshot, then deliver what arrived meanwhile. */
  #attached(session: HubSession, snapshot: Snapshot): void {
    session.lastSeq = Math.max(session.lastSeq, snapshot.lastSeq);
    session.autoEnd = snapshot.autoEndOnDisconnect;
    session.status = snapshot.status;
    this.#trackPendingTool(session, snapshot.pendingToolRequest);
    this.#pushPopupState();
    // After the page has its reply (posted before this task ends), so its
    // handle exists when the first events arrive.
    setTimeout(() => {
      const held = session.held ?? [];
      session.held = null;
      for (const frame of held) this.#onEvent(frame);
    }, 0);
  }

  async #createSession(route: Route, payload: BridgeCalls["create_session"]["params"]): Promise<BridgeCalls["create_session"]["result"]> {
    const created = await this.native.request("create_session", route.origin, payload);
    const session = this.#newSession(created.sessionId, route.origin, route, created.snapshot.autoEndOnDisconnect);
    try {
      const attached = await this.native.request("attach", route.origin, { sessionId: created.sessionId });
      if (this.#sessions.get(session.sessionId) !== session) {
        // The page left while the session was being made; its leaving already
        // ended (auto-end) or detached the session.
        throw bridgeError("EXTENSION_DISCONNECTED", "the page disconnected");
      }
      this.#attached(session, attached.snapshot);
      return { sessionId: created.sessionId, provider: created.provider, effortLevel: created.effortLevel, snapshot: attached.snapshot, toolOwner: true };
    } catch (e) {
      if (this.#sessions.get(session.sessionId) === session && !route.closed) this.#routeLeft(session, route.id);
      throw e;
    }
  }

  async #resumeSession(route: Route, params: { sessionId?: unknown }): Promise<BridgeCalls["resume_session"]["result"]> {
    const sessionId = params.sessionId;
    if (typeof sessionId !== "string" || sessionId === "") throw bridgeError("INVALID_INPUT", "resumeSession needs a non-empty session id");
    const existing = this.#sessions.get(sessionId);
    if (existing && existing.origin === route.origin) {
      // Already streamed to this worker: one host stream per session, so this
      // route joins it; a fresh snapshot gives the route the current state.
      if (route.sessions.has(sessionId)) {
        const r = await this.native.request("get_session", route.origin, { sessionId });
        return { sessionId, snapshot: r.snapshot, toolOwner: this.#ownerOf(existing, existing.pendingTool?.request.operationId) === route.id };
      }
      existing.routes.add(route.id);
      route.sessions.add(sessionId);
      this.#pushPopupState();
      try {
        const r = await this.native.request("get_session", route.origin, { sessionId });
        return { sessionId, snapshot: r.snapshot, toolOwner: this.#ownerOf(existing, r.snapshot.pendingToolRequest?.operationId) === route.id };
      } catch (e) {
        this.#routeLeft(existing, route.id);
        throw e;
      }
    }
    if (existing) {
      // Another origin's session: Core decides (THREAD_ACCESS_DENIED), never this worker.
      await this.native.request("get_session", route.origin, { sessionId });
      throw bridgeError("THREAD_ACCESS_DENIED", "the session belongs to another origin", { sessionId });
    }
    const session = this.#newSession(sessionId, route.origin, route, false);
    try {
      const attached = await this.native.request("attach", route.origin, { sessionId });
      if (this.#sessions.get(sessionId) !== session) throw bridgeError("EXTENSION_DISCONNECTED", "the page disconnected");
      this.#attached(session, attached.snapshot);
      return { sessionId, snapshot: attached.snapshot, toolOwner: true };
    } catch (e) {
      // Nothing was attached: forget it without ending anything.
      if (this.#sessions.get(sessionId) === session) this.#forget(session);
      throw e;
    }
  }

  #forget(session: HubSession): void {
    if (session.reattachTimer) clearTimeout(session.reattachTimer);
    this.#sessions.delete(session.sessionId);
    for (const id of session.routes) this.#routes.get(id)?.sessions.delete(session.sessionId);
    session.routes.clear();
    this.#pushPopupState();
  }

  #ownerOf(session: HubSession, operationId: string | undefined): number | undefined {
    const preferred = operationId ? session.opOwner.get(operationId) : undefined;
    if (preferred !== undefined && session.routes.has(preferred)) return preferred;
    return session.routes.values().next().value;
  }

  #trackPendingTool(session: HubSession, request: PendingToolRequest | null): void {
    if (!request) {
      session.pendingTool = null;
      return;
    }
    if (session.pendingTool?.request.toolRequestId === request.toolRequestId) return;
    const owner = this.#ownerOf(session, request.operationId);
    session.pendingTool = owner === undefined ? null : { request, owner };
  }

  #onEvent(frame: EventFrame): void {
    const session = this.#sessions.get(frame.sessionId);
    if (!session) return;
    if (session.held) {
      session.held.push(frame);
      return;
    }
    const e = frame.event;
    if (e.type === "snapshot") {
      if (e.snapshot.lastSeq > session.lastSeq) session.lastSeq = e.snapshot.lastSeq;
      session.status = e.snapshot.status;
      this.#trackPendingTool(session, e.snapshot.pendingToolRequest);
    } else {
      if (frame.seq <= session.lastSeq) return; // replayed duplicate
      session.lastSeq = frame.seq;
      if (e.type === "status") session.status = e.status;
      if (e.type === "tool_request") {
        const { type: _type, ...request } = e;
        this.#trackPendingTool(session, request);
      }
      if (e.type === "tool_request_cleared" && session.pendingTool?.request.toolRequestId === e.toolRequestId) session.pendingTool = null;
      if (e.type === "ended") session.status = "ended";
    }
    const owner = session.pendingTool?.owner;
    const carriesTool = e.type === "tool_request" || (e.type === "snapshot" && e.snapshot.pendingToolRequest !== null);
    for (const id of session.routes) {
      const route = this.#routes.get(id);
      if (route) this.#post(route, { kind: "event", frame, toolOwner: carriesTool && id === owner });
    }
    if (e.type === "status" || e.type === "ended") this.#pushPopupState();
  }

  // ---- routes leaving ----

  #removeRoute(route: Route): void {
    if (route.closed) return;
    route.closed = true;
    this.#routes.delete(route.id);
    for (const sessionId of [...route.sessions]) {
      const session = this.#sessions.get(sessionId);
      if (session) this.#routeLeft(session, route.id);
    }
    route.sessions.clear();
    for (const approval of this.#approvals.values()) approval.waiters = approval.waiters.filter((w) => w.route !== route);
    this.#pushPopupState();
    this.#closeNativeIfIdle();
  }

  /** A route no longer follows `session`: hand over its tool request, or end/detach when it was the last. */
  #routeLeft(session: HubSession, routeId: number): void {
    session.routes.delete(routeId);
    this.#routes.get(routeId)?.sessions.delete(session.sessionId);
    if (session.routes.size > 0) {
      if (session.pendingTool?.owner === routeId) {
        const owner = this.#ownerOf(session, session.pendingTool.request.operationId)!;
        session.pendingTool.owner = owner;
        const route = this.#routes.get(owner);
        if (route) this.#post(route, { kind: "tool_handover", sessionId: session.sessionId, request: session.pendingTool.request });
      }
      return;
    }
    this.#forget(session);
    const { sessionId, origin } = session;
    if (session.autoEnd && session.status !== "ended") {
      // The seeds' page-scoped lifecycle: end at once, not after Core's grace period.
      this.native.request("end", origin, { sessionId, reason: "auto_end" }).catch((e: unknown) => {
        console.warn(`pedelec: auto-end of ${sessionId} failed`, e);
      }).finally(() => this.#closeNativeIfIdle());
    }
    if (this.native.open) {
      this.native.request("detach", origin, { sessionId }).catch(() => undefined).finally(() => this.#closeNativeIfIdle());
    }
  }

  /** One native port while any route exists; none otherwise (lets the worker sleep). */
  #closeNativeIfIdle(): void {
    if (this.#routes.size > 0 || this.native.busy) return;
    if (this.#reconnectTimer) {
      clearTimeout(this.#reconnectTimer);
      this.#reconnectTimer = null;
    }
    this.native.close();
  }

  // ---- native port loss ----

  #onNativeLost(error: NativeError, _afterHello: boolean): void {
    for (const session of this.#sessions.values()) {
      if (session.reattachTimer) clearTimeout(session.reattachTimer);
      session.reattachTimer = null;
      // Frames held for an attach in flight died with the port; the re-attach replays from lastSeq.
      session.held = null;
    }
    this.#pushPopupState();
    // Reconnecting is for the sessions' streams; without any, the next request
    // reconnects (so a missing or refusing host is not respawned in a loop).
    // A version mismatch does not heal by retrying.
    if (this.#routes.size === 0 || this.#sessions.size === 0 || error.code === "PROTOCOL_MISMATCH") return;
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#reconnectTimer) return;
    const delay = this.#backoff[Math.min(this.#reconnectAttempt, this.#backoff.length - 1)] ?? 1000;
    this.#reconnectAttempt++;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = null;
      if (this.#routes.size === 0) return;
      this.native.connect().then(
        () => {
          this.#reconnectAttempt = 0;
          for (const session of this.#sessions.values()) void this.#reattach(session);
        },
        () => {
          // lost() already ran for the failed port; make sure another try is queued.
          if (!this.native.open) this.#scheduleReconnect();
        },
      );
    }, delay);
  }

  #onDetached(frame: DetachedFrame): void {
    const session = this.#sessions.get(frame.sessionId);
    if (session) this.#scheduleReattach(session);
  }

  #scheduleReattach(session: HubSession): void {
    if (session.reattachTimer) return;
    const delay = this.#backoff[Math.min(session.reattachAttempt, this.#backoff.length - 1)] ?? 1000;
    session.reattachAttempt++;
    session.reattachTimer = setTimeout(() => {
      session.reattachTimer = null;
      void this.#reattach(session);
    }, delay);
  }

  /** Restores a session's stream with its last seq; the host replays what it missed. */
  async #reattach(session: HubSession): Promise<void> {
    if (this.#sessions.get(session.sessionId) !== session) return;
    session.held = [];
    try {
      const r = await this.native.request("attach", session.origin, { sessionId: session.sessionId, afterSeq: session.lastSeq });
      session.reattachAttempt = 0;
      // Only the status bookkeeping: the routes get the replayed events (or a
      // replay-gap snapshot event), not this reply.
      session.autoEnd = r.snapshot.autoEndOnDisconnect;
      const held = session.held ?? [];
      session.held = null;
      for (const f of held) this.#onEvent(f);
      this.#pushPopupState();
    } catch (e) {
      session.held = null;
      const error = toBridgeError(e);
      if (error.code === "THREAD_NOT_FOUND" || error.code === "THREAD_ACCESS_DENIED") {
        for (const id of session.routes) {
          const route = this.#routes.get(id);
          if (route) this.#post(route, { kind: "session_lost", sessionId: session.sessionId, error });
        }
        this.#forget(session);
        return;
      }
      // The port dropped again (its loss re-attaches everything) or Core is still starting.
      if (this.native.open) this.#scheduleReattach(session);
    }
  }

  // ---- approval ----

  async #requireApproval(route: Route): Promise<void> {
    if (this.#approved.has(route.origin)) return;
    const origin = route.origin;
    let approval = this.#approvals.get(origin);
    if (!approval) {
      // Registered before the UI opens, so a second request of the origin
      // arriving meanwhile waits for this approval instead of opening another.
      const created: PendingApproval = {
        origin,
        waiters: [],
        windowId: null,
        timer: setTimeout(() => this.#settleApproval(origin, bridgeError("APPROVAL_TIMEOUT", `origin ${origin} was not approved in time`)), this.#approvalTimeoutMs),
      };
      approval = created;
      this.#approvals.set(origin, created);
      this.#pushPopupState();
      this.#openApprovalUi(origin).then(
        (windowId) => {
          if (windowId === null) return;
          if (this.#approvals.get(origin) === created) created.windowId = windowId;
          else this.#api.windows.remove(windowId).catch(() => undefined); // decided already
        },
        (error: BridgeError) => this.#settleApproval(origin, error),
      );
    }
    const pending = approval;
    await new Promise<void>((resolve, reject) => {
      pending.waiters.push({ route, resolve, reject });
      // The SDK pauses its bridge timeout while the user decides.
      this.#post(route, { kind: "approval", state: "pending" });
    });
  }

  /** chrome.action.openPopup, else a popup window, else OPEN_POPUP_FAILED. Returns the window id it opened. */
  async #openApprovalUi(origin: string): Promise<number | null> {
    try {
      if (typeof this.#api.action?.openPopup === "function") {
        await this.#api.action.openPopup();
        return null;
      }
    } catch {
      // No focused window, or not allowed here: fall back to a window.
    }
    try {
      const win = await this.#api.windows.create({
        url: this.#api.runtime.getURL(`popup.html?approve=${encodeURIComponent(origin)}`),
        type: "popup",
        width: 420,
        height: 560,
        focused: true,
      });
      return win?.id ?? null;
    } catch (e) {
      throw bridgeError("OPEN_POPUP_FAILED", `could not open the approval popup: ${(e as Error).message ?? String(e)}`, { origin });
    }
  }

  /** `error` null: approved. */
  #settleApproval(origin: string, error: BridgeError | null): void {
    const approval = this.#approvals.get(origin);
    if (!approval) return;
    this.#approvals.delete(origin);
    clearTimeout(approval.timer);
    for (const w of approval.waiters) {
      this.#post(w.route, { kind: "approval", state: "settled" });
      if (error) w.reject(error);
      else w.resolve();
    }
    if (approval.windowId !== null) this.#api.windows.remove(approval.windowId).catch(() => undefined);
    this.#pushPopupState();
  }

  #onWindowRemoved(windowId: number): void {
    for (const approval of this.#approvals.values()) {
      if (approval.windowId === windowId) {
        approval.windowId = null;
        this.#settleApproval(approval.origin, bridgeError("APPROVAL_REJECTED", `the approval window for ${approval.origin} was closed`));
      }
    }
  }

  async approve(origin: string): Promise<void> {
    this.#approved.add(origin);
    await this.#saveApproved();
    this.#settleApproval(origin, null);
  }

  reject(origin: string): void {
    this.#settleApproval(origin, bridgeError("APPROVAL_REJECTED", `the user rejected Pedelec access for ${origin}`));
  }

  /** Forgets the origin and cuts its routes (their handles detach). */
  async revoke(origin: string): Promise<void> {
    this.#approved.delete(origin);
    await this.#saveApproved();
    for (const route of [...this.#routes.values()]) {
      if (route.origin !== origin) continue;
      route.port.disconnect();
      this.#removeRoute(route);
    }
    this.#pushPopupState();
  }

  async #saveApproved(): Promise<void> {
    await this.#api.storage.local.set({ [APPROVED_ORIGINS_KEY]: [...this.#approved].sort() });
  }

  // ---- options page (settings) ----

  #addOptionsPage(port: Port): void {
    port.onMessage.addListener((message) => void this.#onOptionsMessage(port, message));
  }

  /** The origin of the extension's own pages, the one the host accepts for settings. */
  #ownOrigin(): string {
    return this.#api.runtime.getURL("").replace(/\/$/, "");
  }

  async #onOptionsMessage(port: Port, message: unknown): Promise<void> {
    const m = message as OptionsToWorker;
    if (m?.kind !== "request" || typeof m.requestId !== "number") return;
    const origin = this.#ownOrigin();
    let reply: WorkerToOptions;
    try {
      let result: unknown;
      switch (m.method) {
        case "list_providers":
          result = await this.native.request("list_providers", origin, undefined);
          break;
        case "get_full_settings":
          result = await this.native.request("get_full_settings", origin, undefined);
          break;
        case "update_settings":
          result = await this.native.request("update_settings", origin, m.params);
          break;
        default:
          throw bridgeError("SDK_PROTOCOL_ERROR", `unknown options method ${String((m as { method?: unknown }).method)}`);
      }
      reply = { kind: "response", requestId: m.requestId, ok: true, result };
    } catch (e) {
      reply = { kind: "response", requestId: m.requestId, ok: false, error: toBridgeError(e) };
    }
    // The page asks now and then: no port kept open for it (the worker may sleep).
    this.#closeNativeIfIdle();
    try {
      port.postMessage(reply);
    } catch {
      // The page was closed meanwhile.
    }
  }

  // ---- popup ----

  #addPopup(port: Port): void {
    this.#popups.add(port);
    port.onDisconnect.addListener(() => this.#popups.delete(port));
    port.onMessage.addListener((message) => void this.#onPopupMessage(port, message as PopupToWorker));
    void this.ready.then(() => this.#postPopup(port));
  }

  /** Asks the host (ping: never starts Core) so the popup shows the current state. */
  async #refreshHostState(): Promise<void> {
    try {
      await this.native.request("ping", undefined, undefined);
    } catch {
      // The state already records why (host missing, mismatch, …).
    }
    this.#closeNativeIfIdle();
    this.#pushPopupState();
  }

  async #onPopupMessage(port: Port, msg: PopupToWorker): Promise<void> {
    switch (msg?.kind) {
      case "get_state":
        void this.#refreshHostState();
        break;
      case "approve":
        if (isPageOrigin(msg.origin)) await this.approve(msg.origin);
        break;
      case "reject":
        this.reject(msg.origin);
        break;
      case "revoke":
        await this.revoke(msg.origin);
        break;
      default:
        return;
    }
    this.#postPopup(port);
  }

  state(): PopupState {
    return {
      host: { ...this.native.state },
      pendingApprovals: [...this.#approvals.keys()],
      approvedOrigins: [...this.#approved].sort(),
      sessions: [...this.#sessions.values()].map((s) => ({
        sessionId: s.sessionId,
        origin: s.origin,
        status: s.status,
        routes: s.routes.size,
        autoEndOnDisconnect: s.autoEnd,
      })),
    };
  }

  #postPopup(port: Port): void {
    const msg: WorkerToPopup = { kind: "state", state: this.state() };
    try {
      port.postMessage(msg);
    } catch {
      this.#popups.delete(port);
    }
  }

  #pushPopupState(): void {
    for (const port of this.#popups) this.#postPopup(port);
  }
}
