// One SDK route: the page's side of window.postMessage ⇄ content script ⇄
// chrome.runtime port ⇄ service worker. A Connection lives until its port
// closes; then every handle bound to it is detached (a handle never migrates
// to a new route silently).
import { PedelecError } from "./errors.js";
import {
  BRIDGE_NAMESPACE,
  INSTALL_PROBE_TIMEOUT_MS,
  isWindowEnvelope,
  type BridgeCalls,
  type BridgeMethod,
  type ContentToPage,
  type PageToContent,
  type TransferRequest,
  type TransferResult,
  type WorkerToPage,
} from "./protocol/bridge.js";

/** The slice of `window` the bridge needs (a fake in tests). */
export type BridgeWindow = Pick<Window, "postMessage" | "addEventListener" | "removeEventListener"> & {
  location: { origin: string };
};

type Pending = {
  method: BridgeMethod;
  resolve: (value: unknown) => void;
  reject: (error: PedelecError) => void;
  remainingMs: number;
  startedAt: number;
  timer: ReturnType<typeof setTimeout> | null;
};

export type ConnectionListener = {
  /** Events, tool handovers, lost sessions. */
  message(msg: WorkerToPage): void;
  /** The route is gone; called once. */
  disconnected(error: PedelecError): void;
};

function newClientId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2)}`;
}

function post(win: BridgeWindow, clientId: string, msg: PageToContent): void {
  // Same window: the content script listens on it. "*" because an opaque
  // origin ("null") cannot be named as a target.
  win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-extension", clientId, msg }, "*");
}

/** A transfer can carry a large body: a ceiling for a hang, far above any real transfer's time. */
const TRANSFER_TIMEOUT_MS = 10 * 60_000;

/** Listens for messages to `clientId` from the content script of this window. */
function listen(win: BridgeWindow, clientId: string, onMessage: (msg: ContentToPage) => void): () => void {
  const handler = (event: MessageEvent) => {
    // Only this window's own content script; never another frame or window.
    if (event.source !== (win as unknown)) return;
    const data: unknown = event.data;
    if (!isWindowEnvelope(data) || data.dir !== "to-page" || data.clientId !== clientId) return;
    onMessage(data.msg as ContentToPage);
  };
  win.addEventListener("message", handler as EventListener);
  return () => win.removeEventListener("message", handler as EventListener);
}

/** Whether the extension's content script answers in this window within 500 ms. */
export function probeExtension(win: BridgeWindow): Promise<boolean> {
  const clientId = newClientId();
  return new Promise((resolve) => {
    const stop = listen(win, clientId, (msg) => {
      if (msg.kind !== "probe_ack") return;
      clearTimeout(timer);
      stop();
      resolve(true);
    });
    const timer = setTimeout(() => {
      stop();
      resolve(false);
    }, INSTALL_PROBE_TIMEOUT_MS);
    post(win, clientId, { kind: "probe" });
  });
}

export class Connection {
  readonly clientId = newClientId();
  /** The origin the extension took from the port (set by `welcome`). */
  origin = "";
  #win: BridgeWindow;
  #timeoutMs: number;
  #listener: ConnectionListener;
  #nextRequestId = 1;
  #pending = new Map<number, Pending>();
  #approvalOpen = false;
  #closed: PedelecError | null = null;
  #stopListening: () => void;
  #welcome: { resolve: () => void; reject: (e: PedelecError) => void } | null = null;
  /** The content script moves asset bodies through the extension (its `capabilities` on connect). */
  canTransfer = false;
  #nextTransferId = 1;
  #transfers = new Map<number, { resolve: (r: TransferResult) => void; reject: (e: PedelecError) => void; timer: ReturnType<typeof setTimeout> }>();

  constructor(win: BridgeWindow, timeoutMs: number, listener: ConnectionListener) {
    this.#win = win;
    this.#timeoutMs = timeoutMs;
    this.#listener = listener;
    this.#stopListening = listen(win, this.clientId, (msg) => this.#onMessage(msg));
  }

  get closed(): boolean {
    return this.#closed !== null;
  }

  /** Opens the route; resolves on the worker's welcome. */
  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#welcome = null;
        const error = new PedelecError("SDK_BRIDGE_TIMEOUT", `the extension did not accept the connection within ${this.#timeoutMs} ms`);
        this.close(error);
        reject(error);
      }, this.#timeoutMs);
      this.#welcome = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      post(this.#win, this.clientId, { kind: "connect" });
    });
  }

  call<M extends BridgeMethod>(method: M, params: BridgeCalls[M]["params"]): Promise<BridgeCalls[M]["result"]> {
    if (this.#closed) return Promise.reject(this.#closed);
    const requestId = this.#nextRequestId++;
    return new Promise((resolve, reject) => {
      const pending: Pending = {
        method,
        resolve: resolve as (value: unknown) => void,
        reject,
        remainingMs: this.#timeoutMs,
        startedAt: Date.now(),
        timer: null,
      };
      this.#pending.set(requestId, pending);
      if (!this.#approvalOpen) this.#arm(requestId, pending);
      post(this.#win, this.clientId, { kind: "request", requestId, call: { method, params } as never });
    });
  }

  /**
   * Hands an asset body to the extension, which fetches the ticket URL from its
   * own frame (no Local Network Access prompt for the page). The Blob crosses
   * by structured clone (a handle, not a copy of the bytes).
   */
  transfer(req: Omit<TransferRequest, "kind" | "transferId">): Promise<TransferResult> {
    if (this.#closed) return Promise.reject(this.#closed);
    const transferId = this.#nextTransferId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#transfers.delete(transferId);
        reject(new PedelecError("SDK_BRIDGE_TIMEOUT", "the extension did not finish the asset transfer"));
      }, TRANSFER_TIMEOUT_MS);
      this.#transfers.set(transferId, { resolve, reject, timer });
      post(this.#win, this.clientId, { kind: "transfer", transferId, ...req });
    });
  }

  #arm(requestId: number, pending: Pending): void {
    pending.startedAt = Date.now();
    pending.timer = setTimeout(() => {
      this.#pending.delete(requestId);
      pending.reject(
        new PedelecError("SDK_BRIDGE_TIMEOUT", `the extension did not answer ${pending.method} within ${this.#timeoutMs} ms`, {
          method: pending.method,
        }),
      );
    }, pending.remainingMs);
  }

  /** While the user looks at the approval UI, no request times out. */
  #pauseTimers(): void {
    for (const pending of this.#pending.values()) {
      if (pending.timer === null) continue;
      clearTimeout(pending.timer);
      pending.timer = null;
      pending.remainingMs = Math.max(0, pending.remainingMs - (Date.now() - pending.startedAt));
    }
  }

  #onMessage(msg: ContentToPage): void {
    switch (msg.kind) {
      case "probe_ack":
        return;
      case "capabilities":
        this.canTransfer = msg.transfer === true;
        return;
      case "transfer_result": {
        const t = this.#transfers.get(msg.transferId);
        if (!t) return;
        this.#transfers.delete(msg.transferId);
        clearTimeout(t.timer);
        t.resolve(msg);
        return;
      }
      case "welcome":
        this.origin = msg.origin;
        this.#welcome?.resolve();
        this.#welcome = null;
        return;
      case "disconnected": {
        // Closed before the welcome: the extension refused this page (e.g. an
        // opaque origin) or could not start; nothing was ever connected.
        const error = this.#welcome
          ? new PedelecError("EXTENSION_UNAVAILABLE", `the extension did not accept this page: ${msg.reason}`, { reason: msg.reason })
          : new PedelecError("EXTENSION_DISCONNECTED", `the extension connection was interrupted: ${msg.reason}`, { reason: msg.reason });
        this.close(error);
        return;
      }
      case "response": {
        const pending = this.#pending.get(msg.requestId);
        if (!pending) return; // timed out already
        this.#pending.delete(msg.requestId);
        if (pending.timer !== null) clearTimeout(pending.timer);
        if (msg.ok) pending.resolve(msg.result);
        else pending.reject(PedelecError.from(msg.error));
        return;
      }
      case "approval":
        if (msg.state === "pending" && !this.#approvalOpen) {
          this.#approvalOpen = true;
          this.#pauseTimers();
        } else if (msg.state === "settled" && this.#approvalOpen) {
          this.#approvalOpen = false;
          for (const [id, pending] of this.#pending) this.#arm(id, pending);
        }
        return;
      default:
        this.#listener.message(msg);
    }
  }

  /** Ends the route (or records that the extension ended it); idempotent. */
  close(error: PedelecError = new PedelecError("EXTENSION_DISCONNECTED", "the connection was closed")): void {
    if (this.#closed) return;
    this.#closed = error;
    post(this.#win, this.clientId, { kind: "disconnect" });
    this.#stopListening();
    this.#welcome?.reject(error);
    this.#welcome = null;
    for (const pending of this.#pending.values()) {
      if (pending.timer !== null) clearTimeout(pending.timer);
      pending.reject(error);
    }
    this.#pending.clear();
    for (const t of this.#transfers.values()) {
      clearTimeout(t.timer);
      t.reject(error);
    }
    this.#transfers.clear();
    this.#listener.disconnected(error);
  }
}
