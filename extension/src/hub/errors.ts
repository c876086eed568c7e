// Bridge errors: the {code, message, details} a page receives, made here or
// taken from whatever a native request or a check threw.
import { NativeError } from "../native-link.js";
import type { BridgeError } from "../../../sdk/src/protocol/bridge.js";

export function bridgeError(code: string, message: string, details: unknown = null): BridgeError {
  return { code, message, details };
}

export function toBridgeError(e: unknown): BridgeError {
  if (e instanceof NativeError) return e.toBridge();
  if (typeof e === "object" && e !== null && "code" in e && "message" in e) {
    const x = e as { code: unknown; message: unknown; details?: unknown };
    if (typeof x.code === "string" && typeof x.message === "string") return { code: x.code, message: x.message, details: x.details ?? null };
  }
  return bridgeError("INTERNAL", e instanceof Error ? e.message : String(e));
}
