// The extension as Chrome and the Chrome Web Store take it: icons at every size
// Chrome uses, and `npm run package`'s zips (scripts/package.mjs), Firefox's too.
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error plain ESM scripts without types
import { packageExtension } from "../scripts/package.mjs";
// @ts-expect-error plain ESM scripts without types
import { readZip, writeZip } from "../scripts/zip.mjs";
// @ts-expect-error plain ESM scripts without types
import { FIREFOX_MIN_VERSION } from "../firefox.mjs";
import { FIREFOX_ADDON_ID } from "../../sdk/src/protocol/bridge.js";

const root = new URL("..", import.meta.url).pathname;
const manifest = JSON.parse(readFileSync(join(root, "static/manifest.json"), "utf8"));

/** Width and height from a PNG's IHDR. */
function pngSize(bytes: Buffer): [number, number] {
  expect(bytes.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  expect(bytes.subarray(12, 16).toString("latin1")).toBe("IHDR");
  return [bytes.readUInt32BE(16), bytes.readUInt32BE(20)];
}

describe("icons", () => {
  it("the manifest names an icon for 16, 32, 48 and 128 px, for the extension and its toolbar button, each a PNG of its size", () => {
    expect(Object.keys(manifest.icons)).toEqual(["16", "32", "48", "128"]);
    expect(Object.keys(manifest.action.default_icon)).toEqual(["16", "32"]);
    for (const icons of [manifest.icons, manifest.action.default_icon]) {
      for (const [size, path] of Object.entries(icons as Record<string, string>)) {
        expect(pngSize(readFileSync(join(root, "static", path))), path).toEqual([Number(size), Number(size)]);
      }
    }
  });
});

describe("npm run package", () => {
  let dir = "";
  let result: { zip: string; names: string[] };
  let files: Map<string, Buffer>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "pedelec-store-"));
    result = await packageExtension(dir);
    files = readZip(readFileSync(result.zip));
  }, 60_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("makes release/pedelec-extension-<version>.zip with the bundles, the pages and every static file", () => {
    expect(result.zip).toBe(join(dir, `pedelec-extension-${manifest.version}.zip`));
    const staticFiles = (function walk(d: string, prefix = ""): string[] {
      return readdirSync(join(root, "static", d), { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(join(d, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`],
      );
    })("");
    expect([...files.keys()].sort()).toEqual([...staticFiles, "worker.js", "content.js", "popup.js", "options.js", "transfer.js"].sort());
    // Everything the manifest points at is in it.
    const named = [
      manifest.background.service_worker,
      ...manifest.content_scripts.flatMap((c: { js: string[] }) => c.js),
      manifest.action.default_popup,
      manifest.options_ui.page,
      ...manifest.web_accessible_resources.flatMap((w: { resources: string[] }) => w.resources),
      ...Object.values(manifest.icons as Record<string, string>),
    ];
    for (const name of named) expect(files.has(name), name).toBe(true);
  });

  it("its manifest has no key (the store refuses one) and is otherwise the unpacked one", () => {
    const packed = JSON.parse(files.get("manifest.json")!.toString("utf8"));
    expect(manifest.key).toMatch(/^MII/);
    expect("key" in packed).toBe(false);
    const { key: _key, ...rest } = manifest;
    expect(packed).toEqual(rest);
  });

  it("ships no source maps and no reference to one (src/ is not in the store package)", () => {
    expect([...files.keys()].filter((n) => n.endsWith(".map"))).toEqual([]);
    for (const [name, data] of files) if (name.endsWith(".js")) expect(data.toString("utf8"), name).not.toContain("sourceMappingURL");
  });

  it("the zip reader and writer agree, byte for byte, and the same files make the same zip", () => {
    const again = writeZip([...files].map(([name, data]) => ({ name, data })));
    expect(again.equals(readFileSync(result.zip))).toBe(true);
  });
});

describe("npm run package, Firefox", () => {
  let dir = "";
  let files: Map<string, Buffer>;
  let zip = "";

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "pedelec-amo-"));
    zip = (await packageExtension(dir, { browser: "firefox" })).zip;
    files = readZip(readFileSync(zip));
  }, 60_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("the same files as Chrome's, and a manifest Firefox takes: an event page, the gecko id, nothing Chrome-only", () => {
    expect(zip).toBe(join(dir, `pedelec-extension-firefox-${manifest.version}.zip`));
    const packed = JSON.parse(files.get("manifest.json")!.toString("utf8"));
    const { key: _key, minimum_chrome_version: _min, externally_connectable: _ext, background: _bg, ...shared } = manifest;
    expect(packed).toEqual({
      ...shared,
      background: { scripts: ["worker.js"] },
      browser_specific_settings: { gecko: { id: FIREFOX_ADDON_ID, strict_min_version: FIREFOX_MIN_VERSION } },
    });
    for (const name of ["worker.js", "content.js", "popup.js", "options.js", "transfer.js", "popup.html", "options.html", "transfer.html"]) expect(files.has(name), name).toBe(true);
    expect([...files.keys()].filter((n) => n.endsWith(".map"))).toEqual([]);
  });
});
