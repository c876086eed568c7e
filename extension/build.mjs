// Bundles the worker, the content script, the popup and the options page (each one file, no
// imports at run time) and copies static/ (manifest, pages, styles, icons): `node build.mjs`
// makes dist/, the unpacked extension Chrome loads (with source maps into src/).
// scripts/package.mjs uses buildExtension() for the store zip (no maps, no `key`).
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const root = dirname(fileURLToPath(import.meta.url));

/** Builds the extension into `out` (emptied first). */
export async function buildExtension(out, { sourcemap = true } = {}) {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  await build({
    entryPoints: { worker: "src/worker.ts", content: "src/content.ts", popup: "src/popup.ts", options: "src/options.ts", transfer: "src/transfer.ts" },
    absWorkingDir: root,
    outdir: out,
    bundle: true,
    // Content scripts cannot be modules; one format for all of them keeps it simple.
    format: "iife",
    target: "chrome116",
    sourcemap: sourcemap ? "linked" : false,
    logLevel: "warning",
  });
  cpSync(join(root, "static"), out, { recursive: true });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const out = join(root, "dist");
  await buildExtension(out);
  console.log(`extension built in ${out}`);
}
