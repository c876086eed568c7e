// Per-hop traffic counters (diagnostics): how many messages, and how many
// characters of their JSON, each hop inside the extension carried — the
// native port into the worker ("host"), the worker toward each page
// ("page <origin>"), and the content script to its page ("to-page"). Read by
// tests/e2e/bench-stream.mjs (worker: globalThis.pedelecHops; content script:
// the same name in its isolated world) to give messages/s and MB/s per hop.
// Cheap by default: one map lookup per message. Characters are counted only
// after `reset(true)` (a bench or test asks): that costs a JSON.stringify of
// every message, which a user's extension should not pay on each event.

/** `first`/`last`: performance.now() of the first and last message counted (this context's clock). */
export type HopCount = { messages: number; chars: number; first: number; last: number };

export class HopCounts {
  #hops = new Map<string, HopCount>();
  #countChars = false;

  /** Counts one message on `hop`; `text` is its JSON text when the caller already has it. */
  count(hop: string, message: unknown, text?: string): void {
    const now = performance.now();
    let c = this.#hops.get(hop);
    if (!c) this.#hops.set(hop, (c = { messages: 0, chars: 0, first: now, last: now }));
    c.last = now;
    c.messages++;
    if (this.#countChars) c.chars += (text ?? JSON.stringify(message) ?? "").length;
  }

  /** A copy of every hop's counts so far. */
  snapshot(): Record<string, HopCount> {
    const out: Record<string, HopCount> = {};
    for (const [hop, c] of this.#hops) out[hop] = { ...c };
    return out;
  }

  /** Clears every hop; `countChars` turns the character count on (off by default). */
  reset(countChars = false): void {
    this.#hops.clear();
    this.#countChars = countChars;
  }
}

/** The one set of counters of this JavaScript context (worker or content script). */
export const hops = new HopCounts();
(globalThis as { pedelecHops?: HopCounts }).pedelecHops = hops;
