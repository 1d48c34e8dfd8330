import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import type { RowChange } from '../store/row-change.js';
import type { StoreContext } from '../store/store-context.js';
import { storeUnavailable } from '../store/store-unavailable.js';
import type { StoreUpstream } from '../store/store-upstream.js';
import { DEFAULT_COMMIT_WAIT_MS, type StoreWriter } from '../store/store-writer.js';

export { DEFAULT_COMMIT_WAIT_MS };

/**
 * What acknowledging a write needs of the store: its writer and, while a working copy stands in front
 * of PostgreSQL, the store of record the copy ships to (null otherwise).
 */
export interface CommitTarget {
  readonly writer: StoreWriter;
  readonly upstream: StoreUpstream | null;
}

/**
 * Runs `act` and returns its result with the first event it emitted that `match` accepts. The runtime
 * emits `session.created` inside `createSession` and `turn.started` inside `submitTurn` before either
 * returns, so the event is known without the runtime handing its id out.
 */
export function emittedDuring<T>(
  trace: StoreContext,
  match: (event: MetisEvent) => boolean,
  act: () => T,
): { result: T; event: MetisEvent | null } {
  let found: MetisEvent | null = null;
  const stop = trace.bus.onEmit((event) => {
    if (found === null && match(event)) found = event;
  });
  try {
    return { result: act(), event: found };
  } finally {
    stop();
  }
}

/**
 * Fails fast while the trace writer is waiting out a storage failure: a request that would only wait
 * for the same failure is answered 503/507 at once rather than after the full commit wait.
 * @throws MetisError METIS_ERR_STORAGE_BUSY, _FULL or _IO
 */
export function assertStorageWritable(trace: CommitTarget): void {
  if (trace.writer.failure !== null) throw trace.writer.storageRefusal();
  const upstream = trace.upstream;
  if (upstream?.failure) throw storeAway(upstream.label, upstream.failure);
}

/** The store of record is gone: named, with why, and what happens to what was already done. */
function storeAway(label: string, cause: Error | null): MetisError {
  return storeUnavailable(
    label,
    cause,
    'new turns are refused until it is back; what was already done waits in the working copy and is sent then',
  );
}

/**
 * Waits (asynchronously, at most `timeoutMs`) until `event` is committed: what makes a 2xx honest. An
 * event not seen (the runtime changed how it emits) falls back to waiting for the writer to be idle.
 * @throws MetisError METIS_ERR_STORAGE_BUSY, _FULL or _IO when storage does not take it in time
 */
export async function untilCommitted(
  trace: StoreContext,
  event: MetisEvent | null,
  timeoutMs = DEFAULT_COMMIT_WAIT_MS,
): Promise<void> {
  const started = performance.now();
  if (event !== null) await trace.writer.whenCommitted(event.id, timeoutMs);
  else {
    trace.bus.dispatchNow();
    if (!(await trace.writer.idle(timeoutMs))) {
      throw trace.writer.storageRefusal();
    }
  }
  await untilShipped(trace, started, timeoutMs);
}

/** Behind a working copy, the answer waits for the store of record too, in what is left of the same wait. */
async function untilShipped(store: CommitTarget, started: number, timeoutMs: number): Promise<void> {
  const upstream = store.upstream;
  if (upstream === null) return;
  const left = Math.max(1, timeoutMs - (performance.now() - started));
  if (!(await upstream.whenShipped(left))) throw storeAway(upstream.label, upstream.failure);
}

/**
 * Queues `change` through the writer (behind every event and row already queued) and waits, at most
 * `timeoutMs`, until it is committed: a 2xx for a row write means stored, as for an event. A row is
 * never dropped: one still waiting when the time is up is refused here and committed once storage is
 * back, as an event acknowledged late would be.
 * @throws MetisError the writer's storage refusal (503/507) when it is not committed in time, or
 * METIS_ERR_STORAGE_IO when the store refused the row itself (the writer's log says why)
 */
export async function untilRowCommitted(
  store: CommitTarget,
  what: string,
  change: RowChange,
  timeoutMs = DEFAULT_COMMIT_WAIT_MS,
): Promise<void> {
  const started = performance.now();
  const committed = await new Promise<boolean>((resolve, reject) => {
    // 0: no limit, as whenCommitted takes it.
    const timer = timeoutMs > 0 ? setTimeout(() => reject(store.writer.storageRefusal()), timeoutMs) : null;
    store.writer.writeRow({
      what,
      change,
      settled: (stored) => {
        if (timer !== null) clearTimeout(timer);
        resolve(stored);
      },
    });
  });
  if (!committed) throw new MetisError('METIS_ERR_STORAGE_IO', `the store refused to write ${what}`);
  await untilShipped(store, started, timeoutMs);
}
