// The transfer frame (transfer.html, web-accessible): embedded hidden by the
// content script, it moves asset bodies between the page and AssetService's
// 127.0.0.1 transfer server (docs/sdk-extension.md "Assets"). As an extension
// page with host permission for http://127.0.0.1/*, its fetch meets neither
// CORS nor Chrome's Local Network Access prompt, and AssetService accepts the
// extension's origin for any ticket. Because any site can embed this page,
// each URL is checked with the worker first: only a ticket URL the worker
// handed to the embedding page's origin (a single use) is fetched, so the
// frame is no general proxy into the loopback interface.
import { TRANSFER_NAMESPACE, TRANSFER_PORT_NAME, type FrameReply, type FrameRequest, type TransferCheck, type TransferCheckResult } from "../../sdk/src/protocol/bridge.js";
import type { PageRuntime, Port } from "./chrome-api.js";
import { webext } from "./webext.js";

const chrome = webext<{ runtime: PageRuntime }>()!;

let worker: Port | null = null;
let nextCheck = 1;
const checks = new Map<number, (r: TransferCheckResult) => void>();

function check(url: string, origin: string): Promise<TransferCheckResult> {
  if (!worker) {
    const port = chrome.runtime.connect({ name: TRANSFER_PORT_NAME });
    port.onMessage.addListener((m) => {
      const r = m as TransferCheckResult;
      checks.get(r.id)?.(r);
      checks.delete(r.id);
    });
    port.onDisconnect.addListener(() => {
      worker = null;
      for (const [id, resolve] of checks) resolve({ kind: "check_result", id, ok: false, message: "the extension worker went away" });
      checks.clear();
    });
    worker = port;
  }
  const id = nextCheck++;
  return new Promise((resolve) => {
    checks.set(id, resolve);
    const msg: TransferCheck = { kind: "check", id, url, origin };
    worker!.postMessage(msg);
  });
}

async function run(req: FrameRequest, origin: string): Promise<FrameReply> {
  const allowed = await check(req.url, origin);
  if (!allowed.ok) return { kind: "fetched", id: req.id, ok: false, message: allowed.message };
  try {
    const headers: Record<string, string> = { authorization: `Bearer ${req.token}` };
    if (req.contentType) headers["content-type"] = req.contentType;
    const response = await fetch(req.url, { method: req.method, headers, body: req.body, credentials: "omit", cache: "no-store" });
    // A Blob goes back by reference, not as a copy of the bytes.
    const body = await response.blob();
    return { kind: "fetched", id: req.id, ok: true, status: response.status, contentType: response.headers.get("content-type") ?? "", body };
  } catch (e) {
    return { kind: "fetched", id: req.id, ok: false, message: `the asset transfer server could not be reached: ${(e as Error).message}` };
  }
}

window.addEventListener("message", (event: MessageEvent) => {
  // The embedding page hands over one port; event.origin is set by the browser
  // (the page's origin; a content script posts with its page's origin).
  if (event.source !== window.parent || (event.data as { ns?: unknown })?.ns !== TRANSFER_NAMESPACE) return;
  const port = event.ports[0];
  if (!port) return;
  const origin = event.origin;
  port.onmessage = (e: MessageEvent) => {
    const req = e.data as FrameRequest;
    if (req?.kind !== "fetch") return;
    void run(req, origin).then((reply) => port.postMessage(reply));
  };
  port.postMessage({ kind: "ready" } satisfies FrameReply);
});
