// Pedelec: the page's client. One client is one SDK route to the extension,
// opened lazily on the first call that needs it and again after it was lost.
import { Connection, probeExtension, type BridgeWindow } from "./connection.js";
import { PedelecError } from "./errors.js";
import { DEFAULT_BRIDGE_TIMEOUT_MS, MIN_BRIDGE_TIMEOUT_MS, type WorkerToPage } from "./protocol/bridge.js";
import type { CreateSessionPayload, EffortLevel, EventFrame, ProviderCode, ProviderInfo as WireProviderInfo } from "./protocol/native.js";
import { PedelecSession, type SessionHost } from "./session.js";
import type { Skills, ToolHandler } from "./tools.js";

export type PedelecOptions = {
  /** How long to wait for the extension per request; at least 15 s (Core may be starting). Default 30 s. */
  timeoutMs?: number;
};

export type ApprovalStatus = {
  /** The extension answered within 500 ms. */
  installed: boolean;
  approved: boolean;
  origin: string;
  /** The native host answers and Core runs. */
  appConnected: boolean;
};

export type ProviderInfo = Pick<WireProviderInfo, "name" | "code" | "available" | "isDefault" | "error">;
export type PedelecSettings = { defaultProvider: ProviderCode | null };

export type CreateSessionOptions = {
  provider?: ProviderCode | (string & {});
  /** One of EFFORT_LEVELS; absent: "default" when a provider is named, else the desktop's choice. */
  effortLevel?: EffortLevel | (string & {});
  skills?: Skills;
  /** Default true: the session ends when the last page connected to it goes. */
  autoEndOnDisconnect?: boolean;
  /** An absolute, existing, application-owned folder; absent: a managed workspace. */
  workspace?: { path: string };
};

/** Frames for a session whose handle is still being built are held at most this many. */
const MAX_EARLY_FRAMES = 4096;

function browserWindow(): BridgeWindow | null {
  const g = globalThis as { window?: unknown; document?: unknown };
  // A page has both; Node, SSR and workers do not.
  if (typeof g.window !== "object" || g.window === null || typeof g.document !== "object") return null;
  const w = g.window as Partial<BridgeWindow>;
  if (typeof w.postMessage !== "function" || typeof w.addEventListener !== "function") return null;
  return w as BridgeWindow;
}

function unavailable(): PedelecError {
  return new PedelecError("EXTENSION_UNAVAILABLE", "Pedelec needs a browser page with the Pedelec extension installed");
}

export class Pedelec {
  #win: BridgeWindow | null;
  #timeoutMs: number;
  #connection: Connection | null = null;
  #opening: Promise<Connection> | null = null;
  #sessions = new Map<string, PedelecSession>();
  /** Handles being built (create/resume in flight): their early frames wait here. */
  #building = 0;
  #early = new Map<string, Array<Extract<WorkerToPage, { kind: "event" }>>>();

  constructor(options: PedelecOptions = {}) {
    // Never throws: a bad option falls back to the default.
    const t = typeof options === "object" && options !== null ? options.timeoutMs : undefined;
    this.#timeoutMs = typeof t === "number" && Number.isFinite(t) ? Math.max(MIN_BRIDGE_TIMEOUT_MS, t) : DEFAULT_BRIDGE_TIMEOUT_MS;
    this.#win = browserWindow();
  }

  async getApprovalStatus(): Promise<ApprovalStatus> {
    if (!this.#win) throw unavailable();
    const origin = this.#win.location.origin;
    if (!this.#connection && !(await probeExtension(this.#win))) {
      return { installed: false, approved: false, origin, appConnected: false };
    }
    const connection = await this.#connect();
    const status = await connection.call("status", {});
    return { installed: true, approved: status.approved, origin: status.origin, appConnected: status.appConnected };
  }

  async listProviders(): Promise<ProviderInfo[]> {
    const connection = await this.#connect();
    const r = await connection.call("list_providers", {});
    // Exactly the documented fields: a newer host's extra fields stay out.
    return r.providers.map((p) => ({ name: p.name, code: p.code, available: p.available, isDefault: p.isDefault, error: p.error }));
  }

  async getSettings(): Promise<PedelecSettings> {
    const connection = await this.#connect();
    const r = await connection.call("get_settings", {});
    return { defaultProvider: r.defaultProvider };
  }

  async createSession(options: CreateSessionOptions = {}): Promise<PedelecSession> {
    if (!this.#win) throw unavailable();
    const { payload, inline } = manifest(options);
    const connection = await this.#connect();
    this.#building++;
    try {
      const r = await connection.call("create_session", payload);
      return this.#adopt(connection, {
        sessionId: r.sessionId,
        provider: r.provider,
        effortLevel: r.effortLevel,
        snapshot: r.snapshot,
        toolOwner: r.toolOwner,
        inlineHandlers: inline,
      });
    } finally {
      this.#doneBuilding();
    }
  }

  async resumeSession(sessionId: string): Promise<PedelecSession> {
    if (!this.#win) throw unavailable();
    if (typeof sessionId !== "string" || sessionId.trim() === "") {
      throw new PedelecError("INVALID_INPUT", "resumeSession needs a non-empty session id");
    }
    const connection = await this.#connect();
    this.#building++;
    try {
      const r = await connection.call("resume_session", { sessionId });
      // The attach snapshot names the session's provider and effort level (empty: unknown).
      return this.#adopt(connection, {
        sessionId: r.sessionId,
        provider: r.snapshot.provider,
        effortLevel: r.snapshot.effortLevel || undefined,
        snapshot: r.snapshot,
        toolOwner: r.toolOwner,
        inlineHandlers: new Map(),
      });
    } finally {
      this.#doneBuilding();
    }
  }

  #adopt(connection: Connection, init: ConstructorParameters<typeof PedelecSession>[1]): PedelecSession {
    const existing = this.#sessions.get(init.sessionId);
    if (existing && !existing.detached) {
      // resumeSession() of a session this client already has a live handle for
      // (React Strict Mode, duplicated effects): the same handle, reconciled,
      // so one session never has two handles racing for its tool requests.
      existing._reconcile(init.snapshot);
      return existing;
    }
    const host: SessionHost = { connection };
    const session = new PedelecSession(host, init);
    this.#sessions.set(session.sessionId, session);
    for (const msg of this.#early.get(session.sessionId) ?? []) session._frame(msg.frame, msg.toolOwner);
    this.#early.delete(session.sessionId);
    if (connection.closed) session._detach(new PedelecError("EXTENSION_DISCONNECTED", "the extension connection was interrupted"));
    return session;
  }

  #doneBuilding(): void {
    this.#building--;
    if (this.#building === 0) this.#early.clear();
  }

  #connect(): Promise<Connection> {
    if (!this.#win) return Promise.reject(unavailable());
    if (this.#connection && !this.#connection.closed) return Promise.resolve(this.#connection);
    this.#opening ??= (async () => {
      const win = this.#win!;
      try {
        if (!(await probeExtension(win))) throw unavailable();
        const connection = new Connection(win, this.#timeoutMs, {
          message: (msg) => this.#onMessage(connection, msg),
          disconnected: (error) => this.#onDisconnected(connection, error),
        });
        await connection.open();
        this.#connection = connection;
        return connection;
      } finally {
        this.#opening = null;
      }
    })();
    return this.#opening;
  }

  #onMessage(connection: Connection, msg: WorkerToPage): void {
    if (connection !== this.#connection) return;
    switch (msg.kind) {
      case "event": {
        const session = this.#sessions.get(msg.frame.sessionId);
        if (session) session._frame(msg.frame, msg.toolOwner);
        else if (this.#building > 0) this.#holdEarly(msg);
        return;
      }
      case "tool_handover":
        this.#sessions.get(msg.sessionId)?._handover(msg.request);
        return;
      case "session_lost": {
        const session = this.#sessions.get(msg.sessionId);
        if (!session) return;
        this.#sessions.delete(msg.sessionId);
        session._lost(PedelecError.from(msg.error));
        return;
      }
      default:
        return;
    }
  }

  #holdEarly(msg: Extract<WorkerToPage, { kind: "event" }>): void {
    const list = this.#early.get(msg.frame.sessionId) ?? [];
    if (list.length >= MAX_EARLY_FRAMES) return;
    list.push(msg);
    this.#early.set(msg.frame.sessionId, list);
  }

  #onDisconnected(connection: Connection, error: PedelecError): void {
    if (connection === this.#connection) this.#connection = null;
    // Every handle of the lost route is detached: EXTENSION_DISCONNECTED once.
    for (const [id, session] of [...this.#sessions]) {
      this.#sessions.delete(id);
      session._detach(error);
    }
  }
}

/** The create_session payload (handlers stripped) and the inline handlers by tool name. */
function manifest(options: CreateSessionOptions): { payload: CreateSessionPayload; inline: Map<string, ToolHandler> } {
  if (typeof options !== "object" || options === null) throw new PedelecError("INVALID_INPUT", "createSession options must be an object");
  const payload: CreateSessionPayload = {};
  const inline = new Map<string, ToolHandler>();
  if (options.provider !== undefined) {
    if (typeof options.provider !== "string" || options.provider === "") throw new PedelecError("INVALID_INPUT", "provider must be a non-empty string");
    payload.provider = options.provider;
    // A provider alone means its "default" effort profile (sdk/README.md, createSession).
    payload.effortLevel = "default";
  }
  if (options.effortLevel !== undefined) {
    if (typeof options.effortLevel !== "string" || options.effortLevel === "") throw new PedelecError("INVALID_INPUT", "effortLevel must be a non-empty string");
    payload.effortLevel = options.effortLevel;
  }
  payload.autoEndOnDisconnect = options.autoEndOnDisconnect ?? true;
  if (typeof payload.autoEndOnDisconnect !== "boolean") throw new PedelecError("INVALID_INPUT", "autoEndOnDisconnect must be a boolean");
  if (options.workspace !== undefined) {
    if (typeof options.workspace?.path !== "string" || options.workspace.path === "") {
      throw new PedelecError("INVALID_INPUT", "workspace.path must be a non-empty string");
    }
    payload.workspace = { path: options.workspace.path };
  }
  if (options.skills !== undefined) {
    const skills = options.skills;
    if (typeof skills !== "object" || skills === null) throw new PedelecError("INVALID_INPUT", "skills must be an object");
    const tools = skills.tools ?? [];
    if (!Array.isArray(tools)) throw new PedelecError("INVALID_INPUT", "skills.tools must be an array");
    payload.skills = {
      ...(skills.guidance !== undefined ? { guidance: skills.guidance } : {}),
      tools: tools.map((tool, i) => {
        if (typeof tool !== "object" || tool === null || typeof tool.name !== "string") {
          throw new PedelecError("INVALID_INPUT", `skills.tools[${i}] needs a name`);
        }
        if (tool.handler !== undefined) {
          if (typeof tool.handler !== "function") throw new PedelecError("INVALID_INPUT", `skills.tools[${i}].handler must be a function`);
          inline.set(tool.name, tool.handler as ToolHandler);
        }
        // The handler stays in the page; only the description crosses the wire.
        const { handler: _handler, ...spec } = tool;
        return spec as { name: string; description: string; argsSchema: Record<string, unknown>; timeoutMs?: number };
      }),
    };
  }
  return { payload, inline };
}

export type { EventFrame };
