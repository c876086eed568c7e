// What the popup says, without the DOM (tested in test/popup-model.test.ts): the
// state of Pedelec on this computer and what to do when it cannot be reached
// (with the exact command), a site's state in plain words, and each site's
// sessions counted as the user thinks of them (working, waiting for the page, idle).
import type { HostState, PopupState } from "../../sdk/src/protocol/bridge.js";
import { ACCESS_TEXT, isLive, type Site } from "./sites.js";

export type Platform = "linux" | "mac";

/** Where `pedelecd install` puts the programs (docs/install.md), as a shell word. */
export function installedPedelecd(platform: Platform): string {
  return platform === "mac" ? '"$HOME/Library/Application Support/Pedelec/bin/pedelecd"' : "~/.local/lib/pedelec/bin/pedelecd";
}

export type Command = { command: string; note: string };

export type HostAdvice = {
  /** running: all well; idle: installed, services stopped (they start on demand); checking: not asked yet. */
  state: "running" | "idle" | "checking" | "not_installed" | "not_allowed" | "mismatch" | "broken";
  title: string;
  text: string;
  commands: Command[];
};

/** The host's state as a sentence, and what to run when something is missing. */
export function hostAdvice(host: HostState, extensionId: string, platform: Platform): HostAdvice {
  const pedelecd = installedPedelecd(platform);
  const error = host.lastError ?? "";
  if (!host.connected && host.lastError !== null) {
    if (host.lastErrorCode === "PROTOCOL_MISMATCH") {
      return {
        state: "mismatch",
        title: "Pedelec and this extension are different versions",
        text: "Install the Pedelec that matches this extension (or update the extension), then reopen this popup. From a copy of the Pedelec repository at the extension's version:",
        commands: [{ command: "./start.sh", note: "builds Pedelec, installs it for you and starts it" }],
      };
    }
    if (/not found/i.test(error)) {
      return {
        state: "not_installed",
        title: "Pedelec is not installed on this computer",
        text: "This extension needs Pedelec's desktop part, which runs the agents. Install it from a copy of the Pedelec repository, then reopen this popup:",
        commands: [
          { command: "./start.sh", note: "builds it, installs it for you and starts it" },
          { command: "./build-release.sh && target/release/pedelecd install", note: "or only build and install it" },
        ],
      };
    }
    if (/forbidden/i.test(error)) {
      return {
        state: "not_allowed",
        title: "Pedelec is installed for another extension",
        text: "Allow this extension too, then reopen this popup:",
        commands: [{ command: `${pedelecd} install --extension-id ${extensionId}`, note: "registers this extension's id with Pedelec" }],
      };
    }
    return {
      state: "broken",
      title: "Pedelec could not be reached",
      text: `${error.charAt(0).toUpperCase()}${error.slice(1).replace(/\.$/, "")}. See what is wrong and how to fix it:`,
      commands: [{ command: `${pedelecd} doctor`, note: "checks the install and the services" }],
    };
  }
  if (host.hostVersion === null) return { state: "checking", title: "Looking for Pedelec on this computer…", text: "", commands: [] };
  if (host.coreRunning === false) {
    return {
      state: "idle",
      title: "Pedelec is installed; its services are not running",
      text: "They start on their own when a page needs an agent. To start them now:",
      commands: [{ command: `${pedelecd} start`, note: "starts Pedelec's services" }],
    };
  }
  return { state: "running", title: "Pedelec is running on this computer", text: `Version ${host.hostVersion}.`, commands: [] };
}

/** A site's grant in a chip and a sentence. */
export function siteState(site: Site | undefined, rejected: boolean, now = Date.now()): { chip: string; chipState: "ok" | "warn" | "bad" | "none"; sentence: string } {
  if (site?.blocked) return { chip: "Blocked", chipState: "bad", sentence: "You blocked this site: it cannot ask to use an agent." };
  if (isLive(site, now)) {
    const agents = site.providers.length ? site.providers.join(", ") : "no agent yet";
    return { chip: "Allowed", chipState: "ok", sentence: `${ACCESS_TEXT[site.access].title}. Agents: ${agents}.` };
  }
  if (rejected) return { chip: "Said no", chipState: "warn", sentence: "You said no in this browser session; it will not ask again until you let it." };
  if (site) return { chip: "Ended", chipState: "none", sentence: "Its permission ended; it will ask again when it needs an agent." };
  return { chip: "Not allowed", chipState: "none", sentence: "It will ask you when it needs an agent." };
}

export type Activity = { sessions: number; working: number; waiting: number };

/** Each origin's open sessions, counted: running a turn (working), waiting for the page's tool (waiting). */
export function activityByOrigin(sessions: PopupState["sessions"]): Map<string, Activity> {
  const byOrigin = new Map<string, Activity>();
  for (const s of sessions) {
    if (s.status === "ended") continue;
    const a = byOrigin.get(s.origin) ?? { sessions: 0, working: 0, waiting: 0 };
    a.sessions++;
    if (s.status === "running") a.working++;
    if (s.status === "waiting_tool_result") a.waiting++;
    byOrigin.set(s.origin, a);
  }
  return byOrigin;
}

/** "2 sessions: 1 working, 1 waiting for the page" (or "1 session, idle"). */
export function activityText(a: Activity): string {
  const head = `${a.sessions} session${a.sessions === 1 ? "" : "s"}`;
  const parts = [a.working ? `${a.working} working` : "", a.waiting ? `${a.waiting} waiting for the page` : ""].filter(Boolean);
  return parts.length ? `${head}: ${parts.join(", ")}` : `${head}, idle`;
}
