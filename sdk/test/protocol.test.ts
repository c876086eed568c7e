import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
// @ts-expect-error plain ESM scripts without types
import { generate, outputPath, schemaPath } from "../scripts/gen-protocol.mjs";
// @ts-expect-error plain ESM scripts without types
import { validate, validateHostMessage } from "../scripts/schema-check.mjs";
import { ALL_CODES, BROWSER_CODES, ErrorCodes, HOST_CODES, SERVICE_CODES } from "../src/protocol/codes.js";

const schemaText = readFileSync(schemaPath as string, "utf8");
const schema = JSON.parse(schemaText);

describe("the protocol module", () => {
  it("native.ts is exactly what the generator makes from the schema (no drift)", () => {
    expect(readFileSync(outputPath as string, "utf8")).toBe((generate as (s: string) => string)(schemaText));
  });

  it("the generator refuses a keyword it cannot express instead of dropping it", () => {
    const bad = JSON.stringify({ $defs: { X: { type: "object", patternProperties: { "^a": { type: "string" } } } } });
    expect(() => (generate as (s: string) => string)(bad)).toThrow(/unsupported keyword "patternProperties"/);
    const badRef = JSON.stringify({ $defs: { X: { $ref: "other.json#/x" } } });
    expect(() => (generate as (s: string) => string)(badRef)).toThrow(/only local/);
  });

  it("every message recorded from the real native host follows the schema", () => {
    const transcript = JSON.parse(readFileSync(new URL("./fixtures/host-transcript.json", import.meta.url), "utf8")) as {
      messages: Array<{ requestType: string | null; message: unknown }>;
    };
    expect(transcript.messages.length).toBeGreaterThan(10);
    for (const { requestType, message } of transcript.messages) {
      expect(validateHostMessage(schema, message, requestType), JSON.stringify(message)).toEqual([]);
    }
  });

  it("the schema catches what the doc forbids (so the host check can fail)", () => {
    const event = (body: unknown) => ({ type: "event", sessionId: "thr_1", seq: 1, at: 1, event: body });
    // v2: error events carry operationId; chat carries messageId.
    expect(validate(schema, event({ type: "error", code: "X", message: "m", details: null, source: "core" }), "HostMessage")).not.toEqual([]);
    expect(validate(schema, event({ type: "chat", operationId: "op_1", text: "hi" }), "HostMessage")).not.toEqual([]);
    expect(validate(schema, event({ type: "chat", operationId: "op_1", messageId: "msg_op_1_1", text: "hi" }), "HostMessage")).toEqual([]);
    // Absent optional objects are null, never missing.
    const snap = JSON.parse(JSON.stringify(schema.$defs.Snapshot.required)) as string[];
    expect(snap).toContain("recentOperations");
    expect(snap).toContain("workspacePath");
    expect(validate(schema, { id: 1, ok: false, error: { code: "X", message: "m" } }, "HostMessage")).not.toEqual([]);
    expect(validate(schema, { type: "chunk", chunkId: 1, index: 0, count: 2, data: "{" }, "HostMessage")).toEqual([]);
    // submit_tool_result: exactly one of result / error.
    const submit = (payload: unknown) => validate(schema, { id: 1, type: "submit_tool_result", origin: "https://a.b", payload }, "Request");
    expect(submit({ sessionId: "s", toolRequestId: "t", result: null })).toEqual([]);
    expect(submit({ sessionId: "s", toolRequestId: "t", error: { code: "C", message: "m" } })).toEqual([]);
    expect(submit({ sessionId: "s", toolRequestId: "t" })).not.toEqual([]);
    expect(submit({ sessionId: "s", toolRequestId: "t", result: 1, error: { code: "C", message: "m" } })).not.toEqual([]);
    // Origin is required on thread requests, not on ping/hello.
    expect(validate(schema, { id: 1, type: "send_text", payload: { sessionId: "s", text: "x" } }, "Request")).not.toEqual([]);
    expect(validate(schema, { id: 1, type: "hello", payload: { protocolVersion: 2 } }, "Request")).toEqual([]);
    expect(validate(schema, { id: 1, type: "hello", payload: { protocolVersion: 1 } }, "Request")).not.toEqual([]);
  });

  it("one list of error codes: the browser's, the host's and the services', no duplicates", () => {
    expect(new Set(ALL_CODES).size).toBe(ALL_CODES.length);
    expect(ALL_CODES.length).toBe(BROWSER_CODES.length + HOST_CODES.length + SERVICE_CODES.length);
    for (const c of ["PROTOCOL_MISMATCH", "TOOL_REQUEST_NOT_PENDING", "APPROVAL_TIMEOUT", "SDK_BRIDGE_TIMEOUT", "ASSET_INVALID_JSON", "CORE_RESTARTED"]) {
      expect(ALL_CODES).toContain(c);
    }
    expect(ErrorCodes.THREAD_NOT_FOUND).toBe("THREAD_NOT_FOUND");
    expect(Object.keys(ErrorCodes)).toEqual([...ALL_CODES]);
    expect(Object.isFrozen(ErrorCodes)).toBe(true);
  });
});
