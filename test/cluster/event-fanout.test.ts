import { describe, expect, it } from 'vitest';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import type { Broker } from '../../src/core/cluster/broker.js';
import { fanOutEvents } from '../../src/core/cluster/event-fanout.js';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { newEventId } from '../../src/core/events/ids.js';
import type { StreamingChannel } from '../../src/core/runtime/streaming-channel.js';
import type { Fenced, StoreUpstream } from '../../src/core/store/store-upstream.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';

/**
 * The order a node publishes in (event-fanout.ts), with its parts stubbed at their seams: a bus event
 * goes out only once the store holds it, a streaming event waits behind the bus events before it, an
 * event fenced off a shipment never goes out, and a store away for long does not make the node hold
 * every event for ever.
 */

function event(seq: number | null): MetisEvent {
  return {
    id: newEventId(),
    timestamp: microsToIso(nowMicros()),
    session_id: 'sess_fanout',
    turn_id: 'turn_fanout',
    parent_event_id: null,
    type: seq === null ? 'text.delta' : 'turn.started',
    actor: 'agent',
    payload: {},
    sensitivity: 'private',
    seq,
  };
}

function rig(options: { shipped: boolean; earlier?: MetisEvent[] } = { shipped: true }) {
  const emitted: ((event: MetisEvent) => void)[] = [];
  const committed: ((batch: readonly MetisEvent[]) => void)[] = [];
  const dropped: ((batch: readonly MetisEvent[]) => void)[] = [];
  const shipped: ((through: string) => void)[] = [];
  const fenced: ((report: Fenced) => void)[] = [];
  const streamed: ((event: MetisEvent) => void)[] = [];
  const published: string[] = [];
  const commitWaits = new Map<string, () => void>();
  const stop = fanOutEvents({
    bus: {
      onEmit: (listener: (event: MetisEvent) => void) => (emitted.push(listener), () => {}),
    } as unknown as EventBus,
    writer: {
      onCommit: (listener: (batch: readonly MetisEvent[]) => void) => (committed.push(listener), () => {}),
      onDrop: (listener: (batch: readonly MetisEvent[]) => void) => dropped.push(listener),
      whenCommitted: (id: string) => new Promise<void>((resolve) => commitWaits.set(id, resolve)),
    } as unknown as StoreWriter,
    upstream: options.shipped
      ? ({
          onShipped: (listener: (through: string) => void) => (shipped.push(listener), () => {}),
          onFenced: (listener: (report: Fenced) => void) => (fenced.push(listener), () => {}),
        } as unknown as StoreUpstream)
      : null,
    earlier: options.earlier,
    streaming: {
      subscribe: (listener: (event: MetisEvent) => void) => (streamed.push(listener), () => {}),
    } as unknown as StreamingChannel,
    broker: {
      publish: (_subject: string, data: string) => published.push(JSON.parse(data).id),
    } as unknown as Broker,
    nodeId: 'node-a',
  });
  return {
    published,
    stop,
    emit: (e: MetisEvent) => {
      for (const listener of emitted) listener(e);
    },
    committed: (batch: MetisEvent[]) => {
      for (const listener of committed) listener(batch);
    },
    /** A bus event emitted and committed locally. */
    commit: (e: MetisEvent) => {
      for (const listener of emitted) listener(e);
      for (const listener of committed) listener([e]);
    },
    /** A batch the writer gave up on (fenced off, or past the buffer's bound). */
    drop: (e: MetisEvent) => {
      for (const listener of dropped) listener([e]);
    },
    /** The writer answers that PostgreSQL holds `e`. */
    committedThrough: (e: MetisEvent) => commitWaits.get(e.id)?.(),
    stream: (e: MetisEvent) => {
      for (const listener of streamed) listener(e);
    },
    ship: (through: string) => {
      for (const listener of shipped) listener(through);
    },
    fence: (events: MetisEvent[]) => {
      for (const listener of fenced) listener({ events, sessionIds: ['sess_fanout'] });
    },
  };
}

describe('the order a cluster node publishes in', () => {
  it('holds bus events, and the deltas behind them, until the store has them; never publishes a fenced one', () => {
    const r = rig();
    const first = event(1);
    const delta = event(null);
    const second = event(2);
    r.commit(first);
    r.stream(delta);
    r.commit(second);
    expect(r.published).toEqual([]);
    r.ship(first.id);
    expect(r.published).toEqual([first.id, delta.id]);
    r.fence([second]);
    r.ship(second.id);
    const after = event(null);
    r.stream(after);
    expect(r.published).toEqual([first.id, delta.id, after.id]);
    r.stop();
  });

  it('on PostgreSQL alone, publishes a bus event once the writer commits it, never a dropped one', async () => {
    const recovered = event(1);
    const r = rig({ shipped: false, earlier: [recovered] });
    const first = event(2);
    const delta = event(null);
    const refused = event(3);
    r.emit(first);
    r.stream(delta);
    r.emit(refused);
    expect(r.published).toEqual([]);
    r.committed([first]);
    expect(r.published).toEqual([first.id, delta.id]);
    r.drop(refused);
    const after = event(null);
    r.stream(after);
    await new Promise((resolve) => setImmediate(resolve));
    expect(r.published).toEqual([first.id, delta.id, after.id]);
    // What recovery closed before the node joined goes out once the writer says PostgreSQL holds it.
    r.committedThrough(recovered);
    await new Promise((resolve) => setImmediate(resolve));
    expect(r.published).toEqual([first.id, delta.id, after.id, recovered.id]);
    r.stop();
  });

  it('gives up on the oldest when the store stays away, so that it holds a bounded number', () => {
    const r = rig();
    const events = Array.from({ length: 60_000 }, (_, i) => event(i + 1));
    for (const e of events) r.commit(e);
    const delta = event(null);
    r.stream(delta);
    expect(r.published).toEqual([]);
    r.ship(events.at(-1)!.id);
    // The oldest were given up on (the other nodes fill them from the store); the rest go out in order.
    expect(r.published.length).toBeLessThan(40_000);
    expect(r.published.at(-1)).toBe(delta.id);
    expect(r.published.slice(0, -1)).toEqual(events.slice(-(r.published.length - 1)).map((e) => e.id));
    r.stop();
  });
});
