// The options page's logic without the DOM (tested in test/options-model.test.ts):
// the form made from the stored settings, and the update_settings payload made
// from the form — only what the user changed, so the host's update mask names
// only those fields and a change made elsewhere meanwhile (pedelec-cli, another
// options tab) is kept. Keys never reach the page: they are shown masked and
// change only by an explicit replace or clear.
import { EFFORT_LEVELS } from "../../sdk/src/protocol/catalog.js";
import type {
  EffortLevel,
  FullSettingsResult,
  KeyChange,
  MaskedKey,
  ProviderCode,
  ProviderInfo,
  ProviderProfiles,
  UpdateSettingsPayload,
} from "../../sdk/src/protocol/native.js";

/** The levels in the order the page shows them (the SDK's list, which the schema checks). */
export { EFFORT_LEVELS };

/** Providers whose turns cannot run without a model (ProviderService's MODEL_REQUIRED): Pedelec's own agent for Ollama. */
export const NEEDS_MODEL: readonly ProviderCode[] = ["ollama"];

/**
 * The effort choices a level's row offers: "" (what an empty value means), the
 * CLI's values — list_providers' `effortValues` (codex's `model_reasoning_effort`,
 * Claude Code's `--effort`, opencode's `--variant`; none for a CLI without an
 * effort setting) — and a stored value outside them, kept and shown.
 */
export function effortOptions(values: readonly string[], level: EffortLevel, stored: string): Array<{ value: string; label: string }> {
  // What an empty effort means (ProviderService): none at the default level, the level's own name at the others;
  // a CLI without an effort setting gets none either way.
  const empty = values.length === 0 ? "— (no effort setting)" : level === "default" ? "(the CLI's own)" : `(${level})`;
  const options = [{ value: "", label: empty }, ...values.map((v) => ({ value: v, label: v }))];
  if (stored !== "" && !options.some((o) => o.value === stored)) options.push({ value: stored, label: `${stored} (set elsewhere)` });
  return options;
}

/** Model names to suggest for a provider: those `listed` (list_providers' `models`), then those its profiles already use, each once. */
export function modelSuggestions(form: ProfileForm | undefined, listed: readonly string[] = []): string[] {
  const used = form ? EFFORT_LEVELS.map((level) => form[level].model.trim()).filter(Boolean) : [];
  return [...new Set([...listed, ...used])];
}

/**
 * What a provider card says about its model suggestions: the CLI's listing
 * (list_providers' `models`, which ProviderService lists in the background),
 * still running, or none. "" for a CLI that cannot list or is unavailable.
 */
export function modelsNote(info: ProviderInfo): string {
  if (!info.available) return "";
  const models = info.models ?? [];
  if (info.modelsPending) return `Asking ${info.name} which models it has…`;
  if (models.length > 0) return `${models.length === 1 ? "1 model" : `${models.length} models`} listed by ${info.name}, offered as you type.`;
  if (info.code === "ollama") return "The Ollama server listed no models (none pulled yet, or not reachable over http://): “ollama pull llama3.2” adds one; type a model's name.";
  return "";
}

export type FormProblem = { provider: ProviderCode; level: EffortLevel; message: string };

/** What the services would refuse or could never run, said before anything is sent. */
export function formProblems(form: SettingsForm, names: Partial<Record<ProviderCode, string>> = {}): FormProblem[] {
  const problems: FormProblem[] = [];
  for (const code of NEEDS_MODEL) {
    const profile = form.profiles[code];
    const name = names[code] ?? code;
    if (form.defaultProvider === code && !profile?.default.model.trim()) {
      problems.push({ provider: code, level: "default", message: `${name} needs a model for its default level before it can be the default agent.` });
    }
    for (const level of EFFORT_LEVELS) {
      const row = profile?.[level];
      if (row && row.effort.trim() !== "" && row.model.trim() === "") problems.push({ provider: code, level, message: `${name}'s ${level} level needs a model.` });
    }
  }
  return problems;
}

/** What a save changed, in words: "the default agent is now Ollama; Ollama's effort levels; …". */
export function describeUpdate(update: UpdateSettingsPayload, names: Partial<Record<ProviderCode, string>> = {}): string {
  const name = (code: string) => names[code as ProviderCode] ?? code;
  const parts: string[] = [];
  if (update.defaultProvider !== undefined) parts.push(update.defaultProvider === null ? "no default agent" : `the default agent is now ${name(update.defaultProvider)}`);
  const profiles = Object.keys(update.profiles ?? {}).map((c) => `${name(c)}'s`);
  if (profiles.length) parts.push(`${listed(profiles)} effort levels`);
  if (update.ollamaEndpoint !== undefined) parts.push(update.ollamaEndpoint === "" ? "Ollama's address (back to the default)" : `Ollama's address (${update.ollamaEndpoint})`);
  const key = (change: KeyChange | undefined, what: string) => {
    if (change?.action === "replace") parts.push(`the new ${what}`);
    if (change?.action === "clear") parts.push(`${what} removed`);
  };
  key(update.ollamaApiKey, "Ollama key");
  key(update.tavilyApiKey, "web search key");
  if (update.shellToolsOnly !== undefined) parts.push("which agents call the page's tools through commands only");
  return parts.length ? `Saved: ${parts.join("; ")}.` : "Nothing to save.";
}

function listed(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

/** One provider's profiles as the form holds them: every level, empty strings where unset. */
export type ProfileForm = Record<EffortLevel, { model: string; effort: string }>;

export type KeyName = "ollamaApiKey" | "tavilyApiKey";

export type SettingsForm = {
  defaultProvider: ProviderCode | null;
  /** Every provider the page shows, by code. */
  profiles: Partial<Record<ProviderCode, ProfileForm>>;
  ollamaEndpoint: string;
  ollamaApiKey: KeyChange;
  tavilyApiKey: KeyChange;
  shellToolsOnly: ProviderCode[];
};

function emptyProfile(): ProfileForm {
  const form = {} as ProfileForm;
  for (const level of EFFORT_LEVELS) form[level] = { model: "", effort: "" };
  return form;
}

function isEffortLevel(level: string): level is EffortLevel {
  return (EFFORT_LEVELS as readonly string[]).includes(level);
}

/** The form for `settings`, with a row for each of `providers` (and any provider the settings name). */
export function formFromSettings(settings: FullSettingsResult, providers: readonly ProviderCode[]): SettingsForm {
  const profiles: SettingsForm["profiles"] = {};
  const codes = new Set<string>([...providers, ...Object.keys(settings.profiles)]);
  for (const code of codes) {
    const form = emptyProfile();
    for (const [level, profile] of Object.entries(settings.profiles[code]?.levels ?? {})) {
      if (isEffortLevel(level)) form[level] = { model: profile.model, effort: profile.effort };
    }
    profiles[code as ProviderCode] = form;
  }
  return {
    defaultProvider: settings.defaultProvider,
    profiles,
    ollamaEndpoint: settings.ollamaEndpoint,
    ollamaApiKey: { action: "keep" },
    tavilyApiKey: { action: "keep" },
    shellToolsOnly: [...settings.shellToolsOnly],
  };
}

/** The stored form of one provider's profiles: the levels with a model or an effort. */
export function profilesOf(form: ProfileForm): ProviderProfiles {
  const levels: ProviderProfiles["levels"] = {};
  for (const level of EFFORT_LEVELS) {
    const model = form[level].model.trim();
    const effort = form[level].effort.trim();
    if (model !== "" || effort !== "") levels[level] = { model, effort };
  }
  return { levels };
}

function sameProfiles(a: ProviderProfiles, b: ProviderProfiles): boolean {
  const names = new Set([...Object.keys(a.levels), ...Object.keys(b.levels)]);
  for (const name of names) {
    const x = a.levels[name];
    const y = b.levels[name];
    if (x?.model !== y?.model || x?.effort !== y?.effort) return false;
  }
  return true;
}

/** A key change worth sending: a replace with nothing typed changes nothing. */
function keyChange(change: KeyChange): KeyChange | undefined {
  if (change.action === "clear") return change;
  if (change.action === "replace" && change.value.trim() !== "") return { action: "replace", value: change.value.trim() };
  return undefined;
}

/** What to send for `form`: only the fields that differ from `saved` (an empty object: nothing to save). */
export function updateFromForm(saved: FullSettingsResult, form: SettingsForm): UpdateSettingsPayload {
  const update: UpdateSettingsPayload = {};
  if (form.defaultProvider !== saved.defaultProvider) update.defaultProvider = form.defaultProvider;
  const profiles: NonNullable<UpdateSettingsPayload["profiles"]> = {};
  for (const [code, profileForm] of Object.entries(form.profiles)) {
    const next = profilesOf(profileForm);
    if (!sameProfiles(next, saved.profiles[code] ?? { levels: {} })) profiles[code] = next;
  }
  if (Object.keys(profiles).length > 0) update.profiles = profiles;
  const endpoint = form.ollamaEndpoint.trim();
  if (endpoint !== saved.ollamaEndpoint) update.ollamaEndpoint = endpoint;
  for (const name of ["ollamaApiKey", "tavilyApiKey"] as const) {
    const change = keyChange(form[name]);
    if (change) update[name] = change;
  }
  const shell = [...new Set(form.shellToolsOnly)].sort();
  if (shell.join() !== [...saved.shellToolsOnly].sort().join()) update.shellToolsOnly = shell;
  return update;
}

/** How a stored key is shown: its mask, never the key. */
export function keyLabel(key: MaskedKey): string {
  return key.set ? key.masked : "not set";
}

/** The availability line of a provider row: list_providers' `error` when it is unavailable. */
export function availabilityText(provider: ProviderInfo): string {
  return provider.available ? "available" : `unavailable: ${provider.error ?? "no reason given"}`;
}

/** A refusal from the services, in the status line: the message first, its code after. */
export function refusalText(what: string, error: { code: string; message: string }): string {
  return `${what}: ${error.message} (${error.code})`;
}
