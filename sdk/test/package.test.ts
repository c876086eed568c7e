import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const sdk = new URL("..", import.meta.url).pathname;
const repoRoot = join(sdk, "..");
const pkg = JSON.parse(readFileSync(join(sdk, "package.json"), "utf8"));
const cargoToml = readFileSync(join(repoRoot, "Cargo.toml"), "utf8");

/** What `npm pack` puts in the tarball (the build must have run: `npm test` builds first). */
function packedFiles(): string[] {
  const r = spawnSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: sdk, encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path);
}

describe("the npm package", () => {
  it("has the metadata a scoped public package needs, under the repository's one license", () => {
    expect(pkg.name).toBe("@pedelec/sdk");
    expect(pkg.type).toBe("module");
    expect(pkg.dependencies ?? {}).toEqual({});
    // The workspace's license (Cargo.toml), the LICENSE at the repository root.
    const workspaceLicense = /^license = "([^"]+)"/m.exec(cargoToml)?.[1];
    expect(workspaceLicense).toBe("Apache-2.0");
    expect(pkg.license).toBe(workspaceLicense);
    expect(readFileSync(join(repoRoot, "LICENSE"), "utf8")).toContain("Apache License\n                           Version 2.0, January 2004");
    expect(pkg.publishConfig).toEqual({ access: "public" });
    expect(pkg.repository).toMatchObject({ type: "git", directory: "sdk" });
    expect(pkg.repository.url).toMatch(/^git\+https:\/\//);
    expect(pkg.homepage).toMatch(/^https:\/\//);
    expect(pkg.bugs?.url).toMatch(/^https:\/\//);
    expect(pkg.engines?.node).toMatch(/^>=\d+/);
  });

  it("exports types and code for both import and require", () => {
    expect(pkg.exports["."]).toEqual({
      import: { types: "./dist/index.d.ts", default: "./dist/index.js" },
      require: { types: "./dist/cjs/index.d.ts", default: "./dist/cjs/index.js" },
    });
    expect(pkg.main).toBe("./dist/cjs/index.js");
    expect(pkg.types).toBe("./dist/cjs/index.d.ts");
    // dist/cjs has a package.json of its own that makes its .js files CommonJS.
    expect(JSON.parse(readFileSync(join(sdk, "dist/cjs/package.json"), "utf8"))).toEqual({ type: "commonjs" });
  });

  it("npm pack ships both builds, their declarations and maps, the sources the maps name, README and LICENSE; nothing else", () => {
    const files = packedFiles();
    expect(files).toEqual(
      expect.arrayContaining([
        "package.json",
        "README.md",
        "LICENSE",
        "dist/index.js",
        "dist/index.d.ts",
        "dist/protocol/native.d.ts",
        "dist/cjs/package.json",
        "dist/cjs/index.js",
        "dist/cjs/index.d.ts",
        "src/index.ts",
      ]),
    );
    expect(files.filter((f) => !f.startsWith("dist/") && !f.startsWith("src/") && !["package.json", "README.md", "LICENSE"].includes(f))).toEqual([]);
    // The shipped LICENSE is the repository's.
    expect(readFileSync(join(sdk, "LICENSE"), "utf8")).toBe(readFileSync(join(repoRoot, "LICENSE"), "utf8"));
    // The built entries import only relative files.
    for (const entry of ["dist/index.js", "dist/cjs/index.js"]) {
      const text = readFileSync(join(sdk, entry), "utf8");
      for (const m of text.matchAll(/(?:from |require\()"([^"]+)"/g)) expect(m[1], entry).toMatch(/^\.\//);
    }
  });

  it("every source map in the package names only files the package ships", () => {
    const files = packedFiles();
    const shipped = new Set(files);
    const maps = files.filter((f) => f.endsWith(".map"));
    expect(maps.length).toBeGreaterThan(10);
    for (const map of maps) {
      const { sources } = JSON.parse(readFileSync(join(sdk, map), "utf8")) as { sources: string[] };
      expect(sources.length, map).toBeGreaterThan(0);
      for (const source of sources) expect(shipped.has(normalize(join(dirname(map), source))), `${map} → ${source}`).toBe(true);
    }
  });
});

describe("the packed tarball in a fresh project", () => {
  let dir = "";
  let app = "";

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "pedelec-pack-"));
    const pack = spawnSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: sdk, encoding: "utf8" });
    expect(pack.status, pack.stderr).toBe(0);
    const tarball = join(dir, (JSON.parse(pack.stdout) as Array<{ filename: string }>)[0]!.filename);
    app = join(dir, "app");
    mkdirSync(app);
    // No "type": a CommonJS project by default, as most Jest set-ups are.
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0" }));
    const install = spawnSync("npm", ["install", "--offline", "--no-audit", "--no-fund", tarball], { cwd: app, encoding: "utf8" });
    expect(install.status, install.stderr).toBe(0);
  }, 60_000);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const probe =
    "const p = new Pedelec();\n" +
    "p.listProviders().catch((e) => console.log(e instanceof PedelecError, e.code, typeof defineTool, ErrorCodes.SESSION_BUSY, PROVIDER_CODES.join()));\n";

  it("imports as an ES module; outside a page it says EXTENSION_UNAVAILABLE", () => {
    writeFileSync(join(app, "main.mjs"), 'import { Pedelec, defineTool, PedelecError, ErrorCodes, PROVIDER_CODES } from "@pedelec/sdk";\n' + probe);
    const run = spawnSync("node", ["main.mjs"], { cwd: app, encoding: "utf8" });
    expect(run.stdout.trim(), run.stderr).toBe("true EXTENSION_UNAVAILABLE function SESSION_BUSY codex,antigravity,opencode,cursor,claude,ollama");
  });

  it("loads with require() from CommonJS", () => {
    writeFileSync(join(app, "main.cjs"), 'const { Pedelec, defineTool, PedelecError, ErrorCodes, PROVIDER_CODES } = require("@pedelec/sdk");\n' + probe);
    const run = spawnSync("node", ["main.cjs"], { cwd: app, encoding: "utf8" });
    expect(run.stdout.trim(), run.stderr).toBe("true EXTENSION_UNAVAILABLE function SESSION_BUSY codex,antigravity,opencode,cursor,claude,ollama");
  });
});
