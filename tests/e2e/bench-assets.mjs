// By-hand benchmark (not part of `npm test`): asset bodies from a page on
// 127.0.0.1 to the loopback transfer server, two ways:
//   direct — the page fetch()es the ticket URL itself (the first SDK cut);
//   frame  — the SDK's path now: the body is handed (transferred ArrayBuffer)
//            to the extension's hidden transfer frame, which fetches it.
// Needs the built sdk/, extension/, demo/ and target/debug binaries:
//   node tests/e2e/bench-assets.mjs [runs]
// Results and the decision: docs/sdk-extension.md "Assets".
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { buildDir, extensionWorker, installHost, launchBrowser, servePages } from "./harness.mjs";

const runs = Number(process.argv[2] ?? 5);
const base = mkdtempSync("/tmp/pdl-bench-");
const env = { PEDELEC_RUNTIME_DIR: join(base, "run"), PEDELEC_HOME: join(base, "home"), HOME: join(base, "user"), PEDELEC_BIN_DIR: buildDir };
mkdirSync(env.HOME, { recursive: true });
installHost(buildDir, env, join(base, "profile"));
const site = await servePages();
const ctx = await launchBrowser(join(base, "profile"), { ...process.env, ...env });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  const sw = await extensionWorker(ctx);
  await sw.evaluate((o) => globalThis.pedelecHub.approve(o, { access: "edit", providers: ["codex", "claude", "ollama"] }), site.origin);
  const page = await ctx.newPage();
  await page.goto(`${site.origin}/`);
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  const sessionId = await page.evaluate(async () => {
    window.s = await window.pedelecDemo.client.createSession({ provider: "codex" });
    return window.s.sessionId;
  });
  console.log("| body | direct PUT | frame PUT (SDK) | direct GET | frame GET (SDK) |\n|---|---|---|---|---|");
  for (const mib of [1, 8, 32]) {
    const t = { directPut: [], framePut: [], directGet: [], frameGet: [] };
    for (let i = 0; i < runs; i++) {
      const name = `b${mib}-${i}.bin`;
      // direct: tickets made by the worker for this page's origin, fetched by the page
      const up = await sw.evaluate(({ origin, sessionId, name, size }) => globalThis.pedelecHub.native.request("create_upload_ticket", origin, { sessionId, name, sizeBytes: size, contentType: "" }), { origin: site.origin, sessionId, name: `d-${name}`, size: mib * 1048576 });
      t.directPut.push(
        await page.evaluate(async ({ url, token, mib }) => {
          const body = new Blob([new Uint8Array(mib * 1048576)]);
          const t0 = performance.now();
          const r = await fetch(url, { method: "PUT", headers: { authorization: `Bearer ${token}` }, body });
          if (!r.ok) throw new Error(`direct PUT ${r.status}`);
          return performance.now() - t0;
        }, { ...up, mib }),
      );
      const down = await sw.evaluate(({ origin, sessionId, path }) => globalThis.pedelecHub.native.request("create_download_ticket", origin, { sessionId, path }), { origin: site.origin, sessionId, path: `/d-${name}` });
      t.directGet.push(
        await page.evaluate(async ({ url, token }) => {
          const t0 = performance.now();
          const r = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
          const b = await r.arrayBuffer();
          if (!r.ok || b.byteLength === 0) throw new Error(`direct GET ${r.status}`);
          return performance.now() - t0;
        }, down),
      );
      // frame: the SDK's own calls (ticket round trip included, as a page sees it)
      const f = await page.evaluate(async ({ mib, name }) => {
        const body = new Blob([new Uint8Array(mib * 1048576)]);
        const t0 = performance.now();
        await window.s.uploadAsset(body, { path: `/f-${name}` });
        const put = performance.now() - t0;
        const t1 = performance.now();
        const file = await window.s.readAsset(`/f-${name}`, "file");
        if (file.size !== mib * 1048576) throw new Error("size");
        return { put, get: performance.now() - t1 };
      }, { mib, name });
      t.framePut.push(f.put);
      t.frameGet.push(f.get);
    }
    const fmt = (xs) => `${median(xs).toFixed(0)} ms (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;
    console.log(`| ${mib} MiB | ${fmt(t.directPut)} | ${fmt(t.framePut)} | ${fmt(t.directGet)} | ${fmt(t.frameGet)} |`);
  }
  console.log(`median (min–max) of ${runs} runs; direct excludes the ticket round trip, frame (the SDK's calls) includes it`);
} finally {
  await ctx.close();
  site.close();
  spawnSync(join(buildDir, "pedelecd"), ["stop"], { env: { ...process.env, ...env } });
  rmSync(base, { recursive: true, force: true });
}
