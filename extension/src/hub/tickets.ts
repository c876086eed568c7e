// Asset transfer tickets: the ticket URLs the worker handed to pages (by URL,
// with the origin each was issued to), and the transfer frame's port, on which
// the frame asks, per body, whether it may fetch a URL for the embedding origin.
// A ticket is good once.
import type { Port } from "../chrome-api.js";
import type { TransferCheck, TransferCheckResult } from "../../../sdk/src/protocol/bridge.js";

/** Bounded: a page that asks for tickets and never uses them cannot grow the table past this. */
const MAX_TICKETS = 1024;
/** How long a ticket without an expiry of its own is honoured. */
const DEFAULT_TICKET_LIFETIME_MS = 10 * 60_000;

export class TransferTickets {
  /** Ticket URLs handed to pages, by URL: what the transfer frame may fetch for which origin (single use). */
  #tickets = new Map<string, { origin: string; until: number }>();

  /** A ticket the host issued for `origin` (from create_upload_ticket / create_download_ticket). */
  remember(url: string, origin: string, expiresAt: number | null): void {
    const now = Date.now();
    for (const [u, t] of this.#tickets) if (t.until < now) this.#tickets.delete(u);
    while (this.#tickets.size >= MAX_TICKETS) this.#tickets.delete(this.#tickets.keys().next().value as string);
    this.#tickets.set(url, { origin, until: expiresAt ?? now + DEFAULT_TICKET_LIFETIME_MS });
  }

  /** The transfer frame asks, per body, whether a URL is a ticket this worker gave that origin. */
  addFrame(port: Port): void {
    port.onMessage.addListener((message) => {
      const m = message as TransferCheck;
      if (m?.kind !== "check" || typeof m.id !== "number") return;
      const ticket = typeof m.url === "string" ? this.#tickets.get(m.url) : undefined;
      let ok = false;
      let why = "not a ticket this extension issued";
      if (ticket && ticket.origin !== m.origin) why = "the ticket belongs to another origin";
      else if (ticket && ticket.until < Date.now()) why = "the ticket expired";
      else if (ticket) ok = true;
      if (ticket && ok) this.#tickets.delete(m.url); // tickets are single use
      const reply: TransferCheckResult = { kind: "check_result", id: m.id, ok, message: ok ? "" : `ASSET_TICKET_INVALID: ${why}` };
      try {
        port.postMessage(reply);
      } catch {
        // The frame went away.
      }
    });
  }
}
