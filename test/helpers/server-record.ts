import { onTestFinished } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { TestServer } from './server.js';

/**
 * The server's own record of a session's stream, independent of any WebSocket: every bus event once its
 * transaction committed (`writer.onCommit`) and every streaming event as published
 * (`runtime.streaming.subscribe`), merged in id order. A bug in what connections send cannot leak into it.
 */
export interface ServerRecord {
  /**
   * What a subscriber to `sessionId` must receive: the session's events in id order, restricted to
   * `eventTypes` (a resolved filter's list; null for all), as JSON values like the wire's.
   */
  of(sessionId: string, eventTypes?: readonly string[] | null): any[];
  /** Resolves with the first recorded event (already recorded or to come) that matches. */
  waitFor(predicate: (event: MetisEvent) => boolean, timeoutMs?: number): Promise<MetisEvent>;
}

export function recordServer(t: Pick<TestServer, 'runtime' | 'context'>): ServerRecord {
  const events: MetisEvent[] = [];
  const waiters: { predicate: (e: MetisEvent) => boolean; resolve: (e: MetisEvent) => void }[] = [];
  const add = (event: MetisEvent) => {
    events.push(event);
    for (const waiter of [...waiters]) {
      if (waiter.predicate(event)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(event);
      }
    }
  };
  const detachStreaming = t.runtime.streaming.subscribe(add);
  const detachCommits = t.context.writer.onCommit((batch) => {
    for (const event of batch) add(event);
  });
  onTestFinished(() => {
    detachStreaming();
    detachCommits();
  });
  return {
    of: (sessionId, eventTypes = null) => {
      const types = eventTypes === null ? null : new Set(eventTypes);
      return events
        .filter((e) => e.session_id === sessionId && (types === null || types.has(e.type)))
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        .map((e) => JSON.parse(JSON.stringify(e)));
    },
    waitFor: (predicate, timeoutMs = 15_000) => {
      const found = events.find(predicate);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error('timed out waiting for a recorded event')),
          timeoutMs,
        );
        waiters.push({
          predicate,
          resolve: (event) => {
            clearTimeout(timer);
            resolve(event);
          },
        });
      });
    },
  };
}
