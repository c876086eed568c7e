// What a user does on the demo page, as steps both browser suites run: the
// Chromium scenarios on a Playwright page, the Firefox ones on firefox.mjs's
// WebDriver BiDi page, which offers the same slice of Playwright's API (fill,
// press, click, selectOption, setChecked, textContent, evaluate,
// waitForFunction).
import { inPage, STEP_MS } from "./harness.mjs";

/** Creates a session on the demo page through its UI (provider picker, workspace, keep-after-reload). */
export async function createInDemo(page, { provider, workspace = "", persistent = false }) {
  if (provider) await page.selectOption("#provider", provider);
  await page.fill("#workspace", workspace);
  await page.setChecked("#persistent", persistent);
  const before = await page.textContent("#session-id");
  await page.click("#create");
  await page.waitForFunction((b) => {
    const id = document.getElementById("session-id")?.textContent ?? "";
    return (id.startsWith("thr_") && id !== b) || document.querySelector("#errors .error");
  }, before, { timeout: STEP_MS });
  const err = await page.evaluate(() => document.querySelector("#errors .error")?.textContent ?? null);
  if (err !== null) throw new Error(`createSession in the demo failed: ${err}`);
  return page.textContent("#session-id");
}

/** Records what a handle reports, in the page (window.rec). */
export function record(page) {
  return inPage(page, (d) => {
    const s = d.session;
    window.rec = { deltas: [], chats: [], statuses: [], errors: [], ended: [] };
    s.onChatDelta((x) => window.rec.deltas.push(x));
    s.onChat((x) => window.rec.chats.push(x));
    s.onStatus((x) => window.rec.statuses.push(x));
    s.onError((e) => window.rec.errors.push(e.code));
    s.onEnded((c) => window.rec.ended.push(c.reason));
    return true;
  });
}

/** Types a prompt into the demo and waits until its sendText() settled. */
export async function sendInDemo(page, text) {
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
  await page.waitForFunction(() => window.pedelecDemo.state.busy === true, null, { timeout: 5_000 }).catch(() => undefined);
  await page.waitForFunction(() => window.pedelecDemo.state.busy === false, null, { timeout: STEP_MS });
}

/** The codes of the errors the demo shows. */
export function demoErrors(page) {
  return page.evaluate(() => [...document.querySelectorAll("#errors .error")].map((e) => e.dataset.code));
}

/** The assistant's messages as the demo shows them. */
export function assistantTexts(page) {
  return page.evaluate(() => [...document.querySelectorAll(".msg-row.assistant .bubble")].map((b) => b.textContent));
}
