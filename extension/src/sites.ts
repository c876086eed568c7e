// Site grants as the extension sees them: the native requests that read and
// change them (list_sites, grant_site, block_site, revoke_site,
// end_site_sessions, list_sessions; docs/native-messaging.md), the rules the
// extension applies before the services do (which origins may ask, loopback),
// and how a grant reads in the UI. The services own the grants; the extension
// only caches them.
import type { NativeLink, PayloadOf } from "./native-link.js";

import type { SessionSummary, Site, SiteAccess, SiteInput } from "../../sdk/src/protocol/bridge.js";

export type { SessionSummary, Site, SiteInput };
export type Access = SiteAccess;

type SiteType = "list_sites" | "grant_site" | "block_site" | "revoke_site" | "end_site_sessions" | "list_sessions";

/** A site request, sent with the extension's own origin (the only one the host accepts for them). */
export function siteRequest<T extends SiteType>(native: NativeLink, type: T, ownOrigin: string, payload: PayloadOf<T>) {
  return native.request(type, ownOrigin, payload);
}

/** What each level lets the agent do, in the words the prompt and the settings page use. */
export const ACCESS_TEXT: Record<Access, { title: string; sentence: string }> = {
  tools: { title: "Answer and use this page's tools", sentence: "Reads its workspace and calls this page's tools; cannot write files or run commands." },
  edit: { title: "Edit files in its workspace", sentence: "Writes only inside its workspace; commands, where the agent can confine them, run inside the workspace without network." },
  full: { title: "Full access", sentence: "Runs any command as you, anywhere on this computer, with your files and network." },
};
export const ACCESS_LEVELS: readonly Access[] = ["tools", "edit", "full"];
export const DEFAULT_ACCESS: Access = "edit";

/** Loopback origins (any port): shared by every program and user on the machine; grants last for the browser session. */
export function isLoopback(origin: string): boolean {
  try {
    const host = new URL(origin).hostname;
    return host === "localhost" || host === "127.0.0.1" || host === "[::1]";
  } catch {
    return false;
  }
}

/** Plain http:// pages other than loopback are refused at once (ORIGIN_NOT_SECURE). */
export function isSecureEnough(origin: string): boolean {
  return origin.startsWith("https://") || isLoopback(origin);
}

/** A grant that lets the origin use Pedelec now. */
export function isLive(site: Site | undefined, now = Date.now()): site is Site & { access: Access } {
  return !!site && !site.blocked && site.access !== null && (site.expiresAt === null || site.expiresAt > now);
}

/** A folder as the user reads it: the home folder as `~` (guessed from /home/<name> or /Users/<name>). */
export function showFolder(path: string): string {
  const m = /^(\/home\/[^/]+|\/Users\/[^/]+|\/root)(\/.*)?$/.exec(path);
  return m ? `~${m[2] ?? ""}` : path;
}

/** The grant input that keeps `site` as it is (for a change of one part). */
export function inputOf(site: Site): SiteInput {
  return { origin: site.origin, access: site.access, providers: [...site.providers], folders: site.folders.map((f) => ({ ...f })), anyModel: site.anyModel, embedders: [...site.embedders], expiresAt: site.expiresAt };
}

/**
 * What the user typed as a site that may embed this one, as an origin: an
 * https:// address, or a loopback http:// one (any path is dropped). Anything
 * else is refused with a sentence the settings page shows.
 */
export function embedderOrigin(text: string): { origin: string } | { error: string } {
  const typed = text.trim();
  let url: URL;
  try {
    url = new URL(typed);
  } catch {
    return { error: `"${typed}" is not a web address; write it like https://example.com` };
  }
  if (url.username || url.password) return { error: "A site's address has no user name or password in it." };
  if (url.protocol === "https:" || (url.protocol === "http:" && isLoopback(url.origin))) return { origin: url.origin };
  if (url.protocol === "http:") return { error: `${url.origin} is not secure: only https:// sites (or this computer's localhost) may embed this site.` };
  return { error: `"${typed}" is not a website; write it like https://example.com` };
}

/** The grant input with `embedder` added (once). */
export function withEmbedder(site: Site, embedder: string): SiteInput {
  const input = inputOf(site);
  if (!input.embedders.includes(embedder)) input.embedders.push(embedder);
  return input;
}

/** The grant input without `embedder`. */
export function withoutEmbedder(site: Site, embedder: string): SiteInput {
  return { ...inputOf(site), embedders: site.embedders.filter((e) => e !== embedder) };
}
