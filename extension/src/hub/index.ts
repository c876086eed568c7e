// The service worker's logic, assembled. Hub takes the ports Chrome hands the
// worker and sorts them by name — SDK routes, the popup, the options page, the
// transfer frame — and owns the one native link. Its parts:
//   routes.ts     a route's bridge calls (approval first, session calls checked)
//   sessions.ts   the session table, event fan-out, a route leaving, auto-end
//   reconnect.ts  the native port's loss: reconnect with backoff, re-attach with the last seq
//   approvals.ts  origin approval and its UI
//   pages.ts      the popup's and the options page's ports
//   tickets.ts    the transfer frame's ticket checks
// chrome.* comes in as `ChromeApi` so the tests can drive it with a fake.
import type { ChromeApi, Port } from "../chrome-api.js";
import { NativeLink } from "../native-link.js";
import { APPROVAL_TIMEOUT_MS, OPTIONS_PORT_NAME, POPUP_PORT_NAME, SDK_PORT_NAME, TRANSFER_PORT_NAME, type PopupState } from "../../../sdk/src/protocol/bridge.js";
import { Approvals } from "./approvals.js";
import { ExtensionPages, isOwnPage } from "./pages.js";
import { DEFAULT_BACKOFF_MS, NativeReconnect } from "./reconnect.js";
import { RouteCalls, isPageOrigin, post, type Route } from "./routes.js";
import { Sessions } from "./sessions.js";
import { TransferTickets } from "./tickets.js";

export type HubOptions = {
  approvalTimeoutMs?: number;
  /** Delays between native reconnect attempts; the last one repeats. */
  backoffMs?: readonly number[];
};

export class Hub {
  readonly native: NativeLink;
  /** Resolves once the approved origins are loaded. */
  readonly ready: Promise<void>;
  #api: ChromeApi;
  #sessions: Sessions;
  #reconnect: NativeReconnect;
  #approvals: Approvals;
  #pages: ExtensionPages;
  #tickets = new TransferTickets();
  #calls: RouteCalls;

  constructor(api: ChromeApi, options: HubOptions = {}) {
    this.#api = api;
    const changed = () => this.#pages.pushState();
    const closeNativeIfIdle = () => this.#reconnect.closeIfIdle();
    this.native = new NativeLink(api, {
      event: (frame) => this.#sessions.onEvent(frame),
      detached: (frame) => this.#reconnect.onDetached(frame),
      lost: (error, afterHello) => this.#reconnect.onNativeLost(error, afterHello),
      stateChanged: changed,
    });
    this.#sessions = new Sessions(this.native, { changed, closeNativeIfIdle });
    this.#reconnect = new NativeReconnect(this.native, this.#sessions, options.backoffMs ?? DEFAULT_BACKOFF_MS, changed);
    this.#approvals = new Approvals(api, options.approvalTimeoutMs ?? APPROVAL_TIMEOUT_MS, changed);
    this.ready = this.#approvals.ready;
    this.#pages = new ExtensionPages(api, {
      native: this.native,
      ready: this.ready,
      state: () => this.state(),
      approve: (origin) => this.approve(origin),
      reject: (origin) => this.reject(origin),
      revoke: (origin) => this.revoke(origin),
      closeNativeIfIdle,
    });
    this.#calls = new RouteCalls({
      ready: this.ready,
      native: this.native,
      approvals: this.#approvals,
      sessions: this.#sessions,
      tickets: this.#tickets,
      closeNativeIfIdle,
    });
  }

  /** Registers the listeners (synchronously, as MV3 requires for a waking worker). */
  start(): void {
    this.#api.runtime.onConnect.addListener((port) => this.#onConnect(port));
    this.#api.runtime.onConnectExternal?.addListener((port) => this.#onConnect(port));
    this.#api.windows.onRemoved?.addListener((windowId) => this.#approvals.onWindowRemoved(windowId));
  }

  #onConnect(port: Port): void {
    if (port.name === SDK_PORT_NAME) return this.#addRoute(port);
    if (port.name === POPUP_PORT_NAME && isOwnPage(this.#api, port)) return this.#pages.addPopup(port);
    if (port.name === TRANSFER_PORT_NAME && isOwnPage(this.#api, port)) return this.#tickets.addFrame(port);
    if (port.name === OPTIONS_PORT_NAME && isOwnPage(this.#api, port)) return this.#pages.addOptionsPage(port);
    port.disconnect();
  }

  #addRoute(port: Port): void {
    // The origin comes from Chrome (the frame's origin), never from the page.
    const origin = port.sender?.origin;
    if (!isPageOrigin(origin)) {
      port.disconnect();
      return;
    }
    const route = this.#sessions.addRoute(port, origin);
    port.onMessage.addListener((message) => void this.#calls.onMessage(route, message));
    port.onDisconnect.addListener(() => this.#removeRoute(route));
    post(route, { kind: "welcome", origin });
  }

  #removeRoute(route: Route): void {
    if (!this.#sessions.removeRoute(route)) return;
    this.#approvals.dropRoute(route);
    this.#pages.pushState();
    this.#reconnect.closeIfIdle();
  }

  approve(origin: string): Promise<void> {
    return this.#approvals.approve(origin);
  }

  reject(origin: string): void {
    this.#approvals.reject(origin);
  }

  /** Forgets the origin and cuts its routes (their handles detach). */
  async revoke(origin: string): Promise<void> {
    await this.#approvals.forget(origin);
    for (const route of this.#sessions.routesFrom(origin)) {
      route.port.disconnect();
      this.#removeRoute(route);
    }
    this.#pages.pushState();
  }

  state(): PopupState {
    return {
      host: { ...this.native.state },
      pendingApprovals: this.#approvals.pendingOrigins(),
      approvedOrigins: this.#approvals.approvedOrigins(),
      sessions: this.#sessions.summaries(),
    };
  }
}
