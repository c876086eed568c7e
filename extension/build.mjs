// Bundles the worker, the content script, the popup and the options page (each one file, no
// imports at run time) and copies static/ (manifest, pages, styles, icons): `node build.mjs`
// makes dist/, the unpacked extension Chrome loads (with source maps into src/), and
// dist-firefox/, the same code with Firefox's manifest (firefox.mjs).
// scripts/package.mjs uses buildExtension() for the store packages (no maps, no `key`).
import { build } from "esbuild";
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { firefoxAddonId, firefoxManifest } from "./firefox.mjs";

export const root = dirname(fileURLToPath(import.meta.url));

/** Builds the extension into `out` (emptied first), for `browser` "chromium" or "firefox". */
export async function buildExtension(out, { sourcemap = true, browser = "chromium" } = {}) {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  await build({
    entryPoints: { worker: "src/worker.ts", content: "src/content.ts", popup: "src/popup.ts", options: "src/options.ts", transfer: "src/transfer.ts" },
    absWorkingDir: root,
    outdir: out,
    bundle: true,
    // Content scripts cannot be modules; one format for all of them keeps it simple.
    format: "iife",
    target: browser === "firefox" ? "firefox140" : "chrome116",
    sourcemap: sourcemap ? "linked" : false,
    logLevel: "warning",
  });
  cpSync(join(root, "static"), out, { recursive: true });
  if (browser === "firefox") {
    const manifest = JSON.parse(readFileSync(join(out, "manifest.json"), "utf8"));
    writeFileSync(join(out, "manifest.json"), `${JSON.stringify(firefoxManifest(manifest, firefoxAddonId(root)), null, 2)}\n`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const out = join(root, "dist");
  await buildExtension(out);
  const firefox = join(root, "dist-firefox");
  await buildExtension(firefox, { browser: "firefox" });
  console.log(`extension built in ${out} (Chromium) and ${firefox} (Firefox)`);
}
