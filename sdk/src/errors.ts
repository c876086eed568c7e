import type { ErrorCode } from "./protocol/codes.js";
import type { BridgeError } from "./protocol/bridge.js";

/** Every error the SDK rejects with or reports to `onError`. */
export class PedelecError extends Error {
  readonly code: ErrorCode;
  readonly details: unknown;

  constructor(code: ErrorCode, message: string, details: unknown = null) {
    super(message);
    this.name = "PedelecError";
    this.code = code;
    this.details = details;
  }

  static from(error: BridgeError | { code: string; message: string; details?: unknown }): PedelecError {
    return new PedelecError(error.code, error.message, error.details ?? null);
  }

  toJSON(): BridgeError {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export function isPedelecError(value: unknown): value is PedelecError {
  return value instanceof PedelecError;
}
