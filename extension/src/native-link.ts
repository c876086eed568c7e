// The one native-messaging port to pedelec-native-host: hello first, request
// ids, at most 64 requests in flight (the rest queue), chunk reassembly, and
// NATIVE_HOST_UNAVAILABLE for whatever was in flight when the port dropped —
// never resent, because a mutation's outcome is then unknown.
import type { ChromeApi, Port } from "./chrome-api.js";
import { hops } from "./hop-counts.js";
import { HOST_MAX_IN_FLIGHT, NATIVE_HOST_NAME, NATIVE_PROTOCOL_VERSION, type BridgeError, type HostState } from "../../sdk/src/protocol/bridge.js";
import type {
  ChunkFrame,
  DetachedFrame,
  EventFrame,
  ErrorReply,
  HelloResult,
  OkReply,
  Request,
  ResultByType,
} from "../../sdk/src/protocol/native.js";

export type NativeType = Request["type"];
type RequestOf<T extends NativeType> = Extract<Request, { type: T }>;
/** The payload a request type takes; `undefined` allowed where the schema makes it optional. */
export type PayloadOf<T extends NativeType> = {} extends Pick<RequestOf<T>, "payload"> ? RequestOf<T>["payload"] | undefined : RequestOf<T>["payload"];

export class NativeError extends Error {
  constructor(readonly code: string, message: string, readonly details: unknown = null) {
    super(message);
  }
  toBridge(): BridgeError {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export type NativeListener = {
  event(frame: EventFrame): void;
  detached(frame: DetachedFrame): void;
  /** The port is gone; `error` says why, `afterHello` whether it had been usable. */
  lost(error: NativeError, afterHello: boolean): void;
  /** Host state changed (for the popup). */
  stateChanged(): void;
};

type InFlight = { type: NativeType; resolve: (r: unknown) => void; reject: (e: NativeError) => void };
type Queued = { type: NativeType; origin: string | undefined; payload: unknown } & Omit<InFlight, "type">;

export const CLIENT_NAME = "pedelec-extension/0.1.0";

export class NativeLink {
  readonly state: HostState = { connected: false, hostVersion: null, protocolVersion: null, coreRunning: null, userName: null, lastError: null, lastErrorCode: null };
  #api: ChromeApi;
  #listener: NativeListener;
  #port: Port | null = null;
  /** Resolves when hello succeeded on the current port. */
  #ready: Promise<void> | null = null;
  #nextId = 1;
  #inFlight = new Map<number, InFlight>();
  #queue: Queued[] = [];
  /** Requests waiting for hello before they can be written. */
  #waitingForHello = 0;
  #chunks: string[] = [];
  #chunkId: number | null = null;

  constructor(api: ChromeApi, listener: NativeListener) {
    this.#api = api;
    this.#listener = listener;
  }

  get open(): boolean {
    return this.#port !== null;
  }

  get busy(): boolean {
    return this.#inFlight.size > 0 || this.#queue.length > 0 || this.#waitingForHello > 0;
  }

  /** Opens the port (if needed) and waits for hello. */
  connect(): Promise<void> {
    if (this.#ready) return this.#ready;
    let port: Port;
    try {
      port = this.#api.runtime.connectNative(NATIVE_HOST_NAME);
    } catch (e) {
      const error = new NativeError("NATIVE_HOST_UNAVAILABLE", `could not start the native host: ${(e as Error).message}`);
      Object.assign(this.state, { lastError: error.message, lastErrorCode: error.code });
      this.#listener.stateChanged();
      return Promise.reject(error);
    }
    this.#port = port;
    port.onMessage.addListener((message) => this.#onMessage(port, message));
    port.onDisconnect.addListener(() => this.#onDisconnect(port));
    const ready = (async () => {
      const hello = (await this.#send("hello", undefined, { protocolVersion: NATIVE_PROTOCOL_VERSION, client: CLIENT_NAME }, true)) as HelloResult;
      if (hello.protocolVersion !== NATIVE_PROTOCOL_VERSION) {
        throw new NativeError("PROTOCOL_MISMATCH", `the native host speaks protocol ${hello.protocolVersion}, the extension ${NATIVE_PROTOCOL_VERSION}`, {
          hostProtocolVersion: hello.protocolVersion,
          clientProtocolVersion: NATIVE_PROTOCOL_VERSION,
        });
      }
      Object.assign(this.state, { connected: true, hostVersion: hello.hostVersion, protocolVersion: hello.protocolVersion, coreRunning: hello.coreRunning, userName: hello.userName || null, lastError: null, lastErrorCode: null });
      this.#listener.stateChanged();
      this.#pump();
    })();
    this.#ready = ready;
    ready.catch((e: NativeError) => {
      // A failed hello (PROTOCOL_MISMATCH, refused caller): nothing may use this port.
      Object.assign(this.state, { lastError: e.message, lastErrorCode: e.code });
      if (this.#port === port) this.#drop(port, e);
    });
    return ready;
  }

  /** Sends a request once hello is done; the result's shape follows the request type. */
  async request<T extends Exclude<NativeType, "hello">>(type: T, origin: string | undefined, payload: PayloadOf<T>): Promise<ResultByType[T]> {
    this.#waitingForHello++;
    try {
      await this.connect();
    } finally {
      this.#waitingForHello--;
    }
    return (await this.#send(type, origin, payload, false)) as ResultByType[T];
  }

  #send(type: NativeType, origin: string | undefined, payload: unknown, first: boolean): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const item: Queued = { type, origin, payload, resolve, reject };
      // hello goes out before anything queued; the rest wait below the host's limit.
      if (first || this.#inFlight.size < HOST_MAX_IN_FLIGHT) this.#write(item);
      else this.#queue.push(item);
    });
  }

  #write(item: Queued): void {
    const port = this.#port;
    if (!port) {
      item.reject(new NativeError("NATIVE_HOST_UNAVAILABLE", "the native host is not connected"));
      return;
    }
    const id = this.#nextId++;
    const frame: Record<string, unknown> = { id, type: item.type };
    if (item.origin !== undefined) frame.origin = item.origin;
    if (item.payload !== undefined) frame.payload = item.payload;
    this.#inFlight.set(id, { type: item.type, resolve: item.resolve, reject: item.reject });
    try {
      port.postMessage(frame);
    } catch (e) {
      this.#inFlight.delete(id);
      item.reject(new NativeError("NATIVE_HOST_UNAVAILABLE", `could not write to the native host: ${(e as Error).message}`));
    }
  }

  #pump(): void {
    while (this.#queue.length > 0 && this.#inFlight.size < HOST_MAX_IN_FLIGHT && this.#port && this.state.connected) {
      this.#write(this.#queue.shift()!);
    }
  }

  #onMessage(port: Port, message: unknown): void {
    if (port !== this.#port || typeof message !== "object" || message === null) return;
    hops.count("host", message);
    const m = message as { type?: unknown };
    if (m.type === "chunk") {
      this.#chunk(message as ChunkFrame);
      return;
    }
    this.#handle(message);
  }

  /** docs/native-messaging.md §2: consecutive slices of one message's JSON text. */
  #chunk(c: ChunkFrame): void {
    if (c.index === 0) {
      this.#chunks = [];
      this.#chunkId = c.chunkId;
    }
    if (c.index !== this.#chunks.length || c.chunkId !== this.#chunkId) {
      // Out of order cannot happen with one writer; drop the partial message loudly.
      console.error(`pedelec: chunk ${c.chunkId}/${c.index} out of order; message dropped`);
      this.#chunks = [];
      this.#chunkId = null;
      return;
    }
    this.#chunks.push(c.data);
    if (this.#chunks.length === c.count) {
      const text = this.#chunks.join("");
      this.#chunks = [];
      this.#chunkId = null;
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        console.error(`pedelec: chunked message ${c.chunkId} is not JSON; dropped`);
        return;
      }
      this.#handle(parsed);
    }
  }

  #handle(message: unknown): void {
    const m = message as { type?: unknown; id?: unknown; ok?: unknown };
    if (m.type === "event") return this.#listener.event(message as EventFrame);
    if (m.type === "detached") return this.#listener.detached(message as DetachedFrame);
    if (typeof m.ok !== "boolean") return;
    const reply = message as OkReply | ErrorReply;
    if (typeof reply.id !== "number") {
      // id null: the host could not read a request of ours — a bug; say so.
      console.error("pedelec: host reply without a usable id", reply);
      return;
    }
    const pending = this.#inFlight.get(reply.id);
    if (!pending) return;
    this.#inFlight.delete(reply.id);
    if (reply.ok) pending.resolve(reply.result);
    else pending.reject(new NativeError(reply.error.code, reply.error.message, reply.error.details));
    if (pending.type === "ping" && reply.ok) {
      this.state.coreRunning = (reply.result as { coreRunning: boolean }).coreRunning;
    }
    this.#pump();
  }

  #onDisconnect(port: Port): void {
    if (port !== this.#port) return;
    const reason = this.#api.runtime.lastError?.message ?? "the native host exited";
    this.#drop(port, new NativeError("NATIVE_HOST_UNAVAILABLE", `the native host disconnected: ${reason}`, { reason }));
  }

  #drop(port: Port, error: NativeError): void {
    if (port !== this.#port) return;
    this.#port = null;
    this.#ready = null;
    this.#chunks = [];
    this.#chunkId = null;
    const wasConnected = this.state.connected;
    Object.assign(this.state, { connected: false, coreRunning: null, lastError: error.message, lastErrorCode: error.code });
    try {
      port.disconnect();
    } catch {
      // already closed
    }
    // In flight: the host may or may not have acted on it. Never resent.
    const inFlight = [...this.#inFlight.values()];
    this.#inFlight.clear();
    for (const p of inFlight) p.reject(error);
    // Queued requests were never written; they fail too (the caller decides), so
    // nothing waits on a port that may never come back.
    const queued = this.#queue;
    this.#queue = [];
    for (const q of queued) q.reject(error);
    this.#listener.stateChanged();
    this.#listener.lost(error, wasConnected);
  }

  /** Closes the port on purpose (no route left). */
  close(): void {
    const port = this.#port;
    if (!port) return;
    this.#port = null;
    this.#ready = null;
    // Closed because unused: the last answers still describe the host and Core.
    this.state.connected = false;
    try {
      port.disconnect();
    } catch {
      // already closed
    }
    const error = new NativeError("NATIVE_HOST_UNAVAILABLE", "the native port was closed");
    for (const p of this.#inFlight.values()) p.reject(error);
    this.#inFlight.clear();
    for (const q of this.#queue) q.reject(error);
    this.#queue = [];
    this.#listener.stateChanged();
  }
}
