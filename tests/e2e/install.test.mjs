// The real Chromium reaches the host `pedelecd install` installed (docs/install.md),
// through the NativeMessagingHosts/ folder install wrote into the profile, and
// that host finds (here: starts) the daemon through its host config alone —
// the browser's environment has no PEDELEC_* variable, as for a browser the
// user starts from the desktop.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { checkBuilt, inPage, NATIVE_HOST_NAME, pidsOf, servePages, startMock, startWorld, until } from "./harness.mjs";

const T = { timeout: 240_000 };

test("the installed host, found through the profile install wrote, starts the daemon with no PEDELEC_* in the browser's environment", T, async (t) => {
  checkBuilt();
  const mock = await startMock();
  t.after(() => mock.stop());
  const site = await servePages();
  t.after(() => site.close());
  const w = await startWorld(t, mock, { installedOnly: true });

  assert.deepEqual(Object.keys(w.browserEnv).filter((k) => k.startsWith("PEDELEC_")), [], "the browser gets no PEDELEC_* variable");
  const manifest = JSON.parse(readFileSync(join(w.profile, `NativeMessagingHosts/${NATIVE_HOST_NAME}.json`), "utf8"));
  assert.equal(manifest.path, join(w.installedBin, "pedelec-native-host"), "the profile's manifest names the installed host");
  const config = JSON.parse(readFileSync(join(w.installedBin, "pedelec-host.json"), "utf8"));
  assert.equal(config.runtimeDir, w.env.PEDELEC_RUNTIME_DIR, "the host config names the installer's socket folder");
  assert.equal(w.pedelecd("status").status, 3, "nothing runs before the page asks");

  await w.approve(site.origin);
  const page = await w.openDemo(site.origin);
  const listed = await inPage(page, (d) => d.client.listProviders());
  assert.ok(listed.ok, `listProviders: ${JSON.stringify(listed.error)}`);
  assert.equal(listed.ok.find((p) => p.code === "codex")?.available, true, "codex (on the browser's PATH) is available");

  // The host that answered is the installed one, with no PEDELEC_* in its environment…
  const hosts = await until("the installed host running", () => {
    const p = pidsOf(join(w.installedBin, "pedelec-native-host"));
    return p.length ? p : null;
  });
  for (const pid of hosts) {
    const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    assert.deepEqual(environ.filter((v) => v.startsWith("PEDELEC_")), [], `host ${pid}'s environment`);
  }
  // …and the daemon it started runs the installed pedelecd on the socket folder of the host config.
  const status = w.pedelecd("status", "--json");
  assert.equal(status.status, 0, status.stderr);
  const doc = JSON.parse(status.stdout);
  assert.equal(doc.runtime_dir, config.runtimeDir);
  assert.equal(readlinkSync(`/proc/${doc.launcher_pid}/exe`), join(w.installedBin, "pedelecd"));
});
