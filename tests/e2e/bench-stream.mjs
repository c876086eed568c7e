// By-hand benchmark (not part of `npm test`): one session's burst of chat
// deltas into a real page, through every hop — the agent's stdout,
// ProviderService, SessionService, the native host, Chrome's native
// messaging, the extension's worker, the content script, window.postMessage
// — to the SDK's onChatDelta; and, while such a burst streams, how long a
// tool request takes from the agent's call to the page's handler. The agent
// is a stub pedelec-agent (a Python loop) so the figures are Pedelec's, not
// a CLI's. Needs the built sdk/, extension/, demo/ and target/release (or
// PEDELEC_BIN_DIR) binaries:
//   node tests/e2e/bench-stream.mjs [deltas=100000] [runs=3] [page stall ms=0]
// Results: docs/benchmarks.md, "Into a real page".
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { extensionWorker, installHost, launchBrowser, privateBinDir, repo, servePages } from "./harness.mjs";

const deltas = Number(process.argv[2] ?? 100_000);
const runs = Number(process.argv[3] ?? 3);
// The page's main thread busy for this long after sendText (0: a page that keeps up): `… 100000 3 1000`.
const stall = Number(process.argv[4] ?? 0);
const from = resolve(process.env.PEDELEC_BIN_DIR ?? join(repo, "target/release"));
const bin = privateBinDir(from);
// The stub agent: `@@burst N [tool]` prints N deltas ("d0 d1 …"); with
// `tool`, halfway it starts `pedelec-cli tool-call stamp {"t": <epoch ms>}`
// in the background and goes on printing.
writeFileSync(
  join(bin, "burst.py"),
  `import json, os, re, subprocess, sys, time
prompt = sys.stdin.read()
out = sys.stdout
out.write('{"type":"session","id":"stub-session"}\\n')
m = re.search(r"@@burst (\\d+)( tool)?", prompt)
n = int(m.group(1)) if m else 1
call = None
for i in range(n):
    out.write('{"type":"chat_delta","text":"d%d "}\\n' % i)
    if m and m.group(2) and i == n // 2:
        out.flush()
        args = json.dumps({"t": time.time() * 1000})
        call = subprocess.Popen([${JSON.stringify(join(bin, "pedelec-cli"))}, "--thread-id", os.environ["PEDELEC_THREAD_ID"], "tool-call", "stamp", args], stdout=subprocess.DEVNULL)
out.write('{"type":"chat","text":"done"}\\n')
out.flush()
if call:
    call.wait()
`,
);
writeFileSync(join(bin, "pedelec-agent"), `#!/bin/sh\n[ "$1" = "--version" ] && echo "pedelec-agent 0.0.0-stub" && exit 0\nexec /usr/bin/python3 ${join(bin, "burst.py")}\n`);
chmodSync(join(bin, "pedelec-agent"), 0o755);

const base = mkdtempSync("/tmp/pdl-bench-");
const env = { PEDELEC_RUNTIME_DIR: join(base, "run"), PEDELEC_HOME: join(base, "home"), HOME: join(base, "user"), PEDELEC_BIN_DIR: bin };
mkdirSync(env.HOME, { recursive: true });
const fullEnv = { ...process.env, ...env };
const run = (b, args) => spawnSync(join(bin, b), args, { env: fullEnv, encoding: "utf8" });
run("pedelecd", ["start"]);
run("pedelec-cli", ["settings", "set", "profile", "ollama", "default", "--model", "stub"]);
installHost(bin, env, join(base, "profile"));
const site = await servePages();
const ctx = await launchBrowser(join(base, "profile"), fullEnv);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  const sw = await extensionWorker(ctx);
  await sw.evaluate((o) => globalThis.pedelecHub.approve(o, { access: "edit", providers: ["ollama"] }), site.origin);
  const page = await ctx.newPage();
  await page.goto(`${site.origin}/`);
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  await page.evaluate(async () => {
    const { client, defineTool } = window.pedelecDemo;
    const stamp = defineTool({ name: "stamp", description: "Records when it was called.", argsSchema: { type: "object", required: ["t"], properties: { t: { type: "number" } } } });
    window.s = await client.createSession({ provider: "ollama", skills: { tools: [stamp] } });
    window.s.onTool("stamp", (args) => {
      window.toolLatency.push(Date.now() - args.t);
      return { ok: true };
    });
    window.toolLatency = [];
  });
  // The content script's counters live in its isolated world: reach it over CDP.
  const cdp = await ctx.newCDPSession(page);
  const worlds = [];
  cdp.on("Runtime.executionContextCreated", (e) => worlds.push(e.context));
  await cdp.send("Runtime.enable");
  const contentHops = async () => {
    for (const w of worlds.filter((w) => w.auxData?.type === "isolated")) {
      const r = await cdp.send("Runtime.evaluate", { contextId: w.id, expression: "globalThis.pedelecHops ? JSON.stringify(globalThis.pedelecHops.snapshot()) : null", returnByValue: true }).catch(() => null);
      if (r?.result?.value) return JSON.parse(r.result.value);
    }
    throw new Error("no content script world with pedelecHops");
  };
  const resetHops = async () => {
    await sw.evaluate(() => globalThis.pedelecHops.reset(true));
    for (const w of worlds.filter((w) => w.auxData?.type === "isolated")) await cdp.send("Runtime.evaluate", { contextId: w.id, expression: "globalThis.pedelecHops?.reset(true)" }).catch(() => null);
  };
  // messages/s and MB/s of one hop over its first-to-last message (chars of JSON ≈ bytes: the text is ASCII).
  const rate = (h) => {
    const s = Math.max(h.last - h.first, 1) / 1000;
    return { messages: h.messages, mb: +(h.chars / 1e6).toFixed(2), msgPerS: Math.round(h.messages / s), mbPerS: +(h.chars / 1e6 / s).toFixed(2), ms: Math.round(h.last - h.first) };
  };
  const rows = { rate: [], calls: [], mbps: [], latency: [], hops: [] };
  for (let r = 0; r < runs; r++) {
    for (const tool of [false, true]) {
      await resetHops();
      const got = await page.evaluate(
        async ([n, tool, stall]) => {
          const s = window.s;
          let count = 0;
          let calls = 0;
          let first = 0;
          let last = 0;
          const parts = [];
          const off = s.onChatDelta((text) => {
            let now = performance.now();
            if (!first && stall > 0) {
              // stall > 0: at the first delta the page's main thread (and its content script) is busy that
              // long, so the rest of the burst queues in front of it; first-to-last is then how fast the
              // page drains a backlog (its read cost), not the rate the host supplies.
              while (performance.now() < now + stall);
              now = performance.now();
            }
            if (!first) first = now;
            last = now;
            calls++;
            parts.push(text);
          });
          await s.sendText(`@@burst ${n}${tool ? " tool" : ""}`);
          off();
          const text = parts.join("");
          count = text.split(" ").length - 1;
          let expected = "";
          for (let i = 0; i < n; i++) expected += `d${i} `;
          return { count, calls, bytes: new TextEncoder().encode(text).length, ms: last - first, same: text === expected };
        },
        [deltas, tool, stall],
      );
      if (!got.same || got.count !== deltas) throw new Error(`run ${r}: ${got.count} of ${deltas} deltas, same text: ${got.same}`);
      const worker = await sw.evaluate(() => globalThis.pedelecHops.snapshot());
      const content = (await contentHops())["to-page"];
      const toPage = worker[`page ${site.origin}`];
      const pageJson = { messages: got.calls, chars: got.bytes, first: 0, last: got.ms };
      const hop = { host: rate(worker.host), worker: rate(toPage), content: rate(content), page: rate(pageJson) };
      // A real turn's counts are consistent: every message toward the page came from a host frame.
      if (!(worker.host.messages >= toPage.messages && toPage.messages > 0 && worker.host.chars > 0 && content.messages >= toPage.messages)) throw new Error(`hop counts inconsistent: ${JSON.stringify(hop)}`);
      if (!tool) rows.hops.push(hop);
      console.log(`  hops: ${Object.entries(hop).map(([k, v]) => `${k} ${v.messages} msgs ${v.mb} MB in ${v.ms} ms = ${v.msgPerS}/s ${v.mbPerS} MB/s`).join("; ")}`);
      if (tool) rows.latency.push(await page.evaluate(() => window.toolLatency.at(-1)));
      else {
        rows.rate.push(Math.round(deltas / (got.ms / 1000)));
        rows.calls.push(got.calls);
        rows.mbps.push(+(got.bytes / 1e6 / (got.ms / 1000)).toFixed(2));
      }
      console.log(`run ${r}${tool ? " (with a tool call)" : ""}: ${got.count} deltas in ${got.calls} onChatDelta calls over ${got.ms.toFixed(0)} ms`);
    }
  }
  console.log(`page.deltas_per_s median ${median(rows.rate)} (runs: ${rows.rate.join(", ")}); onChatDelta calls (messages the page got): ${rows.calls.join(", ")}; text MB/s at the page: ${rows.mbps.join(", ")}`);
  for (const k of ["host", "worker", "content", "page"]) {
    const name = { host: "host → worker (native port)", worker: "worker → content script", content: "content script → page (postMessage)", page: "page onChatDelta (text only)" }[k];
    console.log(`hop ${name}: msgs/s ${rows.hops.map((h) => h[k].msgPerS).join(", ")}; MB/s ${rows.hops.map((h) => h[k].mbPerS).join(", ")}; msgs ${rows.hops.map((h) => h[k].messages).join(", ")}`);
  }
  console.log(`page.tool_call_during_burst_ms median ${median(rows.latency)} (runs: ${rows.latency.join(", ")})`);
} finally {
  await ctx.close();
  run("pedelecd", ["stop"]);
  site.close();
  rmSync(base, { recursive: true, force: true });
  rmSync(bin, { recursive: true, force: true });
}
