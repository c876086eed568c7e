// Origin approval: the approved origins (kept in chrome.storage.local), and a
// pending approval per origin — every request of that origin waits on the one
// approval UI (the action popup, else a popup window) until the user approves,
// rejects, closes the window, or the time runs out.
import type { ChromeApi } from "../chrome-api.js";
import { APPROVED_ORIGINS_KEY, type BridgeError } from "../../../sdk/src/protocol/bridge.js";
import { bridgeError } from "./errors.js";
import { post, type Route } from "./routes.js";

type PendingApproval = {
  origin: string;
  waiters: Array<{ route: Route; resolve: () => void; reject: (e: BridgeError) => void }>;
  timer: ReturnType<typeof setTimeout>;
  windowId: number | null;
};

export class Approvals {
  /** Resolves once the approved origins are loaded. */
  readonly ready: Promise<void>;
  #api: ChromeApi;
  #timeoutMs: number;
  /** Something the popup shows changed. */
  #changed: () => void;
  #approved = new Set<string>();
  #pending = new Map<string, PendingApproval>();

  constructor(api: ChromeApi, timeoutMs: number, changed: () => void) {
    this.#api = api;
    this.#timeoutMs = timeoutMs;
    this.#changed = changed;
    this.ready = api.storage.local.get(APPROVED_ORIGINS_KEY).then(
      (items) => {
        const list = items[APPROVED_ORIGINS_KEY];
        if (Array.isArray(list)) for (const o of list) if (typeof o === "string") this.#approved.add(o);
      },
      (e: unknown) => console.error("pedelec: could not read approved origins", e),
    );
  }

  isApproved(origin: string): boolean {
    return this.#approved.has(origin);
  }

  /** Approved origins, sorted. */
  approvedOrigins(): string[] {
    return [...this.#approved].sort();
  }

  /** Origins waiting for the user, oldest first. */
  pendingOrigins(): string[] {
    return [...this.#pending.keys()];
  }

  /** Resolves once `route`'s origin is approved; rejects with the reason it was not. */
  async require(route: Route): Promise<void> {
    if (this.#approved.has(route.origin)) return;
    const origin = route.origin;
    let approval = this.#pending.get(origin);
    if (!approval) {
      // Registered before the UI opens, so a second request of the origin
      // arriving meanwhile waits for this approval instead of opening another.
      const created: PendingApproval = {
        origin,
        waiters: [],
        windowId: null,
        timer: setTimeout(() => this.#settle(origin, bridgeError("APPROVAL_TIMEOUT", `origin ${origin} was not approved in time`)), this.#timeoutMs),
      };
      approval = created;
      this.#pending.set(origin, created);
      this.#changed();
      this.#openUi(origin).then(
        (windowId) => {
          if (windowId === null) return;
          if (this.#pending.get(origin) === created) created.windowId = windowId;
          else this.#api.windows.remove(windowId).catch(() => undefined); // decided already
        },
        (error: BridgeError) => this.#settle(origin, error),
      );
    }
    const pending = approval;
    await new Promise<void>((resolve, reject) => {
      pending.waiters.push({ route, resolve, reject });
      // The SDK pauses its bridge timeout while the user decides.
      post(route, { kind: "approval", state: "pending" });
    });
  }

  /** A route that went away waits for nothing. */
  dropRoute(route: Route): void {
    for (const approval of this.#pending.values()) approval.waiters = approval.waiters.filter((w) => w.route !== route);
  }

  /** chrome.action.openPopup, else a popup window, else OPEN_POPUP_FAILED. Returns the window id it opened. */
  async #openUi(origin: string): Promise<number | null> {
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
  #settle(origin: string, error: BridgeError | null): void {
    const approval = this.#pending.get(origin);
    if (!approval) return;
    this.#pending.delete(origin);
    clearTimeout(approval.timer);
    for (const w of approval.waiters) {
      post(w.route, { kind: "approval", state: "settled" });
      if (error) w.reject(error);
      else w.resolve();
    }
    if (approval.windowId !== null) this.#api.windows.remove(approval.windowId).catch(() => undefined);
    this.#changed();
  }

  onWindowRemoved(windowId: number): void {
    for (const approval of this.#pending.values()) {
      if (approval.windowId === windowId) {
        approval.windowId = null;
        this.#settle(approval.origin, bridgeError("APPROVAL_REJECTED", `the approval window for ${approval.origin} was closed`));
      }
    }
  }

  async approve(origin: string): Promise<void> {
    this.#approved.add(origin);
    await this.#save();
    this.#settle(origin, null);
  }

  reject(origin: string): void {
    this.#settle(origin, bridgeError("APPROVAL_REJECTED", `the user rejected Pedelec access for ${origin}`));
  }

  /** Forgets an approved origin (its routes are the caller's to cut). */
  async forget(origin: string): Promise<void> {
    this.#approved.delete(origin);
    await this.#save();
  }

  async #save(): Promise<void> {
    await this.#api.storage.local.set({ [APPROVED_ORIGINS_KEY]: [...this.#approved].sort() });
  }
}
