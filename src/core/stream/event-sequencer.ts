import type { EventBus } from '../bus/event-bus.js';
import type { MetisEvent } from '../events/envelope.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { StoreWriter } from '../store/store-writer.js';

export type ReleaseListener = (event: MetisEvent) => void;

interface Slot {
  readonly event: MetisEvent;
  /** Streaming events are ready at once; bus events once their transaction committed. */
  ready: boolean;
  dropped: boolean;
}

/**
 * Merges the two channels into one stream in id order (DESIGN.md invariants 1 and 2):
 *
 *   bus.emit ──(onEmit)──▶ slot (pending) ──(writer.onCommit)──▶ ready ─┐
 *   streaming.publish ───▶ slot (ready) ────────────────────────────────┴─▶ release in id order
 *
 * Every event gets a slot when it is created, and ids are handed out in creation order, so the slots
 * are already sorted. The head is released as soon as it is ready: a streaming delta waits only for the
 * bus events created before it to commit (one dispatch tick), and a bus event never reaches a client
 * before the store has it. A bus event whose batch failed to commit is dropped from the stream.
 */
export class EventSequencer {
  private readonly slots: Slot[] = [];
  private head = 0;
  private readonly pendingById = new Map<string, Slot>();
  private readonly listeners = new Set<ReleaseListener>();
  private releasing = false;
  private readonly detachers: (() => void)[] = [];
  /** Id of the newest event released, the `snapshot_at_event_id` of a snapshot taken now. */
  lastReleasedId: string | null = null;
  /**
   * Id of the first event this process created, or null before it: before anything is released, the
   * stored rows at and after it are this process's own, committed and still waiting for their release.
   */
  firstCreatedId: string | null = null;
  /** Per session another node runs, the newest of its events released here (releaseRemote). */
  private readonly remoteReleased = new Map<string, string>();
  /** Whether a streaming event is shown at all (a cluster node: only of the sessions it runs). */
  private admitsStreaming: (event: MetisEvent) => boolean = () => true;

  constructor(bus: EventBus, writer: Pick<StoreWriter, 'onCommit' | 'onDrop'>, streaming: StreamingChannel) {
    this.detachers.push(
      bus.onEmit((event) => {
        const slot: Slot = { event, ready: false, dropped: false };
        this.firstCreatedId ??= event.id;
        this.slots.push(slot);
        this.pendingById.set(event.id, slot);
      }),
    );
    writer.onCommit((batch) => this.settle(batch, false));
    writer.onDrop((batch) => this.settle(batch, true));
    this.detachers.push(
      streaming.subscribe((event) => {
        if (!this.admitsStreaming(event)) return;
        this.firstCreatedId ??= event.id;
        this.slots.push({ event, ready: true, dropped: false });
        this.release();
      }),
    );
  }

  /**
   * Releases an event another node of a cluster ran, once this node's copy holds it (a bus event) or as
   * it arrives (a streaming one). This node never runs that session, so no event of its own is ordered
   * against it.
   */
  releaseRemote(event: MetisEvent): void {
    // Not through the slots: this node's own events neither wait for it nor are ordered after it, and
    // `lastReleasedId`, this node's horizon for its own sessions, is not moved by another node's ids.
    this.markRemote(event.session_id, event.id);
    for (const listener of this.listeners) listener(event);
  }

  /**
   * Shows only the streaming events `admits` lets through. A cluster node frozen past the node timeout
   * runs its turn on when it thaws, in a session another node has taken meanwhile: its deltas would reach
   * its own clients amid the new owner's events, ids out of order, text that never happened.
   */
  admitStreaming(admits: (event: MetisEvent) => boolean): void {
    this.admitsStreaming = admits;
  }

  /** A session another node runs, whose events up to `id` this node's copy holds (all released). */
  markRemote(sessionId: string, id: string): void {
    const newest = this.remoteReleased.get(sessionId);
    if (newest === undefined || id > newest) this.remoteReleased.set(sessionId, id);
  }

  /** The newest event of a session another node runs released here, if any. */
  remoteMark(sessionId: string): string | undefined {
    return this.remoteReleased.get(sessionId);
  }

  /** This node runs these sessions now (it took them over): their horizon is its own again. */
  forgetRemote(sessionIds: Iterable<string>): void {
    for (const id of sessionIds) this.remoteReleased.delete(id);
  }

  /**
   * The newest event released to clients of these sessions: no snapshot or replay reaches past it.
   * For sessions another node runs, the newest of theirs released here (each is released as soon as
   * this node's copy holds it); for this node's own, `lastReleasedId`.
   */
  releasedThrough(sessionIds: Iterable<string>): string | null {
    let newest: string | null = null;
    let remote = false;
    for (const id of sessionIds) {
      const mark = this.remoteReleased.get(id);
      if (mark === undefined) continue;
      remote = true;
      if (newest === null || mark > newest) newest = mark;
    }
    return remote ? newest : this.lastReleasedId;
  }

  /**
   * Which stored rows a replay may show, given `upTo` (releasedThrough, read before the rows were): those
   * up to it; before this process released anything, those before its first own event (all while it
   * created none), since its own rows are committed and still wait for their release. Asked at each row,
   * so an event created while the rows were read is left to arrive live.
   */
  storedRowShown(upTo: string | null): (id: string) => boolean {
    if (upTo !== null) return (id) => id <= upTo;
    return (id) => this.firstCreatedId === null || id < this.firstCreatedId;
  }

  /**
   * Before this process released anything, the bound a snapshot's point is looked up below (the newest
   * stored event before it): its first own event, or past every id when it created none.
   */
  unreleasedBound(): string {
    return this.firstCreatedId ?? '~';
  }

  onRelease(listener: ReleaseListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Events created but not yet released (waiting for a commit): for diagnostics and tests. */
  get waiting(): number {
    return this.slots.length - this.head;
  }

  close(): void {
    for (const detach of this.detachers) detach();
    this.listeners.clear();
  }

  private settle(batch: readonly MetisEvent[], dropped: boolean): void {
    for (const event of batch) {
      const slot = this.pendingById.get(event.id);
      if (slot === undefined) continue; // emitted before the sequencer existed
      this.pendingById.delete(event.id);
      slot.ready = true;
      slot.dropped = dropped;
    }
    this.release();
  }

  private release(): void {
    // A listener may cause new events (a slow client's close emits bus.subscriber_unregistered);
    // those join the queue and the outer loop releases them in order.
    if (this.releasing) return;
    this.releasing = true;
    try {
      while (this.head < this.slots.length) {
        const slot = this.slots[this.head]!;
        if (!slot.ready) break;
        this.head += 1;
        if (slot.dropped) continue;
        this.lastReleasedId = slot.event.id;
        for (const listener of this.listeners) listener(slot.event);
      }
      if (this.head > 1024 && this.head * 2 > this.slots.length) {
        this.slots.splice(0, this.head);
        this.head = 0;
      }
    } finally {
      this.releasing = false;
    }
  }
}
