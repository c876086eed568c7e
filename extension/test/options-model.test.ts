import { describe, expect, it } from "vitest";
import type { FullSettingsResult } from "../../sdk/src/protocol/native.js";
// @ts-expect-error plain ESM script without types
import { validate } from "../../sdk/scripts/schema-check.mjs";
import { readFileSync } from "node:fs";
import type { ProviderInfo } from "../../sdk/src/protocol/native.js";
import {
  EFFORT_LEVELS,
  availabilityText,
  describeUpdate,
  effortOptions,
  formFromSettings,
  formProblems,
  keyLabel,
  modelSuggestions,
  modelsNote,
  profilesOf,
  refusalText,
  updateFromForm,
} from "../src/options-model.js";

const schema = JSON.parse(readFileSync(new URL("../../protocol/native-messaging.schema.json", import.meta.url), "utf8"));
const PROVIDERS = ["codex", "claude", "ollama"] as const;

function stored(over: Partial<FullSettingsResult> = {}): FullSettingsResult {
  return {
    defaultProvider: "codex",
    profiles: {
      codex: { levels: { default: { model: "gpt-5", effort: "" }, high: { model: "gpt-5", effort: "high" } } },
      ollama: { levels: { default: { model: "qwen3:8b", effort: "" } } },
    },
    ollamaEndpoint: "",
    ollamaApiKey: { set: true, masked: "••••1234" },
    tavilyApiKey: { set: false, masked: "" },
    shellToolsOnly: [],
    ...over,
  };
}

/** Every payload the page would send is a valid update_settings payload. */
function valid(update: unknown): unknown {
  expect(validate(schema, update, "UpdateSettingsPayload")).toEqual([]);
  return update;
}

describe("options page logic", () => {
  it("shows every level of every provider, unset ones empty", () => {
    expect(EFFORT_LEVELS).toEqual(["default", "low", "medium", "high"]);
    const form = formFromSettings(stored(), PROVIDERS);
    expect(Object.keys(form.profiles).sort()).toEqual(["claude", "codex", "ollama"]);
    expect(form.profiles.codex!.high).toEqual({ model: "gpt-5", effort: "high" });
    expect(form.profiles.codex!.low).toEqual({ model: "", effort: "" });
    expect(form.profiles.claude!.default).toEqual({ model: "", effort: "" });
    expect(form.ollamaApiKey).toEqual({ action: "keep" });
  });

  it("an untouched form saves nothing", () => {
    const s = stored();
    expect(updateFromForm(s, formFromSettings(s, PROVIDERS))).toEqual({});
  });

  it("sends only what changed: default provider, one provider's profiles, endpoint", () => {
    const s = stored();
    const form = formFromSettings(s, PROVIDERS);
    form.defaultProvider = "ollama";
    form.profiles.ollama!.high = { model: " qwen3:32b ", effort: "" };
    form.ollamaEndpoint = " http://127.0.0.1:11500 ";
    const update = valid(updateFromForm(s, form));
    // codex's profiles are not sent, so a concurrent change of them is kept.
    expect(update).toEqual({
      defaultProvider: "ollama",
      profiles: { ollama: { levels: { default: { model: "qwen3:8b", effort: "" }, high: { model: "qwen3:32b", effort: "" } } } },
      ollamaEndpoint: "http://127.0.0.1:11500",
    });
  });

  it("clears the default provider with null, and a provider's profiles with no levels", () => {
    const s = stored();
    const form = formFromSettings(s, PROVIDERS);
    form.defaultProvider = null;
    for (const level of EFFORT_LEVELS) form.profiles.codex![level] = { model: "  ", effort: "" };
    expect(valid(updateFromForm(s, form))).toEqual({ defaultProvider: null, profiles: { codex: { levels: {} } } });
    expect(profilesOf(form.profiles.codex!)).toEqual({ levels: {} });
  });

  it("keys change only by replace or clear; an empty replace changes nothing", () => {
    const s = stored();
    const form = formFromSettings(s, PROVIDERS);
    form.ollamaApiKey = { action: "replace", value: "" };
    expect(updateFromForm(s, form)).toEqual({});
    form.ollamaApiKey = { action: "replace", value: " new-ollama-key-9999\n" };
    form.tavilyApiKey = { action: "clear" };
    expect(valid(updateFromForm(s, form))).toEqual({
      ollamaApiKey: { action: "replace", value: "new-ollama-key-9999" },
      tavilyApiKey: { action: "clear" },
    });
    form.ollamaApiKey = { action: "keep" };
    form.tavilyApiKey = { action: "keep" };
    expect(updateFromForm(s, form)).toEqual({});
  });

  it("the shell-tools-only list is sent when its membership changes, in any order", () => {
    const s = stored({ shellToolsOnly: ["claude", "codex"] });
    const form = formFromSettings(s, PROVIDERS);
    form.shellToolsOnly = ["codex", "claude"];
    expect(updateFromForm(s, form)).toEqual({});
    form.shellToolsOnly = ["codex"];
    expect(valid(updateFromForm(s, form))).toEqual({ shellToolsOnly: ["codex"] });
  });

  it("shows keys only masked, and why a provider is unavailable", () => {
    expect(keyLabel({ set: true, masked: "••••1234" })).toBe("••••1234");
    expect(keyLabel({ set: false, masked: "" })).toBe("not set");
    expect(availabilityText(info({ name: "Codex", code: "codex", isDefault: true }))).toBe("available");
    expect(availabilityText(info({ name: "Cursor", code: "cursor", available: false, error: "cursor-agent not found on PATH" }))).toBe(
      "unavailable: cursor-agent not found on PATH",
    );
  });
});

describe("the settings page in plain words", () => {
  const names = { codex: "Codex", claude: "Claude Code", ollama: "Ollama" } as const;

  it("effort is a choice of the provider's values (list_providers' effortValues); what empty means; a value set elsewhere is kept", () => {
    const codex = ["minimal", "low", "medium", "high", "xhigh"];
    expect(effortOptions(codex, "high", "").map((o) => o.value)).toEqual(["", ...codex]);
    expect(effortOptions(codex, "high", "")[0]!.label).toBe("(high)");
    expect(effortOptions(["low", "max"], "default", "")[0]!.label).toBe("(the CLI's own)");
    // Ollama, Cursor and Antigravity have no effort setting: the service lists none.
    expect(effortOptions([], "high", "")).toEqual([{ value: "", label: "— (no effort setting)" }]);
    expect(effortOptions(codex, "low", "turbo").at(-1)).toEqual({ value: "turbo", label: "turbo (set elsewhere)" });
  });

  it("suggests the models the CLI lists, then those a provider's profiles use, and says where they come from", () => {
    const form = formFromSettings(stored(), PROVIDERS);
    expect(modelSuggestions(form.profiles.codex)).toEqual(["gpt-5"]);
    expect(modelSuggestions(form.profiles.codex, ["gpt-6.2-sol", "gpt-5"])).toEqual(["gpt-6.2-sol", "gpt-5"]);
    expect(modelSuggestions(form.profiles.ollama, ["llama3.2", "qwen3:8b"])).toEqual(["llama3.2", "qwen3:8b"]);
    expect(modelsNote(info({ name: "OpenCode", code: "opencode", models: ["mock/mock-model"] }))).toBe("1 model listed by OpenCode, offered as you type.");
    expect(modelsNote(info({ name: "Codex", code: "codex", models: [], modelsPending: true }))).toBe("Asking Codex which models it has…");
    expect(modelsNote(info({ name: "Claude Code", code: "claude" }))).toBe("");
    expect(modelsNote(info({ name: "Ollama", code: "ollama" }))).toContain("ollama pull llama3.2");
    expect(modelsNote(info({ name: "Cursor", code: "cursor", available: false, models: ["auto"] }))).toBe("");
  });

  it("Ollama needs a model: as the default agent, at its default level", () => {
    const s = stored({ profiles: {} });
    const form = formFromSettings(s, PROVIDERS);
    expect(formProblems(form, names)).toEqual([]);
    form.defaultProvider = "ollama";
    expect(formProblems(form, names)).toEqual([{ provider: "ollama", level: "default", message: "Ollama needs a model for its default level before it can be the default agent." }]);
    form.profiles.ollama!.default.model = "llama3.2";
    expect(formProblems(form, names)).toEqual([]);
    form.profiles.ollama!.high.effort = "high";
    expect(formProblems(form, names)).toEqual([{ provider: "ollama", level: "high", message: "Ollama's high level needs a model." }]);
  });

  it("a save says what changed in words, not field names", () => {
    expect(
      describeUpdate(
        {
          defaultProvider: "claude",
          profiles: { codex: { levels: {} }, ollama: { levels: {} } },
          ollamaEndpoint: "http://127.0.0.1:11500",
          ollamaApiKey: { action: "clear" },
          tavilyApiKey: { action: "replace", value: "x" },
          shellToolsOnly: [],
        },
        names,
      ),
    ).toBe(
      "Saved: the default agent is now Claude Code; Codex's and Ollama's effort levels; Ollama's address (http://127.0.0.1:11500); Ollama key removed; the new web search key; which agents call the page's tools through commands only.",
    );
    expect(describeUpdate({ defaultProvider: null })).toBe("Saved: no default agent.");
    expect(describeUpdate({ ollamaEndpoint: "" })).toBe("Saved: Ollama's address (back to the default).");
    expect(describeUpdate({ profiles: { codex: { levels: {} } } }, names)).not.toMatch(/profiles|defaultProvider|ollamaEndpoint/);
    expect(refusalText("Not saved", { code: "INVALID_INPUT", message: "ollama_endpoint: must be http or https" })).toBe("Not saved: ollama_endpoint: must be http or https (INVALID_INPUT)");
  });
});

/** A list_providers entry: available, no models, no effort values, unless `over` says otherwise. */
function info(over: Partial<ProviderInfo> & Pick<ProviderInfo, "name" | "code">): ProviderInfo {
  return { available: true, isDefault: false, error: null, effortValues: [], models: [], modelsPending: false, ...over };
}
