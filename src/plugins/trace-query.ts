import { MetisError } from '../core/errors.js';
import type { MetisEvent } from '../core/events/envelope.js';
import { rowToEvent } from '../core/store/event-rows.js';
import { DEFAULT_COMMIT_WAIT_MS, type StoreWriter } from '../core/store/store-writer.js';
import { messagesUpTo, toolCallRow } from '../core/store/trace-content-rows.js';
import {
  sqliteTraceQueryReads,
  type TraceQueryReads,
  ulidOfEventId,
} from '../core/store/trace-query-reads.js';
import type { TraceStore } from '../core/store/trace-store.js';
import type { AsyncTraceQuery, TraceQuery } from './define-plugin.js';
import type { RecentEvents } from './recent-events.js';

/**
 * A trace no file of this process holds (PostgreSQL alone): its asynchronous reads, and the writer that
 * stores this process's events, whose drops the host's memory forgets and whose commits an
 * asynchronous read waits for.
 */
export interface RemoteTrace {
  readonly reads: TraceQueryReads;
  readonly writer: Pick<StoreWriter, 'onDrop' | 'whenCommitted'>;
  /** How long an asynchronous read waits for that commit before it is refused (DEFAULT_COMMIT_WAIT_MS). */
  readonly commitWaitMs?: number;
}

/** The trace plugins read (`ctx.store`) over a SQLite store: every read answered from the file at the call. */
export function sqliteTraceQuery(store: TraceStore): TraceQuery {
  return {
    replay: (query) => {
      const { rows, tooLarge } = store.replay(query);
      return { events: rows.map(rowToEvent), tooLarge };
    },
    sessionEvents: (sessionId) => store.sessionEvents(sessionId),
    getEvent: (id) => store.getEvent(id),
    causalChain: (eventId) => store.causalChain(eventId),
    messagesBefore: (sessionId, eventId, limit) =>
      messagesUpTo(store.db, sessionId, ulidOfEventId(eventId), limit),
    toolCall: (sessionId, toolUseId) => toolCallRow(store.db, sessionId, toolUseId),
    async: sqliteTraceQueryReads(store),
  };
}

/** A synchronous read the host cannot answer exactly here, naming it and what to use instead. */
function refuse(read: string, why: string): never {
  throw new MetisError(
    'METIS_ERR_TRACE_READ_REFUSED',
    `${read} cannot be answered synchronously on a PostgreSQL store without a working copy: ${why}; use ctx.store.async.${read.slice(0, read.indexOf('('))}`,
  );
}

/**
 * The trace plugins read over a store with no file here: `getEvent` and `causalChain` from the events
 * this process dispatched (`recent`), exact or refused; the reads that need history or content refused;
 * `async` from the store. An asynchronous read first waits until the newest event the host has seen is
 * committed, so a plugin asking about an event it was just handed (or its parents) finds it stored; when
 * storage does not commit it in time the read is refused with the writer's storage error, never answered
 * without it.
 */
export function recentTraceQuery(recent: RecentEvents, remote: RemoteTrace): TraceQuery {
  remote.writer.onDrop((events) => recent.forget(events));
  const waitMs = remote.commitWaitMs ?? DEFAULT_COMMIT_WAIT_MS;
  const stored = async (): Promise<void> => {
    const newest = recent.newestId;
    if (newest === null) return;
    try {
      await remote.writer.whenCommitted(newest, waitMs);
    } catch (error) {
      // A dropped event is never stored: nothing to wait for, and the read shows what the store has.
      // Still waiting is another matter: the store may lack what the plugin was handed.
      if (!recent.wasDropped(newest)) throw error;
    }
  };
  const after =
    <A extends unknown[], R>(read: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      await stored();
      return read(...args);
    };
  const { reads } = remote;
  const async: AsyncTraceQuery = {
    replay: after(reads.replay),
    sessionEvents: after(reads.sessionEvents),
    getEvent: after(reads.getEvent),
    causalChain: after(reads.causalChain),
    messagesBefore: after(reads.messagesBefore),
    toolCall: after(reads.toolCall),
  };
  const notHeld = `not among the ${recent.capacity} newest events this process dispatched`;
  return {
    replay: () => refuse('replay()', 'history is not kept in memory'),
    sessionEvents: (sessionId) => refuse(`sessionEvents(${sessionId})`, 'history is not kept in memory'),
    getEvent: (id): MetisEvent => recent.get(id) ?? refuse(`getEvent(${id})`, notHeld),
    causalChain: (eventId) =>
      recent.chain(eventId) ?? refuse(`causalChain(${eventId})`, `a link of the chain is ${notHeld}`),
    messagesBefore: (sessionId) =>
      refuse(`messagesBefore(${sessionId})`, 'message content is not on the bus'),
    toolCall: (sessionId, toolUseId) =>
      refuse(`toolCall(${sessionId}, ${toolUseId})`, 'tool call rows are not on the bus'),
    async,
  };
}
