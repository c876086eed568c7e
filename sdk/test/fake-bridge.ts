// A fake of everything behind window.postMessage: the content script and the
// extension's worker, speaking the real bridge envelopes (protocol/bridge.ts).
// The SDK under test runs its real Connection code against it.
import {
  BRIDGE_NAMESPACE,
  isWindowEnvelope,
  type BridgeCall,
  type BridgeCalls,
  type BridgeError,
  type BridgeMethod,
  type ContentToPage,
  type TransferRequest,
  type TransferResult,
  type WorkerToPage,
} from "../src/protocol/bridge.js";
import type { EventFrame, Snapshot } from "../src/protocol/native.js";

type Listener = (event: MessageEvent) => void;

export class FakeWindow {
  location = { origin: "https://app.example" };
  #listeners = new Set<Listener>();

  postMessage(data: unknown, _targetOrigin: string): void {
    // A task, like the real postMessage; structuredClone like the real one.
    const event = { data: structuredClone(data), source: this } as unknown as MessageEvent;
    setTimeout(() => {
      for (const l of [...this.#listeners]) l(event);
    }, 0);
  }
  /** A message from another window/frame (source differs): must be ignored. */
  postFromElsewhere(data: unknown): void {
    const event = { data: structuredClone(data), source: {} } as unknown as MessageEvent;
    setTimeout(() => {
      for (const l of [...this.#listeners]) l(event);
    }, 0);
  }
  addEventListener(type: string, l: Listener): void {
    if (type === "message") this.#listeners.add(l);
  }
  removeEventListener(type: string, l: Listener): void {
    if (type === "message") this.#listeners.delete(l);
  }
  get listenerCount(): number {
    return this.#listeners.size;
  }
}

export class BridgeFailure extends Error {
  constructor(readonly error: BridgeError) {
    super(error.message);
  }
}
export const fail = (code: string, message = code.toLowerCase(), details: unknown = null) => new BridgeFailure({ code, message, details });

type Handler<M extends BridgeMethod> = (params: BridgeCalls[M]["params"], clientId: string) => BridgeCalls[M]["result"] | Promise<BridgeCalls[M]["result"]>;

export class FakeExtension {
  installed = true;
  /** false: accept the connect but never welcome (a hung worker). */
  welcome = true;
  /** false: never answer requests (a hung worker). */
  answer = true;
  calls: Array<{ clientId: string } & BridgeCall> = [];
  probes = 0;
  clients = new Set<string>();
  /** Set: the content script offers the transfer frame (capabilities on connect) and answers transfers with this. */
  transfer: ((req: TransferRequest) => TransferResult | Promise<TransferResult>) | null = null;
  transfers: TransferRequest[] = [];
  handlers: { [M in BridgeMethod]?: Handler<M> } = {};
  #win: FakeWindow;

  constructor(win: FakeWindow) {
    this.#win = win;
    win.addEventListener("message", (event) => {
      if (event.source !== (win as unknown)) return;
      const data: unknown = event.data;
      if (!this.installed || !isWindowEnvelope(data) || data.dir !== "to-extension") return;
      void this.#handle(data.clientId, data.msg);
    });
  }

  on<M extends BridgeMethod>(method: M, handler: Handler<M>): void {
    (this.handlers as Record<string, unknown>)[method] = handler;
  }

  callsOf<M extends BridgeMethod>(method: M): Array<BridgeCalls[M]["params"]> {
    return this.calls.filter((c) => c.method === method).map((c) => c.params as BridgeCalls[M]["params"]);
  }

  async #handle(clientId: string, msg: { kind: string; requestId?: number; call?: BridgeCall }): Promise<void> {
    switch (msg.kind) {
      case "probe":
        this.probes++;
        return this.toPage(clientId, { kind: "probe_ack" });
      case "connect":
        this.clients.add(clientId);
        if (this.transfer) this.toPage(clientId, { kind: "capabilities", transfer: true });
        if (this.welcome) this.toPage(clientId, { kind: "welcome", origin: this.#win.location.origin });
        return;
      case "disconnect":
        this.clients.delete(clientId);
        return;
      case "transfer": {
        const req = msg as unknown as TransferRequest;
        this.transfers.push(req);
        if (this.transfer) this.toPage(clientId, await this.transfer(req));
        return;
      }
      case "request": {
        const call = msg.call!;
        this.calls.push({ clientId, ...call });
        if (!this.answer) return;
        const handler = (this.handlers as Record<string, Handler<BridgeMethod> | undefined>)[call.method];
        try {
          if (!handler) throw fail("SDK_PROTOCOL_ERROR", `fake has no handler for ${call.method}`);
          const result = await handler(call.params as never, clientId);
          this.toPage(clientId, { kind: "response", requestId: msg.requestId!, ok: true, result });
        } catch (e) {
          const error = e instanceof BridgeFailure ? e.error : { code: "INTERNAL", message: String(e), details: null };
          this.toPage(clientId, { kind: "response", requestId: msg.requestId!, ok: false, error });
        }
        return;
      }
    }
  }

  toPage(clientId: string, msg: ContentToPage | WorkerToPage): void {
    this.#win.postMessage({ ns: BRIDGE_NAMESPACE, dir: "to-page", clientId, msg }, "*");
  }

  /** Sends to every connected client. */
  broadcast(msg: WorkerToPage): void {
    for (const c of this.clients) this.toPage(c, msg);
  }

  event(sessionId: string, seq: number, event: EventFrame["event"], toolOwner = event.type === "tool_request"): void {
    this.broadcast({ kind: "event", frame: { type: "event", sessionId, seq, at: 1764524403000 + seq, event }, toolOwner });
  }

  /** The port closed (tab's extension reloaded, origin revoked …). */
  dropAll(reason = "the extension closed the connection"): void {
    for (const c of [...this.clients]) {
      this.clients.delete(c);
      this.toPage(c, { kind: "disconnected", reason });
    }
  }
}

export function snapshot(over: Partial<Snapshot> = {}): Snapshot {
  return {
    sessionId: "thr_1",
    status: "idle",
    activeOperation: null,
    lastOperation: null,
    recentOperations: [],
    pendingToolRequest: null,
    usage: null,
    provider: "codex",
    effortLevel: "high",
    model: "",
    autoEndOnDisconnect: true,
    workspacePath: null,
    createdAt: 1764524403000,
    lastSeq: 0,
    replayGap: false,
    ...over,
  };
}

/** Lets posted messages and the tasks they start run (several hops deep). */
export async function settle(rounds = 8): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setTimeout(r, 0));
}

/** Installs a fake page (window + document) on globalThis; returns the fakes and an uninstaller. */
export function installPage(): { win: FakeWindow; ext: FakeExtension; uninstall: () => void } {
  const g = globalThis as Record<string, unknown>;
  const win = new FakeWindow();
  const ext = new FakeExtension(win);
  g.window = win;
  g.document = {};
  return {
    win,
    ext,
    uninstall: () => {
      delete g.window;
      delete g.document;
    },
  };
}

/** A fake extension with the common happy-path handlers. */
export function standardHandlers(ext: FakeExtension, snap: Partial<Snapshot> = {}): void {
  let op = 0;
  ext.on("status", () => ({ approved: true, origin: "https://app.example", appConnected: true }));
  ext.on("create_session", (p) => ({
    sessionId: "thr_1",
    provider: p.provider ?? "codex",
    effortLevel: p.effortLevel ?? "default",
    snapshot: snapshot({ ...snap, autoEndOnDisconnect: p.autoEndOnDisconnect ?? true }),
    toolOwner: true,
  }));
  ext.on("resume_session", (p) => ({ sessionId: p.sessionId, snapshot: snapshot({ sessionId: p.sessionId, ...snap }), toolOwner: true }));
  ext.on("send_text", () => ({ operationId: `op_${++op}` }));
  ext.on("prepare", () => ({ operationId: `op_${++op}` }));
  ext.on("cancel", () => ({ operationId: `op_${op}` }));
  ext.on("end", (p) => ({ snapshot: snapshot({ sessionId: p.sessionId, status: "ended" }) }));
  ext.on("reactivate", (p) => ({ snapshot: snapshot({ sessionId: p.sessionId, status: "idle" }) }));
  ext.on("submit_tool_result", () => ({}));
}
