#!/usr/bin/env node
// `npm run package`: the zip to upload to the Chrome Web Store,
// release/pedelec-extension-<version>.zip, and the one to submit to
// addons.mozilla.org, release/pedelec-extension-firefox-<version>.zip. The same
// builds as dist/ and dist-firefox/ but without source maps (the store
// packages do not ship src/); the Chrome one with a manifest without `key`:
// the store refuses a manifest that carries one and gives the item its own id
// (docs/sdk-extension.md, "Packaging and the extension id"). Firefox's
// manifest has no `key`; its id is the gecko id.
import { readFileSync, readdirSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { buildExtension, root } from "../build.mjs";
import { writeZip } from "./zip.mjs";

/** The manifest as the store takes it: everything but `key`. */
export function storeManifest(manifest) {
  const { key: _key, ...rest } = manifest;
  return rest;
}

function filesUnder(dir) {
  const out = [];
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...filesUnder(path));
    else out.push(path);
  }
  return out;
}

/** Builds the store zip for `browser` into `outDir`; returns its path and the names it holds. */
export async function packageExtension(outDir = join(root, "release"), { browser = "chromium" } = {}) {
  const staging = mkdtempSync(join(tmpdir(), "pedelec-extension-"));
  try {
    await buildExtension(staging, { sourcemap: false, browser });
    const manifest = JSON.parse(readFileSync(join(staging, "manifest.json"), "utf8"));
    const files = filesUnder(staging).map((path) => {
      const name = relative(staging, path).split("\\").join("/");
      const data = name === "manifest.json" ? Buffer.from(`${JSON.stringify(storeManifest(manifest), null, 2)}\n`) : readFileSync(path);
      return { name, data };
    });
    mkdirSync(outDir, { recursive: true });
    const zip = join(outDir, `pedelec-extension-${browser === "firefox" ? "firefox-" : ""}${manifest.version}.zip`);
    writeFileSync(zip, writeZip(files));
    return { zip, names: files.map((f) => f.name) };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  for (const browser of ["chromium", "firefox"]) {
    const { zip, names } = await packageExtension(undefined, { browser });
    console.log(`${zip}: ${names.length} files, ${statSync(zip).size} bytes`);
  }
}
