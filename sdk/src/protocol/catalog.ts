// The provider codes and effort level names as runtime values, for applications
// (a provider picker, an effort choice) and for the extension's settings page.
// Their types are the schema's (ProviderCode, EffortLevel in native.ts):
// test/protocol.test.ts checks these lists against the schema's enums, and the
// compiler checks that each list names every member of its type and nothing else.
import type { EffortLevel, ProviderCode } from "./native.js";

/** Every provider code, in the order the desktop runtime lists the providers. */
export const PROVIDER_CODES = Object.freeze(["codex", "antigravity", "opencode", "cursor", "claude", "ollama"] as const satisfies readonly ProviderCode[]);

/** Every effort level name, from the least specific: `default` is what a session without one uses. */
export const EFFORT_LEVELS = Object.freeze(["default", "low", "medium", "high"] as const satisfies readonly EffortLevel[]);

type Assert<T extends true> = T;
type Complete<All, Listed> = [Exclude<All, Listed>] extends [never] ? true : false;
// A member added to the schema's enum and missing here fails to compile.
type _ProvidersComplete = Assert<Complete<ProviderCode, (typeof PROVIDER_CODES)[number]>>;
type _LevelsComplete = Assert<Complete<EffortLevel, (typeof EFFORT_LEVELS)[number]>>;
