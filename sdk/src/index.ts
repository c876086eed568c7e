export { Pedelec } from "./client.js";
export type { ApprovalStatus, CreateSessionOptions, PedelecOptions, PedelecSettings, ProviderInfo } from "./client.js";
export { PedelecSession } from "./session.js";
export type {
  AssetInfo,
  CompletedOperation,
  Disposer,
  EndedEventContext,
  ErrorEventContext,
  HistoryEntry,
  HistoryOptions,
  HistoryPage,
  PedelecEventContext,
  PedelecOperation,
  ReadAs,
  SessionStatus,
} from "./session.js";
export { PedelecError, isPedelecError } from "./errors.js";
export type { PedelecErrorOptions } from "./errors.js";
export { defineTool } from "./tools.js";
export type {
  ArgsSchemaNode,
  ArraySchema,
  BooleanSchema,
  GenericToolHandler,
  InferArgs,
  NumberSchema,
  ObjectSchema,
  OneOfSchema,
  Skills,
  StringSchema,
  ToolContext,
  ToolDefinition,
  ToolHandler,
} from "./tools.js";
export { ErrorCodes } from "./protocol/codes.js";
export type { ErrorCode, KnownErrorCode } from "./protocol/codes.js";
export { EFFORT_LEVELS, PROVIDER_CODES } from "./protocol/catalog.js";
export type { EffortLevel, OperationKind, OperationOutcome, ProviderCode } from "./protocol/native.js";
// The history entry kinds, one per `HistoryEntry["type"]`.
export type {
  HistoryAgentMessage,
  HistoryDropped,
  HistoryError,
  HistoryOperationFinished,
  HistoryOperationStarted,
  HistoryToolOutcome,
  HistoryToolRequest,
  HistoryUserText,
} from "./protocol/native.js";
