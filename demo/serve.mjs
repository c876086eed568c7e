#!/usr/bin/env node
// A static file server for demo/dist on 127.0.0.1 (no dependencies). Used by
// ../start.sh. Usage: node serve.mjs [--port N] [--dir DIR]; prints
// {"url":"http://127.0.0.1:N/"} once listening. Port 0 (default) picks a free one.
import { createServer } from "node:http";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : fallback;
};
const dir = resolve(opt("--dir", join(dirname(fileURLToPath(import.meta.url)), "dist")));
const port = Number(opt("--port", "0"));
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css", ".map": "application/json", ".svg": "image/svg+xml", ".json": "application/json" };

const server = createServer((req, res) => {
  const path = new URL(req.url ?? "/", "http://x").pathname;
  const file = normalize(join(dir, path === "/" ? "index.html" : decodeURIComponent(path)));
  // Only files inside dir.
  if (!file.startsWith(dir + "/") || !existsSync(file) || !statSync(file).isFile()) {
    res.writeHead(404, { "content-type": "text/plain" }).end("not found");
    return;
  }
  res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" }).end(readFileSync(file));
});
server.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/` }));
});
for (const s of ["SIGINT", "SIGTERM"]) process.on(s, () => server.close(() => process.exit(0)));
