// By hand (not part of `npm test`): run ./start.sh --browser as a new user
// would — fresh HOME, the real codex CLI against the mock model — with the
// browser it starts made headless (a wrapper given as $PEDELEC_BROWSER adds
// --headless and a DevTools port), then click through the demo: Connect,
// approve, a session, a turn with a page-tool call. Screenshot in target/e2e/.
//   node tests/e2e/try-it.mjs [--debug]
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { agentsBin, artifacts, chromiumPath, codexTool, POPUP_URL, repo, shot, startMock, until, writeCodexConfig } from "./harness.mjs";

const debug = process.argv.includes("--debug");
const bin = join(repo, debug ? "target/debug" : "target/release");
// Outside the temporary folder, as a user's home is: below full access codex's
// own sandbox cannot start from a home under /tmp (docs/security.md, "Access levels").
const home = mkdtempSync("/var/tmp/pdl-try-");
const mock = await startMock();
const agents = join(home, "agents");
mkdirSync(agents);
symlinkSync(join(agentsBin, "codex"), join(agents, "codex"));
writeCodexConfig(join(home, ".codex"), mock.port);
const wrapper = join(home, "headless-chromium");
writeFileSync(wrapper, `#!/bin/sh\nexec ${chromiumPath} --headless=new --no-sandbox --disable-gpu --remote-debugging-port=9339 "$@"\n`);
chmodSync(wrapper, 0o755);
// A fresh HOME, but the toolchain this machine has (rustup finds it through HOME otherwise).
const toolchain = { RUSTUP_HOME: process.env.RUSTUP_HOME ?? join(process.env.HOME, ".rustup"), CARGO_HOME: process.env.CARGO_HOME ?? join(process.env.HOME, ".cargo") };
const env = { ...process.env, ...toolchain, HOME: home, PEDELEC_RUNTIME_DIR: join(home, "run"), CODEX_HOME: join(home, ".codex"), PATH: `${agents}:${process.env.PATH}`, PEDELEC_BROWSER: wrapper };
delete env.PEDELEC_HOME;
const port = 4391;
const start = spawn(join(repo, "start.sh"), ["--browser", "--port", String(port), ...(debug ? ["--debug"] : [])], { env, stdio: ["ignore", "pipe", "inherit"], detached: true });
let out = "";
let exited = null;
start.on("exit", (code) => (exited = code));
start.stdout.on("data", (d) => {
  out += d;
  process.stdout.write(d);
});
try {
  await until("start.sh ready", () => {
    if (exited !== null) throw new Error(`start.sh exited ${exited}`);
    return out.includes("Ctrl-C stops");
  }, 900_000);
  const browser = await until("the browser's DevTools port", () => chromium.connectOverCDP("http://127.0.0.1:9339").catch(() => null), 30_000);
  const context = browser.contexts()[0];
  const page = await until("the demo tab", () => context.pages().find((p) => p.url().startsWith(`http://127.0.0.1:${port}/`)), 30_000);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  await page.click("#connect");
  const popup = await context.newPage();
  await popup.goto(POPUP_URL);
  const prompt = popup.locator(`#prompts .prompt[data-kind="site"][data-origin="http://127.0.0.1:${port}"]`);
  await prompt.locator('input[type=checkbox][value="codex"]').check();
  // Playwright waits out the prompt's one-second delay before Approve can be clicked.
  await prompt.locator('button[data-action="approve"]').click();
  await popup.close();
  await page.waitForFunction(() => document.getElementById("approval")?.dataset.state === "approved");
  await page.selectOption("#provider", "codex");
  await page.click("#create");
  await page.waitForFunction(() => document.getElementById("status")?.textContent === "idle");
  // The site's grant is the default level (edit): codex calls the page's tool natively.
  await mock.script(codexTool("update_counter", { delta: 3 }, "Done — the counter is now 3. ({output})"));
  await page.fill("#prompt", "Please add 3 to the counter");
  await page.press("#prompt", "Enter");
  await page.waitForFunction(() => document.querySelector(".msg-row.assistant .bubble.done") && document.getElementById("status")?.textContent === "idle", null, { timeout: 120_000 });
  await shot(page, "try-it-after-tool-call");
  console.log(`counter: ${await page.textContent("#counter")}; screenshot ${join(artifacts, "try-it-after-tool-call.png")}`);
  await browser.close().catch(() => undefined);
} finally {
  if (exited === null) {
    process.kill(-start.pid, "SIGINT");
    await new Promise((r) => start.on("exit", r));
  }
  spawnSync(join(bin, "pedelecd"), ["stop"], { env });
  mock.stop();
  // Chromium's last processes may still write into the profile for a moment.
  rmSync(home, { recursive: true, force: true, maxRetries: 20, retryDelay: 100 });
}
