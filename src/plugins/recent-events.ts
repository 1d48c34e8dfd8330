import type { MetisEvent } from '../core/events/envelope.js';

/** How many events the plugin host keeps for plugins' synchronous reads on a store with no file here. */
export const RECENT_EVENTS_KEPT = 10_000;

/**
 * The newest bus events this process dispatched, by id, in a fixed-size ring: what the plugin host
 * answers `getEvent` and `causalChain` from where the trace cannot be read synchronously (PostgreSQL
 * alone). Stored events never change, so an event held here is exactly the stored one; what the ring
 * does not hold is unknown to it, never "absent" (`null` means "not here", not "not stored").
 */
export class RecentEvents {
  private readonly byId = new Map<string, MetisEvent>();
  /** Ids in arrival order, overwritten in a circle: evicting the oldest allocates nothing. */
  private readonly order: (string | undefined)[];
  private next = 0;
  /** Ids the writer gave up on, the newest `capacity` of them (insertion order: the oldest go first). */
  private readonly dropped = new Set<string>();
  /** The newest id recorded (ids are dispatched in increasing order), held or since evicted. */
  newestId: string | null = null;

  constructor(readonly capacity: number = RECENT_EVENTS_KEPT) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError('capacity must be a positive integer');
    this.order = new Array(capacity);
  }

  get size(): number {
    return this.byId.size;
  }

  /** Keeps one event, evicting the oldest kept when full. Cheap: it runs on the bus's fast path. */
  record(event: MetisEvent): void {
    const evicted = this.order[this.next];
    if (evicted !== undefined) this.byId.delete(evicted);
    this.order[this.next] = event.id;
    this.next = (this.next + 1) % this.capacity;
    this.byId.set(event.id, event);
    this.newestId = event.id;
  }

  /**
   * Forgets events the store's writer gave up on (dropped in an outage, refused): they will never be
   * stored, so answering them would tell a plugin of events replay cannot show.
   */
  forget(events: readonly MetisEvent[]): void {
    for (const event of events) {
      this.byId.delete(event.id);
      this.dropped.add(event.id);
    }
    for (const id of this.dropped) {
      if (this.dropped.size <= this.capacity) break;
      this.dropped.delete(id);
    }
  }

  /** Whether the writer gave up on this event (among the newest `capacity` so dropped). */
  wasDropped(id: string): boolean {
    return this.dropped.has(id);
  }

  /** The event if held, else null: not held says nothing of whether the store has it. */
  get(id: string): MetisEvent | null {
    return this.byId.get(id) ?? null;
  }

  /**
   * The causal chain from `eventId` to its root (an event with no parent), the event first, when every
   * link is held; null when the walk leaves the ring, so a caller never gets part of a chain.
   */
  chain(eventId: string): MetisEvent[] | null {
    const chain: MetisEvent[] = [];
    let id: string | null = eventId;
    // A loop in the parents cannot be longer than the ring; the bound keeps a bad chain from spinning.
    while (id !== null && chain.length <= this.capacity) {
      const event = this.byId.get(id);
      if (event === undefined) return null;
      chain.push(event);
      id = event.parent_event_id;
    }
    return id === null ? chain : null;
  }
}
