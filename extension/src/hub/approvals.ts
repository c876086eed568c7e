// Site grants and the prompts that make them. The services own the grants
// (list_sites / grant_site / block_site / revoke_site); this keeps a copy in
// memory and in chrome.storage.session (the worker's and the extension pages'
// storage, never content scripts', lost when the browser closes), and asks the
// user: a site prompt (approve with a level and providers, reject, block), a
// provider prompt (add a provider to the grant) and a folder prompt (add a
// folder, once or always). One prompt per question, shared by every request
// that needs its answer; the UI is the action popup, else a popup window.
import type { ChromeApi } from "../chrome-api.js";
import type { NativeLink } from "../native-link.js";
import { SITES_CACHE_KEY, type ApprovalPrompt, type BridgeError, type PromptAnswer, type SiteAccess } from "../../../sdk/src/protocol/bridge.js";
import type { ProviderInfo } from "../../../sdk/src/protocol/native.js";
import { inputOf, isLive, isLoopback, showFolder, siteRequest, type Site, type SiteInput } from "../sites.js";
import { bridgeError } from "./errors.js";
import { post, type Route } from "./routes.js";

/** What the user decided in a prompt. */
export type Decision =
  | { kind: "approve"; access: SiteAccess; providers: string[] }
  | { kind: "reject" }
  | { kind: "block" }
  | { kind: "answer"; answer: PromptAnswer }
  /** The prompt went away unanswered: window closed, time ran out. */
  | { kind: "gone"; error: BridgeError };

type Waiter = { route: Route; resolve: (v: unknown) => void; reject: (e: BridgeError) => void };

type PendingPrompt = {
  view: ApprovalPrompt;
  key: string;
  waiters: Waiter[];
  timer: ReturnType<typeof setTimeout>;
  windowId: number | null;
  /** Runs once, with the user's decision; its result (or error) goes to every waiter. */
  act: (d: Decision) => Promise<unknown>;
  settled: boolean;
  /**
   * Its view is complete (the providers offered are known). Until then the
   * popup is not shown it: a popup keeps a card as first drawn (so a state
   * push cannot reset a choice), and a card drawn from the empty view would
   * offer no agent, so an approval granted none.
   */
  ready: boolean;
};

type Cached = { sites: Site[]; rejected: string[] };

export class Approvals {
  /** Resolves once the cached grants are read from chrome.storage.session. */
  readonly ready: Promise<void>;
  #api: ChromeApi;
  #native: NativeLink;
  #ownOrigin: string;
  #timeoutMs: number;
  /** Something the popup shows changed. */
  #changed: () => void;
  #sites = new Map<string, Site>();
  /** list_sites answered in this browser session (else the next use asks). */
  #loaded = false;
  #loading: Promise<void> | null = null;
  /**
   * Origins whose revoke or block is in flight: no list_sites answer brings
   * their grant back meanwhile. A grant the services answer later is newer
   * than the withdrawal and lifts the mark.
   */
  #withdrawn = new Set<string>();
  /** Rejected in this browser session: no new prompt. */
  #rejected = new Set<string>();
  #prompts = new Map<number, PendingPrompt>();
  #nextPromptId = 1;

  constructor(api: ChromeApi, native: NativeLink, timeoutMs: number, changed: () => void) {
    this.#api = api;
    this.#native = native;
    this.#ownOrigin = api.runtime.getURL("").replace(/\/$/, "");
    this.#timeoutMs = timeoutMs;
    this.#changed = changed;
    this.ready = api.storage.session.get(SITES_CACHE_KEY).then(
      (items) => {
        const cached = items[SITES_CACHE_KEY] as Cached | undefined;
        if (!cached || !Array.isArray(cached.sites)) return;
        for (const site of cached.sites) this.#sites.set(site.origin, site);
        for (const o of cached.rejected ?? []) this.#rejected.add(o);
        this.#loaded = true;
      },
      (e: unknown) => console.error("pedelec: could not read the cached site grants", e),
    );
  }

  // ---- the grants ----

  /** The grants as the services last answered (loads them once per browser session). */
  async load(): Promise<void> {
    await this.ready;
    if (!this.#loaded) await this.refresh();
  }

  /** Asks the services again (one request at a time). */
  refresh(): Promise<void> {
    this.#loading ??= siteRequest(this.#native, "list_sites", this.#ownOrigin, {})
      .then(async ({ sites }) => {
        this.#sites = new Map(sites.filter((s) => !this.#withdrawn.has(s.origin)).map((s) => [s.origin, s]));
        this.#loaded = true;
        await this.#save();
      })
      .finally(() => (this.#loading = null));
    return this.#loading;
  }

  site(origin: string): Site | undefined {
    return this.#sites.get(origin);
  }

  isApproved(origin: string): boolean {
    return isLive(this.#sites.get(origin));
  }

  sites(): Site[] {
    return [...this.#sites.values()].sort((a, b) => a.origin.localeCompare(b.origin));
  }

  rejected(): string[] {
    return [...this.#rejected].sort();
  }

  prompts(): ApprovalPrompt[] {
    return [...this.#prompts.values()].filter((p) => p.ready).map((p) => p.view);
  }

  /** grant_site; a site prompt of that origin waiting is answered by it. */
  async grant(input: SiteInput): Promise<Site> {
    const { site } = await siteRequest(this.#native, "grant_site", this.#ownOrigin, { site: input });
    this.#withdrawn.delete(site.origin);
    this.#sites.set(site.origin, site);
    this.#rejected.delete(site.origin);
    await this.#save();
    this.#settleSitePrompt(site.origin, null);
    return site;
  }

  async block(origin: string): Promise<void> {
    const { site } = await this.#withdrawing(origin, () => siteRequest(this.#native, "block_site", this.#ownOrigin, { origin }));
    // Unless a grant given meanwhile (newer) is there.
    if (!this.#sites.has(origin)) this.#sites.set(origin, site);
    await this.#save();
    this.#settleSitePrompt(origin, bridgeError("APPROVAL_REJECTED", `the user blocked Pedelec for ${origin}`));
  }

  /** revoke_site: the grant (or block) goes, the services end the site's sessions. */
  async revoke(origin: string): Promise<string[]> {
    const { endedSessionIds } = await this.#withdrawing(origin, () => siteRequest(this.#native, "revoke_site", this.#ownOrigin, { origin }));
    this.#rejected.delete(origin);
    await this.#save();
    return endedSessionIds;
  }

  /**
   * Runs a request that takes the grant of `origin` away (revoke, block) with
   * the grant already gone from the cache: the services end the site's
   * sessions before they answer, and a page that sees its sessions end must
   * already find itself unapproved. If the request fails, the services' copy
   * is read again.
   */
  async #withdrawing<T>(origin: string, request: () => Promise<T>): Promise<T> {
    const before = this.#sites.get(origin);
    this.#sites.delete(origin);
    this.#withdrawn.add(origin);
    try {
      return await request();
    } catch (e) {
      this.#withdrawn.delete(origin);
      // A grant given meanwhile is newer than `before`.
      if (before && !this.#sites.has(origin)) this.#sites.set(origin, before);
      await this.refresh().catch(() => undefined);
      throw e;
    } finally {
      this.#withdrawn.delete(origin);
    }
  }

  async endSessions(origin: string): Promise<string[]> {
    return (await siteRequest(this.#native, "end_site_sessions", this.#ownOrigin, { origin })).endedSessionIds;
  }

  async forgetRejection(origin: string): Promise<void> {
    this.#rejected.delete(origin);
    await this.#save();
  }

  /** Browser start-up: loopback grants last for one browser session. */
  async revokeLoopback(): Promise<void> {
    await this.ready;
    const { sites } = await siteRequest(this.#native, "list_sites", this.#ownOrigin, {});
    for (const site of sites) {
      if (isLoopback(site.origin) && !site.blocked) await siteRequest(this.#native, "revoke_site", this.#ownOrigin, { origin: site.origin });
    }
    this.#rejected.clear();
    await this.refresh();
  }

  async #save(): Promise<void> {
    const cached: Cached = { sites: [...this.#sites.values()], rejected: [...this.#rejected] };
    try {
      await this.#api.storage.session.set({ [SITES_CACHE_KEY]: cached });
    } catch (e) {
      console.error("pedelec: could not cache the site grants", e);
    }
    this.#changed();
  }

  // ---- what a request needs ----

  /**
   * Resolves with the route's live grant; asks the user when the site has
   * none. A blocked site, or one rejected in this browser session, is
   * APPROVAL_REJECTED at once. `provider`: the one the request named
   * (preselected in the prompt).
   */
  async require(route: Route, provider?: string): Promise<Site> {
    await this.load();
    const origin = route.origin;
    const now = this.#sites.get(origin);
    if (isLive(now)) return now;
    if (now?.blocked) throw bridgeError("APPROVAL_REJECTED", `${origin} is blocked (Pedelec settings, Sites)`);
    if (this.#rejected.has(origin)) throw bridgeError("APPROVAL_REJECTED", `the user rejected Pedelec access for ${origin} in this browser session`);
    await this.#prompt(route, `site:${origin}`, async () => ({ kind: "site", providers: await this.#offer(provider) }), async (d) => {
      switch (d.kind) {
        case "approve":
          await this.grant({ origin, access: d.access, providers: d.providers, folders: [], anyModel: false, embedders: [] });
          return;
        case "block":
          await this.block(origin);
          throw bridgeError("APPROVAL_REJECTED", `the user blocked Pedelec for ${origin}`);
        case "gone":
          throw d.error;
        default:
          this.#rejected.add(origin);
          await this.#save();
          throw bridgeError("APPROVAL_REJECTED", `the user rejected Pedelec access for ${origin}`);
      }
    });
    const site = this.#sites.get(origin);
    if (!isLive(site)) throw bridgeError("APPROVAL_REJECTED", `${origin} has no grant`);
    return site;
  }

  /** A provider outside the grant: asks; on yes it is added. A no leaves the grant as it is (the services refuse). */
  async ensureProvider(route: Route, code: string): Promise<void> {
    const origin = route.origin;
    if (!isLive(this.#sites.get(origin)) || this.#sites.get(origin)!.providers.includes(code)) return;
    const name = (await this.#providers()).find((p) => p.code === code)?.name ?? code;
    await this.#prompt(route, `provider:${origin}:${code}`, async () => ({ kind: "provider", provider: { code, name } }), async (d) => {
      const site = this.#sites.get(origin);
      if (d.kind !== "answer" || d.answer !== "yes" || !isLive(site) || site.providers.includes(code)) return;
      await this.grant({ ...inputOf(site), providers: [...site.providers, code] });
    });
  }

  /** A folder outside the grant: asks (once / always / no); a no leaves the grant as it is (the services refuse). */
  async ensureFolder(route: Route, path: string): Promise<void> {
    const origin = route.origin;
    const current = this.#sites.get(origin);
    if (!isLive(current) || current.folders.some((f) => f.path === path)) return;
    await this.#prompt(route, `folder:${origin}:${path}`, async () => ({ kind: "folder", folder: { path, shown: showFolder(path) } }), async (d) => {
      const site = this.#sites.get(origin);
      if (d.kind !== "answer" || (d.answer !== "once" && d.answer !== "always") || !isLive(site)) return;
      const folders = site.folders.filter((f) => f.path !== path);
      await this.grant({ ...inputOf(site), folders: [...folders, { path, once: d.answer === "once" }] });
    });
  }

  /** Whether the cached grant of `origin` lists `path` as a folder to use once (the services use it up). */
  folderOnce(origin: string, path: string): boolean {
    return this.#sites.get(origin)?.folders.some((f) => f.path === path && f.once) ?? false;
  }

  /** Drops the cached grant of `origin` and asks the services again (they answered SITE_NOT_APPROVED). */
  async stale(origin: string): Promise<void> {
    this.#sites.delete(origin);
    await this.refresh().catch(() => undefined);
  }

  // ---- prompts ----

  async #providers(): Promise<ProviderInfo[]> {
    try {
      return (await this.#native.request("list_providers", this.#ownOrigin, undefined)).providers;
    } catch {
      return [];
    }
  }

  /** The providers a site prompt offers: the user's default, and the one the page named, preselected. */
  async #offer(named: string | undefined): Promise<ApprovalPrompt["providers"]> {
    return (await this.#providers()).map((p) => ({ code: p.code, name: p.name, available: p.available, preselected: p.isDefault || p.code === named }));
  }

  /**
   * Shows the prompt `key` (or joins the one showing) and waits for the
   * result of `act` on the user's decision.
   */
  async #prompt(route: Route, key: string, make: () => Promise<Partial<ApprovalPrompt> & Pick<ApprovalPrompt, "kind">>, act: (d: Decision) => Promise<unknown>): Promise<unknown> {
    let pending = [...this.#prompts.values()].find((p) => p.key === key && !p.settled);
    if (!pending) {
      const id = this.#nextPromptId++;
      const view: ApprovalPrompt = { id, kind: "site", origin: route.origin, tab: route.tab, loopback: isLoopback(route.origin), providers: [], provider: null, folder: null };
      const created: PendingPrompt = {
        view,
        key,
        waiters: [],
        windowId: null,
        act,
        settled: false,
        ready: false,
        timer: setTimeout(() => void this.decide(id, { kind: "gone", error: bridgeError("APPROVAL_TIMEOUT", `${route.origin}: no answer in time`) }), this.#timeoutMs),
      };
      pending = created;
      // Registered before anything is awaited, so a second request meanwhile joins it.
      this.#prompts.set(id, created);
      Object.assign(view, await make());
      created.ready = true;
      if (created.settled) return this.#wait(created, route);
      this.#changed();
      // One window shows every prompt: a window already open for another prompt serves this one too.
      const shared = [...this.#prompts.values()].find((p) => p !== created && p.windowId !== null);
      if (shared) {
        created.windowId = shared.windowId;
        return this.#wait(created, route);
      }
      this.#openUi(route.origin).then(
        (windowId) => {
          if (windowId === null) return;
          if (!created.settled) created.windowId = windowId;
          else this.#api.windows.remove(windowId).catch(() => undefined);
        },
        (error: BridgeError) => void this.decide(id, { kind: "gone", error }),
      );
    }
    return this.#wait(pending, route);
  }

  #wait(pending: PendingPrompt, route: Route): Promise<unknown> {
    return new Promise((resolve, reject) => {
      pending.waiters.push({ route, resolve, reject });
      // The SDK pauses its bridge timeout while the user decides.
      post(route, { kind: "approval", state: "pending" });
    });
  }

  /** The user's answer to prompt `id` (from the popup); runs the prompt's act once. */
  async decide(id: number, decision: Decision): Promise<void> {
    const p = this.#prompts.get(id);
    if (!p || p.settled) return;
    p.settled = true;
    clearTimeout(p.timer);
    let outcome: { ok: true; value: unknown } | { ok: false; error: BridgeError };
    try {
      outcome = { ok: true, value: await p.act(decision) };
    } catch (e) {
      outcome = { ok: false, error: e as BridgeError };
    }
    this.#finish(p, outcome);
  }

  /** Ends a site prompt of `origin` from outside it (a grant or block made elsewhere). */
  #settleSitePrompt(origin: string, error: BridgeError | null): void {
    for (const p of this.#prompts.values()) {
      if (p.key !== `site:${origin}` || p.settled) continue;
      p.settled = true;
      clearTimeout(p.timer);
      this.#finish(p, error ? { ok: false, error } : { ok: true, value: undefined });
    }
  }

  #finish(p: PendingPrompt, outcome: { ok: true; value: unknown } | { ok: false; error: BridgeError }): void {
    this.#prompts.delete(p.view.id);
    for (const w of p.waiters) {
      post(w.route, { kind: "approval", state: "settled" });
      if (outcome.ok) w.resolve(outcome.value);
      else w.reject(outcome.error);
    }
    if (p.windowId !== null && ![...this.#prompts.values()].some((q) => q.windowId === p.windowId)) this.#api.windows.remove(p.windowId).catch(() => undefined);
    this.#changed();
  }

  /** A route that went away waits for nothing. */
  dropRoute(route: Route): void {
    for (const p of this.#prompts.values()) p.waiters = p.waiters.filter((w) => w.route !== route);
  }

  onWindowRemoved(windowId: number): void {
    for (const p of [...this.#prompts.values()]) {
      if (p.windowId !== windowId) continue;
      p.windowId = null;
      void this.decide(p.view.id, { kind: "gone", error: bridgeError("APPROVAL_REJECTED", `the approval window for ${p.view.origin} was closed`) });
    }
  }

  /** chrome.action.openPopup, else a popup window, else OPEN_POPUP_FAILED. Returns the window id it opened. */
  async #openUi(origin: string): Promise<number | null> {
    try {
      if (typeof this.#api.action?.openPopup === "function") {
        await this.#api.action.openPopup();
        return null;
      }
    } catch {
      // No focused window, or not allowed here: fall back to a window.
    }
    try {
      const win = await this.#api.windows.create({
        url: this.#api.runtime.getURL(`popup.html?approve=${encodeURIComponent(origin)}`),
        type: "popup",
        width: 460,
        height: 640,
        focused: true,
      });
      return win?.id ?? null;
    } catch (e) {
      throw bridgeError("OPEN_POPUP_FAILED", `could not open the approval popup: ${(e as Error).message ?? String(e)}`, { origin });
    }
  }
}
