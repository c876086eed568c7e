// The Firefox build's manifest, made from the one in static/ (one source, two
// builds; docs/sdk-extension.md, "Firefox"). Firefox runs the worker as a
// background event page (it has no extension service workers), identifies the
// add-on by `browser_specific_settings.gecko.id` instead of a `key`, and knows
// neither `externally_connectable` nor `minimum_chrome_version`.
import { readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The oldest Firefox the add-on installs in: the ESR before the one the suite
 * runs (153), with every WebExtension API the extension uses (MV3 event
 * pages, storage.session, runtime.MessageSender.origin, action.openPopup).
 */
export const FIREFOX_MIN_VERSION = "140.0";

/** The add-on id, from its one home (sdk/src/protocol/bridge.ts). */
export function firefoxAddonId(root) {
  const source = readFileSync(join(root, "../sdk/src/protocol/bridge.ts"), "utf8");
  const m = source.match(/export const FIREFOX_ADDON_ID = "([^"]+)"/);
  if (!m) throw new Error("FIREFOX_ADDON_ID not found in sdk/src/protocol/bridge.ts");
  return m[1];
}

/** `manifest` (Chromium's) as Firefox takes it. */
export function firefoxManifest(manifest, addonId) {
  const { key: _key, minimum_chrome_version: _min, externally_connectable: _ext, background, ...rest } = manifest;
  return {
    ...rest,
    background: { scripts: [background.service_worker] },
    browser_specific_settings: { gecko: { id: addonId, strict_min_version: FIREFOX_MIN_VERSION } },
  };
}
