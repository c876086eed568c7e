// Bundles the worker, the content script, the popup and the options page (each one file, no
// imports at run time) into dist/, the unpacked extension Chrome loads.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const out = join(root, "dist");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { worker: "src/worker.ts", content: "src/content.ts", popup: "src/popup.ts", options: "src/options.ts", transfer: "src/transfer.ts" },
  absWorkingDir: root,
  outdir: out,
  bundle: true,
  // Content scripts cannot be modules; one format for all three keeps it simple.
  format: "iife",
  target: "chrome116",
  sourcemap: "linked",
  logLevel: "warning",
});
cpSync(join(root, "static"), out, { recursive: true });
console.log(`extension built in ${out}`);
