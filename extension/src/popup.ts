// The action popup and the approval window (same page): host and Core state,
// origins waiting for approval, approved origins (revocable), live sessions.
import { POPUP_PORT_NAME, type PopupState, type PopupToWorker, type WorkerToPopup } from "../../sdk/src/protocol/bridge.js";
import type { PageRuntime } from "./chrome-api.js";

declare const chrome: { runtime: PageRuntime & { openOptionsPage(): Promise<void> } };

const port = chrome.runtime.connect({ name: POPUP_PORT_NAME });
const send = (msg: PopupToWorker) => port.postMessage(msg);
const asked = new URLSearchParams(location.search).get("approve");

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string, attrs: Record<string, string> = {}): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  // textContent only: origins come from web pages.
  if (text !== undefined) node.textContent = text;
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function section(id: string, title: string): HTMLElement {
  const s = el("section", undefined, { id });
  s.append(el("h2", title));
  return s;
}

function render(state: PopupState): void {
  const root = document.getElementById("root")!;
  root.replaceChildren();

  const host = section("host", "Desktop");
  const h = state.host;
  host.append(
    el(
      "p",
      h.hostVersion === null
        ? "Native host not reached yet"
        : `Native host ${h.hostVersion} (protocol ${h.protocolVersion ?? "?"})${h.connected ? "" : ", idle"}`,
      { id: "host-state" },
    ),
    el("p", h.coreRunning === null ? "Core: unknown" : h.coreRunning ? "Core: running" : "Core: not running", { id: "core-state" }),
  );
  if (h.lastError) host.append(el("p", h.lastError, { class: "error" }));
  const settings = el("button", "Settings…", { id: "open-settings" });
  settings.onclick = () => void chrome.runtime.openOptionsPage();
  host.append(settings);
  root.append(host);

  const pending = section("pending", "Waiting for approval");
  if (state.pendingApprovals.length === 0) pending.append(el("p", "None"));
  for (const origin of state.pendingApprovals) {
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    if (origin === asked) row.classList.add("asked");
    const approve = el("button", "Approve", { "data-action": "approve" });
    approve.onclick = () => send({ kind: "approve", origin });
    const reject = el("button", "Reject", { "data-action": "reject" });
    reject.onclick = () => send({ kind: "reject", origin });
    row.append(el("span", origin), approve, reject);
    pending.append(row);
  }
  root.append(pending);

  const approved = section("approved", "Approved origins");
  if (state.approvedOrigins.length === 0) approved.append(el("p", "None"));
  for (const origin of state.approvedOrigins) {
    const row = el("div", undefined, { class: "row", "data-origin": origin });
    const revoke = el("button", "Revoke", { "data-action": "revoke" });
    revoke.onclick = () => send({ kind: "revoke", origin });
    row.append(el("span", origin), revoke);
    approved.append(row);
  }
  root.append(approved);

  const sessions = section("sessions", "Live sessions");
  if (state.sessions.length === 0) sessions.append(el("p", "None"));
  const byOrigin = new Map<string, PopupState["sessions"]>();
  for (const s of state.sessions) byOrigin.set(s.origin, [...(byOrigin.get(s.origin) ?? []), s]);
  for (const [origin, list] of byOrigin) {
    sessions.append(el("h3", origin));
    const ul = el("ul");
    for (const s of list) {
      ul.append(el("li", `${s.sessionId} — ${s.status}, ${s.routes} page${s.routes === 1 ? "" : "s"}${s.autoEndOnDisconnect ? ", ends with its last page" : ""}`));
    }
    sessions.append(ul);
  }
  root.append(sessions);
}

port.onMessage.addListener((m) => {
  const msg = m as WorkerToPopup;
  if (msg.kind === "state") render(msg.state);
});
send({ kind: "get_state" });
