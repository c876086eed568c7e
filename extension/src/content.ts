// Content script (every http(s) frame, document_start): bridges the page's
// namespaced window.postMessage envelopes to one chrome.runtime port per SDK
// client. It never adds an origin: the worker reads it from the port's sender.
import { BRIDGE_NAMESPACE, SDK_PORT_NAME, isWindowEnvelope, type ContentToPage, type PageToWorker } from "../../sdk/src/protocol/bridge.js";

type RuntimePort = {
  postMessage(message: unknown): void;
  disconnect(): void;
  onMessage: { addListener(f: (message: unknown) => void): void };
  onDisconnect: { addListener(f: () => void): void };
};
type Runtime = { connect(info: { name: string }): RuntimePort; lastError?: { message?: string } };

export function installBridge(win: Window, runtime: Runtime): void {
  const ports = new Map<string, RuntimePort>();

  const toPage = (clientId: string, msg: ContentToPage) => {
    win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-page", clientId, msg }, "*");
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
        let port: RuntimePort;
        try {
          port = runtime.connect({ name: SDK_PORT_NAME });
        } catch (e) {
          // e.g. "Extension context invalidated" after the extension was reloaded.
          toPage(clientId, { kind: "disconnected", reason: (e as Error).message ?? String(e) });
          return;
        }
        ports.set(clientId, port);
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
      default:
        return;
    }
  });
}

declare const chrome: { runtime?: Partial<Runtime> } | undefined;
if (typeof chrome !== "undefined" && typeof chrome?.runtime?.connect === "function") installBridge(window, chrome.runtime as Runtime);
