// The WebExtension API object of the browser running the extension: Firefox's
// `browser` (promise-based), else Chrome's `chrome` (whose MV3 calls return
// promises too). Each entry point takes it from here, so one source serves
// both builds (docs/sdk-extension.md, "Firefox").
export function webext<T>(): T | undefined {
  const g = globalThis as { browser?: unknown; chrome?: unknown };
  return (g.browser ?? g.chrome) as T | undefined;
}
