import { describe, expect, it } from "vitest";
import { embedderOrigin, withEmbedder, withoutEmbedder } from "../src/sites.js";
import { site } from "./fake-chrome.js";

describe("the settings page's embedding sites", () => {
  it("takes an https:// address or a loopback http:// one as its origin", () => {
    expect(embedderOrigin("https://Host.Example/some/page?x=1")).toEqual({ origin: "https://host.example" });
    expect(embedderOrigin("  https://host.example:8443  ")).toEqual({ origin: "https://host.example:8443" });
    expect(embedderOrigin("https://host.example:443/")).toEqual({ origin: "https://host.example" });
    expect(embedderOrigin("http://localhost:3000/app")).toEqual({ origin: "http://localhost:3000" });
    expect(embedderOrigin("http://127.0.0.1:8080")).toEqual({ origin: "http://127.0.0.1:8080" });
    expect(embedderOrigin("http://[::1]:9")).toEqual({ origin: "http://[::1]:9" });
  });

  it("refuses anything else with a plain sentence", () => {
    const refused = (text: string) => {
      const r = embedderOrigin(text);
      expect("error" in r ? r.error : r).toMatch(/./);
      return "error" in r ? r.error : "";
    };
    expect(refused("http://host.example")).toMatch(/not secure/);
    expect(refused("host.example")).toMatch(/not a web address/);
    expect(refused("")).toMatch(/not a web address/);
    expect(refused("file:///etc/passwd")).toMatch(/not a website/);
    expect(refused("chrome-extension://abcdefghijklmnopabcdefghijklmnop/")).toMatch(/not a website/);
    expect(refused("javascript:alert(1)")).toMatch(/not a website/);
    expect(refused("https://me:secret@host.example")).toMatch(/no user name or password/);
    for (const text of ["http://host.example", "host.example", "file:///x", "https://a:b@host.example"]) expect("origin" in embedderOrigin(text)).toBe(false);
  });

  it("adds an embedder once and removes it, keeping the rest of the grant", () => {
    const granted = site("https://app.example", { access: "tools", providers: ["codex", "claude"], folders: [{ path: "/home/u/p", once: false }], anyModel: true, embedders: ["https://a.example"] });
    const added = withEmbedder(granted, "https://b.example");
    expect(added).toEqual({ origin: "https://app.example", access: "tools", providers: ["codex", "claude"], folders: [{ path: "/home/u/p", once: false }], anyModel: true, embedders: ["https://a.example", "https://b.example"], expiresAt: null });
    expect(withEmbedder(granted, "https://a.example").embedders).toEqual(["https://a.example"]);
    expect(withoutEmbedder(granted, "https://a.example")).toEqual({ ...added, embedders: [] });
    expect(granted.embedders).toEqual(["https://a.example"]);
  });
});
