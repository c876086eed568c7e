// The options page's logic without the DOM (tested in test/options-model.test.ts):
// the form made from the stored settings, and the update_settings payload made
// from the form — only what the user changed, so the host's update mask names
// only those fields and a change made elsewhere meanwhile (pedelec-cli, another
// options tab) is kept. Keys never reach the page: they are shown masked and
// change only by an explicit replace or clear.
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

/** The order the page shows the levels in; a Record, so the compiler notices a level missing here. */
const LEVEL_ORDER = { default: 0, low: 1, medium: 2, high: 3 } satisfies Record<EffortLevel, number>;
export const EFFORT_LEVELS = (Object.keys(LEVEL_ORDER) as EffortLevel[]).sort((a, b) => LEVEL_ORDER[a] - LEVEL_ORDER[b]);

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
  return Object.hasOwn(LEVEL_ORDER, level);
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
