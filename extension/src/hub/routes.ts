// SDK routes: a route is one port from a page (one per Pedelec client), with
// the origin Chrome put on it. Here: which origins may have a route, posting to
// a route, and a route's bridge calls — `status` for anyone; the rest only for
// an https:// or loopback page that is a top-level page (or a frame its grant
// lets that top-level site embed), after approval; createSession with a
// provider or folder outside the grant asks first; the session calls only on
// sessions the route attached.
import type { Port } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import { hops } from "../hop-counts.js";
import { SESSION_METHODS, type BridgeCall, type BridgeCalls, type BridgeMethod, type WorkerToPage } from "../../../sdk/src/protocol/bridge.js";
import { isLive, isSecureEnough } from "../sites.js";
import type { Approvals } from "./approvals.js";
import { bridgeError, toBridgeError } from "./errors.js";
import type { Sessions } from "./sessions.js";
import type { TransferTickets } from "./tickets.js";

export type Route = {
  id: number;
  port: Port;
  origin: string;
  sessions: Set<string>;
  closed: boolean;
  /** The tab the page is in (null: not in a tab), and how the prompt names it. */
  tabId: number | null;
  tab: string;
  /** 0: the tab's top-level page; else a frame, embedded by `topOrigin` (null: not known). */
  frameId: number;
  topOrigin: string | null;
};

/** Only http(s) pages may use Pedelec; opaque ("null") and other schemes are refused. */
export function isPageOrigin(origin: string | undefined): origin is string {
  return typeof origin === "string" && /^https?:\/\/[^/]+$/.test(origin);
}

export function post(route: Route, msg: WorkerToPage): void {
  if (route.closed) return;
  try {
    route.port.postMessage(msg);
    hops.count(`page ${route.origin}`, msg);
  } catch {
    // The page went away between two events; onDisconnect cleans up.
  }
}

export type RouteCallsDeps = {
  /** Resolves once the approved origins are loaded. */
  ready: Promise<void>;
  native: NativeLink;
  approvals: Approvals;
  sessions: Sessions;
  tickets: TransferTickets;
  closeNativeIfIdle(): void;
};

/** Answers the requests a route sends. */
export class RouteCalls {
  #d: RouteCallsDeps;

  constructor(deps: RouteCallsDeps) {
    this.#d = deps;
  }

  async onMessage(route: Route, message: unknown): Promise<void> {
    const m = message as { kind?: unknown; requestId?: unknown; call?: { method?: unknown; params?: unknown } };
    if (m?.kind !== "request" || typeof m.requestId !== "number" || typeof m.call?.method !== "string") return;
    const requestId = m.requestId;
    try {
      const result = await this.#dispatch(route, m.call as BridgeCall);
      post(route, { kind: "response", requestId, ok: true, result });
    } catch (e) {
      const error = toBridgeError(e);
      // The services no longer hold a grant the cache has (revoked elsewhere, expired): ask them again.
      if (error.code === "SITE_NOT_APPROVED") await this.#d.approvals.stale(route.origin);
      post(route, { kind: "response", requestId, ok: false, error });
    }
  }

  async #dispatch(route: Route, call: BridgeCall): Promise<unknown> {
    const { native, approvals, sessions, tickets } = this.#d;
    await this.#d.ready;
    const params = (typeof call.params === "object" && call.params !== null ? call.params : {}) as Record<string, unknown>;
    const method = call.method as BridgeMethod;
    if (method === "status") return this.#status(route);
    if (!isSecureEnough(route.origin)) {
      throw bridgeError("ORIGIN_NOT_SECURE", `${route.origin} is a plain http:// page; Pedelec serves https:// pages and this computer's own (localhost) pages only`);
    }
    if (route.frameId !== 0) await this.#frameAllowed(route);
    const named = typeof params.provider === "string" ? params.provider : undefined;
    await approvals.require(route, method === "create_session" ? named : undefined);
    if (route.closed) throw bridgeError("EXTENSION_DISCONNECTED", "the route closed");
    switch (method) {
      case "list_providers":
        return native.request("list_providers", route.origin, undefined);
      case "get_settings":
        return native.request("get_settings", route.origin, undefined);
      case "create_session": {
        const payload = params as BridgeCalls["create_session"]["params"];
        // The grant's provider and folder: asked here, enforced by the services either way.
        const provider = named ?? (await native.request("get_settings", route.origin, undefined)).defaultProvider;
        if (provider) await approvals.ensureProvider(route, provider);
        const path = payload.workspace?.path;
        if (typeof path === "string" && path !== "") await approvals.ensureFolder(route, path);
        if (route.closed) throw bridgeError("EXTENSION_DISCONNECTED", "the route closed");
        if (typeof path !== "string" || path === "") return sessions.create(route, payload);
        // A folder allowed once is used up by this create; a refused one means the cache is behind: read the services' grant again, so the next create asks.
        const once = approvals.folderOnce(route.origin, path);
        try {
          const created = await sessions.create(route, payload);
          if (once) await approvals.refresh().catch(() => undefined);
          return created;
        } catch (e) {
          if (once || toBridgeError(e).code === "FOLDER_NOT_GRANTED") await approvals.refresh().catch(() => undefined);
          throw e;
        }
      }
      case "resume_session":
        return sessions.resume(route, params as BridgeCalls["resume_session"]["params"]);
      default:
        break;
    }
    if (!SESSION_METHODS.has(method)) throw bridgeError("SDK_PROTOCOL_ERROR", `unknown bridge method ${String(method)}`);
    const sessionId = params.sessionId;
    if (typeof sessionId !== "string" || !route.sessions.has(sessionId)) {
      throw bridgeError("INVALID_INPUT", "this page is not attached to that session", { sessionId });
    }
    const session = sessions.get(sessionId)!;
    switch (method) {
      case "send_text":
      case "prepare": {
        const r = await native.request(method, route.origin, params as never);
        sessions.noteOperation(session, r.operationId, route.id);
        return r;
      }
      case "end": {
        const r = await native.request("end", route.origin, { sessionId, reason: "requested" });
        session.status = r.snapshot.status;
        return r;
      }
      case "create_upload_ticket":
      case "create_download_ticket": {
        const r = await native.request(method as "create_upload_ticket", route.origin, params as never);
        tickets.remember(r.url, route.origin, r.expiresAt);
        return r;
      }
      default:
        return native.request(method as "get_session", route.origin, params as never);
    }
  }

  /** A frame may ask only when its grant lists the top-level site it is embedded in; it never opens a prompt. */
  async #frameAllowed(route: Route): Promise<void> {
    const { approvals } = this.#d;
    await approvals.load();
    const site = approvals.site(route.origin);
    const top = route.topOrigin;
    if (top !== null && isLive(site) && site.embedders.includes(top)) return;
    throw bridgeError(
      "FRAME_NOT_ALLOWED",
      `${route.origin} is a frame inside ${top ?? "another page"}; only a top-level page may use Pedelec unless its grant lets that site embed it`,
      { origin: route.origin, embeddedIn: top },
    );
  }

  async #status(route: Route): Promise<BridgeCalls["status"]["result"]> {
    let appConnected = false;
    try {
      // ping never starts the services: a probe, not a launch.
      appConnected = (await this.#d.native.request("ping", undefined, undefined)).coreRunning;
    } catch {
      appConnected = false;
    }
    // The grants come from the services: asked only when they run (status never starts them).
    if (appConnected) await this.#d.approvals.load().catch(() => undefined);
    this.#d.closeNativeIfIdle();
    return { approved: this.#d.approvals.isApproved(route.origin), origin: route.origin, appConnected };
  }
}
