// The options page (the extension's settings page): every setting, edited in
// place and saved through the worker, which asks the native host with the
// extension's own origin (get_full_settings / update_settings). Keys are shown
// masked; the page can replace or clear them but never reads them.
import {
  OPTIONS_PORT_NAME,
  type BridgeError,
  type OptionsCalls,
  type OptionsMethod,
  type OptionsToWorker,
  type WorkerToOptions,
} from "../../sdk/src/protocol/bridge.js";
import type { FullSettingsResult, KeyChange, MaskedKey, ProviderCode, ProviderInfo } from "../../sdk/src/protocol/native.js";
import type { PageRuntime, Port } from "./chrome-api.js";
import { ACCESS_LEVELS, ACCESS_TEXT, embedderOrigin, inputOf, isLoopback, showFolder, withEmbedder, withoutEmbedder, type Access, type Site } from "./sites.js";
import { EFFORT_LEVELS, availabilityText, formFromSettings, keyLabel, updateFromForm, type KeyName, type SettingsForm } from "./options-model.js";

declare const chrome: { runtime: PageRuntime };

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

function setStatus(state: "loading" | "saving" | "saved" | "unchanged" | "error", text: string, code = ""): void {
  const status = document.getElementById("status")!;
  status.textContent = text;
  status.dataset.state = state;
  status.dataset.code = code;
}

function providerCodes(): ProviderCode[] {
  return providers.map((p) => p.code);
}

// ---- rendering ----

function renderProviders(form: SettingsForm): HTMLElement {
  const section = el("section", undefined, { id: "providers" });
  section.append(el("h2", "Providers"));
  const none = el("label", undefined, { class: "default-none" });
  const noneRadio = input({ type: "radio", name: "default-provider", value: "" }, "");
  noneRadio.checked = form.defaultProvider === null;
  none.append(noneRadio, " No default provider (a page must name one)");
  section.append(none);
  const known = new Set(providerCodes());
  const rows: Array<{ code: ProviderCode; name: string; info: ProviderInfo | null }> = providers.map((p) => ({ code: p.code, name: p.name, info: p }));
  // A provider the settings name but the service did not list (should not happen; shown, not dropped).
  for (const code of Object.keys(form.profiles) as ProviderCode[]) if (!known.has(code)) rows.push({ code, name: code, info: null });
  const cards = el("div", undefined, { class: "cards" });
  for (const { code, name, info } of rows) {
    const card = el("div", undefined, { class: "provider", "data-provider": code });
    const head = el("div", undefined, { class: "provider-head" });
    head.append(el("h3", `${name} (${code})`));
    const available = info?.available ?? false;
    head.append(el("span", info ? availabilityText(info) : "unavailable: not listed by the provider service", { class: `availability ${available ? "ok" : "unavailable"}`, "data-available": String(available) }));
    const def = el("label", undefined, { class: "default" });
    const radio = input({ type: "radio", name: "default-provider", value: code }, code);
    radio.checked = form.defaultProvider === code;
    def.append(radio, " Default");
    head.append(def);
    card.append(head);

    const table = el("table", undefined, { class: "levels" });
    const header = el("tr");
    header.append(el("th", "Effort level"), el("th", "Model"), el("th", "Effort"));
    table.append(header);
    const profile = form.profiles[code];
    for (const level of EFFORT_LEVELS) {
      const row = el("tr", undefined, { "data-level": level });
      const values = profile?.[level] ?? { model: "", effort: "" };
      // What an empty field means (ProviderService, docs/decisions.md): the CLI's own model; no
      // effort at the default level, the level's name at the others (no fallback to "default").
      const model = input({ type: "text", "data-field": "model", placeholder: "the CLI's default model" }, values.model);
      const effort = input({ type: "text", "data-field": "effort", placeholder: level === "default" ? "none" : level }, values.effort);
      const cells = [el("td", level), el("td"), el("td")];
      cells[1]!.append(model);
      cells[2]!.append(effort);
      row.append(...cells);
      table.append(row);
    }
    card.append(table);
    const shell = el("label", undefined, { class: "shell-tools-only" });
    const box = input({ type: "checkbox", "data-field": "shell-tools-only" }, "");
    box.checked = form.shellToolsOnly.includes(code);
    shell.append(box, " Page tools only through pedelec-cli shell commands (no MCP)");
    card.append(shell);
    cards.append(card);
  }
  section.append(cards);
  return section;
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
  const section = el("section", undefined, { id: "ollama" });
  section.append(el("h2", "Ollama (pedelec-agent)"));
  const label = el("label", "Endpoint ", { for: "ollama-endpoint" });
  section.append(label, input({ type: "text", id: "ollama-endpoint", placeholder: "http://127.0.0.1:11434 (default)" }, form.ollamaEndpoint));
  section.append(renderKey("ollamaApiKey", "API key (for hosted models)", stored.ollamaApiKey));
  return section;
}

function renderTavily(stored: FullSettingsResult): HTMLElement {
  const section = el("section", undefined, { id: "tavily" });
  section.append(el("h2", "Web search (Tavily)"));
  section.append(el("p", "With a key, pedelec-agent offers the model a web-search tool; without one the tool is not offered.", { class: "hint" }));
  section.append(renderKey("tavilyApiKey", "API key", stored.tavilyApiKey));
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
        effort: row.querySelector<HTMLInputElement>('[data-field="effort"]')!.value,
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
  const actions = el("div", undefined, { class: "actions" });
  const save = el("button", "Save", { id: "save", type: "button" });
  save.onclick = () => void onSave();
  const revert = el("button", "Discard changes", { id: "revert", type: "button" });
  revert.onclick = () => {
    keyEdits.ollamaApiKey = { action: "keep" };
    keyEdits.tavilyApiKey = { action: "keep" };
    render(formFromSettings(saved!, providerCodes()));
    setStatus("unchanged", "Changes discarded");
  };
  actions.append(save, revert);
  root.replaceChildren(renderProviders(form), renderOllama(form, saved), renderTavily(saved), actions);
}

/** Re-renders keeping what was typed (a key button changes the key's block). */
function rerender(): void {
  render(readForm());
}

// ---- loading and saving ----

function showError(e: unknown, what: string): void {
  const error = e instanceof OptionsError ? e.error : { code: "INTERNAL", message: String(e), details: null };
  setStatus("error", `${what}: ${error.code}: ${error.message}`, error.code);
}

async function load(): Promise<void> {
  setStatus("loading", "Loading…");
  try {
    const [settings, list] = await Promise.all([ask("get_full_settings", {}), ask("list_providers", {})]);
    saved = settings;
    providers = list.providers;
    render(formFromSettings(settings, providerCodes()));
    setStatus("unchanged", "Loaded");
  } catch (e) {
    showError(e, "Could not load the settings");
  }
}

async function onSave(): Promise<void> {
  if (!saved) return;
  const update = updateFromForm(saved, readForm());
  if (Object.keys(update).length === 0) {
    setStatus("unchanged", "Nothing to save");
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
    setStatus("saved", `Saved (${Object.keys(update).join(", ")})`);
  } catch (e) {
    // The form keeps what was typed, so the user can fix it.
    showError(e, "Not saved");
  }
}

// ---- sites (the services' grants: change the level, agents or any model, remove a folder, allow or remove an embedding site, revoke) ----

function when(ms: number | null): string {
  return ms === null ? "never" : new Date(ms).toLocaleString();
}

function setSitesStatus(text: string, code = ""): void {
  const status = document.getElementById("sites-status")!;
  status.textContent = text;
  status.dataset.code = code;
}

function renderSite(site: Site): HTMLElement {
  const card = el("div", undefined, { class: "provider site", "data-origin": site.origin });
  const head = el("div", undefined, { class: "provider-head" });
  head.append(el("h3", site.origin));
  const revoke = el("button", site.blocked ? "Unblock" : "Revoke", { type: "button", "data-action": "revoke" });
  revoke.onclick = () => void changeSite(site.origin, () => ask("revoke_site", { origin: site.origin }), site.blocked ? "Unblocked" : "Revoked");
  head.append(revoke);
  card.append(head);
  if (site.blocked) {
    card.append(el("p", "Blocked: this site cannot ask to use Pedelec.", { class: "hint" }));
    return card;
  }
  const ends = site.expiresAt === null ? "" : ` Ends ${when(site.expiresAt)}${isLoopback(site.origin) ? " or when the browser closes, whichever comes first" : ""}.`;
  const facts = el("p", `Allowed on ${when(site.grantedAt)}; last used ${site.lastUsedAt === null ? "never" : when(site.lastUsedAt)}.${ends}`, { class: "hint" });
  card.append(facts);

  const level = el("label");
  const select = el("select", undefined, { "data-field": "access" });
  for (const a of ACCESS_LEVELS) {
    const option = el("option", a === "full" ? "Full access — run any command as you" : ACCESS_TEXT[a].title, { value: a });
    option.selected = site.access === a;
    select.append(option);
  }
  level.append("What the agent may do: ", select);
  card.append(level);

  const agents = el("div", undefined, { class: "key agents" });
  agents.append(el("span", "Agents it may use:", { class: "key-title" }));
  const codes = new Set([...providers.map((p) => p.code as string), ...site.providers]);
  for (const code of codes) {
    const label = el("label");
    const box = input({ type: "checkbox", "data-field": "provider", value: code }, code);
    box.checked = site.providers.includes(code);
    label.append(box, ` ${providers.find((p) => p.code === code)?.name ?? code}`);
    agents.append(label);
  }
  card.append(agents);

  const anyModel = el("label");
  const anyBox = input({ type: "checkbox", "data-field": "any-model" }, "any-model");
  anyBox.checked = site.anyModel;
  anyModel.append(anyBox, " May choose any model (otherwise only the models in your profiles)");
  card.append(anyModel);

  const folders = el("div");
  folders.append(el("span", site.folders.length === 0 ? "Folders: none besides its own workspaces" : "Folders:", { class: "key-title" }));
  const list = el("ul");
  for (const f of site.folders) {
    const li = el("li", undefined, { "data-folder": f.path });
    const remove = el("button", "Remove", { type: "button", "data-action": "remove-folder" });
    remove.onclick = () => void changeSite(site.origin, () => ask("grant_site", { site: { ...inputOf(site), folders: site.folders.filter((x) => x.path !== f.path) } }), "Folder removed");
    li.append(`${showFolder(f.path)}${f.once ? " (once: for the next session only)" : ""} `, remove);
    list.append(li);
  }
  folders.append(list);
  card.append(folders);
  card.append(renderEmbedders(site));

  const save = el("button", "Save changes", { type: "button", "data-action": "save-site" });
  save.onclick = () => {
    const access = select.value as Access;
    if (access === "full" && site.access !== "full" && !window.confirm(`Give ${site.origin} full access? The agent can run any command as you.`)) return;
    const chosen = [...agents.querySelectorAll<HTMLInputElement>("input[data-field=provider]:checked")].map((b) => b.value);
    void changeSite(site.origin, () => ask("grant_site", { site: { ...inputOf(site), access, providers: chosen, anyModel: anyBox.checked } }), "Saved");
  };
  card.append(save);
  return card;
}

/** The sites this one may ask from inside (in a frame of their pages): listed with Remove, and one more can be added. */
function renderEmbedders(site: Site): HTMLElement {
  const box = el("div", undefined, { class: "embedders" });
  box.append(el("span", site.embedders.length === 0 ? "Allowed inside these sites: none (it may ask only as the page you opened)" : "Allowed inside these sites:", { class: "key-title" }));
  const list = el("ul");
  for (const e of site.embedders) {
    const li = el("li", undefined, { "data-embedder": e });
    const remove = el("button", "Remove", { type: "button", "data-action": "remove-embedder" });
    remove.onclick = () => void changeSite(site.origin, () => ask("grant_site", { site: withoutEmbedder(site, e) }), `No longer allowed inside ${e}`);
    li.append(`${e} `, remove);
    list.append(li);
  }
  box.append(list);
  const add = el("div", undefined, { class: "key add-embedder" });
  const field = input({ type: "text", "data-field": "embedder", placeholder: "https://example.com" }, "");
  field.setAttribute("aria-label", `A site ${site.origin} may be used inside`);
  const allow = el("button", "Allow inside this site", { type: "button", "data-action": "add-embedder" });
  allow.onclick = () => {
    const typed = embedderOrigin(field.value);
    if ("error" in typed) {
      setSitesStatus(`Not changed: ${typed.error}`, "INVALID_INPUT");
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
    setSitesStatus(`${done}: ${origin}`);
  } catch (e) {
    const error = e instanceof OptionsError ? e.error : { code: "INTERNAL", message: String(e) };
    setSitesStatus(`Not changed: ${error.code}: ${error.message}`, error.code);
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
    setSitesStatus(`Could not load the sites: ${error.code}: ${error.message}`, error.code);
  }
}

void load().then(loadSites);
