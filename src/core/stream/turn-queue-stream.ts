import { MetisError } from '../errors.js';
import type { StartedTurn } from '../runtime/turn-queue.js';
import type { ConnectionDeps } from './connection-deps.js';
import { followTurnFrom, rejoinTurn } from './turn-subscription.js';
import type { TurnTransport } from './turn-transport.js';

/** What a turn's own stream (AG-UI, AI SDK) may ask for when its message comes while a turn runs. */
export const STREAM_MULTITASK = ['reject', 'enqueue', 'interrupt'] as const;
export type StreamMultitask = (typeof STREAM_MULTITASK)[number];

/** Reads a strategy a stream request carries (a metis field the protocol lets through); none: reject. */
export function streamMultitaskOf(value: unknown, field: string): StreamMultitask {
  if (value === undefined || value === null) return 'reject';
  if ((STREAM_MULTITASK as readonly unknown[]).includes(value)) return value as StreamMultitask;
  throw new MetisError(
    'METIS_ERR_INVALID_ARGUMENT',
    `${field}: must be one of ${STREAM_MULTITASK.join(', ')} (steer needs POST /sessions/{id}/turns)`,
  );
}

/**
 * A turn's own stream for a message sent with a strategy (issue 31): the request waits, with nothing
 * written, until its turn starts (after the running turn, or once the interrupted one has ended), then
 * streams that turn from its first event. Closing the request while it waits drops the message from
 * the queue; once its turn runs, it cancels the turn (`client_disconnect`) as every turn stream does.
 * A refusal (409 with `reject`) or a drop is thrown before anything is written.
 */
export async function followQueuedTurn(
  deps: ConnectionDeps,
  transport: TurnTransport,
  sessionId: string,
  message: string,
  multitask: StreamMultitask,
  onStart: (turnId: string) => void,
): Promise<void> {
  const { runtime } = deps;
  const submitted = runtime.turnQueues.submit(sessionId, message, null, multitask);
  if (submitted.status === 'started') {
    // Started in this tick: nothing of it is released yet, so following it live misses nothing.
    followTurnFrom(deps, transport, sessionId, () => submitted.turn.turnId, onStart);
    return;
  }
  if (submitted.status === 'steered')
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'steer is not offered on a turn stream');
  const dropOnClose = () => runtime.turnQueues.drop(sessionId, submitted.queuedId);
  transport.response.once('close', dropOnClose);
  let turn: StartedTurn;
  try {
    turn = await submitted.started;
  } finally {
    transport.response.off('close', dropOnClose);
  }
  transport.response.once('close', () => {
    if (transport.closedByServer || transport.turnOver) return;
    if (runtime.currentTurn(sessionId)?.turnId === turn.turnId)
      runtime.cancelTurn(sessionId, turn.turnId, 'client_disconnect');
  });
  // It may have emitted since it started: from its turn.started, as a reconnect replays it.
  await rejoinTurn(deps, transport, sessionId, turn.turnId, onStart);
}
