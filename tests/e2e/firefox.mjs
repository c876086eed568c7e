// Firefox for the browser suite (docs/testing.md, "Firefox"): Debian's
// firefox-esr driven through WebDriver BiDi, which Firefox serves itself
// (`--remote-debugging-port`), with the Firefox build of the extension
// (extension/dist-firefox) installed as a temporary add-on. Plain BiDi
// commands over a WebSocket (websocket.mjs): no driver program, no client library.
import { spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { artifacts, repo, until, withTimeout } from "./harness.mjs";
import { connect } from "./websocket.mjs";

export const firefoxPath = process.env.PEDELEC_FIREFOX ?? "/usr/bin/firefox-esr";
export const firefoxExtensionDir = join(repo, "extension/dist-firefox");
/**
 * The add-on's moz-extension uuid, fixed through Firefox's
 * `extensions.webextensions.uuids` preference, so the suite knows the
 * origin of the extension's own pages (each install gets a random one).
 */
export const ADDON_UUID = "5e1f0c3a-7d2b-4c6e-9a81-0f2d3b4c5d6e";

/** Throws, naming what installs it, when Firefox or the Firefox build is missing. */
export function checkFirefox() {
  const missing = [];
  if (!existsSync(firefoxPath)) missing.push(`${firefoxPath} (apt-get install firefox-esr; tests/e2e/ensure-firefox.sh)`);
  if (!existsSync(join(firefoxExtensionDir, "manifest.json"))) missing.push("extension/dist-firefox (npm --prefix extension run build)");
  if (missing.length) throw new Error(`not installed: ${missing.join("; ")}`);
}

/** Preferences of the suite's profile. */
function prefs(addonId) {
  return {
    "extensions.webextensions.uuids": JSON.stringify({ [addonId]: ADDON_UUID }),
    // No first-run pages, updates or telemetry in the suite's browser.
    "browser.shell.checkDefaultBrowser": false,
    "browser.aboutwelcome.enabled": false,
    "app.update.enabled": false,
    "datareporting.policy.dataSubmissionEnabled": false,
    // Console messages (the extension's too) to stdout, kept in target/e2e/firefox.log.
    "devtools.console.stdout.chrome": true,
    "devtools.console.stdout.content": true,
  };
}

/** WebDriver's key for Enter, which BiDi's key actions take too. */
const KEY = { Enter: "\uE007" };

/** One BiDi session on a headless firefox-esr with the add-on installed. */
export class Firefox {
  #browser;
  #socket;
  #profile;
  #next = 0;
  #pending = new Map();
  /** The browsing context (tab) commands go to: WebDriver's current window. */
  #context;
  /** The add-on's id, as Firefox reported it on install. */
  addonId = null;

  constructor(browser, socket, profile) {
    this.#browser = browser;
    this.#socket = socket;
    this.#profile = profile;
    socket.onmessage = (text) => {
      const m = JSON.parse(text);
      const waiter = m.id === undefined ? undefined : this.#pending.get(m.id);
      if (!waiter) return;
      this.#pending.delete(m.id);
      if (m.type === "success") waiter.resolve(m.result);
      else waiter.reject(new Error(`WebDriver BiDi ${waiter.method}: ${m.error}: ${m.message}`));
    };
    socket.onclose = (why) => {
      for (const w of this.#pending.values()) w.reject(new Error(`WebDriver BiDi ${w.method}: ${why}`));
      this.#pending.clear();
    };
  }

  /**
   * Starts Firefox on a fresh profile with `env` (complete: Firefox and the
   * native host it starts see exactly this; HOME decides where Firefox finds
   * host manifests), opens a BiDi session and installs the add-on.
   */
  static async launch(env, { addonId }) {
    const profile = mkdtempSync(join(tmpdir(), "pedelec-firefox-"));
    writeFileSync(
      join(profile, "user.js"),
      Object.entries(prefs(addonId))
        .map(([k, v]) => `user_pref(${JSON.stringify(k)}, ${JSON.stringify(v)});\n`)
        .join(""),
    );
    // --remote-allow-system-access: the suite opens the extension's own pages
    // from the browser's chrome window (`openExtensionPage`).
    const browser = spawn(firefoxPath, ["-headless", "-no-remote", "-profile", profile, "--remote-debugging-port", "0", "--remote-allow-system-access"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const url = await withTimeout(
      new Promise((resolve, reject) => {
        let text = "";
        const seen = (d) => {
          text += d;
          const m = text.match(/WebDriver BiDi listening on (ws:\/\/127\.0\.0\.1:\d+)/);
          if (m) resolve(m[1]);
        };
        browser.stdout.on("data", seen);
        browser.stderr.on("data", seen);
        mkdirSync(artifacts, { recursive: true });
        const log = createWriteStream(join(artifacts, "firefox.log"), { flags: "a" });
        browser.stdout.pipe(log);
        browser.stderr.pipe(log);
        browser.on("exit", (code) => reject(new Error(`firefox exited ${code}: ${text}`)));
      }),
      "Firefox's WebDriver BiDi listening",
      30_000,
    );
    const ff = new Firefox(browser, await connect(`${url}/session`), profile);
    await ff.#send("session.new", { capabilities: {} });
    ff.addonId = (await ff.#send("webExtension.install", { extensionData: { type: "path", path: firefoxExtensionDir } })).extension;
    ff.#context = (await ff.windows())[0];
    return ff;
  }

  /** moz-extension://<uuid> of the extension's own pages. */
  get extensionOrigin() {
    return `moz-extension://${ADDON_UUID}`;
  }

  #send(method, params) {
    const id = ++this.#next;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, method });
      this.#socket.send(JSON.stringify({ id, method, params }));
    });
  }

  async goto(url) {
    await this.#send("browsingContext.navigate", { context: this.#context, url, wait: "complete" });
  }

  /**
   * Opens one of the extension's own pages (`popup.html`, `options.html`) in
   * a new tab and switches to it, as the toolbar button's page opened in a
   * tab; returns its handle.
   */
  async openExtensionPage(path) {
    // From the browser's own window, as the toolbar button does: BiDi may not
    // navigate a web page's tab to a moz-extension:// URL.
    const before = new Set(await this.windows());
    const chrome = await this.#send("browsingContext.getTree", { maxDepth: 0, "moz:scope": "chrome" });
    const win = chrome.contexts.find((c) => c.url.startsWith("chrome://browser/"));
    const r = await this.#send("script.callFunction", {
      functionDeclaration: `(url) => {
        const tab = gBrowser.addTab(url, { triggeringPrincipal: Services.scriptSecurityManager.getSystemPrincipal() });
        gBrowser.selectedTab = tab;
      }`,
      arguments: [{ type: "string", value: `${this.extensionOrigin}/${path}` }],
      target: { context: win.context },
      awaitPromise: false,
    });
    if (r.type === "exception") throw new Error(`opening ${path}: ${r.exceptionDetails.text}`);
    const handle = await until("the extension page's tab", async () => (await this.windows()).find((h) => !before.has(h)));
    await this.switchTo(handle);
    await this.waitForFunction(() => document.readyState === "complete", null, { what: `${path} loaded` });
    return handle;
  }

  async reload() {
    await this.#send("browsingContext.reload", { context: this.#context, wait: "complete" });
  }

  async url() {
    const tree = await this.#send("browsingContext.getTree", { root: this.#context, maxDepth: 0 });
    return tree.contexts[0].url;
  }

  /** Runs `fn` (a function's source) in the current page with string arguments. */
  async #call(fn, args) {
    const r = await this.#send("script.callFunction", {
      functionDeclaration: fn,
      arguments: args.map((value) => ({ type: "string", value })),
      target: { context: this.#context },
      awaitPromise: true,
    });
    if (r.type === "exception") throw new Error(`in the page: ${r.exceptionDetails.text}`);
    return r.result;
  }

  /**
   * Runs `f(arg)` in the current page (an async function is awaited) and
   * returns its JSON result.
   */
  async evaluate(f, arg) {
    // Compiled by BiDi, not by the page: an extension page's CSP forbids eval.
    const r = await this.#call(`async (arg) => JSON.stringify((await (${f.toString()})(JSON.parse(arg))) ?? null)`, [
      JSON.stringify(arg ?? null),
    ]);
    return JSON.parse(r.value);
  }

  /** Polls `f(arg)` in the page until it returns something truthy (Playwright's name and arguments). */
  async waitForFunction(f, arg, { timeout = 90_000, what = f.toString().slice(0, 80) } = {}) {
    const deadline = Date.now() + timeout;
    for (;;) {
      const v = await this.evaluate(f, arg).catch(() => null);
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`timed out in Firefox: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The element `css` names, scrolled into view, as a BiDi node reference. */
  async #element(css) {
    const node = await this.#call(
      `(css) => { const e = document.querySelector(css); e?.scrollIntoView({ block: "center" }); return e; }`,
      [css],
    );
    if (node.type !== "node") throw new Error(`no element ${css}`);
    return { sharedId: node.sharedId };
  }

  #perform(actions) {
    return this.#send("input.performActions", { context: this.#context, actions });
  }

  /** A real mouse click in the element's centre (trusted events, as the user's). */
  async click(css) {
    const element = await this.#element(css);
    await this.#perform([
      {
        type: "pointer",
        id: "mouse",
        parameters: { pointerType: "mouse" },
        actions: [
          { type: "pointerMove", x: 0, y: 0, origin: { type: "element", element } },
          { type: "pointerDown", button: 0 },
          { type: "pointerUp", button: 0 },
        ],
      },
    ]);
  }

  /** Types `text` as key presses into the focused element. */
  #type(text) {
    return this.#perform([{ type: "key", id: "keyboard", actions: [...text].flatMap((value) => [{ type: "keyDown", value }, { type: "keyUp", value }]) }]);
  }

  // The slice of Playwright's page API the shared demo steps use
  // (demo-steps.mjs), so Chromium and Firefox run the same steps.

  /** Replaces an input's value with `text`, as typing does. */
  async fill(css, text) {
    await this.evaluate((c) => {
      const e = document.querySelector(c);
      e.focus();
      e.value = "";
      e.dispatchEvent(new Event("input", { bubbles: true }));
      return true;
    }, css);
    if (text !== "") await this.#type(text);
  }

  /** Presses `key` ("Enter") in the element. */
  async press(css, key) {
    await this.evaluate((c) => (document.querySelector(c).focus(), true), css);
    await this.#type(KEY[key]);
  }

  textContent(css) {
    return this.evaluate((c) => document.querySelector(c)?.textContent ?? null, css);
  }

  /** Chooses `value` in a <select>, as the user does (a change event). */
  selectOption(css, value) {
    return this.evaluate(
      ([c, v]) => {
        const select = document.querySelector(c);
        select.value = v;
        select.dispatchEvent(new Event("change", { bubbles: true }));
        return true;
      },
      [css, value],
    );
  }

  /** Ticks or clears a checkbox by clicking it when it is not as wanted. */
  async setChecked(css, checked) {
    if ((await this.evaluate((c) => document.querySelector(c)?.checked, css)) !== checked) await this.click(css);
  }

  /** The handles (top-level browsing contexts) of the open tabs. */
  async windows() {
    const tree = await this.#send("browsingContext.getTree", { maxDepth: 0 });
    return tree.contexts.map((c) => c.context);
  }

  window() {
    return this.#context;
  }

  async switchTo(handle) {
    this.#context = handle;
    await this.#send("browsingContext.activate", { context: handle });
  }

  /** Opens a new tab and switches to it; returns its handle. */
  async newTab() {
    const { context } = await this.#send("browsingContext.create", { type: "tab" });
    await this.switchTo(context);
    return context;
  }

  async closeWindow() {
    await this.#send("browsingContext.close", { context: this.#context });
  }

  /** The current tab as a PNG in target/e2e/<name>.png (and, with `docs`, docs/img/). */
  async screenshot(name, { docs = false } = {}) {
    const { data } = await this.#send("browsingContext.captureScreenshot", { context: this.#context });
    const png = Buffer.from(data, "base64");
    mkdirSync(artifacts, { recursive: true });
    const path = join(artifacts, `${name}.png`);
    writeFileSync(path, png);
    if (docs && process.env.PEDELEC_E2E_DOC_SHOTS) writeFileSync(join(repo, "docs/img", `${name}.png`), png);
    return path;
  }

  async close() {
    await withTimeout(this.#send("session.end", {}), "the BiDi session's end", 5_000).catch(() => undefined);
    this.#socket.close();
    try {
      process.kill(-this.#browser.pid, "SIGKILL");
    } catch {
      // already gone
    }
    await until("Firefox gone", () => this.#browser.exitCode !== null || this.#browser.signalCode !== null, 10_000).catch(() => undefined);
    rmSync(this.#profile, { recursive: true, force: true });
  }
}
