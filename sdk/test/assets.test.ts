import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Pedelec, PedelecError, type PedelecSession } from "../src/index.js";
import { installPage, standardHandlers, type FakeExtension } from "./fake-bridge.js";

let page: ReturnType<typeof installPage>;
let ext: FakeExtension;
let session: PedelecSession;
let fetchMock: ReturnType<typeof vi.fn>;
const ticket = (kind: string, path: string) => ({ url: `http://127.0.0.1:40123/assets/${kind}/tkt_1`, token: "tok", expiresAt: 1, path });

beforeEach(async () => {
  page = installPage();
  ext = page.ext;
  standardHandlers(ext);
  ext.on("create_upload_ticket", (p) => ticket("upload", p.targetPath ?? `/${p.name}`));
  ext.on("create_download_ticket", (p) => ticket("download", p.path));
  ext.on("list_assets", () => ({ assets: [{ name: "a.txt", path: "/a.txt", sizeBytes: 3, modifiedAt: 5 }] }));
  fetchMock = vi.fn();
  vi.stubGlobal("fetch", fetchMock);
  session = await new Pedelec().createSession();
});
afterEach(() => {
  vi.unstubAllGlobals();
  page.uninstall();
});

async function rejection(p: Promise<unknown>): Promise<PedelecError> {
  try {
    await p;
  } catch (e) {
    return e as PedelecError;
  }
  throw new Error("expected a rejection");
}

describe("assets", () => {
  it("uploadAsset: a ticket for the size and type, then a PUT with the bearer token; the page never sees the ticket", async () => {
    fetchMock.mockResolvedValue(new Response(JSON.stringify({ name: "notes.txt", path: "/docs/notes.txt", sizeBytes: 5, modifiedAt: 7 }), { status: 201 }));
    const info = await session.uploadAsset(new Blob(["hello"], { type: "text/plain" }), { path: "/docs/notes.txt" });
    expect(info).toEqual({ name: "notes.txt", path: "/docs/notes.txt", sizeBytes: 5, modifiedAt: 7 });
    expect(ext.callsOf("create_upload_ticket")).toEqual([{ sessionId: "thr_1", name: "notes.txt", sizeBytes: 5, contentType: "text/plain", targetPath: "/docs/notes.txt" }]);
    const [url, init] = fetchMock.mock.calls[0]!;
    expect(url).toBe("http://127.0.0.1:40123/assets/upload/tkt_1");
    expect(init.method).toBe("PUT");
    expect(init.headers.authorization).toBe("Bearer tok");
    expect(await (init.body as Blob).text()).toBe("hello");
  });

  it("uploadAsset takes a string and a File too", async () => {
    fetchMock.mockImplementation(async () => new Response("{}", { status: 201 }));
    await session.uploadAsset("héllo");
    await session.uploadAsset(new File(["x"], "pic.png", { type: "image/png" }));
    expect(ext.callsOf("create_upload_ticket")).toEqual([
      { sessionId: "thr_1", name: "text.txt", sizeBytes: 6, contentType: "text/plain;charset=utf-8" },
      { sessionId: "thr_1", name: "pic.png", sizeBytes: 1, contentType: "image/png" },
    ]);
    expect((await rejection(session.uploadAsset(42 as never))).code).toBe("INVALID_INPUT");
  });

  it("listAssets", async () => {
    expect(await session.listAssets()).toEqual([{ name: "a.txt", path: "/a.txt", sizeBytes: 3, modifiedAt: 5 }]);
  });

  it("readAsset as text, json and file", async () => {
    fetchMock.mockImplementation(async () => new Response('{"a":1}', { status: 200, headers: { "content-type": "application/json" } }));
    expect(await session.readAsset("/d.json")).toBe('{"a":1}');
    expect(await session.readAsset("/d.json", "json")).toEqual({ a: 1 });
    const file = await session.readAsset("/dir/d.json", "file");
    expect(file).toBeInstanceOf(File);
    expect([file.name, await file.text()]).toEqual(["d.json", '{"a":1}']);
    expect(fetchMock.mock.calls[0]![1].headers.authorization).toBe("Bearer tok");
  });

  it("ASSET_TEXT_DECODE_FAILED and ASSET_INVALID_JSON", async () => {
    fetchMock.mockImplementation(async () => new Response(new Uint8Array([0xff, 0xfe, 0x00]), { status: 200 }));
    expect((await rejection(session.readAsset("/bin", "text"))).code).toBe("ASSET_TEXT_DECODE_FAILED");
    fetchMock.mockImplementation(async () => new Response("{nope", { status: 200 }));
    expect((await rejection(session.readAsset("/x.json", "json"))).code).toBe("ASSET_INVALID_JSON");
    expect((await rejection(session.readAsset("/x", "xml" as never))).code).toBe("INVALID_INPUT");
  });

  it("the transfer server's error code reaches the page; an unreachable server is CORE_UNAVAILABLE", async () => {
    fetchMock.mockResolvedValueOnce(new Response(JSON.stringify({ code: "ASSET_NOT_FOUND", message: "no /x" }), { status: 404 }));
    const e = await rejection(session.readAsset("/x"));
    expect([e.code, e.message, e.details]).toEqual(["ASSET_NOT_FOUND", "no /x", { status: 404 }]);
    fetchMock.mockRejectedValueOnce(new TypeError("Failed to fetch"));
    expect((await rejection(session.uploadAsset("x"))).code).toBe("CORE_UNAVAILABLE");
  });

  it("an ended handle has no asset access", async () => {
    await session.end();
    for (const p of [session.uploadAsset("x"), session.listAssets(), session.readAsset("/a")]) {
      expect((await rejection(p)).code).toBe("SESSION_ENDED");
    }
    expect(ext.callsOf("create_upload_ticket")).toEqual([]);
    expect(fetchMock).not.toHaveBeenCalled();
  });
});

describe("assets through the extension's transfer frame", () => {
  let viaFrame: PedelecSession;
  beforeEach(async () => {
    // A content script that offers the frame: the SDK hands it the bodies, the page fetches nothing.
    ext.transfer = async (req) =>
      req.method === "PUT"
        ? { kind: "transfer_result", transferId: req.transferId, ok: true, status: 201, contentType: "application/json", body: new Blob([JSON.stringify({ name: "n.txt", path: "/n.txt", sizeBytes: 5, modifiedAt: 9 })]) }
        : { kind: "transfer_result", transferId: req.transferId, ok: true, status: 200, contentType: "application/json", body: new Blob(['{"a":1}']) };
    viaFrame = await new Pedelec().createSession();
  });

  it("uploads and reads through the frame with the ticket's URL and token; bodies cross as Blobs", async () => {
    const info = await viaFrame.uploadAsset(new Blob(["hello"], { type: "text/plain" }), { path: "/n.txt" });
    expect(info).toEqual({ name: "n.txt", path: "/n.txt", sizeBytes: 5, modifiedAt: 9 });
    expect(await viaFrame.readAsset("/d.json", "json")).toEqual({ a: 1 });
    const file = await viaFrame.readAsset("/d.json", "file");
    expect([file.name, await file.text()]).toEqual(["d.json", '{"a":1}']);
    expect(fetchMock).not.toHaveBeenCalled();
    const [put, get] = ext.transfers;
    expect({ ...put!, body: undefined }).toEqual({ kind: "transfer", transferId: 1, method: "PUT", url: "http://127.0.0.1:40123/assets/upload/tkt_1", token: "tok", contentType: "text/plain", body: undefined });
    expect(put!.body).toBeInstanceOf(Blob);
    expect(await put!.body!.text()).toBe("hello");
    expect([get!.method, get!.url, get!.body]).toEqual(["GET", "http://127.0.0.1:40123/assets/download/tkt_1", null]);
  });

  it("an HTTP error from the transfer server keeps its code; a refused check is ASSET_TICKET_INVALID", async () => {
    ext.transfer = (req) => ({ kind: "transfer_result", transferId: req.transferId, ok: true, status: 404, contentType: "application/json", body: new Blob(['{"code":"ASSET_NOT_FOUND","message":"no /x"}']) });
    expect((await rejection(viaFrame.readAsset("/x"))).code).toBe("ASSET_NOT_FOUND");
    ext.transfer = (req) => ({ kind: "transfer_result", transferId: req.transferId, ok: false, unavailable: false, message: "ASSET_TICKET_INVALID: the ticket belongs to another origin" });
    const e = await rejection(viaFrame.readAsset("/x"));
    expect([e.code, e.message]).toEqual(["ASSET_TICKET_INVALID", "the ticket belongs to another origin"]);
    expect(fetchMock).not.toHaveBeenCalled();
  });

  it("falls back to the page's own fetch when the frame is unavailable (e.g. the page's CSP blocks it)", async () => {
    ext.transfer = (req) => ({ kind: "transfer_result", transferId: req.transferId, ok: false, unavailable: true, message: "blocked" });
    fetchMock.mockResolvedValue(new Response("plain", { status: 200 }));
    expect(await viaFrame.readAsset("/a.txt")).toBe("plain");
    expect(fetchMock.mock.calls[0]![0]).toBe("http://127.0.0.1:40123/assets/download/tkt_1");
  });
});
