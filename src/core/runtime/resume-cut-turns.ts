import type { Logger } from 'pino';
import type { Runtime } from './runtime.js';
import type { CutTurn } from './turn-resume-plan.js';

/**
 * Takes up the turns crash recovery left open (docs/runtime.md "Durable turns"): at a start, or when a
 * cluster node takes a dead node's session over. Loading the session again emits the `session.resumed`
 * the resumption cap counts, and each turn goes on in its own session and turn. A session that already
 * runs another turn (a request let in meanwhile) keeps that one: the cut turn stays open, logged, for
 * the next start or take-over, which closes it at its cap. Then the messages queued in `queued`
 * sessions are taken up: behind a resumed turn, or started now when none runs.
 */
export function resumeCutTurns(
  runtime: Runtime,
  cuts: readonly CutTurn[],
  logger: Logger,
  where: 'at start' | 'after a take-over',
  queued: readonly string[],
): void {
  for (const cut of cuts) {
    try {
      if (runtime.currentTurn(cut.sessionId) !== null) throw new Error('another turn of the session runs');
      void runtime.resumeTurn(cut);
    } catch (error) {
      logger.error(
        { session_id: cut.sessionId, turn_id: cut.turnId, err: error },
        `could not resume a turn ${where}`,
      );
    }
  }
  for (const sessionId of queued) {
    try {
      runtime.turnQueues.restore(sessionId);
    } catch (error) {
      logger.error({ session_id: sessionId, err: error }, `could not take up the queued messages ${where}`);
    }
  }
}

/**
 * `resumeCutTurns` on a store the runtime reads only from memory (PostgreSQL with no working copy):
 * each session is opened first (`runtime.open` loads its family), then the turns resume and the queues
 * are taken up as above. A session that cannot be opened is logged and left to its resumption below.
 */
export async function openAndResumeCutTurns(
  runtime: Runtime,
  cuts: readonly CutTurn[],
  logger: Logger,
  where: 'at start' | 'after a take-over',
  queued: readonly string[],
): Promise<void> {
  for (const sessionId of new Set([...cuts.map((cut) => cut.sessionId), ...queued])) {
    try {
      await runtime.open(sessionId);
    } catch (error) {
      logger.error({ session_id: sessionId, err: error }, `could not open a session to resume it ${where}`);
    }
  }
  resumeCutTurns(runtime, cuts, logger, where, queued);
}
