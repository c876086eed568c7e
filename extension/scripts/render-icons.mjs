#!/usr/bin/env node
// Renders the extension's icons from their SVG sources with the real Chromium
// (Debian's, as the browser suite uses; PEDELEC_CHROMIUM to choose another):
// static/icons/pedelec.svg at 32, 48 and 128 px, static/icons/pedelec-small.svg
// (no spark, bolder, for the toolbar) at 16 px. The PNGs are committed; run this
// after changing an SVG:  node scripts/render-icons.mjs
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const icons = join(dirname(fileURLToPath(import.meta.url)), "../static/icons");
const chromium = process.env.PEDELEC_CHROMIUM ?? "/usr/bin/chromium";
/** Which SVG each size Chrome uses is drawn from. */
const ICON_SOURCES = { 16: "pedelec-small.svg", 32: "pedelec.svg", 48: "pedelec.svg", 128: "pedelec.svg" };

const work = mkdtempSync(join(tmpdir(), "pedelec-icons-"));
try {
  for (const [size, source] of Object.entries(ICON_SOURCES)) {
    const page = join(work, `icon-${size}.html`);
    const svg = readFileSync(join(icons, source), "utf8");
    writeFileSync(page, `<!doctype html><style>html,body{margin:0;background:transparent}svg{display:block;width:${size}px;height:${size}px}</style>${svg}`);
    const out = join(icons, `icon-${size}.png`);
    const r = spawnSync(
      chromium,
      ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--default-background-color=00000000", `--window-size=${size},${size}`, `--screenshot=${out}`, `file://${page}`],
      { encoding: "utf8", timeout: 60_000 },
    );
    if (r.status !== 0) throw new Error(`chromium failed for ${size} px: ${r.stderr || r.error}`);
    console.log(`${out} (${statSync(out).size} bytes)`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
