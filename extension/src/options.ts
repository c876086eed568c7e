// The options page (the extension's settings page): every setting, edited in
// place and saved through the worker, which asks the native host with the
// extension's own origin (get_full_settings / update_settings), and the Sites
// section (the grants). Keys are shown masked; the page can replace or clear
// them but never reads them. The logic without the DOM is options-model.ts;
// the look is static/pedelec.css, the popup's.
import {
  OPTIONS_PORT_NAME,
  type BridgeError,
  type OptionsCalls,
  type OptionsMethod,
  type OptionsToWorker,
  type WorkerToOptions,
} from "../../sdk/src/protocol/bridge.js";
import type { EffortLevel, FullSettingsResult, KeyChange, MaskedKey, ProviderCode, ProviderInfo } from "../../sdk/src/protocol/native.js";
import type { PageRuntime, Port } from "./chrome-api.js";
import { webext } from "./webext.js";
import { ACCESS_LEVELS, ACCESS_TEXT, embedderOrigin, inputOf, isLoopback, showFolder, withEmbedder, withoutEmbedder, type Access, type Site } from "./sites.js";
import {
  EFFORT_LEVELS,
  NEEDS_MODEL,
  availabilityText,
  describeUpdate,
  effortOptions,
  formFromSettings,
  formProblems,
  keyLabel,
  modelSuggestions,
  modelsNote,
  refusalText,
  updateFromForm,
  type KeyName,
  type SettingsForm,
} from "./options-model.js";

const chrome = webext<{ runtime: PageRuntime }>()!;

class OptionsError extends Error {
  constructor(readonly error: BridgeError) {
    super(error.message);
  }
}

let port: Port | null = null;
let nextRequestId = 1;
const pending = new Map<number, { resolve: (r: unknown) => void; reject: (e: OptionsError) => void }>();

/** The worker's port, reopened when the worker was stopped (MV3 workers sleep). */
function workerPort(): Port {
  if (port) return port;
  const p = chrome.runtime.connect({ name: OPTIONS_PORT_NAME });
  p.onMessage.addListener((m) => {
    const msg = m as WorkerToOptions;
    const waiter = pending.get(msg?.requestId);
    if (msg?.kind !== "response" || !waiter) return;
    pending.delete(msg.requestId);
    if (msg.ok) waiter.resolve(msg.result);
    else waiter.reject(new OptionsError(msg.error));
  });
  p.onDisconnect.addListener(() => {
    if (port === p) port = null;
    for (const w of pending.values()) w.reject(new OptionsError({ code: "EXTENSION_DISCONNECTED", message: "the extension's worker went away", details: null }));
    pending.clear();
  });
  port = p;
  return p;
}

function ask<M extends OptionsMethod>(method: M, params: OptionsCalls[M]["params"]): Promise<OptionsCalls[M]["result"]> {
  const requestId = nextRequestId++;
  return new Promise((resolve, reject) => {
    pending.set(requestId, { resolve: resolve as (r: unknown) => void, reject });
    workerPort().postMessage({ kind: "request", requestId, method, params } as OptionsToWorker);
  });
}

// ---- state ----

let saved: FullSettingsResult | null = null;
let providers: ProviderInfo[] = [];
/** Key edits in progress (the rest of the form is read from the inputs). */
const keyEdits: Record<KeyName, KeyChange> = { ollamaApiKey: { action: "keep" }, tavilyApiKey: { action: "keep" } };
/** The pending re-ask of list_providers while a CLI's first model listing runs. */
let listingTimer: ReturnType<typeof setTimeout> | null = null;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, attrs: Record<string, string> = {}): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function input(attrs: Record<string, string>, value: string): HTMLInputElement {
  const node = el("input", undefined, attrs);
  node.value = value;
  return node;
}

function panel(id: string, title: string, hint?: string): HTMLElement {
  const section = el("section", undefined, { id, class: "panel" });
  section.append(el("h2", title));
  if (hint) section.append(el("p", hint, { class: "hint small" }));
  return section;
}

function setStatus(state: "loading" | "saving" | "saved" | "unchanged" | "error", text: string, code = ""): void {
  const status = document.getElementById("status")!;
  status.textContent = text;
  status.dataset.state = state;
  status.dataset.code = code;
}

function providerCodes(): ProviderCode[] {
  return providers.map((p) => p.code);
}

function providerNames(): Partial<Record<ProviderCode, string>> {
  return Object.fromEntries(providers.map((p) => [p.code, p.name]));
}

// ---- rendering ----

function renderProviders(form: SettingsForm): HTMLElement {
  const section = panel(
    "providers",
    "Agents",
    "Each agent runs at one of four effort levels; a page chooses the level (or gets “default”). For each level, the model and the CLI's own effort setting; empty fields leave the choice to the CLI.",
  );
  const none = el("label", undefined, { class: "default-none" });
  const noneRadio = input({ type: "radio", name: "default-provider", value: "" }, "");
  noneRadio.checked = form.defaultProvider === null;
  none.append(noneRadio, " No default agent (a page must name one)");
  section.append(none);
  const known = new Set(providerCodes());
  const rows: Array<{ code: ProviderCode; name: string; info: ProviderInfo | null }> = providers.map((p) => ({ code: p.code, name: p.name, info: p }));
  // A provider the settings name but the service did not list (should not happen; shown, not dropped).
  for (const code of Object.keys(form.profiles) as ProviderCode[]) if (!known.has(code)) rows.push({ code, name: code, info: null });
  const cards = el("div", undefined, { class: "cards" });
  for (const { code, name, info } of rows) cards.append(renderProvider(form, code, name, info));
  section.append(cards);
  return section;
}

function renderProvider(form: SettingsForm, code: ProviderCode, name: string, info: ProviderInfo | null): HTMLElement {
  const card = el("div", undefined, { class: "card provider", "data-provider": code });
  const head = el("div", undefined, { class: "card-head" });
  const title = el("div", undefined, { class: "card-title" });
  title.append(el("h3", name), el("span", code, { class: "mono muted" }));
  const available = info?.available ?? false;
  const availability = el("span", info ? availabilityText(info) : "unavailable: not listed by the provider service", {
    class: `availability ${available ? "ok" : "unavailable"}`,
    "data-available": String(available),
  });
  const def = el("label", undefined, { class: "default" });
  const radio = input({ type: "radio", name: "default-provider", value: code }, code);
  radio.checked = form.defaultProvider === code;
  def.append(radio, " Default");
  head.append(title, def);
  card.append(head, availability);

  const needsModel = NEEDS_MODEL.includes(code);
  const effortValues = info?.effortValues ?? [];
  const hasEffort = effortValues.length > 0;
  const profile = form.profiles[code];
  const suggestions = el("datalist", undefined, { id: `models-${code}` });
  for (const model of modelSuggestions(profile, info?.models)) suggestions.append(el("option", undefined, { value: model }));
  card.append(suggestions);
  card.append(el("p", info ? modelsNote(info) : "", { class: "hint small models-note" }));

  const table = el("table", undefined, { class: "levels" });
  const header = el("tr");
  header.append(el("th", "Level"), el("th", needsModel ? "Model (required)" : "Model"), el("th", "Effort"));
  table.append(header);
  for (const level of EFFORT_LEVELS) {
    const row = el("tr", undefined, { "data-level": level });
    const values = profile?.[level] ?? { model: "", effort: "" };
    const model = input(
      { type: "text", "data-field": "model", list: suggestions.id, spellcheck: "false", autocomplete: "off", placeholder: needsModel ? "required, e.g. llama3.2" : "the CLI's default model" },
      values.model,
    );
    model.setAttribute("aria-label", `${name}, ${level} level: model`);
    const effort = el("select", undefined, { "data-field": "effort" });
    effort.setAttribute("aria-label", `${name}, ${level} level: effort`);
    for (const option of effortOptions(effortValues, level, values.effort)) {
      const o = el("option", option.label, { value: option.value });
      o.selected = option.value === values.effort;
      effort.append(o);
    }
    if (!hasEffort && values.effort === "") {
      effort.disabled = true;
      effort.title = `${name} has no effort setting`;
    }
    const cells = [el("td", level, { class: "level" }), el("td"), el("td")];
    cells[1]!.append(model);
    cells[2]!.append(effort);
    row.append(...cells);
    table.append(row);
  }
  card.append(table);
  if (needsModel) card.append(el("p", "A level without a model cannot be used: a page asking for it gets MODEL_REQUIRED.", { class: "hint small" }));
  const shell = el("label", undefined, { class: "shell-tools-only small" });
  const box = input({ type: "checkbox", "data-field": "shell-tools-only" }, "");
  box.checked = form.shellToolsOnly.includes(code);
  shell.append(box, " Call the page's tools through pedelec-cli commands only (no MCP)");
  card.append(shell);
  return card;
}

function renderKey(name: KeyName, title: string, stored: MaskedKey): HTMLElement {
  const box = el("div", undefined, { class: "key", id: name === "ollamaApiKey" ? "ollama-key" : "tavily-key" });
  const edit = keyEdits[name];
  box.append(el("span", title, { class: "key-title" }));
  const shown = edit.action === "clear" ? "will be cleared" : keyLabel(stored);
  box.append(el("span", shown, { class: "masked", "data-set": String(stored.set) }));
  if (edit.action === "replace") {
    const value = input({ type: "password", class: "new-key", autocomplete: "off", placeholder: "new key" }, edit.value);
    value.oninput = () => (keyEdits[name] = { action: "replace", value: value.value });
    box.append(value);
  }
  const button = (label: string, action: KeyChange["action"]) => {
    const b = el("button", label, { type: "button", "data-action": action });
    b.onclick = () => {
      keyEdits[name] = action === "replace" ? { action, value: "" } : { action };
      rerender();
      if (action === "replace") (document.querySelector(`#${box.id} .new-key`) as HTMLInputElement | null)?.focus();
    };
    return b;
  };
  if (edit.action !== "replace") box.append(button(stored.set ? "Replace" : "Set", "replace"));
  if (stored.set && edit.action !== "clear") box.append(button("Clear", "clear"));
  if (edit.action !== "keep") box.append(button("Keep stored", "keep"));
  return box;
}

function renderOllama(form: SettingsForm, stored: FullSettingsResult): HTMLElement {
  const section = panel("ollama", "Ollama", "Pedelec's own agent runs Ollama models. Its models are chosen in the Ollama card above.");
  const row = el("div", undefined, { class: "key" });
  row.append(el("label", "Address", { for: "ollama-endpoint", class: "key-title" }));
  const endpoint = input({ type: "text", id: "ollama-endpoint", spellcheck: "false", autocomplete: "off", placeholder: "http://127.0.0.1:11434 (the default)" }, form.ollamaEndpoint);
  row.append(endpoint);
  section.append(row);
  section.append(el("p", "Saved, the address is asked for its models (http:// only); they are offered in the Ollama card.", { class: "hint small" }));
  section.append(renderKey("ollamaApiKey", "API key (for a hosted Ollama)", stored.ollamaApiKey));
  return section;
}

function renderTavily(stored: FullSettingsResult): HTMLElement {
  const section = panel("tavily", "Web search", "With a Tavily key, Pedelec's agent can search the web for Ollama models; without one it cannot.");
  section.append(renderKey("tavilyApiKey", "Tavily API key", stored.tavilyApiKey));
  return section;
}

/** The form as the inputs show it now. */
function readForm(): SettingsForm {
  const checked = document.querySelector<HTMLInputElement>('input[name="default-provider"]:checked');
  const profiles: SettingsForm["profiles"] = {};
  const shellToolsOnly: ProviderCode[] = [];
  for (const card of document.querySelectorAll<HTMLElement>(".provider")) {
    const code = card.dataset.provider as ProviderCode;
    const form = {} as NonNullable<SettingsForm["profiles"][ProviderCode]>;
    for (const level of EFFORT_LEVELS) {
      const row = card.querySelector(`tr[data-level="${level}"]`)!;
      form[level] = {
        model: row.querySelector<HTMLInputElement>('[data-field="model"]')!.value,
        effort: row.querySelector<HTMLSelectElement>('[data-field="effort"]')!.value,
      };
    }
    profiles[code] = form;
    if (card.querySelector<HTMLInputElement>('[data-field="shell-tools-only"]')!.checked) shellToolsOnly.push(code);
  }
  return {
    defaultProvider: checked && checked.value !== "" ? (checked.value as ProviderCode) : null,
    profiles,
    ollamaEndpoint: document.querySelector<HTMLInputElement>("#ollama-endpoint")!.value,
    ollamaApiKey: keyEdits.ollamaApiKey,
    tavilyApiKey: keyEdits.tavilyApiKey,
    shellToolsOnly,
  };
}

function render(form: SettingsForm): void {
  const root = document.getElementById("root")!;
  if (!saved) return;
  root.replaceChildren(renderProviders(form), renderOllama(form, saved), renderTavily(saved));
}

/** Re-renders keeping what was typed (a key button changes the key's block). */
function rerender(): void {
  render(readForm());
}

/** Shows the providers' listings without re-rendering the form (the user may be typing). */
function showListings(): void {
  const typed = readForm();
  for (const info of providers) {
    const card = document.querySelector<HTMLElement>(`.provider[data-provider="${info.code}"]`);
    const list = document.getElementById(`models-${info.code}`);
    if (!card || !list) continue;
    list.replaceChildren(...modelSuggestions(typed.profiles[info.code], info.models).map((model) => el("option", undefined, { value: model })));
    const note = card.querySelector(".models-note");
    if (note) note.textContent = modelsNote(info);
  }
}

/**
 * While a CLI's first model listing runs (`modelsPending`: list_providers never
 * waits for one), asks list_providers again every second, for at most `tries`.
 */
function followListings(tries = 30): void {
  if (listingTimer !== null) clearTimeout(listingTimer);
  listingTimer = null;
  if (tries <= 0 || !providers.some((p) => p.modelsPending)) return;
  listingTimer = setTimeout(() => {
    listingTimer = null;
    ask("list_providers", {})
      .then((list) => {
        providers = list.providers;
        showListings();
        followListings(tries - 1);
      })
      .catch(() => undefined);
  }, 1000);
}

// ---- loading and saving ----

function showError(e: unknown, what: string): void {
  const error = e instanceof OptionsError ? e.error : { code: "INTERNAL", message: String(e), details: null };
  setStatus("error", refusalText(what, error), error.code);
}

async function load(): Promise<void> {
  setStatus("loading", "Loading…");
  try {
    const [settings, list] = await Promise.all([ask("get_full_settings", {}), ask("list_providers", {})]);
    saved = settings;
    providers = list.providers;
    render(formFromSettings(settings, providerCodes()));
    setStatus("unchanged", "");
    followListings();
  } catch (e) {
    showError(e, "Could not load the settings");
  }
}

/** Marks the fields of `problems` (and only those) as invalid. */
function markProblems(problems: ReturnType<typeof formProblems>): void {
  for (const field of document.querySelectorAll('[aria-invalid="true"]')) field.removeAttribute("aria-invalid");
  for (const p of problems) {
    document.querySelector(`.provider[data-provider="${p.provider}"] tr[data-level="${p.level as EffortLevel}"] [data-field="model"]`)?.setAttribute("aria-invalid", "true");
  }
}

async function onSave(): Promise<void> {
  if (!saved) return;
  const form = readForm();
  const problems = formProblems(form, providerNames());
  markProblems(problems);
  if (problems.length > 0) {
    setStatus("error", `Not saved: ${problems.map((p) => p.message).join(" ")}`, "MODEL_REQUIRED");
    return;
  }
  const update = updateFromForm(saved, form);
  if (Object.keys(update).length === 0) {
    setStatus("unchanged", "Nothing to save: nothing was changed.");
    return;
  }
  setStatus("saving", "Saving…");
  try {
    saved = await ask("update_settings", update);
    keyEdits.ollamaApiKey = { action: "keep" };
    keyEdits.tavilyApiKey = { action: "keep" };
    // Availability can follow a change (e.g. the Ollama endpoint); ask again.
    providers = (await ask("list_providers", {})).providers;
    render(formFromSettings(saved, providerCodes()));
    setStatus("saved", describeUpdate(update, providerNames()));
    // A save lists the models again (e.g. a new Ollama address).
    followListings();
  } catch (e) {
    // The form keeps what was typed, so the user can fix it.
    showError(e, "Not saved");
  }
}

document.getElementById("save")!.onclick = () => void onSave();
document.getElementById("revert")!.onclick = () => {
  if (!saved) return;
  keyEdits.ollamaApiKey = { action: "keep" };
  keyEdits.tavilyApiKey = { action: "keep" };
  render(formFromSettings(saved, providerCodes()));
  setStatus("unchanged", "Changes discarded: the page shows the saved settings.");
};

// ---- sites (the services' grants: change the level, agents or any model, remove a folder, allow or remove an embedding site, revoke) ----

function when(ms: number | null): string {
  return ms === null ? "never" : new Date(ms).toLocaleString();
}

function setSitesStatus(text: string, code = "", state: "saved" | "error" | "" = ""): void {
  const status = document.getElementById("sites-status")!;
  status.textContent = text;
  status.dataset.code = code;
  status.dataset.state = state;
}

function renderSite(site: Site): HTMLElement {
  const card = el("div", undefined, { class: "card site", "data-origin": site.origin });
  const head = el("div", undefined, { class: "card-head" });
  const title = el("div", undefined, { class: "card-title" });
  title.append(el("h3", site.origin));
  title.append(el("span", site.blocked ? "blocked" : "allowed", { class: "chip", "data-state": site.blocked ? "bad" : "ok" }));
  const revoke = el("button", site.blocked ? "Unblock" : "Revoke", { type: "button", "data-action": "revoke", class: site.blocked ? "" : "danger" });
  revoke.title = site.blocked ? "Let this site ask again" : "End its sessions and take back its permission";
  revoke.onclick = () => void changeSite(site.origin, () => ask("revoke_site", { origin: site.origin }), site.blocked ? "Unblocked" : "Revoked; its sessions ended");
  head.append(title, revoke);
  card.append(head);
  if (site.blocked) {
    card.append(el("p", "Blocked: this site cannot ask to use Pedelec.", { class: "hint small" }));
    return card;
  }
  const ends = site.expiresAt === null ? "" : ` Ends ${when(site.expiresAt)}${isLoopback(site.origin) ? " or when the browser closes, whichever comes first" : ""}.`;
  card.append(el("p", `Allowed on ${when(site.grantedAt)}; last used ${site.lastUsedAt === null ? "never" : when(site.lastUsedAt)}.${ends}`, { class: "hint small" }));

  const grid = el("div", undefined, { class: "site-fields" });
  const select = el("select", undefined, { "data-field": "access" });
  for (const a of ACCESS_LEVELS) {
    const option = el("option", a === "full" ? "Full access — run any command as you" : ACCESS_TEXT[a].title, { value: a });
    option.selected = site.access === a;
    select.append(option);
  }
  const level = el("label", undefined, { class: "field" });
  level.append(el("span", "What the agent may do"), select);
  grid.append(level);

  const agents = el("div", undefined, { class: "field agents" });
  agents.append(el("span", "Agents it may use"));
  const choices = el("div", undefined, { class: "choices" });
  const codes = new Set([...providers.map((p) => p.code as string), ...site.providers]);
  for (const code of codes) {
    const label = el("label", undefined, { class: "choice" });
    const box = input({ type: "checkbox", "data-field": "provider", value: code }, code);
    box.checked = site.providers.includes(code);
    label.append(box, ` ${providers.find((p) => p.code === code)?.name ?? code}`);
    choices.append(label);
  }
  agents.append(choices);
  grid.append(agents);
  card.append(grid);

  const anyModel = el("label", undefined, { class: "check small" });
  const anyBox = input({ type: "checkbox", "data-field": "any-model" }, "any-model");
  anyBox.checked = site.anyModel;
  anyModel.append(anyBox, " May choose any model (otherwise only the models in your profiles)");
  card.append(anyModel);

  const save = el("button", "Save changes", { type: "button", "data-action": "save-site", class: "primary" });
  save.onclick = () => {
    const access = select.value as Access;
    if (access === "full" && site.access !== "full" && !window.confirm(`Give ${site.origin} full access? The agent can run any command as you.`)) return;
    const chosen = [...agents.querySelectorAll<HTMLInputElement>("input[data-field=provider]:checked")].map((b) => b.value);
    void changeSite(site.origin, () => ask("grant_site", { site: { ...inputOf(site), access, providers: chosen, anyModel: anyBox.checked } }), "Saved");
  };
  card.append(el("div", undefined, { class: "actions" }));
  card.lastElementChild!.append(save);

  const folders = el("div", undefined, { class: "list" });
  folders.append(el("span", site.folders.length === 0 ? "Folders: none besides its own workspaces" : "Folders it may work in", { class: "list-title" }));
  const list = el("ul");
  for (const f of site.folders) {
    const li = el("li", undefined, { "data-folder": f.path });
    const remove = el("button", "Remove", { type: "button", "data-action": "remove-folder", class: "link" });
    remove.onclick = () => void changeSite(site.origin, () => ask("grant_site", { site: { ...inputOf(site), folders: site.folders.filter((x) => x.path !== f.path) } }), "Folder removed");
    li.append(el("span", `${showFolder(f.path)}${f.once ? " (once: for the next session only)" : ""}`, { class: "mono" }), " ", remove);
    list.append(li);
  }
  folders.append(list);
  card.append(folders, renderEmbedders(site));
  return card;
}

/** The sites this one may ask from inside (in a frame of their pages): listed with Remove, and one more can be added. */
function renderEmbedders(site: Site): HTMLElement {
  const box = el("div", undefined, { class: "list embedders" });
  box.append(el("span", site.embedders.length === 0 ? "Allowed inside these sites: none (it may ask only as the page you opened)" : "Allowed inside these sites", { class: "list-title" }));
  const list = el("ul");
  for (const e of site.embedders) {
    const li = el("li", undefined, { "data-embedder": e });
    const remove = el("button", "Remove", { type: "button", "data-action": "remove-embedder", class: "link" });
    remove.onclick = () => void changeSite(site.origin, () => ask("grant_site", { site: withoutEmbedder(site, e) }), `No longer allowed inside ${e}`);
    li.append(el("span", e, { class: "mono" }), " ", remove);
    list.append(li);
  }
  box.append(list);
  const add = el("div", undefined, { class: "add-embedder" });
  const field = input({ type: "text", "data-field": "embedder", placeholder: "https://example.com", spellcheck: "false" }, "");
  field.setAttribute("aria-label", `A site ${site.origin} may be used inside`);
  const allow = el("button", "Allow inside this site", { type: "button", "data-action": "add-embedder" });
  allow.onclick = () => {
    const typed = embedderOrigin(field.value);
    if ("error" in typed) {
      field.setAttribute("aria-invalid", "true");
      setSitesStatus(`Not changed: ${typed.error}`, "INVALID_INPUT", "error");
      return;
    }
    void changeSite(site.origin, () => ask("grant_site", { site: withEmbedder(site, typed.origin) }), `Allowed inside ${typed.origin}`);
  };
  add.append(field, allow);
  box.append(add);
  return box;
}

async function changeSite(origin: string, change: () => Promise<unknown>, done: string): Promise<void> {
  setSitesStatus("Saving…");
  try {
    await change();
    await loadSites();
    setSitesStatus(`${done}: ${origin}`, "", "saved");
  } catch (e) {
    const error = e instanceof OptionsError ? e.error : { code: "INTERNAL", message: String(e) };
    setSitesStatus(refusalText("Not changed", error), error.code, "error");
  }
}

async function loadSites(): Promise<void> {
  const root = document.getElementById("sites-root")!;
  try {
    const { sites } = await ask("list_sites", {});
    root.replaceChildren(...(sites.length === 0 ? [el("p", "No site has asked yet.", { class: "hint" })] : [el("div", undefined, { class: "cards" })]));
    const cards = root.querySelector(".cards");
    for (const site of sites) cards?.append(renderSite(site));
  } catch (e) {
    const error = e instanceof OptionsError ? e.error : { code: "INTERNAL", message: String(e) };
    setSitesStatus(refusalText("Could not load the sites", error), error.code, "error");
  }
}

void load().then(loadSites);
