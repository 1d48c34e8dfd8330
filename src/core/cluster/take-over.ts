import type { Logger } from 'pino';
import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import { ensureIdsAfter } from '../events/ids.js';
import { recoverCrashedTurns } from '../runtime/crash-recovery.js';
import { resumeCutTurns } from '../runtime/resume-cut-turns.js';
import type { Runtime } from '../runtime/runtime.js';
import type { CutTurn } from '../runtime/turn-resume-plan.js';
import { type StoredSession, writeStoredSession } from '../store/postgres/session-pull.js';
import { copiedRowToEvent } from '../store/store-copy.js';
import type { TraceContext } from '../store/trace-context.js';

/** What taking a session over brought in and closed. */
export interface TakeOverReport {
  /** Events the store had and this node's working copy did not. */
  readonly added: number;
  /** Turns the previous owner left open, closed as crash recovery closes them. */
  readonly recoveredTurns: number;
  /**
   * Turns the previous owner left open that go on here (`runtime.on_restart: resume`), for
   * `resumeTakenTurns` once this node holds the session.
   */
  readonly resumable: readonly CutTurn[];
  /** The session and its workers: their queued messages are taken up with the turns. */
  readonly sessionIds: readonly string[];
}

/** `runtime.on_restart` and `runtime.max_resumptions`: what a take-over does with the turns it finds cut. */
export interface DurableTurns {
  readonly onRestart: 'resume' | 'fail';
  readonly maxResumptions: number;
}

/**
 * Makes this node's copy of a session the store's before it runs anything of it (another node ran it
 * since this node last did): its rows and events brought in from the store, the bus's seq and the
 * runtime's memory of it forgotten (the runtime then resumes it as a session of an earlier process),
 * ids continuing after its newest, and the turns the previous owner left open closed the way crash
 * recovery closes them (docs/decisions.md "Several nodes on one store"), or, with `on_restart: resume`,
 * planned to go on here as a restarting node's do (docs/runtime.md "Durable turns"): their cut calls are
 * closed now, and `resumeTakenTurns` takes them up once the lease is this node's in its memory too (a
 * streaming delta of a session it does not hold yet is nobody's).
 */
export async function takeOverSession(
  parts: {
    /** Reads the session and its workers from the store (session-pull.ts). */
    readonly read: (sessionId: string) => Promise<StoredSession>;
    readonly trace: TraceContext;
    readonly runtime: Runtime;
    readonly pricingVersion: string;
    readonly logger: Logger;
    /**
     * Hands this node's clients the events brought in (in id order), before anything of the session
     * runs here: the previous owner's last events may never have reached this node over NATS (it died
     * between storing and publishing them), and its clients would miss them for good.
     */
    readonly release?: (events: readonly MetisEvent[]) => void;
    /** Default: every cut turn is closed as failed (`on_restart: fail`). */
    readonly durableTurns?: DurableTurns;
  },
  sessionId: string,
): Promise<TakeOverReport> {
  const { trace, runtime, logger } = parts;
  const stored = await parts.read(sessionId);
  // A turn still running here (this node lost the session and got it back meanwhile) must end first.
  for (const id of stored.sessionIds)
    if (runtime.currentTurn(id) !== null)
      throw new MetisError(
        'METIS_ERR_TURN_IN_FLIGHT',
        `session ${id} still has a turn running on this node; it is taken over once that turn ends`,
      );
  const { added, lastEventId, addedEvents } = writeStoredSession(trace.db, stored);
  ensureIdsAfter(lastEventId);
  parts.release?.(addedEvents.map(copiedRowToEvent).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
  for (const id of stored.sessionIds) {
    trace.bus.forgetSeq(id);
    runtime.release(id);
  }
  const recovery = await recoverCrashedTurns(trace.db, trace.bus, {
    pricingVersion: parts.pricingVersion,
    logger,
    sessions: stored.sessionIds,
    onRestart: parts.durableTurns?.onRestart ?? 'fail',
    maxResumptions: parts.durableTurns?.maxResumptions,
  });
  if (added > 0 || recovery.turns > 0 || recovery.resumable.length > 0)
    logger.info(
      {
        session_id: sessionId,
        events_added: added,
        turns_closed: recovery.turns,
        turns_resuming: recovery.resumable.length,
      },
      'took the session over from another node',
    );
  return {
    added,
    recoveredTurns: recovery.turns,
    resumable: recovery.resumable,
    sessionIds: stored.sessionIds,
  };
}

/** Takes up the turns a take-over found cut, once this node holds the lease (the fence lets them through). */
export function resumeTakenTurns(runtime: Runtime, report: TakeOverReport, logger: Logger): void {
  resumeCutTurns(runtime, report.resumable, logger, 'after a take-over', report.sessionIds);
}
