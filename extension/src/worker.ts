// MV3 service worker entry: all logic is in Hub (tested with a fake chrome).
import type { ChromeApi } from "./chrome-api.js";
import { Hub } from "./hub/index.js";
import { webext } from "./webext.js";

const hub = new Hub(webext<ChromeApi>()!);
// Synchronously at top level, so a port that wakes the worker is not missed.
hub.start();
// For debugging from the worker's DevTools console (and the browser smoke test).
(globalThis as { pedelecHub?: Hub }).pedelecHub = hub;
