// The extension's own pages on their ports: the popup (host state, pending and
// approved origins, live sessions; approve/reject/revoke) and the options page
// (settings, sent to the host with the extension's own origin). Only pages of
// this extension may open these ports.
import type { ChromeApi, Port } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import type { OptionsToWorker, PopupState, PopupToWorker, WorkerToOptions, WorkerToPopup } from "../../../sdk/src/protocol/bridge.js";
import { bridgeError, toBridgeError } from "./errors.js";
import { isPageOrigin } from "./routes.js";

/** Whether `port` comes from one of this extension's own pages. */
export function isOwnPage(api: ChromeApi, port: Port): boolean {
  const own = api.runtime.getURL("");
  return port.sender?.id === api.runtime.id && typeof port.sender?.url === "string" && port.sender.url.startsWith(own);
}

export type PagesDeps = {
  native: NativeLink;
  /** Resolves once the approved origins are loaded. */
  ready: Promise<void>;
  state(): PopupState;
  approve(origin: string): Promise<void>;
  reject(origin: string): void;
  revoke(origin: string): Promise<void>;
  closeNativeIfIdle(): void;
};

export class ExtensionPages {
  #api: ChromeApi;
  #d: PagesDeps;
  #popups = new Set<Port>();

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
    this.#popups.add(port);
    port.onDisconnect.addListener(() => this.#popups.delete(port));
    port.onMessage.addListener((message) => void this.#onPopupMessage(port, message as PopupToWorker));
    void this.#d.ready.then(() => this.#postPopup(port));
  }

  /** Asks the host (ping: never starts Core) so the popup shows the current state. */
  async #refreshHostState(): Promise<void> {
    try {
      await this.#d.native.request("ping", undefined, undefined);
    } catch {
      // The state already records why (host missing, mismatch, …).
    }
    this.#d.closeNativeIfIdle();
    this.pushState();
  }

  async #onPopupMessage(port: Port, msg: PopupToWorker): Promise<void> {
    switch (msg?.kind) {
      case "get_state":
        void this.#refreshHostState();
        break;
      case "approve":
        if (isPageOrigin(msg.origin)) await this.#d.approve(msg.origin);
        break;
      case "reject":
        this.#d.reject(msg.origin);
        break;
      case "revoke":
        await this.#d.revoke(msg.origin);
        break;
      default:
        return;
    }
    this.#postPopup(port);
  }

  #postPopup(port: Port): void {
    const msg: WorkerToPopup = { kind: "state", state: this.#d.state() };
    try {
      port.postMessage(msg);
    } catch {
      this.#popups.delete(port);
    }
  }

  /** Sends the current state to every open popup. */
  pushState(): void {
    for (const port of this.#popups) this.#postPopup(port);
  }
}
