import type { MetisEvent } from '../events/envelope.js';

/**
 * What a connection holds between accept and subscribe (streaming §3.7 step 1): every event released to
 * it, so that the seam has no gap. Bounded: a client that never subscribes (or stays after a
 * subscribe_error) must not make the server hold events for it without limit. Past the bound the buffer
 * is dropped and the socket is served by cursor instead (`early`), from `acceptedAfterId` out of the
 * store and RecentStreams: memory stays bounded, and a socket that has read nothing yet is not too slow
 * (issue 14 obs. 8).
 */
export class AcceptBuffer {
  events: MetisEvent[] = [];
  early = false;
  /** How often the bound was passed: a subscribe whose reads saw it happen must start again. */
  overflows = 0;

  constructor(
    /** The last event released before accept: `events` holds everything after it. */
    readonly acceptedAfterId: string | null,
    readonly bound: number,
  ) {}

  add(event: MetisEvent): void {
    if (this.early) return;
    if (this.events.length >= this.bound) this.overflow();
    else this.events.push(event);
  }

  /**
   * A subscribe's store reads begin: an `early` socket, which holds nothing, holds from now on what is
   * released while they are under way (its replay covers what came before, by cursor).
   */
  holdFromNow(): void {
    if (this.early) this.events = [];
    this.early = false;
  }

  /** A subscribe that began `early` was refused: the socket is served by its cursor again. */
  backToCursor(): void {
    this.events = [];
    this.early = true;
  }

  /** The subscribe took what was buffered (or the connection closed). */
  clear(): void {
    this.events = [];
    this.early = false;
  }

  /** More than the bound arrived before subscribe: from now on the socket is served by its cursor. */
  protected overflow(): void {
    this.events = [];
    this.early = true;
    this.overflows += 1;
  }
}
