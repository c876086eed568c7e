// By-hand benchmark (not part of `npm test`): asset bodies from a page on
// 127.0.0.1 straight to the loopback transfer server (the SDK's path) against
// the extension path (bytes handed to the extension worker, which PUTs them).
// Needs the built sdk/ and extension/ and target/debug binaries:
//   node tests/e2e/bench-assets.mjs
// Results and the decision: docs/sdk-extension.md "Assets".
import { spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync, rmSync, cpSync } from "node:fs";
import { join, normalize, extname } from "node:path";
import { chromium } from "playwright-core";
const repo = new URL("../..", import.meta.url).pathname.replace(/\/$/, ""), binDir = join(repo, "target/debug"), sdkDist = join(repo, "sdk/dist");
const ID = "ekeclpceddngodnkncegoclkkeknaacb";
const base = mkdtempSync("/tmp/pdl-x-");
const ext = join(base, "ext"); cpSync(join(repo, "extension/dist"), ext, { recursive: true });
const man = JSON.parse(readFileSync(join(ext, "manifest.json"))); man.host_permissions = ["http://127.0.0.1/*"]; writeFileSync(join(ext, "manifest.json"), JSON.stringify(man));
const env = { PEDELEC_RUNTIME_DIR: join(base, "run"), PEDELEC_HOME: join(base, "home"), HOME: join(base, "user"), PEDELEC_BIN_DIR: binDir };
mkdirSync(env.HOME, { recursive: true }); mkdirSync(join(base, "profile/NativeMessagingHosts"), { recursive: true });
writeFileSync(join(base, "profile/NativeMessagingHosts/dev.pedelec.host.json"), JSON.stringify({ name: "dev.pedelec.host", description: "x", path: join(binDir, "pedelec-native-host"), type: "stdio", allowed_origins: [`chrome-extension://${ID}/`] }));
const server = createServer((req, res) => { const u = new URL(req.url, "http://x"); if (u.pathname === "/") return res.writeHead(200, { "content-type": "text/html" }).end(`<script type=module>import {Pedelec} from "/sdk/index.js"; window.Pedelec=Pedelec; document.title="ready"</script>`); const f = normalize(join(sdkDist, u.pathname.slice(5))); if (existsSync(f)) return res.writeHead(200, { "content-type": "text/javascript" }).end(readFileSync(f)); res.writeHead(404).end(); });
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const origin = `http://127.0.0.1:${server.address().port}`;
const ctx = await chromium.launchPersistentContext(join(base, "profile"), { executablePath: "/usr/bin/chromium", headless: true, env: { ...process.env, ...env }, ignoreDefaultArgs: ["--disable-extensions"], args: ["--no-sandbox", `--disable-extensions-except=${ext}`, `--load-extension=${ext}`, "--no-first-run"] });
try {
  const sw = ctx.serviceWorkers()[0] ?? await ctx.waitForEvent("serviceworker");
  await sw.evaluate((o) => pedelecHub.approve(o), origin);
  const page = await ctx.newPage(); await page.goto(origin + "/"); await page.waitForFunction(() => document.title === "ready");
  const sessionId = await page.evaluate(async () => { window.s = await new Pedelec().createSession({ provider: "codex" }); return window.s.sessionId; });
  for (const mib of [1, 8, 32]) {
    const direct = await page.evaluate(async (mib) => { const b = new Blob([new Uint8Array(mib * 1048576)]); const t = performance.now(); await window.s.uploadAsset(b, { path: `/d${mib}.bin` }); const up = performance.now() - t; const t2 = performance.now(); const f = await window.s.readAsset(`/d${mib}.bin`, "file"); return { up, down: performance.now() - t2, size: f.size }; }, mib);
    // Extension path: extension ports carry JSON, so the body crosses page -> content script -> worker as base64; then the worker PUTs it (host permission for 127.0.0.1 added to a copy of the manifest).
    const viaExt = await sw.evaluate(async ({ mib, origin, sessionId }) => {
      const bytes = new Uint8Array(mib * 1048576);
      // cost of crossing the port: base64 encode + decode of the body
      const t0 = performance.now();
      let s = ""; for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      const b64 = btoa(s); const bin = atob(b64); const back = new Uint8Array(bin.length); for (let i = 0; i < bin.length; i++) back[i] = bin.charCodeAt(i);
      const encode = performance.now() - t0;
      const tk = await pedelecHub.native.request("create_upload_ticket", origin, { sessionId, name: `e${mib}.bin`, sizeBytes: back.length, contentType: "" });
      const t1 = performance.now();
      const r = await fetch(tk.url, { method: "PUT", headers: { authorization: `Bearer ${tk.token}` }, body: back });
      return { encode, put: performance.now() - t1, status: r.status, body: (await r.text()).slice(0, 200) };
    }, { mib, origin, sessionId });
    console.log(mib, "MiB direct", JSON.stringify(direct), "viaExt", JSON.stringify(viaExt));
  }
} finally { await ctx.close(); server.close(); spawnSync(join(binDir, "pedelecd"), ["stop"], { env: { ...process.env, ...env } }); rmSync(base, { recursive: true, force: true }); }
