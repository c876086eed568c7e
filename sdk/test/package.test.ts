import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
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
});
