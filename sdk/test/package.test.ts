import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

describe("the npm package", () => {
  it("npm pack ships the ESM build with .d.ts and the README, nothing else, and no runtime dependencies", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    expect(pkg.name).toBe("@pedelec/sdk");
    expect(pkg.type).toBe("module");
    expect(pkg.dependencies ?? {}).toEqual({});
    const r = spawnSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: new URL("..", import.meta.url), encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    const files = (JSON.parse(r.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path);
    expect(files).toEqual(expect.arrayContaining(["package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/protocol/native.d.ts"]));
    expect(files.filter((f) => !f.startsWith("dist/") && !["package.json", "README.md"].includes(f))).toEqual([]);
    // The built entry imports only relative files.
    const entry = readFileSync(new URL("../dist/index.js", import.meta.url), "utf8");
    for (const m of entry.matchAll(/from "([^"]+)"/g)) expect(m[1]).toMatch(/^\.\//);
  });

  it("the packed tarball installs into a fresh project and imports; outside a page it says EXTENSION_UNAVAILABLE", () => {
    const dir = mkdtempSync(join(tmpdir(), "pedelec-pack-"));
    try {
      const sdk = new URL("..", import.meta.url).pathname;
      const pack = spawnSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: sdk, encoding: "utf8" });
      expect(pack.status, pack.stderr).toBe(0);
      const tarball = join(dir, (JSON.parse(pack.stdout) as Array<{ filename: string }>)[0]!.filename);
      const app = join(dir, "app");
      spawnSync("mkdir", ["-p", app]);
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module" }));
      const install = spawnSync("npm", ["install", "--offline", "--no-audit", "--no-fund", tarball], { cwd: app, encoding: "utf8" });
      expect(install.status, install.stderr).toBe(0);
      writeFileSync(
        join(app, "main.js"),
        'import { Pedelec, defineTool, PedelecError } from "@pedelec/sdk";\n' +
          "const p = new Pedelec();\n" +
          "try { await p.listProviders(); } catch (e) { console.log(e instanceof PedelecError, e.code, typeof defineTool); }\n",
      );
      const run = spawnSync("node", ["main.js"], { cwd: app, encoding: "utf8" });
      expect(run.stdout.trim(), run.stderr).toBe("true EXTENSION_UNAVAILABLE function");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
