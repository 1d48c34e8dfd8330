import type { Logger } from 'pino';
import type { Runtime } from '../runtime/runtime.js';
import type { MetisServer } from './metis-server.js';

/**
 * The broker is lost: the streams of sessions other nodes run get no live events any more, so they are
 * closed with a named error (their clients reconnect with their cursor). Returns the listener.
 */
export function closeStreamsOfOtherNodes(
  server: MetisServer,
  runsHere: (sessionId: string) => boolean,
  logger: Logger,
): () => void {
  return () => {
    const closed = server.hub.closeStreams(
      (sessionId) => !runsHere(sessionId),
      'broker_unavailable',
      'this node lost its NATS broker and no longer receives the live events of this session, which another node runs; reconnect with your cursor (to another node, or to this one once it is back)',
    );
    if (closed > 0)
      logger.warn({ streams: closed }, 'closed the streams of sessions other nodes run: the broker is away');
  };
}

/**
 * Families another node holds now (this node's writes of them were fenced): what this node still runs
 * there reaches no one, so the turn is cancelled (its tools' processes with it), then the family is
 * forgotten: its next use here asks for the lease again and reads the store.
 */
export function letFamiliesGo(runtime: Runtime, roots: readonly string[]): void {
  for (const root of roots) {
    const turn = runtime.currentTurn(root);
    if (turn === null) continue;
    runtime.cancelTurn(root, turn.turnId, 'timeout');
    void turn.done.finally(() => runtime.release(root));
  }
}
