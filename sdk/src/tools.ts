// Tools a page exposes to the agent: the Pedelec Tool Args Schema subset
// (sdk/README.md, "Tools") and the TypeScript type of the arguments it describes.

type Meta = {
  readonly description?: string;
  readonly title?: string;
  readonly default?: unknown;
  readonly examples?: readonly unknown[];
};
export type StringSchema = Meta & {
  readonly type: "string";
  readonly enum?: readonly string[];
  readonly minLength?: number;
  readonly maxLength?: number;
  readonly pattern?: string;
};
export type NumberSchema = Meta & {
  readonly type: "number" | "integer";
  readonly enum?: readonly number[];
  readonly minimum?: number;
  readonly maximum?: number;
};
export type BooleanSchema = Meta & { readonly type: "boolean"; readonly enum?: readonly boolean[] };
export type ArraySchema = Meta & {
  readonly type: "array";
  readonly items?: ArgsSchemaNode;
  readonly minItems?: number;
  readonly maxItems?: number;
};
export type ObjectSchema = Meta & {
  readonly type: "object";
  readonly properties?: { readonly [name: string]: ArgsSchemaNode };
  readonly required?: readonly string[];
};
export type OneOfSchema = Meta & { readonly oneOf: readonly ArgsSchemaNode[] };
export type ArgsSchemaNode = StringSchema | NumberSchema | BooleanSchema | ArraySchema | ObjectSchema | OneOfSchema;

/** The arguments an `argsSchema` describes. */
export type InferArgs<S> = S extends { readonly oneOf: readonly (infer U)[] }
  ? InferArgs<U>
  : S extends { readonly enum: readonly (infer E)[] }
    ? E
    : S extends { readonly type: "string" }
      ? string
      : S extends { readonly type: "number" | "integer" }
        ? number
        : S extends { readonly type: "boolean" }
          ? boolean
          : S extends { readonly type: "array"; readonly items: infer I }
            ? InferArgs<I>[]
            : S extends { readonly type: "array" }
              ? unknown[]
              : S extends { readonly type: "object" }
                ? InferObject<S>
                : unknown;

type RequiredKeys<S> = S extends { readonly required: readonly (infer R)[] } ? R : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};
type InferObject<S> = S extends { readonly properties: infer P }
  ? Simplify<
      { -readonly [K in keyof P as K extends RequiredKeys<S> ? K : never]: InferArgs<P[K]> } & {
        -readonly [K in keyof P as K extends RequiredKeys<S> ? never : K]?: InferArgs<P[K]>;
      }
    >
  : Record<string, unknown>;

/** What a tool handler gets besides its arguments. */
export type ToolContext = {
  type: "tool_request";
  sessionId: string;
  seq?: number;
  at?: number;
  operationId: string;
  toolRequestId: string;
  tool: string;
  /** Aborted when the request is cleared (answered elsewhere, timed out, session ended or detached). */
  signal: AbortSignal;
};

/** A handler's return value must be JSON-serialisable; `undefined` is sent as null. */
export type ToolHandler<A = unknown> = (args: A, ctx: ToolContext) => unknown;
export type GenericToolHandler = (tool: string, args: unknown, ctx: ToolContext) => unknown;

export type ToolDefinition<S extends ObjectSchema = ObjectSchema> = {
  name: string;
  description: string;
  argsSchema: S;
  /** Per-tool timeout for the agent's call (default 60 s in Core). */
  timeoutMs?: number;
  /** Inline handler; stays in the page (stripped before the manifest is sent). */
  handler?: ToolHandler<InferArgs<S>>;
};

/** Identity at run time; gives `handler` its argument type from `argsSchema`. */
export function defineTool<const S extends ObjectSchema>(tool: ToolDefinition<S>): ToolDefinition<S> {
  return tool;
}

export type Skills = {
  guidance?: string;
  // Each tool keeps its own schema type; only the handler's argument type depends on it.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  tools?: readonly ToolDefinition<any>[];
};
