import type { ErrorCode } from "./protocol/codes.js";
import type { BridgeError } from "./protocol/bridge.js";

/** What a PedelecError may carry besides its code, message and details. */
export type PedelecErrorOptions = {
  /** The operation (a sendText or prepare) the error belongs to. */
  operationId?: string;
  /** What caused it in the page, e.g. the value a tool handler threw. */
  cause?: unknown;
};

/** Every error the SDK rejects with or reports to `onError`. */
export class PedelecError extends Error {
  readonly code: ErrorCode;
  readonly details: unknown;
  /** The operation the error belongs to: a failed or cancelled sendText()/prepare(), a tool request's operation. */
  readonly operationId: string | undefined;

  constructor(code: ErrorCode, message: string, details: unknown = null, options: PedelecErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PedelecError";
    this.code = code;
    this.details = details;
    this.operationId = options.operationId;
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
