// The session table: the routes the worker has, the sessions they attached,
// creating and resuming a session for a route, the session events fanned out
// to its routes (only the tool owner gets to answer a tool request), and a
// route leaving: its tool request handed over, or, as the session's last
// route, the session ended (autoEndOnDisconnect) and detached.
import type { Port } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import type { BridgeCalls, BridgeError, PopupState } from "../../../sdk/src/protocol/bridge.js";
import type { EventFrame, PendingToolRequest, SessionStatus, Snapshot } from "../../../sdk/src/protocol/native.js";
import { bridgeError } from "./errors.js";
import { post, type Route } from "./routes.js";

export type HubSession = {
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

export type SessionHooks = {
  /** Something the popup shows changed. */
  changed(): void;
  closeNativeIfIdle(): void;
};

/** How many operations per session remember the route that started them. */
const OP_OWNER_MEMORY = 32;

export class Sessions {
  #native: NativeLink;
  #hooks: SessionHooks;
  #routes = new Map<number, Route>();
  #nextRouteId = 1;
  #sessions = new Map<string, HubSession>();

  constructor(native: NativeLink, hooks: SessionHooks) {
    this.#native = native;
    this.#hooks = hooks;
  }

  get routeCount(): number {
    return this.#routes.size;
  }

  get sessionCount(): number {
    return this.#sessions.size;
  }

  get(sessionId: string): HubSession | undefined {
    return this.#sessions.get(sessionId);
  }

  all(): IterableIterator<HubSession> {
    return this.#sessions.values();
  }

  /** For the popup: each session with its origin, status and number of routes. */
  summaries(): PopupState["sessions"] {
    return [...this.#sessions.values()].map((s) => ({
      sessionId: s.sessionId,
      origin: s.origin,
      status: s.status,
      routes: s.routes.size,
      autoEndOnDisconnect: s.autoEnd,
    }));
  }

  // ---- routes ----

  addRoute(port: Port, origin: string, where: Pick<Route, "tabId" | "tab" | "frameId" | "topOrigin">): Route {
    const route: Route = { id: this.#nextRouteId++, port, origin, sessions: new Set(), closed: false, ...where };
    this.#routes.set(route.id, route);
    return route;
  }

  /**
   * For the action icon's badge: per tab, the sessions its pages follow that run a turn
   * (`working`) and those of them waiting for a tool result from the page (`waiting`).
   */
  busyByTab(): Map<number, { working: number; waiting: number }> {
    const byTab = new Map<number, { working: Set<string>; waiting: Set<string> }>();
    for (const route of this.#routes.values()) {
      if (route.tabId === null) continue;
      const tab = byTab.get(route.tabId) ?? { working: new Set<string>(), waiting: new Set<string>() };
      for (const id of route.sessions) {
        const status = this.#sessions.get(id)?.status;
        if (status === "running" || status === "waiting_tool_result") tab.working.add(id);
        if (status === "waiting_tool_result") tab.waiting.add(id);
      }
      byTab.set(route.tabId, tab);
    }
    return new Map([...byTab].map(([tab, s]) => [tab, { working: s.working.size, waiting: s.waiting.size }]));
  }

  /** The origin of the top-level page in `tabId` that has a route (null: none). */
  originInTab(tabId: number): string | null {
    for (const route of this.#routes.values()) if (route.tabId === tabId && route.frameId === 0) return route.origin;
    return null;
  }

  routesFrom(origin: string): Route[] {
    return [...this.#routes.values()].filter((route) => route.origin === origin);
  }

  /** Closes `route` and lets its sessions go; false if it was closed already. */
  removeRoute(route: Route): boolean {
    if (route.closed) return false;
    route.closed = true;
    this.#routes.delete(route.id);
    for (const sessionId of [...route.sessions]) {
      const session = this.#sessions.get(sessionId);
      if (session) this.#routeLeft(session, route.id);
    }
    route.sessions.clear();
    return true;
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
    this.#hooks.changed();
    // After the page has its reply (posted before this task ends), so its
    // handle exists when the first events arrive.
    setTimeout(() => {
      const held = session.held ?? [];
      session.held = null;
      for (const frame of held) this.onEvent(frame);
    }, 0);
  }

  async create(route: Route, payload: BridgeCalls["create_session"]["params"]): Promise<BridgeCalls["create_session"]["result"]> {
    const created = await this.#native.request("create_session", route.origin, payload);
    const session = this.#newSession(created.sessionId, route.origin, route, created.snapshot.autoEndOnDisconnect);
    try {
      const attached = await this.#native.request("attach", route.origin, { sessionId: created.sessionId, mergeDeltas: true });
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

  async resume(route: Route, params: { sessionId?: unknown }): Promise<BridgeCalls["resume_session"]["result"]> {
    const sessionId = params.sessionId;
    if (typeof sessionId !== "string" || sessionId === "") throw bridgeError("INVALID_INPUT", "resumeSession needs a non-empty session id");
    const existing = this.#sessions.get(sessionId);
    if (existing && existing.origin === route.origin) {
      // Already streamed to this worker: one host stream per session, so this
      // route joins it; a fresh snapshot gives the route the current state.
      if (route.sessions.has(sessionId)) {
        const r = await this.#native.request("get_session", route.origin, { sessionId });
        return { sessionId, snapshot: r.snapshot, toolOwner: this.#ownerOf(existing, existing.pendingTool?.request.operationId) === route.id };
      }
      existing.routes.add(route.id);
      route.sessions.add(sessionId);
      this.#hooks.changed();
      try {
        const r = await this.#native.request("get_session", route.origin, { sessionId });
        return { sessionId, snapshot: r.snapshot, toolOwner: this.#ownerOf(existing, r.snapshot.pendingToolRequest?.operationId) === route.id };
      } catch (e) {
        this.#routeLeft(existing, route.id);
        throw e;
      }
    }
    if (existing) {
      // Another origin's session: Core decides (THREAD_ACCESS_DENIED), never this worker.
      await this.#native.request("get_session", route.origin, { sessionId });
      throw bridgeError("THREAD_ACCESS_DENIED", "the session belongs to another origin", { sessionId });
    }
    const session = this.#newSession(sessionId, route.origin, route, false);
    try {
      const attached = await this.#native.request("attach", route.origin, { sessionId, mergeDeltas: true });
      if (this.#sessions.get(sessionId) !== session) throw bridgeError("EXTENSION_DISCONNECTED", "the page disconnected");
      this.#attached(session, attached.snapshot);
      return { sessionId, snapshot: attached.snapshot, toolOwner: true };
    } catch (e) {
      // Nothing was attached: forget it without ending anything.
      if (this.#sessions.get(sessionId) === session) this.forget(session);
      throw e;
    }
  }

  /** `routeId` started `operationId`: its tool requests go to that route first. */
  noteOperation(session: HubSession, operationId: string, routeId: number): void {
    session.opOwner.set(operationId, routeId);
    if (session.opOwner.size > OP_OWNER_MEMORY) session.opOwner.delete(session.opOwner.keys().next().value as string);
  }

  forget(session: HubSession): void {
    if (session.reattachTimer) clearTimeout(session.reattachTimer);
    this.#sessions.delete(session.sessionId);
    for (const id of session.routes) this.#routes.get(id)?.sessions.delete(session.sessionId);
    session.routes.clear();
    this.#hooks.changed();
  }

  /** The session cannot be re-attached (gone, or not this origin's): its routes are told, then it is forgotten. */
  lost(session: HubSession, error: BridgeError): void {
    for (const id of session.routes) {
      const route = this.#routes.get(id);
      if (route) post(route, { kind: "session_lost", sessionId: session.sessionId, error });
    }
    this.forget(session);
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

  // ---- events ----

  onEvent(frame: EventFrame): void {
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
      if (route) post(route, { kind: "event", frame, toolOwner: carriesTool && id === owner });
    }
    if (e.type === "status" || e.type === "ended") this.#hooks.changed();
  }

  // ---- routes leaving ----

  /** A route no longer follows `session`: hand over its tool request, or end/detach when it was the last. */
  #routeLeft(session: HubSession, routeId: number): void {
    session.routes.delete(routeId);
    this.#routes.get(routeId)?.sessions.delete(session.sessionId);
    if (session.routes.size > 0) {
      if (session.pendingTool?.owner === routeId) {
        const owner = this.#ownerOf(session, session.pendingTool.request.operationId)!;
        session.pendingTool.owner = owner;
        const route = this.#routes.get(owner);
        if (route) post(route, { kind: "tool_handover", sessionId: session.sessionId, request: session.pendingTool.request });
      }
      return;
    }
    this.forget(session);
    const { sessionId, origin } = session;
    if (session.autoEnd && session.status !== "ended") {
      // A page-scoped session ends when its last page goes, at once, not after Core's grace period.
      this.#native.request("end", origin, { sessionId, reason: "auto_end" }).catch((e: unknown) => {
        console.warn(`pedelec: auto-end of ${sessionId} failed`, e);
      }).finally(() => this.#hooks.closeNativeIfIdle());
    }
    if (this.#native.open) {
      this.#native.request("detach", origin, { sessionId }).catch(() => undefined).finally(() => this.#hooks.closeNativeIfIdle());
    }
  }
}
