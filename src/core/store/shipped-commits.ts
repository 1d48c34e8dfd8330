import type { MetisEvent } from '../events/envelope.js';
import type { StoreUpstream } from './store-upstream.js';
import type { StoreWriter } from './store-writer.js';

/** Events committed here and not yet in PostgreSQL held at most, per listener. */
const MAX_AWAITING_SHIPMENT = 50_000;

/**
 * What "committed" means on a PostgreSQL store: a bus event counts once the store of record holds it,
 * not when this node's working copy does, for this node's clients (app/metis-server.ts) and the other
 * nodes' (cluster/event-fanout.ts) alike, so that a crash or a fence cannot take back what a client was
 * shown. Events committed locally wait here for the shipment that takes them; a batch that failed to
 * commit is dropped as the local stream drops it.
 */
export function shippedCommits(
  writer: StoreWriter,
  upstream: StoreUpstream,
): Pick<StoreWriter, 'onCommit' | 'onDrop'> {
  const awaiting: MetisEvent[] = [];
  let drop: ((batch: readonly MetisEvent[]) => void) | null = null;
  return {
    onCommit: (listener) => {
      const stopLocal = writer.onCommit((batch) => {
        for (const event of batch) awaiting.push(event);
        // PostgreSQL away for long: the oldest are given up on here (never released live, and what waits
        // behind them goes on); a client finds the gap by seq and replays it from the store once back.
        if (awaiting.length > MAX_AWAITING_SHIPMENT && drop !== null)
          drop(awaiting.splice(0, awaiting.length - MAX_AWAITING_SHIPMENT / 2));
      });
      const stopShipped = upstream.onShipped((through) => {
        let count = 0;
        while (count < awaiting.length && awaiting[count]!.id <= through) count += 1;
        if (count > 0) listener(awaiting.splice(0, count));
      });
      return () => {
        stopLocal();
        stopShipped();
      };
    },
    onDrop: (listener) => {
      drop = listener;
      writer.onDrop(listener);
      // Fenced off a shipment (another node runs the session now): never published.
      upstream.onFenced(({ events }) => {
        const ids = new Set(events.map((event) => event.id));
        const dropped = awaiting.filter((event) => ids.has(event.id));
        if (dropped.length === 0) return;
        for (let i = awaiting.length - 1; i >= 0; i -= 1) if (ids.has(awaiting[i]!.id)) awaiting.splice(i, 1);
        listener(dropped);
      });
    },
  };
}
