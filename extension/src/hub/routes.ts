// SDK routes: a route is one port from a page (one per Pedelec client), with
// the origin Chrome put on it. Here: which origins may have a route, posting to
// a route, and a route's bridge calls — `status` for anyone, the rest after
// approval, the session calls only on sessions the route attached.
import type { Port } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import { SESSION_METHODS, type BridgeCall, type BridgeCalls, type BridgeMethod, type WorkerToPage } from "../../../sdk/src/protocol/bridge.js";
import type { Approvals } from "./approvals.js";
import { bridgeError, toBridgeError } from "./errors.js";
import type { Sessions } from "./sessions.js";
import type { TransferTickets } from "./tickets.js";

export type Route = { id: number; port: Port; origin: string; sessions: Set<string>; closed: boolean };

/** Only http(s) pages may use Pedelec; opaque ("null") and other schemes are refused. */
export function isPageOrigin(origin: string | undefined): origin is string {
  return typeof origin === "string" && /^https?:\/\/[^/]+$/.test(origin);
}

export function post(route: Route, msg: WorkerToPage): void {
  if (route.closed) return;
  try {
    route.port.postMessage(msg);
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
      post(route, { kind: "response", requestId, ok: false, error: toBridgeError(e) });
    }
  }

  async #dispatch(route: Route, call: BridgeCall): Promise<unknown> {
    const { native, approvals, sessions, tickets } = this.#d;
    await this.#d.ready;
    const params = (typeof call.params === "object" && call.params !== null ? call.params : {}) as Record<string, unknown>;
    const method = call.method as BridgeMethod;
    if (method === "status") return this.#status(route);
    await approvals.require(route);
    if (route.closed) throw bridgeError("EXTENSION_DISCONNECTED", "the route closed");
    switch (method) {
      case "list_providers":
        return native.request("list_providers", route.origin, undefined);
      case "get_settings":
        return native.request("get_settings", route.origin, undefined);
      case "create_session":
        return sessions.create(route, params as BridgeCalls["create_session"]["params"]);
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

  async #status(route: Route): Promise<BridgeCalls["status"]["result"]> {
    let appConnected = false;
    try {
      // ping never starts the services: a probe, not a launch.
      appConnected = (await this.#d.native.request("ping", undefined, undefined)).coreRunning;
    } catch {
      appConnected = false;
    }
    this.#d.closeNativeIfIdle();
    return { approved: this.#d.approvals.isApproved(route.origin), origin: route.origin, appConnected };
  }
}
