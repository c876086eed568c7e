// What the demo shows of a resumed session's history, and how it joins the
// history with the session's live events. No DOM here, so it is tested alone
// (test/history.test.ts); main.ts renders the rows and wires the join.
import type { HistoryEntry } from "@pedelec/sdk";

export type RowKind = "user" | "assistant" | "tool" | "system";
export type Row = { kind: RowKind; text: string };

/** `value` with every object's keys in order, so its JSON reads the same whichever way it travelled. */
export function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted((value as Record<string, unknown>)[k])]));
}

/** A tool call as the chat shows it, live and from the history alike: `tool NAME(ARGS) → WHAT CAME OF IT`. */
export function toolNote(tool: string, args: unknown, outcome: string): string {
  return `tool ${tool}(${JSON.stringify(sorted(args))}) → ${outcome}`;
}

/** A tool's result as a tool note ends, live and from the history alike. */
export function resultText(result: unknown): string {
  return JSON.stringify(sorted(result)) ?? "null";
}

/**
 * The conversation as it was, in the rows the live chat makes: the user's
 * texts, the agent's messages, each tool call with what came of it, errors
 * and cancellations. A tool call still waiting for the page is left to the
 * live handler, which notes it when it answers.
 */
export function historyRows(entries: HistoryEntry[]): Row[] {
  const rows: Row[] = [];
  const calls = new Map<string, { tool: string; args: unknown }>();
  for (const e of entries) {
    switch (e.type) {
      case "user_text":
        rows.push({ kind: "user", text: e.text });
        break;
      case "agent_message":
        rows.push({ kind: "assistant", text: e.text });
        break;
      case "tool_request":
        calls.set(e.toolRequestId, { tool: e.tool, args: e.args });
        break;
      case "tool_outcome": {
        const call = calls.get(e.toolRequestId) ?? { tool: "(an earlier call)", args: null };
        const outcome =
          e.reason !== "resolved" ? e.reason
          : e.error ? `error ${e.error.code}: ${e.error.message}`
          : e.truncated ? `${e.resultPreview ?? ""}… (truncated)`
          : resultText(e.result);
        rows.push({ kind: "tool", text: toolNote(call.tool, call.args, outcome) });
        break;
      }
      case "operation_finished":
        if (e.outcome === "cancelled") rows.push({ kind: "system", text: "Cancelled." });
        break;
      case "error":
        rows.push({ kind: "system", text: `${e.code}: ${e.message}` });
        break;
      case "dropped":
        rows.push({ kind: "system", text: `${e.count} earlier entries are no longer kept.` });
        break;
      default:
        break;
    }
  }
  return rows;
}

/**
 * The tool calls whose outcome the history shows. A call still pending when
 * the page resumed is answered by the live handler, which may finish before
 * the history is read; then the history shows it and the handler's own note
 * would be a second row for it.
 */
export function settledCalls(entries: HistoryEntry[]): Set<string> {
  return new Set(entries.flatMap((e) => (e.type === "tool_outcome" ? [e.toolRequestId] : [])));
}

/**
 * Joins a resumed session's history with its live events. Listening starts
 * before the history is read; until it is shown, live events wait; then only
 * those after it (seq > coveredSeq) run, so nothing is shown twice and
 * nothing is lost.
 */
export class LiveJoin {
  /** The history's coveredSeq once it is shown; null while it loads. */
  covered: number | null = null;
  #early: { seq: number | undefined; run: () => void }[] = [];

  /** A live event's effect: run unless the history showed it (an event without a seq is never in it). */
  live(seq: number | undefined, run: () => void): void {
    if (this.covered === null) this.#early.push({ seq, run });
    else if (seq === undefined || seq > this.covered) run();
  }

  /** Something new to note (a tool the page answered): now, or after the history while it loads. */
  afterHistory(run: () => void): void {
    this.live(undefined, run);
  }

  /** The history is shown, up to `covered`: what waited and came after it runs, in order. */
  shown(covered: number): void {
    this.covered = covered;
    const early = this.#early;
    this.#early = [];
    for (const e of early) if (e.seq === undefined || e.seq > covered) e.run();
  }
}
