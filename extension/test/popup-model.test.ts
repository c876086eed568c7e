import { describe, expect, it } from "vitest";
import type { HostState } from "../../sdk/src/protocol/bridge.js";
import { EXTENSION_ID } from "../../sdk/src/protocol/bridge.js";
import { activityByOrigin, activityText, hostAdvice, installedPedelecd, siteState } from "../src/popup-model.js";
import { site } from "./fake-chrome.js";

const host = (over: Partial<HostState> = {}): HostState => ({
  connected: false,
  hostVersion: null,
  protocolVersion: null,
  coreRunning: null,
  userName: null,
  lastError: null,
  lastErrorCode: null,
  ...over,
});

describe("Pedelec on this computer, in the popup", () => {
  it("running, and installed but stopped (with the command that starts it)", () => {
    expect(hostAdvice(host({ connected: true, hostVersion: "0.1.0", protocolVersion: 2, coreRunning: true }), EXTENSION_ID, "linux")).toEqual({
      state: "running",
      title: "Pedelec is running on this computer",
      text: "Version 0.1.0.",
      commands: [],
    });
    // Closed because idle: the last answers still hold.
    expect(hostAdvice(host({ hostVersion: "0.1.0", coreRunning: true }), EXTENSION_ID, "linux").state).toBe("running");
    const idle = hostAdvice(host({ connected: true, hostVersion: "0.1.0", coreRunning: false }), EXTENSION_ID, "linux");
    expect(idle.state).toBe("idle");
    expect(idle.commands.map((c) => c.command)).toEqual(["~/.local/lib/pedelec/bin/pedelecd start"]);
    expect(hostAdvice(host(), EXTENSION_ID, "linux").state).toBe("checking");
  });

  it("not installed (Chrome finds no host): how to install it", () => {
    const a = hostAdvice(host({ lastError: "the native host disconnected: Specified native messaging host not found.", lastErrorCode: "NATIVE_HOST_UNAVAILABLE" }), EXTENSION_ID, "linux");
    expect(a.state).toBe("not_installed");
    expect(a.title).toBe("Pedelec is not installed on this computer");
    expect(a.commands.map((c) => c.command)).toEqual(["./start.sh", "./build-release.sh && target/release/pedelecd install"]);
  });

  it("installed for another extension id: the install command naming this extension's id", () => {
    const a = hostAdvice(host({ lastError: "the native host disconnected: Access to the specified native messaging host is forbidden.", lastErrorCode: "NATIVE_HOST_UNAVAILABLE" }), "abcdefghijklmnopabcdefghijklmnop", "mac");
    expect(a.state).toBe("not_allowed");
    expect(a.commands.map((c) => c.command)).toEqual(['"$HOME/Library/Application Support/Pedelec/bin/pedelecd" install --extension-id abcdefghijklmnopabcdefghijklmnop']);
  });

  it("another protocol version, or a host that stopped: what to do", () => {
    expect(hostAdvice(host({ lastError: "the native host speaks protocol 3, the extension 2", lastErrorCode: "PROTOCOL_MISMATCH" }), EXTENSION_ID, "linux").state).toBe("mismatch");
    const broken = hostAdvice(host({ hostVersion: "0.1.0", lastError: "the native host disconnected: Native host has exited.", lastErrorCode: "NATIVE_HOST_UNAVAILABLE" }), EXTENSION_ID, "linux");
    expect(broken.state).toBe("broken");
    expect(broken.text).toBe("The native host disconnected: Native host has exited. See what is wrong and how to fix it:");
    expect(broken.commands.map((c) => c.command)).toEqual([`${installedPedelecd("linux")} doctor`]);
  });
});

describe("a site and its sessions, in the popup", () => {
  it("a site's state in a chip and a sentence", () => {
    expect(siteState(site("https://a.example", { access: "edit", providers: ["codex", "claude"] }), false)).toEqual({
      chip: "Allowed",
      chipState: "ok",
      sentence: "Edit files in its workspace. Agents: codex, claude.",
    });
    expect(siteState(site("https://a.example", { blocked: true, access: null }), false).chip).toBe("Blocked");
    expect(siteState(undefined, true).chip).toBe("Said no");
    expect(siteState(undefined, false)).toEqual({ chip: "Not allowed", chipState: "none", sentence: "It will ask you when it needs an agent." });
    expect(siteState(site("http://127.0.0.1:8080", { expiresAt: 1 }), false, 2).chip).toBe("Ended");
  });

  it("counts each site's open sessions: working, waiting for the page, idle", () => {
    const s = (origin: string, status: "idle" | "running" | "waiting_tool_result" | "ended" | "error") => ({ sessionId: `${origin}${status}`, origin, status, routes: 1, autoEndOnDisconnect: true });
    const activity = activityByOrigin([s("https://a", "running"), s("https://a", "waiting_tool_result"), s("https://a", "idle"), s("https://b", "idle"), s("https://c", "ended")]);
    expect([...activity]).toEqual([
      ["https://a", { sessions: 3, working: 1, waiting: 1 }],
      ["https://b", { sessions: 1, working: 0, waiting: 0 }],
    ]);
    expect(activityText(activity.get("https://a")!)).toBe("3 sessions: 1 working, 1 waiting for the page");
    expect(activityText(activity.get("https://b")!)).toBe("1 session, idle");
  });
});
