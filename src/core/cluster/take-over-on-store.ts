import type pg from 'pg';
import type { Logger } from 'pino';
import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import { ensureIdsAfter } from '../events/ids.js';
import { recoverCutTurns } from '../runtime/crash-recovery.js';
import type { Runtime } from '../runtime/runtime.js';
import type { CutTurn } from '../runtime/turn-resume-plan.js';
import type { LeaseTable } from '../store/postgres/lease-table.js';
import type { PostgresContext } from '../store/postgres/pg-context.js';
import { PgOpenWork } from '../store/postgres/pg-open-work.js';
import { PgStreamArchiveRows } from '../store/postgres/pg-stream-archive-rows.js';
import { pgReplayJson } from '../store/postgres/pg-stream-reads.js';
import type { DurableTurns } from './take-over.js';

/** What taking a family over on PostgreSQL alone found, closed and left for the caller. */
export interface StoreTakeOverReport {
  /** Turns the previous owner left open, closed as crash recovery closes them. */
  readonly recoveredTurns: number;
  /** Turns the previous owner left open that go on here (`runtime.on_restart: resume`): `resumeCutTurns`. */
  readonly resumable: readonly CutTurn[];
  /** The root and every worker below it: their queued messages are taken up with the turns. */
  readonly sessionIds: readonly string[];
  /**
   * The family's events the store holds past what this node's clients were given (the sequencer's
   * remote marks), in id order, for the caller to release before anything of the family runs here:
   * the previous owner may have died between storing them and publishing them (issue 35, cause 6).
   */
  readonly missed: readonly MetisEvent[];
}

/** Stored events read per page while collecting the missed ones. */
const MISSED_PAGE = 1000;

/**
 * Takes a family over on a node that runs on PostgreSQL alone (docs/plans/store-port.md §2 "M
 * cluster", step 9), once `acquireLease` gave it `token`. The family is read from the store (its
 * sessions, its newest id) and its lease recorded in `leases` with them, so what this node writes of
 * it from then on carries the new token, and what the previous owner still writes is refused by the
 * fence. Then the events this node's clients missed are collected, the memory this node kept of the
 * family from an earlier ownership is dropped (its seq included: some of it may have been fenced off),
 * the turns the previous owner left open in the family, and only there, are closed (or planned to
 * resume, per `durableTurns`), that is committed, and the runtime loads the family (`runtime.open`),
 * so its seq and ids go on after everything stored. Left to the caller: releasing `missed` to its
 * clients first, then resuming the planned turns (`resumeCutTurns` with `sessionIds` as the queued).
 * @throws MetisError METIS_ERR_SESSION_NOT_FOUND when the store has no session `root`,
 *   METIS_ERR_TURN_IN_FLIGHT when a turn of the family still runs here (it must end first)
 */
export async function takeOverFromStore(
  parts: {
    readonly trace: PostgresContext;
    readonly runtime: Runtime;
    readonly leases: LeaseTable;
    readonly pricingVersion: string;
    readonly logger: Logger;
    /** Default: every cut turn is closed as failed (`on_restart: fail`). */
    readonly durableTurns?: DurableTurns;
    /**
     * The newest event of a session released to this node's clients while another node ran it (the
     * sequencer's `remoteMark`); absent, or undefined for every session, when none watched the family.
     */
    readonly released?: (sessionId: string) => string | undefined;
  },
  root: string,
  token: number,
): Promise<StoreTakeOverReport> {
  const { trace, runtime, leases, logger } = parts;
  const family = await trace.port.families.loadFamily(root);
  if (family === null) throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${root}`);
  const sessionIds = family.sessions.map((loaded) => loaded.row.id);
  // A turn still running here (this node lost the family and got it back meanwhile) must end first.
  for (const id of sessionIds)
    if (runtime.runningTurnId(id) !== null)
      throw new MetisError(
        'METIS_ERR_TURN_IN_FLIGHT',
        `session ${id} still has a turn running on this node; it is taken over once that turn ends`,
      );
  // From here on this node's writes of the family carry the new token.
  leases.hold(root, token, sessionIds);
  ensureIdsAfter(family.newestEventId);
  // Read before recovery emits anything: what recovery writes is this node's own, released in order.
  const missed = await missedEvents(trace.pool, sessionIds, parts.released);
  for (const id of sessionIds) {
    // The seq this bus gave the family before (some of it perhaps fenced off) is not the store's.
    trace.bus.forgetSeq(id);
    runtime.release(id);
  }
  const recovery = await recoverCutTurns(
    new PgOpenWork(trace.pool, sessionIds),
    {
      bus: trace.bus,
      sessions: trace.port.sessions,
      archive: new PgStreamArchiveRows(trace.pool, trace.writer),
    },
    {
      pricingVersion: parts.pricingVersion,
      logger,
      sessions: sessionIds,
      onRestart: parts.durableTurns?.onRestart ?? 'fail',
      maxResumptions: parts.durableTurns?.maxResumptions,
    },
  );
  // Committed before the load, which then counts the closed turns and numbers after their events.
  await trace.flush();
  await runtime.open(root);
  if (recovery.turns > 0 || recovery.resumable.length > 0 || missed.length > 0)
    logger.info(
      {
        session_id: root,
        token,
        events_missed: missed.length,
        turns_closed: recovery.turns,
        turns_resuming: recovery.resumable.length,
      },
      'took the session over from another node',
    );
  return { recoveredTurns: recovery.turns, resumable: recovery.resumable, sessionIds, missed };
}

/**
 * The family's stored events past each session's remote mark, in id order. A session of a watched
 * family with no mark of its own (a worker this node was given nothing of) starts at the family's
 * newest mark: a replay to a client of this node reached that far in every session of the family.
 */
async function missedEvents(
  pool: pg.Pool,
  sessionIds: readonly string[],
  released: ((sessionId: string) => string | undefined) | undefined,
): Promise<MetisEvent[]> {
  if (released === undefined) return [];
  const marks = new Map(sessionIds.map((id) => [id, released(id)]));
  const known = [...marks.values()].filter((mark): mark is string => mark !== undefined);
  if (known.length === 0) return [];
  const newestMark = known.reduce((a, b) => (a > b ? a : b));
  const missed: MetisEvent[] = [];
  for (const [sessionId, mark] of marks) {
    let afterId = mark ?? newestMark;
    for (;;) {
      const page = await pgReplayJson(pool, { sessionIds: [sessionId], afterId, limit: MISSED_PAGE });
      for (const [, json] of page.rows) missed.push(JSON.parse(json) as MetisEvent);
      if (!page.tooLarge || page.rows.length === 0) break;
      afterId = page.rows.at(-1)![0];
    }
  }
  return missed.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
