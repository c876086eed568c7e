// Firefox for the browser suite (docs/testing.md, "Firefox"): Debian's
// firefox-esr driven through W3C WebDriver by geckodriver (built from
// crates.io by tests/setup.sh), with the Firefox build of the extension
// (extension/dist-firefox) installed as a temporary add-on. Only plain
// WebDriver commands over fetch: no client library.
import { spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { artifacts, repo, until, withTimeout } from "./harness.mjs";

export const firefoxPath = process.env.PEDELEC_FIREFOX ?? "/usr/bin/firefox-esr";
export const geckodriverPath = process.env.PEDELEC_GECKODRIVER ?? join(repo, ".tools/cargo/bin/geckodriver");
export const firefoxExtensionDir = join(repo, "extension/dist-firefox");
/**
 * The add-on's moz-extension uuid, fixed through Firefox's
 * `extensions.webextensions.uuids` preference, so the suite knows the
 * origin of the extension's own pages (each install gets a random one).
 */
export const ADDON_UUID = "5e1f0c3a-7d2b-4c6e-9a81-0f2d3b4c5d6e";

/** Throws, naming what installs it, when Firefox, geckodriver or the Firefox build is missing. */
export function checkFirefox() {
  const missing = [];
  if (!existsSync(firefoxPath)) missing.push(`${firefoxPath} (apt-get install firefox-esr; tests/setup.sh)`);
  if (!existsSync(geckodriverPath)) missing.push(`${geckodriverPath} (cargo install geckodriver --root .tools/cargo; tests/setup.sh)`);
  if (!existsSync(join(firefoxExtensionDir, "manifest.json"))) missing.push("extension/dist-firefox (npm --prefix extension run build)");
  if (missing.length) throw new Error(`not installed: ${missing.join("; ")}`);
}

const KEY = { Enter: "\uE007" };

/** One WebDriver session on a headless firefox-esr with the add-on installed. */
export class Firefox {
  #base;
  #id;
  #driver;
  /** The add-on's id, as Firefox reported it on install. */
  addonId = null;

  constructor(driver, base, id) {
    this.#driver = driver;
    this.#base = base;
    this.#id = id;
  }

  /**
   * Starts geckodriver and Firefox with `env` (complete: Firefox and the
   * native host it starts see exactly this; HOME decides where Firefox finds
   * host manifests) and installs the add-on.
   */
  static async launch(env, { addonId }) {
    // --allow-system-access: the suite opens the extension's own pages in a
    // tab from the browser's chrome context, as the toolbar button would
    // (WebDriver may not navigate to moz-extension:// URLs).
    const driver = spawn(geckodriverPath, ["--port", "0", "--host", "127.0.0.1", "--allow-system-access"], { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    const port = await withTimeout(
      new Promise((resolve, reject) => {
        let text = "";
        const seen = (d) => {
          text += d;
          const m = text.match(/Listening on 127\.0\.0\.1:(\d+)/);
          if (m) resolve(Number(m[1]));
        };
        driver.stdout.on("data", seen);
        driver.stderr.on("data", seen);
        mkdirSync(artifacts, { recursive: true });
        const log = createWriteStream(join(artifacts, "firefox.log"), { flags: "a" });
        driver.stdout.pipe(log);
        driver.stderr.pipe(log);
        driver.on("exit", (code) => reject(new Error(`geckodriver exited ${code}: ${text}`)));
      }),
      "geckodriver listening",
      20_000,
    );
    const base = `http://127.0.0.1:${port}`;
    const session = await call(base, "POST", "/session", {
      capabilities: {
        alwaysMatch: {
          browserName: "firefox",
          "moz:firefoxOptions": {
            binary: firefoxPath,
            args: ["-headless"],
            prefs: {
              "extensions.webextensions.uuids": JSON.stringify({ [addonId]: ADDON_UUID }),
              // No first-run pages, updates or telemetry in the suite's browser.
              "browser.shell.checkDefaultBrowser": false,
              "app.update.enabled": false,
              "datareporting.policy.dataSubmissionEnabled": false,
              // Console messages (the extension's too) to stdout, kept in target/e2e/firefox.log.
              "devtools.console.stdout.chrome": true,
              "devtools.console.stdout.content": true,
            },
          },
        },
      },
    });
    const ff = new Firefox(driver, base, session.sessionId);
    ff.addonId = await ff.#cmd("POST", "/moz/addon/install", { path: firefoxExtensionDir, temporary: true });
    return ff;
  }

  /** moz-extension://<uuid> of the extension's own pages. */
  get extensionOrigin() {
    return `moz-extension://${ADDON_UUID}`;
  }

  #cmd(method, path, body) {
    return call(this.#base, method, `/session/${this.#id}${path}`, body);
  }

  goto(url) {
    return this.#cmd("POST", "/url", { url });
  }

  /** Runs `script` (a function body) with system privileges in the browser window. */
  async inChrome(script, args = []) {
    await this.#cmd("POST", "/moz/context", { context: "chrome" });
    try {
      return await this.#cmd("POST", "/execute/sync", { script, args });
    } finally {
      await this.#cmd("POST", "/moz/context", { context: "content" });
    }
  }

  /**
   * Opens one of the extension's own pages (`popup.html`, `options.html`) in
   * a new tab and switches to it; returns its handle.
   */
  async openExtensionPage(path) {
    const before = new Set(await this.windows());
    await this.inChrome(
      `const win = Services.wm.getMostRecentWindow("navigator:browser");
       const tab = win.gBrowser.addTab(arguments[0], { triggeringPrincipal: Services.scriptSecurityManager.getSystemPrincipal() });
       win.gBrowser.selectedTab = tab;`,
      [`${this.extensionOrigin}/${path}`],
    );
    const handle = await until("the extension page's tab", async () => (await this.windows()).find((h) => !before.has(h)));
    await this.switchTo(handle);
    await this.waitForFunction(() => document.readyState === "complete", null, { what: `${path} loaded` });
    return handle;
  }

  reload() {
    return this.#cmd("POST", "/refresh", {});
  }

  url() {
    return this.#cmd("GET", "/url");
  }

  /**
   * Runs `f(arg)` in the current page (an async function is awaited) and
   * returns its JSON result.
   */
  async evaluate(f, arg) {
    const script = `const done = arguments[arguments.length - 1];
      Promise.resolve().then(() => (${f.toString()})(arguments[0]))
        .then((v) => done({ ok: v === undefined ? null : v }), (e) => done({ thrown: String(e?.stack ?? e) }));`;
    const r = await this.#cmd("POST", "/execute/async", { script, args: [arg ?? null] });
    if (r && "thrown" in r) throw new Error(`in the page: ${r.thrown}`);
    return r.ok;
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

  async #element(css) {
    const found = await this.#cmd("POST", "/element", { using: "css selector", value: css });
    return Object.values(found)[0];
  }

  async click(css) {
    await this.#cmd("POST", `/element/${await this.#element(css)}/click`, {});
  }

  // The slice of Playwright's page API the shared demo steps use
  // (demo-steps.mjs), so Chromium and Firefox run the same steps.

  /** Replaces an input's value with `text`, as typing does. */
  async fill(css, text) {
    const el = await this.#element(css);
    await this.#cmd("POST", `/element/${el}/clear`, {});
    if (text !== "") await this.#cmd("POST", `/element/${el}/value`, { text });
  }

  /** Presses `key` ("Enter") in the element. */
  async press(css, key) {
    await this.#cmd("POST", `/element/${await this.#element(css)}/value`, { text: KEY[key] });
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

  windows() {
    return this.#cmd("GET", "/window/handles");
  }

  window() {
    return this.#cmd("GET", "/window");
  }

  switchTo(handle) {
    return this.#cmd("POST", "/window", { handle });
  }

  /** Opens a new tab and switches to it; returns its handle. */
  async newTab() {
    const { handle } = await this.#cmd("POST", "/window/new", { type: "tab" });
    await this.switchTo(handle);
    return handle;
  }

  closeWindow() {
    return this.#cmd("DELETE", "/window");
  }

  /** The current window as a PNG in target/e2e/<name>.png (and, with `docs`, docs/img/). */
  async screenshot(name, { docs = false } = {}) {
    const png = Buffer.from(await this.#cmd("GET", "/screenshot"), "base64");
    mkdirSync(artifacts, { recursive: true });
    const path = join(artifacts, `${name}.png`);
    writeFileSync(path, png);
    if (docs && process.env.PEDELEC_E2E_DOC_SHOTS) writeFileSync(join(repo, "docs/img", `${name}.png`), png);
    return path;
  }

  async close() {
    await this.#cmd("DELETE", "").catch(() => undefined);
    try {
      process.kill(-this.#driver.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}

async function call(base, method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(`WebDriver ${method} ${path}: ${j?.value?.error}: ${j?.value?.message}`);
  return j.value;
}
