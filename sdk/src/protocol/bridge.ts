// The page ⇄ content script ⇄ service worker message shapes, and the fixed
// identities and limits both sides of the bridge agree on. The native-host
// wire shapes are in ./native.ts (generated from the schema).
import type {
  AttachResult,
  CreateSessionPayload,
  CreateDownloadTicketRequest,
  CreateUploadTicketPayload,
  EmptyResult,
  EventFrame,
  FullSettingsResult,
  GetHistoryRequest,
  GetHistoryResult,
  GetSettingsResult,
  ListAssetsResult,
  ListProvidersResult,
  OperationResult,
  CancelResult,
  PendingToolRequest,
  ProtocolVersion,
  SessionStatus,
  SessionSummary,
  Site,
  SiteAccess,
  SiteFolder,
  SiteInput,
  Snapshot,
  SnapshotResult,
  SubmitToolResultPayload,
  Ticket,
  UpdateSettingsPayload,
} from "./native.js";
import type { ErrorCode } from "./codes.js";

/** The extension's fixed id, given by the manifest `key` (docs/native-messaging.md §1). */
export const EXTENSION_ID = "ekeclpceddngodnkncegoclkkeknaacb";
/** The Firefox add-on's fixed id (its manifest's `browser_specific_settings.gecko.id`): the one the native host admits from Firefox. */
export const FIREFOX_ADDON_ID = "pedelec@pedelec.dev";
/** The native-messaging host name, registered by the installer and the tests. */
export const NATIVE_HOST_NAME = "dev.pedelec.host";
/** The native protocol version the extension speaks (checked by `hello`). */
export const NATIVE_PROTOCOL_VERSION: ProtocolVersion = 2;
/** The host stops reading stdin above this many requests in flight; the extension queues the rest. */
export const HOST_MAX_IN_FLIGHT = 64;

/** `chrome.runtime.connect` name of an SDK route (one per `Pedelec` client). */
export const SDK_PORT_NAME = "pedelec-sdk";
/** `chrome.runtime.connect` name of the extension's own popup/approval page. */
export const POPUP_PORT_NAME = "pedelec-popup";
/** Namespace of every window.postMessage envelope, so unrelated page messages are ignored. */
export const BRIDGE_NAMESPACE = "pedelec-sdk/1";

/** `installed` means the content script answered a probe within this time. */
export const INSTALL_PROBE_TIMEOUT_MS = 500;
/** The SDK never waits less than this for the extension (Core may be starting: up to 10 s). */
export const MIN_BRIDGE_TIMEOUT_MS = 15_000;
export const DEFAULT_BRIDGE_TIMEOUT_MS = 30_000;
/** How long the extension waits for the user to approve an origin. */
export const APPROVAL_TIMEOUT_MS = 120_000;
/** A tool result above this (serialized, UTF-8) is refused in the SDK. */
export const MAX_TOOL_RESULT_BYTES = 2 * 1024 * 1024;
/** The host refuses requests nested deeper than 32 levels; a tool result sits 2 levels down. */
export const MAX_TOOL_RESULT_DEPTH = 30;
/** chrome.storage.session key of the extension's cache of the services' site grants (trusted contexts only). */
export const SITES_CACHE_KEY = "pedelecSites";
/** The approval prompt's Approve button stays disabled this long after the prompt shows (no click-through). */
export const APPROVE_DELAY_MS = 1_000;

/** An error as it crosses the bridge (a PedelecError's data). */
export type BridgeError = {
  code: ErrorCode;
  message: string;
  details: unknown;
};

/** What each bridge method takes and answers. The worker adds the origin. */
export interface BridgeCalls {
  /** Approval state and Core reachability; never opens the approval UI. */
  status: { params: Record<string, never>; result: { approved: boolean; origin: string; appConnected: boolean } };
  list_providers: { params: Record<string, never>; result: ListProvidersResult };
  get_settings: { params: Record<string, never>; result: GetSettingsResult };
  /** create_session, then attach this route; `toolOwner`: this route answers tool requests. */
  create_session: {
    params: CreateSessionPayload;
    result: { sessionId: string; provider: string; effortLevel: string; snapshot: Snapshot; toolOwner: boolean };
  };
  /** Attach this route to an existing session. */
  resume_session: { params: { sessionId: string }; result: AttachResult & { toolOwner: boolean } };
  send_text: { params: { sessionId: string; text: string }; result: OperationResult };
  prepare: { params: { sessionId: string }; result: OperationResult };
  cancel: { params: { sessionId: string }; result: CancelResult };
  end: { params: { sessionId: string }; result: SnapshotResult };
  reactivate: { params: { sessionId: string }; result: SnapshotResult };
  get_session: { params: { sessionId: string }; result: SnapshotResult };
  /** A page of the session's conversation history (the session's own origin only). */
  get_history: { params: GetHistoryRequest["payload"]; result: GetHistoryResult };
  submit_tool_result: { params: SubmitToolResultPayload; result: EmptyResult };
  create_upload_ticket: { params: CreateUploadTicketPayload; result: Ticket };
  create_download_ticket: { params: CreateDownloadTicketRequest["payload"]; result: Ticket };
  list_assets: { params: { sessionId: string }; result: ListAssetsResult };
}
export type BridgeMethod = keyof BridgeCalls;
export type BridgeCall = { [M in BridgeMethod]: { method: M; params: BridgeCalls[M]["params"] } }[BridgeMethod];
export const BRIDGE_METHODS: readonly BridgeMethod[] = [
  "status", "list_providers", "get_settings", "create_session", "resume_session", "send_text", "prepare",
  "cancel", "end", "reactivate", "get_session", "get_history", "submit_tool_result", "create_upload_ticket",
  "create_download_ticket", "list_assets",
];
/** Methods that act on one session: the route must have attached it. */
export const SESSION_METHODS: ReadonlySet<BridgeMethod> = new Set<BridgeMethod>([
  "send_text", "prepare", "cancel", "end", "reactivate", "get_session", "get_history", "submit_tool_result",
  "create_upload_ticket", "create_download_ticket", "list_assets",
]);

/** Page (SDK) → worker, through the content script and the port. */
export type PageToWorker = { kind: "request"; requestId: number; call: BridgeCall };

/** Worker → page, through the port and the content script. */
export type WorkerToPage =
  /** First message on a route: the origin the worker took from the port's sender. */
  | { kind: "welcome"; origin: string }
  | { kind: "response"; requestId: number; ok: true; result: unknown }
  | { kind: "response"; requestId: number; ok: false; error: BridgeError }
  /** A session event; only the tool owner route dispatches a tool_request. */
  | { kind: "event"; frame: EventFrame; toolOwner: boolean }
  /** The route that owned a pending tool request went away: this route answers it now. */
  | { kind: "tool_handover"; sessionId: string; request: PendingToolRequest }
  /** Re-attaching after a host restart failed for good (e.g. THREAD_NOT_FOUND). */
  | { kind: "session_lost"; sessionId: string; error: BridgeError }
  /** The approval UI opened (the SDK pauses its timeouts) or closed. */
  | { kind: "approval"; state: "pending" | "settled" };

/**
 * An asset body the extension moves for the page (docs/sdk-extension.md
 * "Assets"): page → content script → hidden extension frame, which fetches the
 * ticket URL. Bodies cross as Blobs (structured clone: a handle to the bytes,
 * not a copy; measured faster than transferred ArrayBuffers, whose fetch body
 * is copied again), never as JSON; so no chrome.runtime port carries them.
 */
export type TransferRequest = {
  kind: "transfer";
  transferId: number;
  method: "PUT" | "GET";
  url: string;
  token: string;
  contentType: string;
  body: Blob | null;
};
export type TransferResult =
  /** The transfer server answered (any HTTP status). */
  | { kind: "transfer_result"; transferId: number; ok: true; status: number; contentType: string; body: Blob }
  /** Not sent; `unavailable`: the extension frame could not be used (the SDK falls back to its own fetch). */
  | { kind: "transfer_result"; transferId: number; ok: false; unavailable: boolean; message: string };

/** Page → content script (window.postMessage). */
export type PageToContent =
  | { kind: "probe" }
  | { kind: "connect" }
  | { kind: "disconnect" }
  | TransferRequest
  | PageToWorker;

/** Content script → page (window.postMessage). */
export type ContentToPage =
  | { kind: "probe_ack" }
  /** Sent on connect, before anything else: what this content script offers besides the route. */
  | { kind: "capabilities"; transfer: boolean }
  /** The route's port closed (extension reloaded, origin refused or revoked, worker gone). */
  | { kind: "disconnected"; reason: string }
  | TransferResult
  | WorkerToPage;

/** `chrome.runtime.connect` name of the transfer frame (asks the worker whether a ticket URL is the page's). */
export const TRANSFER_PORT_NAME = "pedelec-transfer";
/** The web-accessible extension page the content script embeds to move asset bodies. */
export const TRANSFER_PAGE = "transfer.html";
/** Namespace of the one message that hands the transfer frame its MessagePort. */
export const TRANSFER_NAMESPACE = "pedelec-transfer/1";
/** The content script gives up on the transfer frame (page CSP, extension gone) after this. */
export const TRANSFER_FRAME_TIMEOUT_MS = 5_000;
/** Transfer frame ⇄ worker (TRANSFER_PORT_NAME). */
export type TransferCheck = { kind: "check"; id: number; url: string; origin: string };
export type TransferCheckResult = { kind: "check_result"; id: number; ok: boolean; message: string };
/** Content script ⇄ transfer frame, over the private MessagePort. */
export type FrameRequest = Omit<TransferRequest, "kind" | "transferId"> & { kind: "fetch"; id: number };
export type FrameReply =
  | { kind: "ready" }
  | { kind: "fetched"; id: number; ok: true; status: number; contentType: string; body: Blob }
  | { kind: "fetched"; id: number; ok: false; message: string };

export type WindowEnvelope =
  | { ns: typeof BRIDGE_NAMESPACE; dir: "to-extension"; clientId: string; msg: PageToContent }
  | { ns: typeof BRIDGE_NAMESPACE; dir: "to-page"; clientId: string; msg: ContentToPage };

export function isWindowEnvelope(data: unknown): data is WindowEnvelope {
  if (typeof data !== "object" || data === null) return false;
  const d = data as Record<string, unknown>;
  return (
    d.ns === BRIDGE_NAMESPACE &&
    (d.dir === "to-extension" || d.dir === "to-page") &&
    typeof d.clientId === "string" &&
    typeof d.msg === "object" &&
    d.msg !== null
  );
}

// The site grants' wire shapes (native requests list_sites, grant_site, block_site,
// revoke_site, end_site_sessions, list_sessions) come from ./native.ts; re-exported
// here for the extension's bridge types below.
export type { SessionSummary, Site, SiteAccess, SiteFolder, SiteInput };

/** The popup/approval page ⇄ worker. */
export type PopupToWorker =
  /** `tabId`: the tab the popup was opened over (its site's state is shown first). */
  | { kind: "get_state"; tabId?: number | null }
  | { kind: "approve"; promptId: number; access: SiteAccess; providers: string[] }
  | { kind: "reject"; promptId: number }
  | { kind: "block"; promptId: number }
  /** A provider prompt (yes/no) or a folder prompt (once/always/no). */
  | { kind: "answer"; promptId: number; answer: PromptAnswer }
  | { kind: "revoke"; origin: string }
  | { kind: "end_sessions"; origin: string }
  /** Lets a site rejected in this browser session ask again. */
  | { kind: "forget_rejection"; origin: string };

export type PromptAnswer = "yes" | "no" | "once" | "always";

/** Something the extension asks the user; the popup shows each. */
export type ApprovalPrompt = {
  id: number;
  /** site: approve the site; provider: add a provider to its grant; folder: add a folder. */
  kind: "site" | "provider" | "folder";
  origin: string;
  /** The tab that asked (its title or address as Chrome reported it). */
  tab: string;
  loopback: boolean;
  /** kind site: the providers offered; the user's default (and a provider the page named) preselected. */
  providers: Array<{ code: string; name: string; available: boolean; preselected: boolean }>;
  /** kind provider: the provider asked for. */
  provider: { code: string; name: string } | null;
  /** kind folder: the folder asked for, with the home folder shown as `~`. */
  folder: { path: string; shown: string } | null;
};

export type HostState = {
  /** A native port is open and answered hello. */
  connected: boolean;
  hostVersion: string | null;
  protocolVersion: number | null;
  /** From the last hello/ping; null when unknown or the host was lost. */
  coreRunning: boolean | null;
  /** The account agents run as (hello's userName); null before hello or when the host did not know. */
  userName: string | null;
  /** The last reason the host could not be used, if any. */
  lastError: string | null;
  /** Its code (NATIVE_HOST_UNAVAILABLE, PROTOCOL_MISMATCH, …), so the popup can say what to do. */
  lastErrorCode: string | null;
};

export type PopupState = {
  host: HostState;
  prompts: ApprovalPrompt[];
  /** The origin of the page in the tab the popup was opened over (null: none, or not a page using Pedelec). */
  activeOrigin: string | null;
  /** The services' grants (blocked sites too), as last loaded. */
  sites: Site[];
  /** Origins rejected in this browser session (no new prompt until forgotten). */
  rejected: string[];
  /** The sessions this extension follows for its pages. */
  sessions: Array<{ sessionId: string; origin: string; status: SessionStatus | "unknown"; routes: number; autoEndOnDisconnect: boolean }>;
  /** The last error of a popup action (e.g. a revoke the host refused). */
  lastError: string | null;
};

export type WorkerToPopup = { kind: "state"; state: PopupState };

/** `chrome.runtime.connect` name of the extension's options page (the settings). */
export const OPTIONS_PORT_NAME = "pedelec-options";

/**
 * What the options page asks the worker. The worker sends each to the host
 * with the extension's own origin (`chrome-extension://<id>`), the only origin
 * the host accepts for the settings requests; web pages have no way to them
 * (not bridge methods, and the port is refused to anything but the extension's
 * own pages).
 */
export interface OptionsCalls {
  list_providers: { params: Record<string, never>; result: ListProvidersResult };
  get_full_settings: { params: Record<string, never>; result: FullSettingsResult };
  update_settings: { params: UpdateSettingsPayload; result: FullSettingsResult };
  list_sites: { params: Record<string, never>; result: { sites: Site[] } };
  grant_site: { params: { site: SiteInput }; result: { site: Site } };
  revoke_site: { params: { origin: string }; result: { endedSessionIds: string[] } };
}
export type OptionsMethod = keyof OptionsCalls;
export type OptionsToWorker = {
  [M in OptionsMethod]: { kind: "request"; requestId: number; method: M; params: OptionsCalls[M]["params"] };
}[OptionsMethod];
export type WorkerToOptions =
  | { kind: "response"; requestId: number; ok: true; result: unknown }
  | { kind: "response"; requestId: number; ok: false; error: BridgeError };
