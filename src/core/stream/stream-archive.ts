import { nowMicros } from '../events/clock.js';
import type { MetisEvent } from '../events/envelope.js';
import type { StreamArchiveRows } from '../store/stream-archive-rows.js';

export interface StreamWindow {
  /** Keep every streaming event of a session newer than this… */
  readonly minAgeMs: number;
  /** …and, whatever their age, its newest this many. */
  readonly minEvents: number;
  /** How often the table is pruned, at most (tests prune at every flush with 0). */
  readonly pruneEveryMs: number;
}

/** The resume window of issue 14: at least 10 minutes or 10,000 events per session, whichever is more. */
export const DEFAULT_STREAM_WINDOW: StreamWindow = {
  minAgeMs: 10 * 60_000,
  minEvents: 10_000,
  pruneEveryMs: 30_000,
};

/** Events waiting for their commit, at most: past it, new ones are not archived (and replay says so). */
const MAX_WAITING = 50_000;
/**
 * Rows go to the writer in batches, at most this long after their event: a model streams one delta per
 * tick, and a transaction per tick would cost more than the deltas themselves. Until committed they are
 * served from memory, so only a crash within this time loses any.
 */
const FLUSH_EVERY_MS = 20;
const FLUSH_AT_EVENTS = 2_000;
const PRUNE_SESSIONS_PER_FLUSH = 32;

/**
 * The streaming events of each session's resume window, in the `stream_events` table (schema 5), so a
 * client reconnecting with a cursor gets every delta it missed, seconds or minutes old, after a server
 * restart too (issue 14 obs. 3). Streaming events reach clients at once (DESIGN.md invariant 2); their
 * rows are written behind, in batches (FLUSH_EVERY_MS), inside the trace writer's group commit, which waits out
 * a busy or full disk as for any row. Until committed they are served from memory.
 */
export class StreamArchive {
  /** Recorded, to be handed to the writer at the next tick. */
  private queued: MetisEvent[] = [];
  /** Handed to the writer, not committed yet: still served from here. */
  private readonly handed = new Set<readonly MetisEvent[]>();
  private unsettled = 0;
  private scheduled = false;
  private readonly touched = new Set<string>();
  private lastPrune = nowMicros();
  /** Per session, the newest event not archived for want of room: a replay from before it is short. */
  private readonly skippedUpTo = new Map<string, string>();
  private closed = false;

  constructor(
    private readonly rows: StreamArchiveRows,
    readonly window: StreamWindow = DEFAULT_STREAM_WINDOW,
  ) {
    // Sessions untouched since a restart are pruned once too, at the first flush once the store has named
    // them. Should it fail to, they are pruned when next written to, or go with the retention sweep.
    this.lastPrune = 0;
    rows.archivedSessions().then(
      (sessionIds) => {
        for (const sessionId of sessionIds) this.touched.add(sessionId);
        this.lastPrune = 0;
      },
      () => {},
    );
  }

  /** Archives a streaming event (released to clients already); its row is written at the next tick. */
  record(event: MetisEvent): void {
    if (this.closed) return;
    if (this.unsettled + this.queued.length >= MAX_WAITING) {
      this.skippedUpTo.set(event.session_id, event.id);
      return;
    }
    this.queued.push(event);
    this.touched.add(event.session_id);
    if (this.queued.length >= FLUSH_AT_EVENTS) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setTimeout(() => this.flush(), FLUSH_EVERY_MS).unref();
    }
  }

  /**
   * The archived streaming events of these sessions after `afterId` (all of them when null), in id
   * order, at most `limit` per session; those still waiting for their commit included. Holds every
   * event recorded before the call; of those recorded while the store reads, some or none.
   */
  async after(
    sessionIds: Iterable<string>,
    afterId: string | null,
    limit = Number.MAX_SAFE_INTEGER,
  ): Promise<MetisEvent[]> {
    const wanted = new Set(sessionIds);
    // Taken before the reads: a batch that commits while they wait leaves memory, and the store may
    // have answered from before its commit.
    const waiting = [...this.uncommitted()].filter(
      (event) => wanted.has(event.session_id) && (afterId === null || event.id > afterId),
    );
    const stored = await Promise.all(
      [...wanted].map((sessionId) => this.rows.after(sessionId, afterId ?? '', limit)),
    );
    const byId = new Map<string, MetisEvent>();
    for (const json of stored.flat()) {
      const event = JSON.parse(json) as MetisEvent;
      byId.set(event.id, event);
    }
    for (const event of waiting) byId.set(event.id, event);
    return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
  }

  /**
   * Whether streaming events of the session after `afterId` may be missing: pruned from the window,
   * from before the table existed, or left out for want of room. A replay from there would be short.
   * Asked after `after` (not beside it), it sees every prune that took rows from that read.
   */
  async missingAfter(sessionId: string, afterId: string): Promise<boolean> {
    const horizon = await this.rows.horizon(sessionId);
    // Looked at once the store answered: a batch refused meanwhile may be missing from that read too.
    const skipped = this.skippedUpTo.get(sessionId);
    if (skipped !== undefined && skipped > afterId) return true;
    return horizon !== undefined && horizon > afterId;
  }

  /** Hands what is queued to the writer now (the server is stopping); later events are not archived. */
  close(): void {
    this.flush();
    this.closed = true;
  }

  private *uncommitted(): Iterable<MetisEvent> {
    for (const batch of this.handed) yield* batch;
    yield* this.queued;
  }

  private flush(): void {
    this.scheduled = false;
    if (this.closed) return;
    const batch = this.queued;
    this.queued = [];
    if (batch.length === 0) return;
    this.handed.add(batch);
    this.unsettled += batch.length;
    const settled = (committed: boolean) => {
      this.unsettled -= batch.length;
      this.handed.delete(batch);
      // Refused for good (not a busy or full disk, which the writer waits out): a replay says so.
      if (!committed) for (const event of batch) this.skippedUpTo.set(event.session_id, event.id);
    };
    this.rows.write(batch, settled);
    if (nowMicros() - this.lastPrune >= this.window.pruneEveryMs * 1000) this.prune();
  }

  /** Drops what falls out of every touched session's window, inside the writer's commit like the rows. */
  prune(): void {
    // A bounded share per transaction: each session costs an index walk of up to `minEvents` rows, and
    // a restart puts every archived session in `touched`. The rest wait for the next flush.
    const sessions = [...this.touched].slice(0, PRUNE_SESSIONS_PER_FLUSH);
    for (const sessionId of sessions) this.touched.delete(sessionId);
    if (this.touched.size === 0) this.lastPrune = nowMicros();
    const cutoffUs = nowMicros() - this.window.minAgeMs * 1000;
    this.rows.prune(sessions, cutoffUs, this.window.minEvents);
  }
}
