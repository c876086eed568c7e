// PedelecSession: one page-side handle of a Core session, bound to the route
// (Connection) that created or resumed it.
import { PedelecError } from "./errors.js";
import type { Connection } from "./connection.js";
import { MAX_TOOL_RESULT_BYTES, MAX_TOOL_RESULT_DEPTH } from "./protocol/bridge.js";
import type {
  Asset,
  EffortLevel,
  EventFrame,
  GetHistoryRequest,
  GetHistoryResult,
  HistoryEntry,
  Operation,
  OperationKind,
  OperationOutcome,
  PendingToolRequest,
  SessionStatus,
  Snapshot,
  EventError,
} from "./protocol/native.js";
import type { GenericToolHandler, ToolContext, ToolHandler } from "./tools.js";

export type { SessionStatus };

/** Passed to every callback. */
export type PedelecEventContext = {
  type: string;
  sessionId: string;
  seq?: number;
  at?: number;
  operationId?: string;
};
export type ErrorEventContext = PedelecEventContext & { type: "error" | "sdk_error"; source: "core" | "sdk" };
export type EndedEventContext = PedelecEventContext & { type: "ended"; reason: string };
export type Disposer = () => void;

export type ReadAs = "text" | "json" | "file";
export type AssetInfo = Asset;

/** One entry of a session's conversation history; `type` says which (docs/native-messaging.md, "Conversation history"). */
export type { HistoryEntry };
/** Which page of the history `getHistory()` reads. */
export type HistoryOptions = {
  /** Only entries with an id below this one (a previous page's `entries[0].id`); absent or 0: from the newest entry. */
  before?: number;
  /** At most this many entries (up to 1000); absent or 0: 100. */
  limit?: number;
};
/**
 * A page of the history, oldest entry first. `hasMore`: older entries exist (ask again with
 * `before: entries[0].id`). `coveredSeq`: every event with `seq <= coveredSeq` is in the history —
 * a page that shows the history and live events skips live ones (`ctx.seq`) at or below it.
 */
export type HistoryPage = GetHistoryResult;

/**
 * One operation of the session — a `sendText()` or a `prepare()`, of this page or of
 * another page of the session — as this handle last learnt it.
 */
export type PedelecOperation = {
  operationId: string;
  kind: OperationKind;
  /** null while it runs. */
  outcome: OperationOutcome | null;
  /** Why it failed or was cancelled, when the runtime said; null otherwise. */
  error: PedelecError | null;
};

/** What `sendText()` and `prepare()` resolve with: the operation they ran, completed. */
export type CompletedOperation = PedelecOperation & { outcome: "completed"; error: null };

type Deferred = { resolve: (op: CompletedOperation) => void; reject: (e: PedelecError) => void };

/**
 * What a session needs from its client. An ended handle stays registered with
 * its client: it may be resume()d, and a lost route must still detach it.
 */
export type SessionHost = {
  connection: Connection;
};

export type SessionInit = {
  sessionId: string;
  provider: string;
  effortLevel: EffortLevel | (string & {}) | undefined;
  snapshot: Snapshot;
  toolOwner: boolean;
  inlineHandlers: Map<string, ToolHandler>;
};

const FINISHED_MEMORY = 64;

function jsonDepth(value: unknown, limit: number): number {
  // Iterative so a hostile, very deep value cannot overflow the stack.
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== "object" || v === null) continue;
    const d = depth + 1;
    if (d > deepest) deepest = d;
    if (deepest > limit) return deepest;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d]);
  }
  return deepest;
}

export class PedelecSession {
  readonly sessionId: string;
  /** The provider code; on a handle built by resumeSession(), the one the session's snapshot names ("" if it names none). */
  provider: string;
  /** The effort level the session runs at; undefined when not known. */
  effortLevel: EffortLevel | (string & {}) | undefined;
  readonly usage = { totalTokens: 0 };
  /** When this browser-side handle was constructed (ms since the epoch). */
  readonly sessionCreatedAt: number = Date.now();

  #host: SessionHost;
  #status: SessionStatus = "idle";
  #ended = false;
  #endedFired = false;
  #detached: PedelecError | null = null;
  /** The newest event seq seen (or reflected by an attach snapshot): older frames are duplicates. */
  #lastSeq = 0;
  /** The seq the current status reflects: an older status event arriving late must not undo it. */
  #stateSeq = 0;
  #toolOwner: boolean;
  #activeOperation: PedelecOperation | null = null;
  #lastOperation: PedelecOperation | null = null;
  /** The seq the operations above reflect: an older snapshot must not undo them. */
  #operationSeq = 0;

  #chat = new Set<(text: string, ctx: PedelecEventContext) => void>();
  #chatDelta = new Set<(delta: string, ctx: PedelecEventContext) => void>();
  #statusListeners = new Set<(status: SessionStatus, ctx: PedelecEventContext) => void>();
  #errorListeners = new Set<(error: PedelecError, ctx: ErrorEventContext) => void>();
  #endedListeners = new Set<(ctx: EndedEventContext) => void>();
  #namedTools = new Map<string, ToolHandler[]>();
  #genericTools: GenericToolHandler[] = [];
  #inlineTools: Map<string, ToolHandler>;

  /** Operations this handle started and waits for, by operationId. */
  #waiting = new Map<string, { deferred: Deferred; kind: OperationKind }>();
  /** Recently finished operations, for a reply that arrives after its operation_finished. */
  #finished = new Map<string, { outcome: OperationOutcome; error: EventError | null; kind: OperationKind | null }>();
  /** A sendText/prepare of this handle whose reply has not come yet. */
  #starting = false;
  #seenToolRequests = new Set<string>();
  #clearedToolRequests = new Set<string>();
  #toolAborts = new Map<string, AbortController>();
  #endPromise: Promise<void> | null = null;
  #resumePromise: Promise<void> | null = null;

  constructor(host: SessionHost, init: SessionInit) {
    this.#host = host;
    this.sessionId = init.sessionId;
    this.provider = init.provider;
    this.effortLevel = init.effortLevel;
    this.#toolOwner = init.toolOwner;
    this.#inlineTools = init.inlineHandlers;
    this.#applySnapshot(init.snapshot, false, true);
  }

  getStatus(): SessionStatus {
    return this.#status;
  }

  /** The operation running now (this page's or another page's of the session), or null. */
  get activeOperation(): PedelecOperation | null {
    return this.#activeOperation;
  }

  /** The newest finished operation, with its outcome and error, or null before the first one. */
  get lastOperation(): PedelecOperation | null {
    return this.#lastOperation;
  }

  // ---- callbacks ----

  onChat(cb: (text: string, ctx: PedelecEventContext) => void): Disposer {
    return this.#add(this.#chat, cb);
  }
  onChatDelta(cb: (delta: string, ctx: PedelecEventContext) => void): Disposer {
    return this.#add(this.#chatDelta, cb);
  }
  onStatus(cb: (status: SessionStatus, ctx: PedelecEventContext) => void): Disposer {
    return this.#add(this.#statusListeners, cb);
  }
  onError(cb: (error: PedelecError, ctx: ErrorEventContext) => void): Disposer {
    return this.#add(this.#errorListeners, cb);
  }
  onEnded(cb: (ctx: EndedEventContext) => void): Disposer {
    return this.#add(this.#endedListeners, cb);
  }
  /** `onTool(name, handler)` for one tool, or `onTool(handler)` for every tool without its own. */
  onTool(name: string, handler: ToolHandler): Disposer;
  onTool(handler: GenericToolHandler): Disposer;
  onTool(a: string | GenericToolHandler, b?: ToolHandler): Disposer {
    if (typeof a === "function") {
      const handler = a;
      this.#genericTools.push(handler);
      return () => {
        this.#genericTools = this.#genericTools.filter((h) => h !== handler);
      };
    }
    if (typeof a !== "string" || typeof b !== "function") {
      throw new PedelecError("INVALID_INPUT", "onTool takes (name, handler) or (handler)");
    }
    const list = this.#namedTools.get(a) ?? [];
    list.push(b);
    this.#namedTools.set(a, list);
    return () => {
      const current = this.#namedTools.get(a);
      if (!current) return;
      const rest = current.filter((h) => h !== b);
      if (rest.length === 0) this.#namedTools.delete(a);
      else this.#namedTools.set(a, rest);
    };
  }

  #add<T>(set: Set<T>, cb: T): Disposer {
    if (typeof cb !== "function") throw new PedelecError("INVALID_INPUT", "a callback must be a function");
    set.add(cb);
    return () => set.delete(cb);
  }

  #emit<A extends unknown[]>(set: Set<(...args: A) => void>, ...args: A): void {
    for (const cb of [...set]) {
      try {
        cb(...args);
      } catch (e) {
        // A page callback's bug must not break event delivery; surface it async.
        setTimeout(() => {
          throw e;
        }, 0);
      }
    }
  }

  #ctx(type: string, frame?: EventFrame, operationId?: string | null): PedelecEventContext {
    const ctx: PedelecEventContext = { type, sessionId: this.sessionId };
    if (frame) {
      ctx.seq = frame.seq;
      if (frame.at !== null) ctx.at = frame.at;
    }
    if (operationId) ctx.operationId = operationId;
    return ctx;
  }

  #sdkError(error: PedelecError, operationId?: string): void {
    const ctx = { ...this.#ctx("sdk_error", undefined, operationId), type: "sdk_error", source: "sdk" } as ErrorEventContext;
    this.#emit(this.#errorListeners, error, ctx);
  }

  // ---- operations ----

  #usable(allowEnded = false): PedelecError | null {
    // Core no longer knows the thread (lost at a re-attach, e.g. after a Core
    // restart): say so, as resume() does — "use resumeSession" would only
    // lead to the same THREAD_NOT_FOUND.
    if (this.#detached?.code === "THREAD_NOT_FOUND") return new PedelecError("THREAD_NOT_FOUND", this.#detached.message, { sessionId: this.sessionId });
    if (this.#detached) return new PedelecError("EXTENSION_DISCONNECTED", "this session handle is detached; use pedelec.resumeSession(sessionId)", { sessionId: this.sessionId });
    if (this.#ended && !allowEnded) return new PedelecError("SESSION_ENDED", "the session has ended", { sessionId: this.sessionId });
    return null;
  }

  /**
   * Resolves with the operation this text started once it completed (its `operationId`,
   * `outcome: "completed"`); rejects with its error (`error.operationId` names it).
   */
  sendText(text: string): Promise<CompletedOperation> {
    if (typeof text !== "string") return Promise.reject(new PedelecError("INVALID_INPUT", "sendText needs a string"));
    return this.#operation("send_text", { sessionId: this.sessionId, text });
  }

  /** Runs the provider once so the first real turn starts faster; resolves as sendText() does. */
  prepare(): Promise<CompletedOperation> {
    return this.#operation("prepare", { sessionId: this.sessionId });
  }

  async #operation(method: OperationKind, params: { sessionId: string; text?: string }): Promise<CompletedOperation> {
    const unusable = this.#usable();
    if (unusable) throw unusable;
    // This handle's own previous operation is still being accepted: Core would
    // say SESSION_BUSY too, but without a round trip.
    if (this.#starting) throw new PedelecError("SESSION_BUSY", "the session is already handling a request", { sessionId: this.sessionId });
    this.#starting = true;
    let operationId: string;
    try {
      const r = await this.#host.connection.call(method, params as { sessionId: string; text: string });
      operationId = r.operationId;
    } finally {
      this.#starting = false;
    }
    // Started, and not yet seen finishing (its events may come before or after this reply).
    if (!this.#finished.has(operationId) && this.#activeOperation?.operationId !== operationId) {
      this.#activeOperation = { operationId, kind: method, outcome: null, error: null };
    }
    return await new Promise<CompletedOperation>((resolve, reject) => {
      const deferred = { resolve, reject };
      const done = this.#finished.get(operationId);
      if (done) this.#settle(deferred, operationId, done.kind ?? method, done.outcome, done.error);
      else this.#waiting.set(operationId, { deferred, kind: method });
    });
  }

  #settle(d: Deferred, operationId: string, kind: OperationKind, outcome: OperationOutcome, error: EventError | null): void {
    if (outcome === "completed") d.resolve({ operationId, kind, outcome, error: null });
    else d.reject(operationError(operationId, outcome, error));
  }

  #finish(operationId: string, outcome: OperationOutcome, error: EventError | null, kind: OperationKind | null): void {
    this.#finished.set(operationId, { outcome, error, kind });
    if (this.#finished.size > FINISHED_MEMORY) this.#finished.delete(this.#finished.keys().next().value as string);
    const waiting = this.#waiting.get(operationId);
    if (waiting) {
      this.#waiting.delete(operationId);
      this.#settle(waiting.deferred, operationId, kind ?? waiting.kind, outcome, error);
    }
  }

  /** An operation_started / operation_finished event moves the active and last operation. */
  #operationEvent(seq: number, op: Operation): void {
    this.#operationSeq = seq;
    if (op.outcome === null) {
      this.#activeOperation = publicOperation(op);
      return;
    }
    this.#lastOperation = publicOperation(op);
    if (this.#activeOperation?.operationId === op.operationId) this.#activeOperation = null;
  }

  /** Interrupts the running operation (its sendText rejects with CANCELLED). */
  async cancel(): Promise<void> {
    const unusable = this.#usable();
    if (unusable) throw unusable;
    await this.#host.connection.call("cancel", { sessionId: this.sessionId });
  }

  /** Ends the session; idempotent. A failure rejects and leaves the handle as it was. */
  end(): Promise<void> {
    if (this.#detached) return Promise.reject(this.#usable());
    if (this.#ended) return Promise.resolve();
    this.#endPromise ??= (async () => {
      try {
        const r = await this.#host.connection.call("end", { sessionId: this.sessionId });
        this.#applySnapshot(r.snapshot, true, false);
        this.#markEnded("requested");
      } catch (e) {
        const error = e instanceof PedelecError ? e : new PedelecError("INTERNAL", String(e));
        this.#sdkError(error);
        throw error;
      } finally {
        this.#endPromise = null;
      }
    })();
    return this.#endPromise;
  }

  /** Ended → idle on the same attached handle; concurrent calls share one request. */
  resume(): Promise<void> {
    const unusable = this.#usable(true);
    if (unusable) return Promise.reject(unusable);
    if (!this.#ended) return Promise.resolve();
    this.#resumePromise ??= (async () => {
      try {
        const r = await this.#host.connection.call("reactivate", { sessionId: this.sessionId });
        this.#ended = false;
        this.#endedFired = false;
        this.#applySnapshot(r.snapshot, true, false);
      } finally {
        this.#resumePromise = null;
      }
    })();
    return this.#resumePromise;
  }

  // ---- history ----

  /**
   * A page of the session's conversation history — the user's texts, the agent's complete
   * messages, each tool call with the page's result or error, each operation's start and outcome,
   * errors — newest `limit` entries older than `before`, returned oldest first. Works on an ended
   * session too; only the session's own origin may read it.
   */
  async getHistory(options: HistoryOptions = {}): Promise<HistoryPage> {
    const unusable = this.#usable(true);
    if (unusable) throw unusable;
    if (typeof options !== "object" || options === null) throw new PedelecError("INVALID_INPUT", "getHistory takes {before?, limit?}");
    const params: GetHistoryRequest["payload"] = { sessionId: this.sessionId };
    for (const key of ["before", "limit"] as const) {
      const value: unknown = options[key];
      if (value === undefined) continue;
      if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
        throw new PedelecError("INVALID_INPUT", `getHistory: ${key} must be a non-negative integer`, { [key]: value });
      }
      params[key] = value;
    }
    return await this.#host.connection.call("get_history", params);
  }

  // ---- assets ----

  /** Uploads a File, Blob or string into the session's workspace assets. */
  async uploadAsset(input: File | Blob | string, options: { path?: string } = {}): Promise<AssetInfo> {
    const unusable = this.#usable();
    if (unusable) throw unusable;
    let blob: Blob;
    let fallbackName: string;
    if (typeof input === "string") {
      blob = new Blob([input], { type: "text/plain;charset=utf-8" });
      fallbackName = "text.txt";
    } else if (typeof Blob !== "undefined" && input instanceof Blob) {
      blob = input;
      fallbackName = typeof File !== "undefined" && input instanceof File && input.name ? input.name : "blob.bin";
    } else {
      throw new PedelecError("INVALID_INPUT", "uploadAsset takes a File, a Blob or a string");
    }
    const path = options.path;
    if (path !== undefined && typeof path !== "string") throw new PedelecError("INVALID_INPUT", "path must be a string");
    const name = path ? (path.split("/").pop() || fallbackName) : fallbackName;
    const ticket = await this.#host.connection.call("create_upload_ticket", {
      sessionId: this.sessionId,
      name,
      sizeBytes: blob.size,
      contentType: blob.type,
      ...(path ? { targetPath: path } : {}),
    });
    const response = await this.#transfer(ticket.url, ticket.token, "PUT", blob);
    return (await response.json()) as AssetInfo;
  }

  async listAssets(): Promise<AssetInfo[]> {
    const unusable = this.#usable();
    if (unusable) throw unusable;
    const r = await this.#host.connection.call("list_assets", { sessionId: this.sessionId });
    return r.assets;
  }

  readAsset(path: string, as: "text"): Promise<string>;
  readAsset(path: string, as: "json"): Promise<unknown>;
  readAsset(path: string, as: "file"): Promise<File>;
  readAsset(path: string): Promise<string>;
  async readAsset(path: string, as: ReadAs = "text"): Promise<string | unknown | File> {
    const unusable = this.#usable();
    if (unusable) throw unusable;
    if (typeof path !== "string" || path === "") throw new PedelecError("INVALID_INPUT", "readAsset needs a path");
    if (as !== "text" && as !== "json" && as !== "file") throw new PedelecError("INVALID_INPUT", `readAsset: unknown format ${String(as)}`);
    const ticket = await this.#host.connection.call("create_download_ticket", { sessionId: this.sessionId, path });
    const response = await this.#transfer(ticket.url, ticket.token, "GET", null);
    if (as === "file") {
      const blob = await response.blob();
      const name = ticket.path.split("/").pop() || "asset";
      return new File([blob], name, { type: blob.type });
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw new PedelecError("ASSET_TEXT_DECODE_FAILED", `${path} is not UTF-8 text`, { path });
    }
    if (as === "text") return text;
    try {
      return JSON.parse(text) as unknown;
    } catch (e) {
      throw new PedelecError("ASSET_INVALID_JSON", `${path} is not valid JSON: ${(e as Error).message}`, { path });
    }
  }

  /**
   * Moves a body to or from the loopback transfer server (docs/sdk-extension.md
   * "Assets"): through the extension's transfer frame when the content script
   * offers it (no Local Network Access prompt for a public site), else — an
   * older extension, or a page whose CSP blocks the frame — the page's own fetch.
   */
  async #transfer(url: string, token: string, method: "PUT" | "GET", blob: Blob | null): Promise<Response> {
    const connection = this.#host.connection;
    let response: Response | null = null;
    if (connection.canTransfer) {
      const r = await connection.transfer({ method, url, token, contentType: blob?.type ?? "", body: blob });
      if (r.ok) response = new Response(r.body, { status: r.status, headers: r.contentType ? { "content-type": r.contentType } : {} });
      else if (!r.unavailable) {
        const [code, ...rest] = r.message.split(": ");
        const known = code === "ASSET_TICKET_INVALID";
        throw new PedelecError(known ? code : "CORE_UNAVAILABLE", known ? rest.join(": ") : r.message);
      }
    }
    if (!response) {
      const headers: Record<string, string> = { authorization: `Bearer ${token}` };
      if (blob?.type) headers["content-type"] = blob.type;
      try {
        response = await fetch(url, { method, headers, ...(blob ? { body: blob } : {}), credentials: "omit", cache: "no-store" });
      } catch (e) {
        throw new PedelecError("CORE_UNAVAILABLE", `the asset transfer server could not be reached: ${(e as Error).message}`);
      }
    }
    if (!response.ok) {
      let body: { code?: unknown; message?: unknown } = {};
      try {
        body = (await response.json()) as typeof body;
      } catch {
        // Not JSON: fall back to the status line.
      }
      const code = typeof body.code === "string" ? body.code : "INTERNAL";
      const message = typeof body.message === "string" ? body.message : `asset transfer failed with HTTP ${response.status}`;
      throw new PedelecError(code, message, { status: response.status });
    }
    return response;
  }

  // ---- inbound: from the client ----

  /** @internal An event frame for this session. */
  _frame(frame: EventFrame, toolOwner: boolean): void {
    const e = frame.event;
    if (e.type === "snapshot") {
      // Not part of the history: it reflects events up to its lastSeq.
      if (e.snapshot.lastSeq <= this.#lastSeq) return;
      this.#toolOwner = toolOwner;
      this.#applySnapshot(e.snapshot, true, true);
      return;
    }
    if (frame.seq <= this.#lastSeq) return; // a duplicate (replayed after a re-attach)
    this.#lastSeq = frame.seq;
    switch (e.type) {
      case "status":
        if (frame.seq > this.#stateSeq) this.#setStatus(e.status, this.#ctx("status", frame));
        return;
      case "chat_delta":
        this.#emit(this.#chatDelta, e.text, this.#ctx("chat_delta", frame, e.operationId));
        return;
      case "chat":
        this.#emit(this.#chat, e.text, this.#ctx("chat", frame, e.operationId));
        return;
      case "usage":
        this.usage.totalTokens = e.totalTokens;
        return;
      case "operation_started":
        this.#operationEvent(frame.seq, { operationId: e.operationId, kind: e.kind, outcome: null, error: null });
        return;
      case "operation_finished": {
        // Core emits operation_finished and then the status it moves to; the
        // page's `await sendText()` continues before that status event arrives,
        // so the status is taken now (Core's rule: completed → idle, failed →
        // error, cancelled → idle, or ended when an end cancelled it) and the
        // status event that follows changes nothing.
        const next: SessionStatus | null =
          e.outcome === "completed" ? "idle" : e.outcome === "failed" ? "error" : e.error?.code === "SESSION_ENDED" ? null : "idle";
        if (next && !this.#ended) this.#setStatus(next, this.#ctx("status", frame));
        this.#operationEvent(frame.seq, { operationId: e.operationId, kind: e.kind, outcome: e.outcome, error: e.error });
        this.#finish(e.operationId, e.outcome, e.error, e.kind);
        return;
      }
      case "error": {
        const ctx = { ...this.#ctx("error", frame, e.operationId), type: "error", source: "core" } as ErrorEventContext;
        this.#emit(this.#errorListeners, new PedelecError(e.code, e.message, e.details), ctx);
        return;
      }
      case "ended":
        if (frame.seq > this.#stateSeq) this.#markEnded(e.reason, frame);
        return;
      case "tool_request":
        if (toolOwner) this.#toolRequest(e, frame);
        return;
      case "tool_request_cleared":
        this.#clearTool(e.toolRequestId, `tool request ${e.reason}`);
        return;
    }
  }

  /** @internal A fresh snapshot for this live handle (a repeated resumeSession()). */
  _reconcile(snapshot: Snapshot): void {
    this.#applySnapshot(snapshot, true, false);
  }

  /** @internal The route that owned a pending tool request left; this one answers it. */
  _handover(request: PendingToolRequest): void {
    this.#toolOwner = true;
    this.#toolRequest(request);
  }

  /** @internal Re-attaching failed for good (the thread is gone). */
  _lost(error: PedelecError): void {
    this.#sdkError(error);
    this._detach(error, false);
  }

  /** @internal The route is gone: this handle is unusable from now on. */
  _detach(error: PedelecError, report = true): void {
    if (this.#detached) return;
    this.#detached = error;
    if (report) this.#sdkError(error);
    for (const { deferred } of this.#waiting.values()) deferred.reject(error);
    this.#waiting.clear();
    for (const id of [...this.#toolAborts.keys()]) this.#clearTool(id, "route disconnected");
  }

  get detached(): boolean {
    return this.#detached !== null;
  }

  #setStatus(status: SessionStatus, ctx: PedelecEventContext): void {
    if (status === "ended" && !this.#ended) {
      this.#ended = true;
      for (const id of [...this.#toolAborts.keys()]) this.#clearTool(id, "session ended");
      // Core finishes every operation before it ends; anything still waiting missed it.
      for (const [id, { deferred }] of this.#waiting) deferred.reject(new PedelecError("SESSION_ENDED", "the session ended", { operationId: id }, { operationId: id }));
      this.#waiting.clear();
    }
    if (status !== "ended" && this.#ended) {
      // Reactivated, possibly by another route of the session.
      this.#ended = this.#endedFired = false;
    }
    if (status === this.#status) return;
    this.#status = status;
    this.#emit(this.#statusListeners, status, ctx);
  }

  /** The transition into ended: onEnded once per transition (reset by resume()). */
  #markEnded(reason: string, frame?: EventFrame, statusCtx?: PedelecEventContext): void {
    this.#setStatus("ended", statusCtx ?? this.#ctx("status", frame));
    if (this.#endedFired) return;
    this.#endedFired = true;
    this.#emit(this.#endedListeners, { ...this.#ctx("ended", frame), type: "ended", reason } as EndedEventContext);
  }

  /** Reconciles authoritative state: status, operations, pending tool request, usage. */
  #applySnapshot(s: Snapshot, emit: boolean, baseline: boolean): void {
    // An attach (or replay-gap) snapshot is the stream's starting point: events up
    // to its lastSeq will not come. A reply snapshot (end, reactivate) is not:
    // events it reflects may still be on their way and must not be dropped.
    if (baseline && s.lastSeq > this.#lastSeq) this.#lastSeq = s.lastSeq;
    if (s.lastSeq > this.#stateSeq) this.#stateSeq = s.lastSeq;
    if (s.usage) this.usage.totalTokens = s.usage.totalTokens; // a missing usage never resets it
    const finished: Operation[] = [...(s.recentOperations ?? [])];
    if (s.lastOperation) finished.push(s.lastOperation);
    for (const op of finished) if (op.outcome) this.#finish(op.operationId, op.outcome, op.error, op.kind);
    if (s.lastSeq >= this.#operationSeq) {
      this.#operationSeq = s.lastSeq;
      this.#activeOperation = s.activeOperation ? publicOperation(s.activeOperation) : null;
      if (s.lastOperation) this.#lastOperation = publicOperation(s.lastOperation);
    }
    // The snapshot names the session's provider and effort level; a handle built
    // without them (resumeSession()) takes them, one that knows them keeps its own.
    if (this.provider === "" && s.provider) this.provider = s.provider;
    if (this.effortLevel === undefined && s.effortLevel) this.effortLevel = s.effortLevel;
    if (!emit) {
      // A handle built on an ended session never saw the transition: no onEnded.
      this.#status = s.status;
      this.#ended = this.#endedFired = s.status === "ended";
    } else {
      const ctx = this.#ctx("status");
      if (s.status === "ended") this.#markEnded("requested", undefined, ctx);
      else {
        // Reactivated (by this handle or another route of the session).
        this.#ended = this.#endedFired = false;
        this.#setStatus(s.status, ctx);
      }
    }
    const pending = s.pendingToolRequest;
    for (const id of [...this.#toolAborts.keys()]) {
      if (id !== pending?.toolRequestId) this.#clearTool(id, "tool request no longer pending");
    }
    if (pending && this.#toolOwner) this.#toolRequest(pending);
  }

  // ---- tools ----

  #toolRequest(req: PendingToolRequest | (PendingToolRequest & { type: "tool_request" }), frame?: EventFrame): void {
    if (this.#seenToolRequests.has(req.toolRequestId)) return; // never run a handler twice
    this.#seenToolRequests.add(req.toolRequestId);
    const abort = new AbortController();
    this.#toolAborts.set(req.toolRequestId, abort);
    // Decided after the current task, so handlers registered right after
    // `await pedelec.resumeSession()` still get a pending request.
    setTimeout(() => void this.#runTool(req, abort, frame), 0);
  }

  #clearTool(toolRequestId: string, reason: string): void {
    this.#clearedToolRequests.add(toolRequestId);
    const abort = this.#toolAborts.get(toolRequestId);
    if (!abort) return;
    this.#toolAborts.delete(toolRequestId);
    abort.abort(new PedelecError("CANCELLED", reason, { toolRequestId }));
  }

  async #runTool(req: PendingToolRequest, abort: AbortController, frame?: EventFrame): Promise<void> {
    if (abort.signal.aborted || this.#detached) return;
    const ctx: ToolContext = {
      type: "tool_request",
      sessionId: this.sessionId,
      operationId: req.operationId,
      toolRequestId: req.toolRequestId,
      tool: req.tool,
      signal: abort.signal,
    };
    if (frame) {
      ctx.seq = frame.seq;
      if (frame.at !== null) ctx.at = frame.at;
    }
    const named = this.#namedTools.get(req.tool);
    const namedHandler = named?.[named.length - 1];
    const inline = this.#inlineTools.get(req.tool);
    const generic = this.#genericTools[this.#genericTools.length - 1];
    let run: (() => unknown) | null = null;
    if (namedHandler) run = () => namedHandler(req.args, ctx);
    else if (inline) run = () => inline(req.args, ctx);
    else if (generic) run = () => generic(req.tool, req.args, ctx);

    // What the agent is told, and the same failure for the page's onError (source "sdk").
    let outcome: { result: unknown } | { error: ToolFailure };
    let cause: unknown;
    if (!run) {
      outcome = { error: toolFailure(req, "TOOL_HANDLER_NOT_FOUND", `No handler for ${req.tool} in the page`) };
    } else {
      try {
        const value = await run();
        outcome = checkResult(req, value === undefined ? null : value);
      } catch (e) {
        cause = e;
        const message = e instanceof Error ? e.message : String(e);
        outcome = { error: toolFailure(req, "TOOL_HANDLER_ERROR", `handler for ${req.tool} threw: ${message}`) };
      }
    }
    // Cleared (answered elsewhere, timed out, ended) or detached meanwhile: a
    // result is never submitted for a request that is not pending, nor resubmitted
    // (and a handler that stopped on its aborted signal is no error of the page).
    if (abort.signal.aborted || this.#detached) return;
    this.#toolAborts.delete(req.toolRequestId);
    if ("error" in outcome) {
      const { code, message, details } = outcome.error;
      this.#sdkError(new PedelecError(code, message, details, { operationId: req.operationId, cause }), req.operationId);
    }
    try {
      await this.#host.connection.call("submit_tool_result", { sessionId: this.sessionId, toolRequestId: req.toolRequestId, ...outcome });
    } catch (e) {
      const error = e instanceof PedelecError ? e : new PedelecError("INTERNAL", String(e));
      // TOOL_REQUEST_NOT_PENDING: it was settled while the handler ran; nothing to do.
      if (error.code !== "TOOL_REQUEST_NOT_PENDING") this.#sdkError(error, req.operationId);
    }
  }
}

/** The error a failed or cancelled operation rejects with (and shows as `lastOperation.error`). */
function operationError(operationId: string, outcome: OperationOutcome, error: EventError | null): PedelecError {
  if (error) return new PedelecError(error.code, error.message, error.details, { operationId });
  return new PedelecError("CANCELLED", `operation ${operationId} was ${outcome}`, { operationId }, { operationId });
}

function publicOperation(op: Operation): PedelecOperation {
  return {
    operationId: op.operationId,
    kind: op.kind,
    outcome: op.outcome,
    error: op.outcome === null || op.outcome === "completed" ? null : operationError(op.operationId, op.outcome, op.error),
  };
}

/** A tool request's failure, as the agent gets it and the page's onError sees it (details name the tool and the request). */
type ToolFailure = { code: string; message: string; details: { tool: string; toolRequestId: string; operationId: string; [k: string]: unknown } };

function toolFailure(req: PendingToolRequest, code: string, message: string, extra: Record<string, unknown> = {}): ToolFailure {
  return { code, message, details: { tool: req.tool, toolRequestId: req.toolRequestId, operationId: req.operationId, ...extra } };
}

/** A handler's value as it is sent (parsed from its own JSON text), or the limit it breaks. */
function checkResult(req: PendingToolRequest, value: unknown): { result: unknown } | { error: ToolFailure } {
  const refuse = (message: string, extra: Record<string, unknown> = {}) => ({ error: toolFailure(req, "TOOL_HANDLER_ERROR", message, extra) });
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    return refuse(`the result of ${req.tool} is not JSON-serialisable: ${(e as Error).message}`);
  }
  if (text === undefined) return refuse(`the result of ${req.tool} is not JSON-serialisable`);
  const bytes = new TextEncoder().encode(text).length;
  if (bytes > MAX_TOOL_RESULT_BYTES) {
    return refuse(`the result of ${req.tool} is ${bytes} bytes, above the ${MAX_TOOL_RESULT_BYTES}-byte limit`, { sizeBytes: bytes, limitBytes: MAX_TOOL_RESULT_BYTES });
  }
  const depth = jsonDepth(value, MAX_TOOL_RESULT_DEPTH);
  if (depth > MAX_TOOL_RESULT_DEPTH) return refuse(`the result of ${req.tool} nests deeper than ${MAX_TOOL_RESULT_DEPTH} levels`, { limitDepth: MAX_TOOL_RESULT_DEPTH });
  // Sent as parsed from its own JSON text: what the agent gets is exactly that.
  return { result: JSON.parse(text) as unknown };
}
