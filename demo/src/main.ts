// The Pedelec demo: one page that uses every part of @pedelec/sdk a web app
// needs — approval, providers and effort levels, a streamed chat, status and
// usage, cancel, end and resume (same handle, and by saved id after a reload,
// showing the conversation so far from the session's history), an explicit
// workspace, two page tools the agent can call, and session files; and,
// without the extension, how to install it.
// Plain DOM: textContent everywhere, and the agent's Markdown through
// markdown.ts, which makes elements and text nodes only (agent text is untrusted).
import {
  EFFORT_LEVELS,
  Pedelec,
  PedelecError,
  defineTool,
  isPedelecError,
  type AssetInfo,
  type EffortLevel,
  type PedelecEventContext,
  type PedelecSession,
  type ProviderInfo,
  type SessionStatus,
} from "@pedelec/sdk";
import { historyRows, LiveJoin, resultText, settledCalls, toolNote } from "./history.js";
import { renderMarkdown } from "./markdown.js";

const STORAGE_KEY = "pedelec-demo-session";
/** How many history entries a resumed session shows (the newest). */
const HISTORY_LIMIT = 500;

type SavedSession = { sessionId: string; provider: string; effortLevel?: string | undefined; workspace?: string | undefined };

function $<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} missing from index.html`);
  return el as T;
}

const ui = {
  approval: $<HTMLSpanElement>("approval"),
  connect: $<HTMLButtonElement>("connect"),
  errors: $<HTMLDivElement>("errors"),
  install: $<HTMLElement>("install"),
  checkAgain: $<HTMLButtonElement>("check-again"),
  provider: $<HTMLSelectElement>("provider"),
  effort: $<HTMLSelectElement>("effort"),
  providerNote: $<HTMLDivElement>("provider-note"),
  workspace: $<HTMLInputElement>("workspace"),
  persistent: $<HTMLInputElement>("persistent"),
  create: $<HTMLButtonElement>("create"),
  end: $<HTMLButtonElement>("end"),
  resume: $<HTMLButtonElement>("resume"),
  saved: $<HTMLDivElement>("saved"),
  savedId: $<HTMLElement>("saved-id"),
  resumeSaved: $<HTMLButtonElement>("resume-saved"),
  forgetSaved: $<HTMLButtonElement>("forget-saved"),
  status: $<HTMLSpanElement>("status"),
  sessionId: $<HTMLElement>("session-id"),
  agent: $<HTMLElement>("session-agent"),
  usage: $<HTMLElement>("usage"),
  chat: $<HTMLDivElement>("chat"),
  composer: $<HTMLFormElement>("composer"),
  prompt: $<HTMLTextAreaElement>("prompt"),
  send: $<HTMLButtonElement>("send"),
  cancel: $<HTMLButtonElement>("cancel"),
  counter: $<HTMLOutputElement>("counter"),
  todos: $<HTMLUListElement>("todos"),
  file: $<HTMLInputElement>("file"),
  upload: $<HTMLButtonElement>("upload"),
  refreshAssets: $<HTMLButtonElement>("refresh-assets"),
  assets: $<HTMLUListElement>("assets"),
  viewer: $<HTMLDivElement>("viewer"),
  viewerName: $<HTMLElement>("viewer-name"),
  viewerBody: $<HTMLPreElement>("viewer-body"),
  viewerClose: $<HTMLButtonElement>("viewer-close"),
};

const pedelec = new Pedelec();
const state = {
  session: null as PedelecSession | null,
  counter: 0,
  todos: [] as string[],
  busy: false,
  providers: [] as ProviderInfo[],
  /** The assistant bubble being streamed into, per operation, with the Markdown received so far. */
  streaming: new Map<string, { bubble: HTMLDivElement; text: string }>(),
  errors: [] as { code: string; message: string }[],
};
let disposers: (() => void)[] = [];

/** Joining a resumed session's history with its live events; null for a new session (every event is live). */
let join: LiveJoin | null = null;

/** Runs a live event's effect unless the history already showed it. */
function live(ctx: PedelecEventContext, run: () => void): void {
  if (join) join.live(ctx.seq, run);
  else run();
}

// ---- errors: shown with code and message, never swallowed ----

function showError(e: unknown, where?: string): void {
  const err = isPedelecError(e) ? e : new PedelecError("INTERNAL", e instanceof Error ? e.message : String(e));
  state.errors.push({ code: err.code, message: err.message });
  const row = document.createElement("div");
  row.className = "error";
  row.setAttribute("role", "alert");
  row.dataset.code = err.code;
  const code = document.createElement("code");
  code.textContent = err.code;
  const msg = document.createElement("span");
  msg.className = "msg";
  msg.textContent = where ? `${where}: ${err.message}` : err.message;
  const close = document.createElement("button");
  close.type = "button";
  close.className = "link";
  close.textContent = "dismiss";
  close.addEventListener("click", () => row.remove());
  row.append(code, msg, close);
  ui.errors.append(row);
  // Keep the four newest.
  while (ui.errors.children.length > 4) ui.errors.firstElementChild?.remove();
}

async function guarded<T>(where: string, f: () => Promise<T>): Promise<T | undefined> {
  try {
    return await f();
  } catch (e) {
    showError(e, where);
    return undefined;
  }
}

// ---- approval and providers ----

async function refreshApproval(): Promise<void> {
  const s = await pedelec.getApprovalStatus();
  // Without the extension nothing else can work: say how to install it.
  ui.install.hidden = s.installed;
  if (!s.installed) setChip(ui.approval, "missing", "Extension not installed");
  else if (!s.approved) setChip(ui.approval, "pending", "Not approved for this site");
  else setChip(ui.approval, "approved", s.appConnected ? "Approved · app running" : "Approved · app not running");
  ui.connect.hidden = s.installed && s.approved && state.providers.length > 0;
  ui.connect.disabled = !s.installed;
}

async function loadProviders(): Promise<void> {
  const [providers, settings] = await Promise.all([pedelec.listProviders(), pedelec.getSettings()]);
  state.providers = providers;
  const previous = ui.provider.value;
  ui.provider.replaceChildren();
  const def = providers.find((p) => p.isDefault);
  ui.provider.append(option("", settings.defaultProvider ? `Default (${def?.name ?? settings.defaultProvider})` : "Default (none set)"));
  for (const p of providers) {
    const o = option(p.code, p.available ? p.name : `${p.name} — unavailable`);
    o.disabled = !p.available;
    ui.provider.append(o);
  }
  const firstAvailable = providers.find((p) => p.available);
  ui.provider.value = previous && providers.some((p) => p.code === previous && p.available) ? previous : firstAvailable?.code ?? "";
  describeProvider();
  await refreshApproval();
}

function option(value: string, text: string): HTMLOptionElement {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text;
  return o;
}

/** The unavailable providers, each with its reason, folded into one line until opened. */
function describeProvider(): void {
  const missing = state.providers.filter((p) => !p.available);
  ui.providerNote.replaceChildren();
  if (missing.length === 0) return;
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = `${missing.length} unavailable: ${missing.map((p) => p.name).join(", ")}`;
  const list = document.createElement("ul");
  for (const p of missing) {
    const li = document.createElement("li");
    const name = document.createElement("strong");
    name.textContent = p.name;
    li.append(name, ` — ${p.error ?? "unavailable"}`);
    list.append(li);
  }
  details.append(summary, list);
  ui.providerNote.append(details);
}

// ---- page tools ----

function updateCounter(delta: number): { counter: number; delta: number } {
  state.counter += delta;
  ui.counter.textContent = String(state.counter);
  flash(ui.counter);
  return { counter: state.counter, delta };
}

function addTodo(text: string): { todos: string[] } {
  state.todos.push(text);
  renderTodos();
  flash(ui.todos.lastElementChild as HTMLElement | null);
  return { todos: [...state.todos] };
}

function renderTodos(): void {
  ui.todos.replaceChildren();
  if (state.todos.length === 0) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "Nothing yet.";
    ui.todos.append(li);
  }
  for (const t of state.todos) {
    const li = document.createElement("li");
    li.textContent = t;
    ui.todos.append(li);
  }
}

function flash(el: HTMLElement | null): void {
  if (!el) return;
  el.classList.remove("flash");
  void el.offsetWidth; // restart the animation
  el.classList.add("flash");
}

const counterTool = defineTool({
  name: "update_counter",
  description: "Change the counter shown on the page by delta (may be negative). Returns the new value.",
  argsSchema: { type: "object", required: ["delta"], properties: { delta: { type: "number", description: "Amount to add." } } },
});
const todoTool = defineTool({
  name: "add_todo",
  description: "Add an item to the to-do list shown on the page. Returns the whole list.",
  argsSchema: { type: "object", required: ["text"], properties: { text: { type: "string", description: "The item." } } },
});

/** Registered on every handle — created or resumed — since handlers cannot survive a reload. */
function registerTools(session: PedelecSession): void {
  disposers.push(
    session.onTool("update_counter", (args, ctx) => {
      const delta = Number((args as { delta?: unknown }).delta);
      if (!Number.isFinite(delta)) throw new PedelecError("INVALID_INPUT", "delta must be a number");
      const result = updateCounter(delta);
      noteToolCall(ctx, args, result);
      return result;
    }),
    session.onTool("add_todo", (args, ctx) => {
      const text = String((args as { text?: unknown }).text ?? "").trim();
      if (!text) throw new PedelecError("INVALID_INPUT", "text must not be empty");
      const result = addTodo(text);
      noteToolCall(ctx, args, result);
      return result;
    }),
  );
}

/** Tool calls the shown history already notes with their outcome (a resumed session's). */
let historyCalls = new Set<string>();

/** A tool call the page answered, noted in the chat once: after the history, unless the history shows it already. */
function noteToolCall(ctx: { tool: string; toolRequestId: string }, args: unknown, result: unknown): void {
  afterHistory(() => {
    if (!historyCalls.has(ctx.toolRequestId)) chatNote("tool", toolNote(ctx.tool, args, resultText(result)));
  });
}

/** Something new for the chat (the user's text, a tool the page answered): after the history while a resumed session's loads. */
function afterHistory(run: () => void): void {
  if (join) join.afterHistory(run);
  else run();
}

// ---- chat ----

function chatEmptyGone(): void {
  ui.chat.querySelector(".empty")?.remove();
}

/** Keeps the log pinned to the bottom while text arrives, unless the user scrolled up. */
function appendToChat(el: HTMLElement): void {
  const atBottom = ui.chat.scrollHeight - ui.chat.scrollTop - ui.chat.clientHeight < 40;
  chatEmptyGone();
  ui.chat.append(el);
  if (atBottom) ui.chat.scrollTop = ui.chat.scrollHeight;
}

function bubble(kind: "user" | "assistant" | "tool" | "system", text: string): HTMLDivElement {
  const row = document.createElement("div");
  row.className = `msg-row ${kind}`;
  const b = document.createElement("div");
  b.className = "bubble";
  // The agent writes Markdown; everything else is shown as typed.
  if (kind === "assistant") {
    b.classList.add("md");
    renderMarkdown(b, text);
  } else b.textContent = text;
  row.append(b);
  appendToChat(row);
  return b;
}

function chatNote(kind: "tool" | "system", text: string): void {
  bubble(kind, text);
}

function onDelta(delta: string, operationId: string | undefined): void {
  const key = operationId ?? "?";
  let stream = state.streaming.get(key);
  if (!stream) {
    const b = bubble("assistant", "");
    b.classList.add("streaming");
    b.dataset.operationId = key;
    stream = { bubble: b, text: "" };
    state.streaming.set(key, stream);
  }
  const atBottom = ui.chat.scrollHeight - ui.chat.scrollTop - ui.chat.clientHeight < 40;
  stream.text += delta;
  renderMarkdown(stream.bubble, stream.text);
  if (atBottom) ui.chat.scrollTop = ui.chat.scrollHeight;
}

function onChat(text: string, operationId: string | undefined): void {
  // The completed message replaces the streamed text (deltas are best-effort).
  const key = operationId ?? "?";
  const b = state.streaming.get(key)?.bubble;
  state.streaming.delete(key);
  if (b && !b.classList.contains("done")) {
    renderMarkdown(b, text);
    b.classList.remove("streaming");
    b.classList.add("done");
  } else {
    bubble("assistant", text).classList.add("done");
  }
}

// ---- session ----

function setChip(el: HTMLElement, state: string, text: string): void {
  el.dataset.state = state;
  el.textContent = text;
}

function render(): void {
  const s = state.session;
  const status: SessionStatus | "none" | "detached" = s ? (s.detached ? "detached" : s.getStatus()) : "none";
  setChip(ui.status, status, s ? (status === "waiting_tool_result" ? "waiting for a tool" : status) : "no session");
  ui.sessionId.textContent = s?.sessionId ?? "—";
  ui.agent.textContent = s ? `${s.provider || "unknown"}${s.effortLevel ? ` · ${s.effortLevel}` : ""}` : "—";
  ui.usage.textContent = s && s.usage.totalTokens > 0 ? s.usage.totalTokens.toLocaleString("en") : "—";
  const live = !!s && !s.detached && status !== "ended";
  ui.send.disabled = !live || state.busy;
  ui.cancel.disabled = !live || !(state.busy || status === "running" || status === "waiting_tool_result");
  ui.end.disabled = !live;
  ui.resume.disabled = !s || s.detached || status !== "ended";
  ui.upload.disabled = ui.refreshAssets.disabled = !live;
  // An ended or detached session's files cannot be read (SESSION_ENDED): say so before a click.
  for (const b of ui.assets.querySelectorAll("button")) b.disabled = !live;
  const saved = loadSaved();
  ui.saved.hidden = !saved || (!!s && s.sessionId === saved.sessionId && !s.detached);
  ui.savedId.textContent = saved?.sessionId ?? "";
}

function loadSaved(): SavedSession | null {
  try {
    const raw = localStorage.getItem(STORAGE_KEY);
    return raw ? (JSON.parse(raw) as SavedSession) : null;
  } catch {
    return null;
  }
}

/** `joining`: the session's history is about to be shown (see `join`). */
function adopt(session: PedelecSession, joining = false): void {
  for (const d of disposers) d();
  disposers = [];
  state.session = session;
  state.streaming.clear();
  join = joining ? new LiveJoin() : null;
  disposers.push(
    session.onChatDelta((d, ctx) => live(ctx, () => onDelta(d, ctx.operationId))),
    session.onChat((t, ctx) => live(ctx, () => onChat(t, ctx.operationId))),
    session.onStatus(() => render()),
    session.onError((e, ctx) =>
      // An error event the history holds is in the chat already (the SDK's own errors have no seq).
      live(ctx, () => {
        showError(e, "session");
        render();
      }),
    ),
    session.onEnded((ctx) => {
      chatNote("system", `Session ended (${ctx.reason ?? "ended"}).`);
      render();
    }),
  );
  registerTools(session);
  ui.sessionId.title = session.sessionId;
  render();
  void refreshAssets();
}

async function createSession(): Promise<void> {
  const provider = ui.provider.value;
  const effortLevel = ui.effort.value as EffortLevel;
  const workspace = ui.workspace.value.trim();
  const persistent = ui.persistent.checked;
  ui.create.disabled = true;
  try {
    const session = await pedelec.createSession({
      ...(provider ? { provider } : {}),
      // "default" is what a session without a level gets; name the others.
      ...(effortLevel !== "default" ? { effortLevel } : {}),
      autoEndOnDisconnect: !persistent,
      ...(workspace ? { workspace: { path: workspace } } : {}),
      skills: {
        guidance: "This is the Pedelec demo page. Use update_counter to change its counter and add_todo to add to its to-do list when the user asks.",
        tools: [counterTool, todoTool],
      },
    });
    if (persistent) {
      const record: SavedSession = { sessionId: session.sessionId, provider: session.provider, effortLevel: session.effortLevel, workspace: workspace || undefined };
      localStorage.setItem(STORAGE_KEY, JSON.stringify(record));
    }
    ui.chat.replaceChildren();
    chatNote("system", `Session ${session.sessionId} started with ${session.provider || "the default provider"} at effort ${session.effortLevel ?? "default"}${workspace ? ` in ${workspace}` : ""}.`);
    adopt(session);
    ui.prompt.focus();
  } catch (e) {
    showError(e, "New session");
  } finally {
    ui.create.disabled = false;
    render();
  }
}

async function resumeSaved(): Promise<void> {
  const saved = loadSaved();
  if (!saved) return;
  const session = await guarded("Resume saved", () => pedelec.resumeSession(saved.sessionId));
  if (!session) return;
  // Listening before the history is read: what happens meanwhile waits in `join`.
  adopt(session, true);
  ui.chat.replaceChildren();
  const history = await guarded("History", () => session.getHistory({ limit: HISTORY_LIMIT }));
  if (state.session !== session || !join) return; // replaced meanwhile (New session)
  if (history?.hasMore) chatNote("system", `Earlier messages of this session are not shown (the newest ${HISTORY_LIMIT} entries are).`);
  historyCalls = settledCalls(history?.entries ?? []);
  for (const row of historyRows(history?.entries ?? [])) {
    const b = bubble(row.kind, row.text);
    if (row.kind === "assistant") b.classList.add("done");
  }
  // The session's snapshot names its provider; the saved record is the fallback.
  chatNote("system", `Resumed ${session.sessionId} (${session.provider || saved.provider || "provider unknown"}) — status ${session.getStatus()}.`);
  // Without a history (an older runtime) every live event is new.
  join.shown(history?.coveredSeq ?? 0);
}

async function send(): Promise<void> {
  const s = state.session;
  const text = ui.prompt.value.trim();
  if (!s || !text || state.busy) return;
  ui.prompt.value = "";
  afterHistory(() => bubble("user", text));
  state.busy = true;
  render();
  try {
    await s.sendText(text);
  } catch (e) {
    // The user's own Cancel is not an error.
    if (isPedelecError(e) && e.code === "CANCELLED") afterHistory(() => chatNote("system", "Cancelled."));
    else showError(e, "Send");
  } finally {
    state.busy = false;
    // A stream cut off (cancel, error) keeps what arrived, without the cursor.
    for (const { bubble: b } of state.streaming.values()) b.classList.remove("streaming");
    render();
  }
}

// ---- assets ----

async function refreshAssets(): Promise<void> {
  const s = state.session;
  if (!s || s.detached || s.getStatus() === "ended") return;
  const list = await guarded("List files", () => s.listAssets());
  if (list) renderAssets(list);
}

function renderAssets(list: AssetInfo[]): void {
  ui.assets.replaceChildren();
  if (list.length === 0) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "No files.";
    ui.assets.append(li);
  }
  for (const a of list) {
    const li = document.createElement("li");
    li.className = "asset";
    li.dataset.path = a.path;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = a.path;
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = a.modifiedAt === null ? formatSize(a.sizeBytes) : `${formatSize(a.sizeBytes)} · ${new Date(a.modifiedAt).toLocaleTimeString()}`;
    const acts = document.createElement("span");
    acts.className = "acts";
    for (const [label, as] of [["Text", "text"], ["JSON", "json"], ["Download", "file"]] as const) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.dataset.as = as;
      b.addEventListener("click", () => void view(a.path, as));
      acts.append(b);
    }
    li.append(name, acts, meta);
    ui.assets.append(li);
  }
  render();
}

function formatSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1048576).toFixed(1)} MiB`;
}

async function view(path: string, as: "text" | "json" | "file"): Promise<void> {
  const s = state.session;
  if (!s) return;
  if (as === "file") {
    const file = await guarded("Download", () => s.readAsset(path, "file"));
    if (!file) return;
    const url = URL.createObjectURL(file);
    const a = document.createElement("a");
    a.href = url;
    a.download = file.name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    return;
  }
  const body = as === "json" ? await guarded("Read JSON", async () => JSON.stringify(await s.readAsset(path, "json"), null, 2)) : await guarded("Read text", () => s.readAsset(path, "text"));
  if (body === undefined) return;
  ui.viewerName.textContent = `${path} (${as})`;
  ui.viewerBody.textContent = body;
  ui.viewer.hidden = false;
}

async function upload(): Promise<void> {
  const s = state.session;
  const file = ui.file.files?.[0];
  if (!s || !file) {
    if (!file) showError(new PedelecError("INVALID_INPUT", "choose a file first"), "Upload");
    return;
  }
  const info = await guarded("Upload", () => s.uploadAsset(file, { path: `/${file.name}` }));
  if (!info) return;
  ui.file.value = "";
  chatNote("system", `Uploaded ${info.path} (${formatSize(info.sizeBytes)}); the agent finds it in its workspace under .pedelec-runtime/assets/.`);
  await refreshAssets();
}

// ---- wiring ----

ui.connect.addEventListener("click", () => void guarded("Connect", loadProviders));
ui.checkAgain.addEventListener("click", () => void guarded("Extension", refreshApproval));
for (const level of EFFORT_LEVELS) ui.effort.append(option(level, level === "default" ? "default (the desktop's profile)" : level));
ui.provider.addEventListener("change", describeProvider);
ui.create.addEventListener("click", () => void createSession());
ui.end.addEventListener("click", () => void guarded("End", async () => (await state.session?.end(), render())));
ui.resume.addEventListener("click", () =>
  void guarded("Resume", async () => {
    await state.session?.resume();
    chatNote("system", "Session resumed.");
    render();
    await refreshAssets();
  }),
);
ui.resumeSaved.addEventListener("click", () => void resumeSaved());
ui.forgetSaved.addEventListener("click", () => {
  localStorage.removeItem(STORAGE_KEY);
  render();
});
ui.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  void send();
});
ui.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    void send();
  }
});
ui.cancel.addEventListener("click", () => void guarded("Cancel", async () => (await state.session?.cancel(), render())));
ui.upload.addEventListener("click", () => void upload());
ui.refreshAssets.addEventListener("click", () => void refreshAssets());
ui.viewerClose.addEventListener("click", () => (ui.viewer.hidden = true));

// For the browser tests and the curious: the client, the live handle and the page state.
(window as unknown as { pedelecDemo: unknown }).pedelecDemo = {
  Pedelec,
  defineTool,
  client: pedelec,
  state,
  get session() {
    return state.session;
  },
};

render();
void guarded("Extension", async () => {
  await refreshApproval();
  // Approved already: list providers right away (no popup then).
  const s = await pedelec.getApprovalStatus();
  if (s.installed && s.approved) await loadProviders();
  document.body.dataset.ready = "1";
}).finally(() => (document.body.dataset.ready = "1"));
