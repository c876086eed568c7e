// Builds the package: the ES module build (dist/) and the CommonJS build
// (dist/cjs/, with a package.json that makes its .js files CommonJS), each with
// its declarations and source maps (they point at src/, which the package
// ships), and copies the repository's LICENSE beside package.json so `npm pack`
// includes it (the one LICENSE stays at the repository root).
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules/typescript/bin/tsc");
rmSync(join(root, "dist"), { recursive: true, force: true });
for (const project of ["tsconfig.build.json", "tsconfig.cjs.json"]) {
  const r = spawnSync(process.execPath, [tsc, "-p", project], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
mkdirSync(join(root, "dist/cjs"), { recursive: true });
writeFileSync(join(root, "dist/cjs/package.json"), `${JSON.stringify({ type: "commonjs" }, null, 2)}\n`);
copyFileSync(join(root, "../LICENSE"), join(root, "LICENSE"));
