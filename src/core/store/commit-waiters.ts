import type { MetisEvent } from '../events/envelope.js';

interface Waiter {
  resolve(): void;
  reject(error: Error): void;
}

/** How many dropped ids are remembered for a `whenCommitted` that asks after the drop. */
const DROPPED_IDS_KEPT = 10_000;

/**
 * Promises that settle when one event is committed (or dropped) by the trace writer: what an HTTP
 * handler awaits before acknowledging a request with a 2xx. Ids are handed out in emit order and the
 * writer commits in that order, so an id at or below the newest committed one that was not dropped is
 * committed.
 */
export class CommitWaiters {
  private readonly waiting = new Map<string, Waiter[]>();
  private readonly droppedIds = new Set<string>();
  private lastCommittedId = '';

  /**
   * Resolves once `eventId` is committed; rejects with `dropError()` if it is dropped. A caller that
   * stops waiting (a timeout) leaves its waiter here until the event is committed or dropped.
   */
  /**
   * As `wait`, and rejects with `refusal()` when the event is still waiting after `timeoutMs` (0: no
   * limit): how long a request may wait for storage before it is refused.
   */
  waitAtMost(eventId: string, timeoutMs: number, refusal: () => Error): Promise<void> {
    const wait = this.wait(eventId, refusal);
    if (timeoutMs <= 0) return wait;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(refusal()), timeoutMs);
      wait.then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  wait(eventId: string, dropError: () => Error): Promise<void> {
    if (this.droppedIds.has(eventId)) return Promise.reject(dropError());
    if (eventId <= this.lastCommittedId) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(eventId) ?? [];
      list.push({ resolve, reject });
      this.waiting.set(eventId, list);
    });
  }

  committed(events: readonly MetisEvent[]): void {
    const last = events.at(-1);
    if (last !== undefined && last.id > this.lastCommittedId) this.lastCommittedId = last.id;
    if (this.waiting.size === 0) return;
    for (const event of events) {
      const list = this.waiting.get(event.id);
      if (list === undefined) continue;
      this.waiting.delete(event.id);
      for (const waiter of list) waiter.resolve();
    }
  }

  dropped(events: readonly MetisEvent[], error: () => Error): void {
    for (const event of events) {
      this.droppedIds.add(event.id);
      const list = this.waiting.get(event.id);
      if (list === undefined) continue;
      this.waiting.delete(event.id);
      for (const waiter of list) waiter.reject(error());
    }
    if (this.droppedIds.size > DROPPED_IDS_KEPT) {
      // Sets iterate in insertion order: forget the oldest.
      const excess = this.droppedIds.size - DROPPED_IDS_KEPT;
      let removed = 0;
      for (const id of this.droppedIds) {
        if (removed++ >= excess) break;
        this.droppedIds.delete(id);
      }
    }
  }
}
