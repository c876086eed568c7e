// The native port's life around the session table: one port while any route
// exists and none otherwise (so the worker may sleep); when the port is lost
// under live sessions, reconnect with backoff (hello again) and re-attach each
// session with its last seq so the host replays what it missed; a session the
// host detached is re-attached on its own backoff.
import type { NativeError, NativeLink } from "../native-link.js";
import type { DetachedFrame } from "../../../sdk/src/protocol/native.js";
import { toBridgeError } from "./errors.js";
import type { HubSession, Sessions } from "./sessions.js";

/** Delays between native reconnect attempts when none are given; the last one repeats. */
export const DEFAULT_BACKOFF_MS: readonly number[] = [250, 500, 1000, 2000, 5000, 10000];

export class NativeReconnect {
  #native: NativeLink;
  #sessions: Sessions;
  #backoff: readonly number[];
  /** Something the popup shows changed. */
  #changed: () => void;
  #reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  #reconnectAttempt = 0;

  constructor(native: NativeLink, sessions: Sessions, backoffMs: readonly number[], changed: () => void) {
    this.#native = native;
    this.#sessions = sessions;
    this.#backoff = backoffMs;
    this.#changed = changed;
  }

  /** One native port while any route exists; none otherwise (lets the worker sleep). */
  closeIfIdle(): void {
    if (this.#sessions.routeCount > 0 || this.#native.busy) return;
    if (this.#reconnectTimer) {
      clearTimeout(this.#reconnectTimer);
      this.#reconnectTimer = null;
    }
    this.#native.close();
  }

  onNativeLost(error: NativeError, _afterHello: boolean): void {
    for (const session of this.#sessions.all()) {
      if (session.reattachTimer) clearTimeout(session.reattachTimer);
      session.reattachTimer = null;
      // Frames held for an attach in flight died with the port; the re-attach replays from lastSeq.
      session.held = null;
    }
    this.#changed();
    // Reconnecting is for the sessions' streams; without any, the next request
    // reconnects (so a missing or refusing host is not respawned in a loop).
    // A version mismatch does not heal by retrying.
    if (this.#sessions.routeCount === 0 || this.#sessions.sessionCount === 0 || error.code === "PROTOCOL_MISMATCH") return;
    this.#scheduleReconnect();
  }

  onDetached(frame: DetachedFrame): void {
    const session = this.#sessions.get(frame.sessionId);
    if (session) this.#scheduleReattach(session);
  }

  #scheduleReconnect(): void {
    if (this.#reconnectTimer) return;
    const delay = this.#backoff[Math.min(this.#reconnectAttempt, this.#backoff.length - 1)] ?? 1000;
    this.#reconnectAttempt++;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = null;
      if (this.#sessions.routeCount === 0) return;
      this.#native.connect().then(
        () => {
          this.#reconnectAttempt = 0;
          for (const session of this.#sessions.all()) void this.#reattach(session);
        },
        () => {
          // lost() already ran for the failed port; make sure another try is queued.
          if (!this.#native.open) this.#scheduleReconnect();
        },
      );
    }, delay);
  }

  #scheduleReattach(session: HubSession): void {
    if (session.reattachTimer) return;
    const delay = this.#backoff[Math.min(session.reattachAttempt, this.#backoff.length - 1)] ?? 1000;
    session.reattachAttempt++;
    session.reattachTimer = setTimeout(() => {
      session.reattachTimer = null;
      void this.#reattach(session);
    }, delay);
  }

  /** Restores a session's stream with its last seq; the host replays what it missed. */
  async #reattach(session: HubSession): Promise<void> {
    if (this.#sessions.get(session.sessionId) !== session) return;
    session.held = [];
    try {
      const r = await this.#native.request("attach", session.origin, { sessionId: session.sessionId, afterSeq: session.lastSeq, mergeDeltas: true });
      session.reattachAttempt = 0;
      // Only the status bookkeeping: the routes get the replayed events (or a
      // replay-gap snapshot event), not this reply.
      session.autoEnd = r.snapshot.autoEndOnDisconnect;
      const held = session.held ?? [];
      session.held = null;
      for (const f of held) this.#sessions.onEvent(f);
      this.#changed();
    } catch (e) {
      session.held = null;
      const error = toBridgeError(e);
      if (error.code === "THREAD_NOT_FOUND" || error.code === "THREAD_ACCESS_DENIED") {
        this.#sessions.lost(session, error);
        return;
      }
      // The port dropped again (its loss re-attaches everything) or Core is still starting.
      if (this.#native.open) this.#scheduleReattach(session);
    }
  }
}
