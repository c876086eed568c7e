// The action popup and the approval window (same page): the prompts waiting for
// the user (approve a site with a level and providers, add a provider, add a
// folder), the site of the tab it was opened over, the sites with sessions
// (End, Revoke), the sites allowed, and Pedelec on this computer — with the
// command to run when it is not installed or not running (popup-model.ts says
// what in words). Rendered with textContent only: origins, tab titles and
// folders come from web pages.
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
import { webext } from "./webext.js";
import { ACCESS_LEVELS, ACCESS_TEXT, DEFAULT_ACCESS, showFolder, type Access } from "./sites.js";
import { activityByOrigin, activityText, hostAdvice, siteState, type Activity, type Command, type Platform } from "./popup-model.js";

const chrome = webext<{
  runtime: PageRuntime & { id: string; openOptionsPage(): Promise<void> };
  tabs?: { query(q: { active: boolean; currentWindow: boolean }): Promise<Array<{ id?: number }>> };
}>()!;

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

function panel(id: string, title: string): HTMLElement {
  const s = el("section", undefined, { id, class: "panel" });
  s.append(el("h2", title));
  return s;
}

function chip(text: string, state: string): HTMLElement {
  return el("span", text, { class: "chip", "data-state": state });
}

/** A command to run in a terminal, with what it does and a Copy button. */
function command(c: Command): HTMLElement {
  const box = el("div");
  box.append(el("p", c.note, { class: "command-note" }));
  const line = el("div", undefined, { class: "command" });
  const code = el("code", c.command);
  const copy = button("Copy", "copy", () => {
    void navigator.clipboard?.writeText(c.command).then(
      () => (copy.textContent = "Copied"),
      () => undefined,
    );
  });
  line.append(code, copy);
  box.append(line);
  return box;
}

function renderActive(state: PopupState, activity: Map<string, Activity>): HTMLElement | null {
  const origin = state.activeOrigin;
  if (!origin) return null;
  const s = panel("this-site", "This site");
  const site = state.sites.find((x) => x.origin === origin);
  const rejected = state.rejected.includes(origin);
  const shown = siteState(site, rejected);
  const head = el("div", undefined, { class: "site-head", "data-origin": origin });
  head.append(el("h3", origin), chip(shown.chip, shown.chipState));
  s.append(head, el("p", shown.sentence, { class: "small", id: "this-site-state" }));
  const a = activity.get(origin);
  if (a) s.append(el("p", activityText(a), { class: "small" }));
  const actions = el("div", undefined, { class: "actions", "data-origin": origin });
  if (a) actions.append(button("End its sessions", "end", () => send({ kind: "end_sessions", origin })));
  if (site) actions.append(button(site.blocked ? "Unblock" : "Revoke", "revoke", () => send({ kind: "revoke", origin })));
  else if (rejected) actions.append(button("Let it ask again", "forget-rejection", () => send({ kind: "forget_rejection", origin })));
  if (actions.childElementCount) s.append(actions);
  return s;
}

function renderSessions(activity: Map<string, Activity>): HTMLElement {
  const s = panel("sessions", "Sites with sessions");
  if (activity.size === 0) s.append(el("p", "No site has a session open.", { class: "empty" }));
  for (const [origin, a] of activity) {
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    const what = el("div", undefined, { class: "what" });
    what.append(el("div", origin, { class: "origin" }), el("div", activityText(a), { class: "detail" }));
    row.append(what);
    if (a.waiting) row.append(chip("waiting", "waiting"));
    else if (a.working) row.append(chip("working", "working"));
    const revoke = button("Revoke", "revoke", () => send({ kind: "revoke", origin }));
    revoke.classList.add("link", "danger");
    revoke.title = "End its sessions and take back its permission";
    row.append(button("End", "end", () => send({ kind: "end_sessions", origin })), revoke);
    s.append(row);
  }
  return s;
}

function renderSites(state: PopupState): HTMLElement {
  const s = panel("sites", "Sites you allowed");
  if (state.sites.length === 0 && state.rejected.length === 0) s.append(el("p", "None yet: a site asks the first time it needs an agent.", { class: "empty" }));
  for (const site of state.sites) {
    const shown = siteState(site, false);
    const row = el("div", undefined, { class: "row", "data-origin": site.origin });
    const what = el("div", undefined, { class: "what" });
    const folders = site.folders.length ? ` Folders: ${site.folders.map((f) => showFolder(f.path)).join(", ")}.` : "";
    what.append(el("div", site.origin, { class: "origin" }), el("div", `${shown.sentence}${folders}`, { class: "detail" }));
    row.append(what, button(site.blocked ? "Unblock" : "Revoke", "revoke", () => send({ kind: "revoke", origin: site.origin })));
    s.append(row);
  }
  for (const origin of state.rejected) {
    if (state.sites.some((x) => x.origin === origin)) continue;
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    const what = el("div", undefined, { class: "what" });
    what.append(el("div", origin, { class: "origin" }), el("div", siteState(undefined, true).sentence, { class: "detail" }));
    row.append(what, button("Let it ask again", "forget-rejection", () => send({ kind: "forget_rejection", origin })));
    s.append(row);
  }
  return s;
}

const platform: Platform = /Mac/i.test(navigator.platform || navigator.userAgent) ? "mac" : "linux";

function renderHost(state: PopupState): HTMLElement {
  const s = panel("host", "Pedelec on this computer");
  const advice = hostAdvice(state.host, chrome.runtime.id, platform);
  const head = el("div", undefined, { class: "host-head", id: "host-state", "data-state": advice.state });
  const chipState = advice.state === "running" ? "ok" : advice.state === "idle" || advice.state === "checking" ? "none" : "bad";
  const chipText = { running: "running", idle: "stopped", checking: "…", not_installed: "not installed", not_allowed: "not allowed", mismatch: "update needed", broken: "not reachable" }[advice.state];
  head.append(el("strong", advice.title), chip(chipText, chipState));
  s.append(head);
  if (advice.text) s.append(el("p", advice.text, { class: "small" }));
  for (const c of advice.commands) s.append(command(c));
  return s;
}

function render(state: PopupState): void {
  const root = document.getElementById("root")!;
  const prompts = renderPrompts(state);
  prompts.classList.add("panel");
  const parts: HTMLElement[] = [prompts];
  if (state.lastError) parts.push(el("p", state.lastError, { class: "error", id: "action-error" }));
  const activity = activityByOrigin(state.sessions);
  const active = renderActive(state, activity);
  if (active) parts.push(active);
  // When Pedelec cannot be reached, what to do comes first.
  const host = renderHost(state);
  const problem = !["running", "idle", "checking"].includes(host.querySelector<HTMLElement>("#host-state")?.dataset.state ?? "");
  if (problem) parts.splice(1, 0, host);
  parts.push(renderSessions(activity), renderSites(state));
  if (!problem) parts.push(host);
  root.replaceChildren(...parts);
}

// Opened as the approval window (when the action popup could not open), not in the toolbar.
document.body.classList.toggle("window", new URLSearchParams(location.search).has("approve"));
document.getElementById("open-settings")!.onclick = () => void chrome.runtime.openOptionsPage();

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
