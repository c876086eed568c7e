// Bundles the demo (src/main.ts plus @pedelec/sdk from ../sdk/dist) into
// dist/app.js and copies the static files. One file, no runtime imports, so
// any static file server can serve dist/.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const out = join(root, "dist");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: "src/main.ts" },
  absWorkingDir: root,
  outdir: out,
  bundle: true,
  format: "esm",
  target: "chrome116",
  sourcemap: "linked",
  logLevel: "warning",
});
cpSync(join(root, "static"), out, { recursive: true });
console.log(`demo built in ${out}`);
