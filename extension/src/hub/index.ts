// The service worker's logic, assembled. Hub takes the ports Chrome hands the
// worker and sorts them by name — SDK routes, the popup, the options page, the
// transfer frame — and owns the one native link. Its parts:
//   routes.ts     a route's bridge calls (approval first, session calls checked)
//   sessions.ts   the session table, event fan-out, a route leaving, auto-end
//   reconnect.ts  the native port's loss: reconnect with backoff, re-attach with the last seq
//   approvals.ts  the site grants (the services' copy, cached) and the prompts that make them
//   pages.ts      the popup's and the options page's ports
//   tickets.ts    the transfer frame's ticket checks
// chrome.* comes in as `ChromeApi` so the tests can drive it with a fake.
import type { ChromeApi, Port } from "../chrome-api.js";
import { NativeLink } from "../native-link.js";
import { APPROVAL_TIMEOUT_MS, OPTIONS_PORT_NAME, POPUP_PORT_NAME, SDK_PORT_NAME, TRANSFER_PORT_NAME, type PopupState } from "../../../sdk/src/protocol/bridge.js";
import { DEFAULT_ACCESS, type Access, type Site } from "../sites.js";
import type { SiteFolder } from "../../../sdk/src/protocol/bridge.js";
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
  /** Resolves once the cached grants are read. */
  readonly ready: Promise<void>;
  #api: ChromeApi;
  #sessions: Sessions;
  #reconnect: NativeReconnect;
  #approvals: Approvals;
  #pages: ExtensionPages;
  #tickets = new TransferTickets();
  #calls: RouteCalls;
  #badgedTabs = new Set<number>();
  /** What each tab's badge shows now (text, colour, title), so an unchanged one is not set again. */
  #badgeShown = new Map<number, string>();

  constructor(api: ChromeApi, options: HubOptions = {}) {
    this.#api = api;
    const changed = () => {
      this.#pages.pushState();
      this.#badge();
    };
    const closeNativeIfIdle = () => this.#reconnect.closeIfIdle();
    this.native = new NativeLink(api, {
      event: (frame) => this.#sessions.onEvent(frame),
      detached: (frame) => this.#reconnect.onDetached(frame),
      lost: (error, afterHello) => this.#reconnect.onNativeLost(error, afterHello),
      stateChanged: changed,
    });
    this.#sessions = new Sessions(this.native, { changed, closeNativeIfIdle });
    this.#reconnect = new NativeReconnect(this.native, this.#sessions, options.backoffMs ?? DEFAULT_BACKOFF_MS, changed);
    this.#approvals = new Approvals(api, this.native, options.approvalTimeoutMs ?? APPROVAL_TIMEOUT_MS, changed);
    this.ready = this.#approvals.ready;
    this.#pages = new ExtensionPages(api, {
      native: this.native,
      ready: this.ready,
      approvals: this.#approvals,
      state: (tabId) => this.state(tabId),
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
    // Loopback grants last for one browser session: a new one starts without them.
    this.#api.runtime.onStartup?.addListener(() => {
      this.#approvals
        .revokeLoopback()
        .catch((e: unknown) => console.error("pedelec: could not revoke the loopback grants at start-up", e))
        .finally(() => this.#reconnect.closeIfIdle());
    });
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
    const sender = port.sender!;
    const frameId = sender.frameId ?? 0;
    const tabOrigin = sender.tab?.url ? originOf(sender.tab.url) : null;
    const route = this.#sessions.addRoute(port, origin, {
      tabId: sender.tab?.id ?? null,
      tab: tabName(sender.tab?.title, sender.tab?.url ?? sender.url ?? origin),
      frameId,
      topOrigin: frameId === 0 ? origin : tabOrigin,
    });
    port.onMessage.addListener((message) => {
      const m = message as { kind?: unknown; topOrigin?: unknown };
      // The content script of a frame says which site embeds it, where Chrome does not tell the worker (no host permission for the tab).
      if (m?.kind === "frame") {
        if (route.frameId !== 0 && route.topOrigin === null && typeof m.topOrigin === "string") route.topOrigin = originOf(m.topOrigin);
        return;
      }
      void this.#calls.onMessage(route, message);
    });
    port.onDisconnect.addListener(() => this.#removeRoute(route));
    post(route, { kind: "welcome", origin });
  }

  #removeRoute(route: Route): void {
    if (!this.#sessions.removeRoute(route)) return;
    this.#approvals.dropRoute(route);
    this.#pages.pushState();
    this.#reconnect.closeIfIdle();
  }

  /**
   * Grants `origin` as the prompt's Approve does (default: edit, the user's
   * default provider); a prompt of that origin waiting is answered by it. For
   * the worker's console and tests that are not about the prompt.
   */
  async approve(origin: string, grant: { access?: Access; providers?: string[]; folders?: SiteFolder[] } = {}): Promise<Site> {
    const providers = grant.providers ?? (await this.native.request("list_providers", this.#api.runtime.getURL("").replace(/\/$/, ""), undefined)).providers.filter((p) => p.isDefault).map((p) => p.code);
    const site = await this.#approvals.grant({ origin, access: grant.access ?? DEFAULT_ACCESS, providers, folders: grant.folders ?? [], anyModel: false, embedders: [] });
    this.#reconnect.closeIfIdle();
    return site;
  }

  /** revoke_site: the services end the origin's sessions (the pages see them end); its routes stay and must ask again. */
  async revoke(origin: string): Promise<string[]> {
    const ended = await this.#approvals.revoke(origin);
    this.#reconnect.closeIfIdle();
    return ended;
  }

  state(tabId: number | null = null): PopupState {
    return {
      host: { ...this.native.state },
      prompts: this.#approvals.prompts(),
      activeOrigin: tabId === null ? null : this.#sessions.originInTab(tabId),
      sites: this.#approvals.sites(),
      rejected: this.#approvals.rejected(),
      sessions: this.#sessionsShown(),
      lastError: this.#pages.lastError,
    };
  }

  /** The sessions this extension follows (live status), then the others the services listed for the popup. */
  #sessionsShown(): PopupState["sessions"] {
    const followed = this.#sessions.summaries();
    const known = new Set(followed.map((s) => s.sessionId));
    const others = this.#pages.servicesSessions
      .filter((s) => !known.has(s.sessionId))
      // Not followed here: no page of this browser holds it, so it is one kept after its page went (or another profile's).
      .map((s) => ({ sessionId: s.sessionId, origin: s.origin, status: s.status, routes: s.attachedRoutes, autoEndOnDisconnect: false }));
    return [...followed, ...others];
  }

  /**
   * The action icon's badge, per tab: how many of the sessions its pages follow run a turn
   * (the count), blue while they work, amber while one waits for the page (a tool result);
   * the icon's title says the same in words. Nothing at none.
   */
  #badge(): void {
    const action = this.#api.action;
    if (typeof action?.setBadgeText !== "function") return;
    const counts = this.#sessions.busyByTab();
    for (const tabId of this.#badgedTabs) if (!counts.has(tabId)) counts.set(tabId, { working: 0, waiting: 0 });
    for (const [tabId, busy] of counts) {
      const badge = badgeFor(busy);
      const key = `${badge.text}|${badge.color}|${badge.title}`;
      if (this.#badgeShown.get(tabId) === key) continue;
      this.#badgeShown.set(tabId, key);
      if (badge.text === "") this.#badgedTabs.delete(tabId);
      else this.#badgedTabs.add(tabId);
      // The tab may be gone: nothing to show then.
      action.setBadgeText({ tabId, text: badge.text }).catch(() => undefined);
      if (badge.text !== "") action.setBadgeBackgroundColor?.({ tabId, color: badge.color }).catch(() => undefined);
      action.setTitle?.({ tabId, title: badge.title }).catch(() => undefined);
    }
  }
}

/** The badge's colours: working (the extension's blue), waiting for the page (amber). */
export const BADGE_COLORS = { working: "#2f6fde", waiting: "#b26b00" } as const;

/** What the action icon shows for a tab whose pages' sessions are `busy`. */
export function badgeFor(busy: { working: number; waiting: number }): { text: string; color: string; title: string } {
  if (busy.working === 0) return { text: "", color: BADGE_COLORS.working, title: "Pedelec" };
  const agents = (n: number) => `${n} agent${n === 1 ? "" : "s"}`;
  const waiting = busy.waiting > 0 ? `${agents(busy.waiting)} waiting for this page` : "";
  const working = busy.working - busy.waiting > 0 ? `${agents(busy.working - busy.waiting)} working` : "";
  return {
    text: String(busy.working),
    color: busy.waiting > 0 ? BADGE_COLORS.waiting : BADGE_COLORS.working,
    title: `Pedelec — ${[working, waiting].filter(Boolean).join(", ")}`,
  };
}

function originOf(url: string): string | null {
  try {
    const o = new URL(url).origin;
    return o === "null" ? null : o;
  } catch {
    return null;
  }
}

/** How a prompt names the tab that asked: its title (the page chooses it) and its address (Chrome's). */
function tabName(title: string | undefined, url: string): string {
  return title && title !== url ? `“${title}” (${url})` : url;
}
