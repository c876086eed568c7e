// The action popup and the approval window (same page): the prompts waiting for
// the user (approve a site with a level and providers, add a provider, add a
// folder), the site of the tab it was opened over, the sites with sessions
// (End, Revoke), the desktop's state. Rendered with textContent only: origins,
// tab titles and folders come from web pages.
import {
  APPROVE_DELAY_MS,
  POPUP_PORT_NAME,
  type ApprovalPrompt,
  type PopupState,
  type PopupToWorker,
  type PromptAnswer,
  type WorkerToPopup,
} from "../../sdk/src/protocol/bridge.js";
import type { PageRuntime } from "./chrome-api.js";
import { ACCESS_LEVELS, ACCESS_TEXT, DEFAULT_ACCESS, isLive, showFolder, type Access, type Site } from "./sites.js";

declare const chrome: {
  runtime: PageRuntime & { openOptionsPage(): Promise<void> };
  tabs?: { query(q: { active: boolean; currentWindow: boolean }): Promise<Array<{ id?: number }>> };
};

const port = chrome.runtime.connect({ name: POPUP_PORT_NAME });
const send = (msg: PopupToWorker) => port.postMessage(msg);

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, attrs: Record<string, string> = {}): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function button(text: string, action: string, onclick: () => void, primary = false): HTMLButtonElement {
  const b = el("button", text, { "data-action": action, type: "button", ...(primary ? { class: "primary" } : {}) });
  b.onclick = onclick;
  return b;
}

function section(id: string, title: string): HTMLElement {
  const s = el("section", undefined, { id });
  s.append(el("h2", title));
  return s;
}

/** Disabled for APPROVE_DELAY_MS after the prompt shows, so a click meant for the page cannot land on it. */
function delayed(b: HTMLButtonElement): HTMLButtonElement {
  b.disabled = true;
  setTimeout(() => (b.disabled = false), APPROVE_DELAY_MS);
  return b;
}

// ---- prompts (kept across re-renders: a state push must not reset a choice or the delay) ----

const shownPrompts = new Map<number, HTMLElement>();

function asker(p: ApprovalPrompt): HTMLElement {
  const box = el("div", undefined, { class: "asker" });
  box.append(el("p", `Asked by the tab ${p.tab}`, { class: "tab" }));
  if (p.loopback) {
    box.append(
      el(
        "p",
        "This is a localhost address: every program and every user on this computer can serve a page there. So your answer lasts only for this browser session.",
        { class: "loopback warn" },
      ),
    );
  }
  return box;
}

/** A prompt's heading: the origin on its own line (it may be long), then what it asks. */
function heading(origin: string, asks: string): HTMLElement {
  const h = el("h3");
  h.append(el("span", origin, { class: "origin" }), el("br"), asks);
  return h;
}

function sitePrompt(p: ApprovalPrompt, userName: string | null): HTMLElement {
  // The account every agent runs as (the host's hello), else plain "you".
  const account = userName ? `as ${userName}` : "as you";
  const card = el("div", undefined, { class: "prompt", "data-kind": "site", "data-origin": p.origin, "data-prompt": String(p.id) });
  card.append(heading(p.origin, "wants to use a coding agent on this computer"), asker(p));

  const levels = el("fieldset", undefined, { class: "levels" });
  levels.append(el("legend", "What the agent may do"));
  for (const level of ACCESS_LEVELS) {
    const label = el("label", undefined, { class: `level level-${level}` });
    const radio = el("input", undefined, { type: "radio", name: `access-${p.id}`, value: level });
    radio.checked = level === DEFAULT_ACCESS;
    const title = level === "full" ? `Full access — run any command ${account}` : ACCESS_TEXT[level].title;
    const text = el("span");
    text.append(el("strong", title), el("br"), el("span", ACCESS_TEXT[level].sentence, { class: "hint" }));
    label.append(radio, text);
    levels.append(label);
  }
  card.append(levels);

  const providers = el("fieldset", undefined, { class: "providers" });
  providers.append(el("legend", "Agents it may use"));
  if (p.providers.length === 0) providers.append(el("p", "No agent listed (the desktop runtime did not answer).", { class: "hint" }));
  // The agents this computer can run now first; the others stay offered (one may be installed later).
  const offered = [...p.providers].sort((a, b) => Number(b.available) - Number(a.available));
  for (const provider of offered) {
    const label = el("label", undefined, { class: provider.available ? "provider" : "provider hint" });
    const box = el("input", undefined, { type: "checkbox", value: provider.code });
    box.checked = provider.preselected;
    label.append(box, ` ${provider.name}${provider.available ? "" : " (not available now)"}`);
    providers.append(label);
  }
  card.append(providers);

  const warning = el("p", `Full access: the agent can run any command ${account} — read, change or delete any of your files, use your accounts and the network. Choose it only for a site you trust as much as a program you install.`, {
    class: "full-warning warn",
  });
  warning.hidden = true;
  const confirm = el("div", undefined, { class: "confirm-full" });
  confirm.hidden = true;
  const actions = el("div", undefined, { class: "actions" });

  const access = () => (card.querySelector<HTMLInputElement>(`input[name="access-${p.id}"]:checked`)?.value ?? DEFAULT_ACCESS) as Access;
  const chosen = () => [...providers.querySelectorAll<HTMLInputElement>("input[type=checkbox]:checked")].map((b) => b.value);
  const approve = () => send({ kind: "approve", promptId: p.id, access: access(), providers: chosen() });
  levels.onchange = () => {
    warning.hidden = access() !== "full";
    confirm.hidden = true;
    actions.hidden = false;
  };
  const confirmButtons = el("div", undefined, { class: "actions" });
  confirmButtons.append(
    button("Yes, give full access", "confirm-full", approve, true),
    button("Back", "back", () => {
      confirm.hidden = true;
      actions.hidden = false;
    }),
  );
  confirm.append(el("p", `Give ${p.origin} full access to your computer?`, { class: "confirm-question" }), confirmButtons);
  actions.append(
    delayed(
      button(
        "Approve",
        "approve",
        () => {
          if (access() !== "full") return approve();
          // Full access takes a second, deliberate confirmation.
          actions.hidden = true;
          confirm.hidden = false;
        },
        true,
      ),
    ),
    button("Reject", "reject", () => send({ kind: "reject", promptId: p.id })),
    button("Block this site", "block", () => send({ kind: "block", promptId: p.id })),
  );
  card.append(warning, actions, confirm);
  return card;
}

function questionPrompt(p: ApprovalPrompt): HTMLElement {
  const card = el("div", undefined, { class: "prompt", "data-kind": p.kind, "data-origin": p.origin, "data-prompt": String(p.id) });
  const answer = (a: PromptAnswer) => () => send({ kind: "answer", promptId: p.id, answer: a });
  const actions = el("div", undefined, { class: "actions" });
  if (p.kind === "provider") {
    card.append(heading(p.origin, `wants to use ${p.provider?.name ?? "another agent"}`), asker(p));
    card.append(el("p", "Allowing adds this agent to what the site may use, at the level you gave it.", { class: "hint" }));
    actions.append(delayed(button("Allow", "yes", answer("yes"), true)), button("Don't allow", "no", answer("no")));
  } else {
    card.append(heading(p.origin, "wants the agent to work in this folder"), el("p", p.folder?.shown ?? "", { class: "folder" }), asker(p));
    card.append(el("p", "The agent may then work on the files in it, at the level you gave this site. “Allow once” is for the session being started now.", { class: "hint" }));
    actions.append(
      delayed(button("Allow once", "once", answer("once"), true)),
      delayed(button("Always allow", "always", answer("always"))),
      button("Don't allow", "no", answer("no")),
    );
  }
  card.append(actions);
  return card;
}

function renderPrompts(state: PopupState): HTMLElement {
  const box = document.getElementById("prompts") ?? section("prompts", "Waiting for your answer");
  const ids = new Set(state.prompts.map((p) => p.id));
  for (const [id, card] of shownPrompts) {
    if (ids.has(id)) continue;
    card.remove();
    shownPrompts.delete(id);
  }
  for (const p of state.prompts) {
    if (shownPrompts.has(p.id)) continue;
    const card = p.kind === "site" ? sitePrompt(p, state.host.userName) : questionPrompt(p);
    shownPrompts.set(p.id, card);
    box.append(card);
  }
  box.hidden = state.prompts.length === 0;
  return box;
}

// ---- the rest (re-rendered on every state) ----

function siteLine(site: Site | undefined, rejected: boolean): string {
  if (site?.blocked) return "Blocked";
  if (isLive(site)) return `Allowed: ${ACCESS_TEXT[site.access].title.toLowerCase()}; agents: ${site.providers.join(", ") || "none"}`;
  if (rejected) return "Rejected in this browser session";
  return "Not allowed";
}

function renderActive(state: PopupState): HTMLElement | null {
  const origin = state.activeOrigin;
  if (!origin) return null;
  const s = section("this-site", "This site");
  const site = state.sites.find((x) => x.origin === origin);
  const rejected = state.rejected.includes(origin);
  const row = el("div", undefined, { class: "row", "data-origin": origin });
  row.append(el("span", `${origin} — ${siteLine(site, rejected)}`));
  if (site) row.append(button(site.blocked ? "Unblock" : "Revoke", "revoke", () => send({ kind: "revoke", origin })));
  else if (rejected) row.append(button("Let it ask again", "forget-rejection", () => send({ kind: "forget_rejection", origin })));
  s.append(row);
  return s;
}

function renderSessions(state: PopupState): HTMLElement {
  const s = section("sessions", "Sites with sessions");
  const byOrigin = new Map<string, PopupState["sessions"]>();
  for (const x of state.sessions) if (x.status !== "ended") byOrigin.set(x.origin, [...(byOrigin.get(x.origin) ?? []), x]);
  if (byOrigin.size === 0) s.append(el("p", "None"));
  for (const [origin, list] of byOrigin) {
    const running = list.filter((x) => x.status === "running" || x.status === "waiting_tool_result").length;
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    row.append(
      el("span", `${origin} — ${list.length} session${list.length === 1 ? "" : "s"}${running ? `, ${running} working` : ""}`),
      button("End", "end", () => send({ kind: "end_sessions", origin })),
      button("Revoke", "revoke", () => send({ kind: "revoke", origin })),
    );
    s.append(row);
  }
  return s;
}

function renderSites(state: PopupState): HTMLElement {
  const s = section("sites", "Allowed sites");
  if (state.sites.length === 0) s.append(el("p", "None"));
  for (const site of state.sites) {
    const row = el("div", undefined, { class: "row", "data-origin": site.origin });
    row.append(el("span", `${site.origin} — ${siteLine(site, false)}${site.folders.length ? `; folders: ${site.folders.map((f) => showFolder(f.path)).join(", ")}` : ""}`));
    row.append(button(site.blocked ? "Unblock" : "Revoke", "revoke", () => send({ kind: "revoke", origin: site.origin })));
    s.append(row);
  }
  for (const origin of state.rejected) {
    if (state.sites.some((x) => x.origin === origin)) continue;
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    row.append(el("span", `${origin} — rejected in this browser session`), button("Let it ask again", "forget-rejection", () => send({ kind: "forget_rejection", origin })));
    s.append(row);
  }
  return s;
}

function renderHost(state: PopupState): HTMLElement {
  const host = section("host", "Desktop");
  const h = state.host;
  host.append(
    el(
      "p",
      h.hostVersion === null ? "Native host not reached yet" : `Native host ${h.hostVersion} (protocol ${h.protocolVersion ?? "?"})${h.connected ? "" : ", idle"}`,
      { id: "host-state" },
    ),
    el("p", h.coreRunning === null ? "Core: unknown" : h.coreRunning ? "Core: running" : "Core: not running", { id: "core-state" }),
  );
  if (h.lastError) host.append(el("p", h.lastError, { class: "error" }));
  const settings = button("Settings…", "settings", () => void chrome.runtime.openOptionsPage());
  settings.id = "open-settings";
  host.append(settings);
  return host;
}

function render(state: PopupState): void {
  const root = document.getElementById("root")!;
  const prompts = renderPrompts(state);
  const parts: HTMLElement[] = [prompts];
  if (state.lastError) parts.push(el("p", state.lastError, { class: "error", id: "action-error" }));
  const active = renderActive(state);
  if (active) parts.push(active);
  parts.push(renderSessions(state), renderSites(state), renderHost(state));
  root.replaceChildren(...parts);
}

port.onMessage.addListener((m) => {
  const msg = m as WorkerToPopup;
  if (msg.kind === "state") render(msg.state);
});

// The tab the popup was opened over (its id needs no permission; its address stays with the worker).
void (async () => {
  let tabId: number | null = null;
  try {
    tabId = (await chrome.tabs?.query({ active: true, currentWindow: true }))?.[0]?.id ?? null;
  } catch {
    tabId = null;
  }
  send({ kind: "get_state", tabId });
})();
