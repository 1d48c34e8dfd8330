import type { MetisEvent } from '../events/envelope.js';
import { rowToEvent } from './event-rows.js';
import {
  type ContentMessage,
  type ContentToolCall,
  messagesUpTo,
  toolCallRow,
} from './trace-content-rows.js';
import type { ReplayQuery, TraceStore } from './trace-store.js';

/**
 * What a plugin may read of the trace (the public `TraceQuery.async`, src/plugins/define-plugin.ts),
 * asynchronous so that a store over the network can answer every read exactly. Each adapter gives the
 * same answers for the same stored rows (test/store/trace-query-contract.test.ts).
 */
export interface TraceQueryReads {
  /** Events after a cursor, in id order, at most `limit`; `tooLarge` says whether more matched. */
  replay(query: ReplayQuery): Promise<{ events: MetisEvent[]; tooLarge: boolean }>;
  /** Every stored event of a session, in id order. */
  sessionEvents(sessionId: string): Promise<MetisEvent[]>;
  getEvent(id: string): Promise<MetisEvent | null>;
  /** The causal chain from an event back to its root, the event itself first; [] for an unknown id. */
  causalChain(eventId: string): Promise<MetisEvent[]>;
  /** The newest `limit` messages of a session stored before an event (by id), oldest first. */
  messagesBefore(sessionId: string, eventId: string, limit: number): Promise<ContentMessage[]>;
  /** A session's stored tool call by its tool_use_id (the newest, should an id repeat), or null. */
  toolCall(sessionId: string, toolUseId: string): Promise<ContentToolCall | null>;
}

/** An event id's ULID: messages are ordered against events by it (`msg_<ULID>` against `evt_<ULID>`). */
export const ulidOfEventId = (eventId: string): string => eventId.slice(eventId.indexOf('_') + 1);

/** The reads over a SQLite store: its synchronous answers, resolved. */
export function sqliteTraceQueryReads(store: TraceStore): TraceQueryReads {
  return {
    replay: async (query) => {
      const { rows, tooLarge } = store.replay(query);
      return { events: rows.map(rowToEvent), tooLarge };
    },
    sessionEvents: async (sessionId) => store.sessionEvents(sessionId),
    getEvent: async (id) => store.getEvent(id),
    causalChain: async (eventId) => store.causalChain(eventId),
    messagesBefore: async (sessionId, eventId, limit) =>
      messagesUpTo(store.db, sessionId, ulidOfEventId(eventId), limit),
    toolCall: async (sessionId, toolUseId) => toolCallRow(store.db, sessionId, toolUseId),
  };
}
