import type { WriteItem } from './batch-committer.js';

/**
 * The trace writer's FIFO of events and rows not yet committed, with the counts its bound is checked
 * against. Items leave only from the front, once committed or refused, so order always holds.
 */
export class WriteQueue {
  private items: WriteItem[] = [];
  private head = 0;
  /** Events waiting (rows are not counted: they are never dropped). */
  events = 0;
  /** Bytes waiting, events and rows. */
  bytes = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: WriteItem): void {
    this.items.push(item);
    this.bytes += item.bytes;
    if ('event' in item) this.events += 1;
  }

  /** The first `max` items, left in place. */
  front(max = Number.POSITIVE_INFINITY): WriteItem[] {
    return this.items.slice(this.head, Math.min(this.items.length, this.head + max));
  }

  /** Removes the first `count` items (they were committed or refused). */
  removeFront(count: number): void {
    const end = Math.min(this.items.length, this.head + count);
    for (let i = this.head; i < end; i += 1) {
      const item = this.items[i]!;
      this.bytes -= item.bytes;
      if ('event' in item) this.events -= 1;
    }
    this.head = end;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}
