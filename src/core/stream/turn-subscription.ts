import { ClientConnection } from './client-connection.js';
import type { ConnectionDeps } from './connection-deps.js';
import type { TurnTransport } from './turn-transport.js';

/**
 * Runs one turn for a request that answers with the turn's own stream (AI SDK, AG-UI), on the one
 * subscription core: the connection is attached before the turn is submitted (nothing of it can be
 * missed) and ends once the turn's last event has gone out. Closing the request first cancels the turn
 * (`client_disconnect`); a stream the server closes (a reader too slow for the queue bound) leaves it
 * running. `onStart` comes first, with the turn id; what `submitTurn` throws is thrown before anything
 * is written.
 */
export function followTurn(
  deps: ConnectionDeps,
  transport: TurnTransport,
  sessionId: string,
  message: string,
  onStart: (turnId: string) => void,
): string {
  return followTurnFrom(
    deps,
    transport,
    sessionId,
    () => deps.runtime.submitTurn(sessionId, message).turnId,
    onStart,
  );
}

/**
 * {@link followTurn} for a turn that `start` submits, or lets go on (an AG-UI run that answers what a
 * running turn waits for: it returns that turn's id). The connection is attached before `start`, so
 * nothing `start` sets off can be missed; what it throws is thrown before anything is written.
 */
export function followTurnFrom(
  deps: ConnectionDeps,
  transport: TurnTransport,
  sessionId: string,
  start: () => string,
  onStart: (turnId: string) => void,
): string {
  const { runtime } = deps;
  const connection = new ClientConnection(transport, sessionId, deps);
  let turnId: string;
  try {
    turnId = start();
  } catch (error) {
    connection.abandon();
    throw error;
  }
  transport.response.on('close', () => {
    if (transport.closedByServer || transport.turnOver) return;
    if (runtime.currentTurn(sessionId)?.turnId === turnId)
      runtime.cancelTurn(sessionId, turnId, 'client_disconnect');
  });
  openTurnStream(connection, transport, turnId, null, onStart);
  return turnId;
}

/**
 * Follows a turn already running, from its first event (the AI SDK's resume: `useChat` replays the
 * stream it reconnects to from its start): a replay from the turn's `turn.started`, then live. Closing
 * it leaves the turn alone.
 */
export async function rejoinTurn(
  deps: ConnectionDeps,
  transport: TurnTransport,
  sessionId: string,
  turnId: string,
  onStart: (turnId: string) => void,
): Promise<void> {
  // Opened first: what is released while the lookup is under way waits in its accept buffer.
  const connection = new ClientConnection(transport, sessionId, deps);
  const started = await deps.lookups.turnStartedId(sessionId, turnId);
  // Not stored yet: nothing of the turn was released either, and all of it arrives live.
  openTurnStream(connection, transport, turnId, started, onStart);
}

function openTurnStream(
  connection: ClientConnection,
  transport: TurnTransport,
  turnId: string,
  since: string | null,
  onStart: (turnId: string) => void,
): void {
  onStart(turnId);
  transport.begin(turnId);
  connection.subscribeWith({
    type: 'subscribe',
    filter: {
      event_types: [...transport.eventTypes],
      actors: null,
      include_worker_sessions: false,
      session_ids: null,
    },
    since,
    snapshot: false,
  });
  void transport.ended.then(() => connection.finish());
}
