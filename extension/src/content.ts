// Content script (every http(s) frame, document_start): bridges the page's
// namespaced window.postMessage envelopes to one chrome.runtime port per SDK
// client. It never adds an origin: the worker reads it from the port's sender.
import {
  BRIDGE_NAMESPACE,
  SDK_PORT_NAME,
  TRANSFER_FRAME_TIMEOUT_MS,
  TRANSFER_NAMESPACE,
  TRANSFER_PAGE,
  isWindowEnvelope,
  type ContentToPage,
  type FrameReply,
  type FrameRequest,
  type PageToWorker,
  type TransferRequest,
  type TransferResult,
} from "../../sdk/src/protocol/bridge.js";
import type { PageRuntime, Port } from "./chrome-api.js";
import { webext } from "./webext.js";
import { hops } from "./hop-counts.js";


/**
 * The hidden extension frame that moves asset bodies (docs/sdk-extension.md
 * "Assets"): an extension page has host permission for the transfer server,
 * so its fetch meets no Local Network Access prompt and no CORS. Made on the
 * first transfer; talks only over a MessagePort handed to it, which the page
 * cannot see. The frame checks with the worker that each URL is a ticket the
 * worker issued to this page's origin.
 */
class TransferFrame {
  #doc: Document;
  #url: string;
  #port: Promise<MessagePort> | null = null;
  /** Why the frame could not be used; a page's CSP does not change, so it is not tried again. */
  #failed: string | null = null;
  #nextId = 1;
  #waiting = new Map<number, (reply: FrameReply & { kind: "fetched" }) => void>();

  constructor(doc: Document, url: string) {
    this.#doc = doc;
    this.#url = url;
  }

  #open(): Promise<MessagePort> {
    if (this.#failed) return Promise.reject(new Error(this.#failed));
    this.#port ??= new Promise<MessagePort>((resolve, reject) => {
      const frame = this.#doc.createElement("iframe");
      frame.src = this.#url;
      frame.setAttribute("aria-hidden", "true");
      frame.tabIndex = -1;
      frame.style.cssText = "position:fixed;width:0;height:0;border:0;opacity:0;pointer-events:none;left:-10px;top:-10px";
      const fail = (why: string) => {
        clearTimeout(timer);
        frame.remove();
        this.#failed = why;
        reject(new Error(why));
      };
      const timer = setTimeout(() => fail("the extension's transfer frame did not load (blocked by the page's Content-Security-Policy?)"), TRANSFER_FRAME_TIMEOUT_MS);
      frame.addEventListener("load", () => {
        const channel = new MessageChannel();
        channel.port1.onmessage = (e: MessageEvent) => {
          const reply = e.data as FrameReply;
          if (reply.kind === "ready") {
            clearTimeout(timer);
            resolve(channel.port1);
            return;
          }
          this.#waiting.get(reply.id)?.(reply);
          this.#waiting.delete(reply.id);
        };
        // Only the extension's own page can receive the port.
        frame.contentWindow?.postMessage({ ns: TRANSFER_NAMESPACE }, new URL(this.#url).origin, [channel.port2]);
      });
      (this.#doc.body ?? this.#doc.documentElement).append(frame);
    });
    return this.#port;
  }

  async fetch(req: TransferRequest): Promise<TransferResult> {
    let port: MessagePort;
    try {
      port = await this.#open();
    } catch (e) {
      return { kind: "transfer_result", transferId: req.transferId, ok: false, unavailable: true, message: (e as Error).message };
    }
    const id = this.#nextId++;
    const reply = await new Promise<FrameReply & { kind: "fetched" }>((resolve) => {
      this.#waiting.set(id, resolve);
      const msg: FrameRequest = { kind: "fetch", id, method: req.method, url: req.url, token: req.token, contentType: req.contentType, body: req.body };
      port.postMessage(msg);
    });
    return reply.ok
      ? { kind: "transfer_result", transferId: req.transferId, ok: true, status: reply.status, contentType: reply.contentType, body: reply.body }
      : { kind: "transfer_result", transferId: req.transferId, ok: false, unavailable: false, message: reply.message };
  }
}

export function installBridge(win: Window, runtime: PageRuntime): void {
  const ports = new Map<string, Port>();
  const transferUrl = typeof runtime.getURL === "function" && typeof MessageChannel !== "undefined" ? runtime.getURL(TRANSFER_PAGE) : null;
  let frame: TransferFrame | null = null;

  const toPage = (clientId: string, msg: ContentToPage) => {
    win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-page", clientId, msg }, "*");
    hops.count("to-page", msg);
  };

  win.addEventListener("message", (event: MessageEvent) => {
    // Only the page of this very frame; other frames and windows are ignored.
    if (event.source !== win) return;
    const data: unknown = event.data;
    if (!isWindowEnvelope(data) || data.dir !== "to-extension") return;
    const { clientId, msg } = data;
    switch (msg.kind) {
      case "probe":
        toPage(clientId, { kind: "probe_ack" });
        return;
      case "connect": {
        if (ports.has(clientId)) return;
        let port: Port;
        try {
          port = runtime.connect({ name: SDK_PORT_NAME });
        } catch (e) {
          // e.g. "Extension context invalidated" after the extension was reloaded.
          toPage(clientId, { kind: "disconnected", reason: (e as Error).message ?? String(e) });
          return;
        }
        ports.set(clientId, port);
        // A frame says which site embeds it (the worker allows a frame only for an embedder its grant lists).
        if (win.top !== win && win.location) {
          const ancestors = win.location.ancestorOrigins;
          const top = ancestors && ancestors.length > 0 ? ancestors[ancestors.length - 1] : null;
          if (top) port.postMessage({ kind: "frame", topOrigin: top });
        }
        toPage(clientId, { kind: "capabilities", transfer: transferUrl !== null });
        port.onMessage.addListener((message) => toPage(clientId, message as ContentToPage));
        port.onDisconnect.addListener(() => {
          ports.delete(clientId);
          toPage(clientId, { kind: "disconnected", reason: runtime.lastError?.message ?? "the extension closed the connection" });
        });
        return;
      }
      case "disconnect": {
        const port = ports.get(clientId);
        ports.delete(clientId);
        port?.disconnect();
        return;
      }
      case "request": {
        const port = ports.get(clientId);
        if (!port) {
          toPage(clientId, { kind: "disconnected", reason: "not connected" });
          return;
        }
        const forward: PageToWorker = { kind: "request", requestId: msg.requestId, call: msg.call };
        try {
          port.postMessage(forward);
        } catch (e) {
          ports.delete(clientId);
          toPage(clientId, { kind: "disconnected", reason: (e as Error).message ?? String(e) });
        }
        return;
      }
      case "transfer": {
        if (!transferUrl) {
          toPage(clientId, { kind: "transfer_result", transferId: msg.transferId, ok: false, unavailable: true, message: "no transfer frame in this browser" });
          return;
        }
        frame ??= new TransferFrame(win.document, transferUrl);
        void frame.fetch(msg).then((result) => toPage(clientId, result));
        return;
      }
      default:
        return;
    }
  });
}

const api = webext<{ runtime?: Partial<PageRuntime> }>();
if (typeof api?.runtime?.connect === "function") installBridge(window, api.runtime as PageRuntime);
