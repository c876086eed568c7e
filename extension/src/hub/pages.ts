// The extension's own pages on their ports: the popup (host state, the
// prompts and their answers, the sites and their sessions; revoke, end) and
// the options page (settings and sites, sent to the host with the extension's
// own origin). Only pages of this extension may open these ports.
import type { ChromeApi, Port } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import type { OptionsToWorker, PopupState, PopupToWorker, WorkerToOptions, WorkerToPopup } from "../../../sdk/src/protocol/bridge.js";
import { bridgeError, toBridgeError } from "./errors.js";
import type { Approvals } from "./approvals.js";
import { siteRequest, type SessionSummary } from "../sites.js";

/** Whether `port` comes from one of this extension's own pages. */
export function isOwnPage(api: ChromeApi, port: Port): boolean {
  const own = api.runtime.getURL("");
  return port.sender?.id === api.runtime.id && typeof port.sender?.url === "string" && port.sender.url.startsWith(own);
}

export type PagesDeps = {
  native: NativeLink;
  /** Resolves once the cached grants are read. */
  ready: Promise<void>;
  approvals: Approvals;
  state(tabId: number | null): PopupState;
  closeNativeIfIdle(): void;
};

export class ExtensionPages {
  #api: ChromeApi;
  #d: PagesDeps;
  /** Each open popup, with the tab it was opened over. */
  #popups = new Map<Port, number | null>();
  /** The last popup action that failed, shown in the popup. */
  lastError: string | null = null;
  /** Every web origin's open sessions as the services last listed them (list_sessions), for the popup. */
  servicesSessions: SessionSummary[] = [];

  constructor(api: ChromeApi, deps: PagesDeps) {
    this.#api = api;
    this.#d = deps;
  }

  // ---- options page (settings) ----

  addOptionsPage(port: Port): void {
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
    const native = this.#d.native;
    let reply: WorkerToOptions;
    try {
      let result: unknown;
      switch (m.method) {
        case "list_providers":
          result = await native.request("list_providers", origin, undefined);
          break;
        case "get_full_settings":
          result = await native.request("get_full_settings", origin, undefined);
          break;
        case "update_settings":
          result = await native.request("update_settings", origin, m.params);
          break;
        case "list_sites":
          await this.#d.approvals.refresh();
          result = { sites: this.#d.approvals.sites() };
          break;
        case "grant_site":
          result = { site: await this.#d.approvals.grant(m.params.site) };
          break;
        case "revoke_site":
          result = { endedSessionIds: await this.#d.approvals.revoke(m.params.origin) };
          break;
        default:
          throw bridgeError("SDK_PROTOCOL_ERROR", `unknown options method ${String((m as { method?: unknown }).method)}`);
      }
      reply = { kind: "response", requestId: m.requestId, ok: true, result };
    } catch (e) {
      reply = { kind: "response", requestId: m.requestId, ok: false, error: toBridgeError(e) };
    }
    // The page asks now and then: no port kept open for it (the worker may sleep).
    this.#d.closeNativeIfIdle();
    try {
      port.postMessage(reply);
    } catch {
      // The page was closed meanwhile.
    }
  }

  // ---- popup ----

  addPopup(port: Port): void {
    this.#popups.set(port, null);
    port.onDisconnect.addListener(() => this.#popups.delete(port));
    port.onMessage.addListener((message) => void this.#onPopupMessage(port, message as PopupToWorker));
    void this.#d.ready.then(() => this.#postPopup(port));
  }

  /**
   * Asks the host (ping: never starts Core) and, when Core runs, the grants
   * and every site's sessions (also those no page of this browser follows,
   * e.g. kept after their page went), so the popup shows the current state.
   */
  async #refresh(): Promise<void> {
    try {
      const { coreRunning } = await this.#d.native.request("ping", undefined, undefined);
      if (coreRunning) {
        await this.#d.approvals.refresh();
        const { sessions } = await siteRequest(this.#d.native, "list_sessions", this.#ownOrigin(), {});
        this.servicesSessions = sessions.filter((s) => s.status !== "ended" && /^https?:\/\//.test(s.origin));
      } else this.servicesSessions = [];
    } catch {
      // The state already records why (host missing, mismatch, …).
    }
    this.#d.closeNativeIfIdle();
    this.pushState();
  }

  async #onPopupMessage(port: Port, msg: PopupToWorker): Promise<void> {
    const approvals = this.#d.approvals;
    this.lastError = null;
    try {
      switch (msg?.kind) {
        case "get_state":
          this.#popups.set(port, typeof msg.tabId === "number" ? msg.tabId : null);
          void this.#refresh();
          break;
        case "approve":
          if (msg.access !== "tools" && msg.access !== "edit" && msg.access !== "full") return;
          await approvals.decide(msg.promptId, { kind: "approve", access: msg.access, providers: msg.providers.filter((p) => typeof p === "string") });
          break;
        case "reject":
          await approvals.decide(msg.promptId, { kind: "reject" });
          break;
        case "block":
          await approvals.decide(msg.promptId, { kind: "block" });
          break;
        case "answer":
          await approvals.decide(msg.promptId, { kind: "answer", answer: msg.answer });
          break;
        case "revoke":
          await approvals.revoke(msg.origin);
          void this.#refresh();
          break;
        case "end_sessions":
          await approvals.endSessions(msg.origin);
          void this.#refresh();
          break;
        case "forget_rejection":
          await approvals.forgetRejection(msg.origin);
          break;
        default:
          return;
      }
    } catch (e) {
      const error = toBridgeError(e);
      this.lastError = `${error.code}: ${error.message}`;
    }
    this.#d.closeNativeIfIdle();
    this.pushState();
  }

  #postPopup(port: Port): void {
    const msg: WorkerToPopup = { kind: "state", state: this.#d.state(this.#popups.get(port) ?? null) };
    try {
      port.postMessage(msg);
    } catch {
      this.#popups.delete(port);
    }
  }

  /** Sends the current state to every open popup. */
  pushState(): void {
    for (const port of this.#popups.keys()) this.#postPopup(port);
  }
}
