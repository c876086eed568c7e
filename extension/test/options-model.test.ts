import { describe, expect, it } from "vitest";
import type { FullSettingsResult } from "../../sdk/src/protocol/native.js";
// @ts-expect-error plain ESM script without types
import { validate } from "../../sdk/scripts/schema-check.mjs";
import { readFileSync } from "node:fs";
import { EFFORT_LEVELS, availabilityText, formFromSettings, keyLabel, profilesOf, updateFromForm } from "../src/options-model.js";

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
    expect(availabilityText({ name: "Codex", code: "codex", available: true, isDefault: true, error: null })).toBe("available");
    expect(availabilityText({ name: "Cursor", code: "cursor", available: false, isDefault: false, error: "cursor-agent not found on PATH" })).toBe(
      "unavailable: cursor-agent not found on PATH",
    );
  });
});
