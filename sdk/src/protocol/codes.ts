// Every error code a page can see: the browser's own, the native host's and the
// services' (services/common/src/codes.rs is the Rust side's list; see
// docs/native-messaging.md). One list, shared by the SDK, the extension and the tests.

/** Codes made in the browser: by the SDK or by the extension. */
export const BROWSER_CODES = [
  "INVALID_INPUT",
  "EXTENSION_UNAVAILABLE",
  "EXTENSION_DISCONNECTED",
  "SDK_BRIDGE_TIMEOUT",
  "SDK_PROTOCOL_ERROR",
  "APPROVAL_REJECTED",
  "APPROVAL_TIMEOUT",
  "OPEN_POPUP_FAILED",
  "SESSION_BUSY",
  "SESSION_ENDED",
  "TOOL_HANDLER_NOT_FOUND",
  "TOOL_HANDLER_ERROR",
  "ASSET_TEXT_DECODE_FAILED",
  "ASSET_INVALID_JSON",
  // A request from a frame whose embedding site the user did not allow.
  "FRAME_NOT_ALLOWED",
] as const;

/** Codes made by the native host (or by the extension about the host). */
export const HOST_CODES = [
  "NATIVE_HOST_UNAVAILABLE",
  "MESSAGE_TOO_LARGE",
  "CORE_UNAVAILABLE",
  "PROTOCOL_MISMATCH",
] as const;

/** Codes made by the services; passed through unchanged. */
export const SERVICE_CODES = [
  "DEFAULT_PROVIDER_NOT_SET",
  "DEFAULT_PROVIDER_UNAVAILABLE",
  "PROVIDER_NOT_FOUND",
  "PROVIDER_FAILED",
  "PROVIDER_UNREACHABLE",
  "PROVIDER_AUTH_FAILED",
  "PROVIDER_MODEL_NOT_FOUND",
  "PROVIDER_RATE_LIMITED",
  "PROVIDER_INVALID_RESPONSE",
  "MODEL_REQUIRED",
  "THREAD_NOT_FOUND",
  "THREAD_ACCESS_DENIED",
  "SETTINGS_ACCESS_DENIED",
  "WORKSPACE_OPEN_FAILED",
  "SITE_NOT_APPROVED",
  "ORIGIN_NOT_SECURE",
  "PROVIDER_NOT_GRANTED",
  "MODEL_NOT_ALLOWED",
  "FOLDER_NOT_GRANTED",
  "FOLDER_NOT_GRANTABLE",
  "WORKSPACE_IN_USE",
  "TOOLS_MANIFEST_INVALID",
  "TOOL_NOT_FOUND",
  "TOOL_ARGS_INVALID",
  "TOOL_TIMEOUT",
  "TOOL_ACCESS_DENIED",
  "TOOL_REQUEST_NOT_PENDING",
  "SERVICE_ACCESS_DENIED",
  "ASSET_NOT_FOUND",
  "ASSET_TOO_LARGE",
  "ASSET_PATH_INVALID",
  "ASSET_TICKET_INVALID",
  "STORAGE_FULL",
  "JOURNAL_WRITE_FAILED",
  "LIMIT_EXCEEDED",
  "CORE_RESTARTED",
  "CANCELLED",
  "INTERNAL",
] as const;

export type KnownErrorCode =
  | (typeof BROWSER_CODES)[number]
  | (typeof HOST_CODES)[number]
  | (typeof SERVICE_CODES)[number];

/**
 * The `code` of a PedelecError: a known code, or any other string (a newer
 * service's code, or a tool's own code) — kept open so the page sees it unchanged.
 */
export type ErrorCode = KnownErrorCode | (string & {});

export const ALL_CODES: readonly KnownErrorCode[] = [...BROWSER_CODES, ...HOST_CODES, ...SERVICE_CODES];

/**
 * Every known code as a runtime constant, `ErrorCodes.SESSION_BUSY === "SESSION_BUSY"`, so an
 * application compares `error.code` with a name the compiler checks. Exported by the SDK.
 */
export const ErrorCodes = Object.freeze(Object.fromEntries(ALL_CODES.map((c) => [c, c]))) as { readonly [K in KnownErrorCode]: K };
