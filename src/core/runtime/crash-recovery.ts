import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { nowMicros } from '../events/clock.js';
import type { Db } from '../store/database.js';
import { type OpenWork, SqliteOpenWork } from '../store/open-work.js';
import { SessionStore } from '../store/session-store.js';
import type { SessionWrites } from '../store/session-writes.js';
import { SqliteStreamArchiveRows, type StreamArchiveRows } from '../store/stream-archive-rows.js';
import { type OpenWorkPlan, type OpenWorkScope, readOpenWork } from './open-work-plan.js';
import { usdDecimal } from './pricing.js';
import { StreamingChannel } from './streaming-channel.js';
import { TurnEvents } from './turn-events.js';
import { closeCutCall } from './turn-resume-close.js';
import { type CutTurn, planResume, type StoredTurnEvent } from './turn-resume-plan.js';

/** What start-up recovery closed, for the log and the tests. */
export interface RecoveryReport {
  /** Turns that had a `turn.started` and no end; each now ends with `turn.completed`. */
  readonly turns: number;
  readonly modelCalls: number;
  readonly toolCalls: number;
  readonly delegations: number;
  /** Worker sessions whose delegation the crash cut; each now ends with `session.ended error`. */
  readonly workerSessions: number;
  /** `tool_calls` rows left `pending` or `running`, now `failed`. */
  readonly toolCallRows: number;
  /**
   * Turns left open for the runtime to take up (`runtime.on_restart: resume`), each with where it stood
   * (turn-resume-plan.ts); their delegations in flight are closed here, as failed.
   */
  readonly resumable: readonly CutTurn[];
  /** Turns of `turns` ended because they reached `runtime.max_resumptions`. */
  readonly capReached: number;
}

type StoredEvent = StoredTurnEvent;

const STOPPED = 'the server stopped before this ended (closed at the next start)';
/** A delegation a restart cut, in a turn that resumes: the planner's model is told, and goes on. */
const INTERRUPTED = 'interrupted: the server stopped while this ran (its turn resumed at the next start)';

export interface RecoveryOptions extends OpenWorkScope {
  readonly pricingVersion: string;
  readonly logger: Logger;
}

/**
 * Closes what a crash left open, before the server takes requests (docs/decisions.md "Turns a crash
 * cut"). A turn the store shows started and never ended gets, in its own session and turn, what a
 * failing turn would have emitted: `llm.call_failed` for a model call without an end, `tool.failed`
 * for a `tool.called` without one, `delegate.failed` for a delegation without one (its worker session
 * ends `error`), then `turn.completed` in the failed-turn shape, with parent its `turn.started` and
 * `signals_extra.failure: "server_stopped"`. Tool-call rows left pending or running are marked failed.
 * Messages need nothing: a message is stored only once it ends, so a cut one was never stored.
 *
 * With `onRestart: resume` (docs/runtime.md "Durable turns") a planner's turn is not closed but planned
 * for the runtime to take up (`resumable`): only its delegations in flight end here (the worker is not
 * resumed), and its cut model call is closed (turn-resume-close.ts). A turn past `maxResumptions`
 * restarts (counted as the `session.resumed` its session has since the turn started) is closed as
 * above, with `failure: "resumption_cap_reached"`.
 *
 * Only the process that holds the database lock may call this: it writes into sessions it now owns,
 * through its own bus, so per-session `seq` continues without a hole or a duplicate. Everything is read
 * first (open-work-plan.ts), then closed in one synchronous pass.
 */
export async function recoverCrashedTurns(
  db: Db,
  bus: EventBus,
  options: RecoveryOptions,
): Promise<RecoveryReport> {
  return recoverCutTurns(
    new SqliteOpenWork(db),
    { bus, sessions: new SessionStore(db), archive: new SqliteStreamArchiveRows(db) },
    options,
  );
}

/** Recovery on any store: its open work read through `openWork`, then closed through `deps`. */
export async function recoverCutTurns(
  openWork: OpenWork,
  deps: CloseDeps,
  options: RecoveryOptions,
): Promise<RecoveryReport> {
  return closeCutTurns(await readOpenWork(openWork, options), deps, options);
}

/** What closing the plan writes through, besides the bus: it only writes (the plan read everything). */
export interface CloseDeps {
  readonly bus: EventBus;
  readonly sessions: SessionWrites;
  readonly archive: StreamArchiveRows;
}

/** Emits and writes what closes (or sets up the resumption of) every turn of the plan. */
export function closeCutTurns(plan: OpenWorkPlan, deps: CloseDeps, options: RecoveryOptions): RecoveryReport {
  const { bus, sessions } = deps;
  const streaming = new StreamingChannel();
  const report = {
    turns: 0,
    modelCalls: 0,
    toolCalls: 0,
    delegations: 0,
    workerSessions: 0,
    toolCallRows: 0,
    resumable: [] as CutTurn[],
    capReached: 0,
  };
  const cutWorkers: string[] = [];
  const maxResumptions = options.maxResumptions ?? 3;
  for (const [sessionId, lastSeq] of plan.lastSeqs) bus.seedSeq(sessionId, lastSeq);

  for (const planned of plan.turns) {
    const { turn, stored, ended, resumption, capped } = planned;
    // One turn that cannot be closed (a stored payload no schema accepts) must not stop the start.
    try {
      if (planned.readError !== null) throw planned.readError;
      const lastUs = stored.reduce((last, e) => Math.max(last, e.timestamp_us), 0);
      const latency = (e: StoredEvent) => Math.max(0, Math.round((lastUs - e.timestamp_us) / 1000));
      const events = new TurnEvents(
        bus,
        streaming,
        turn.session_id,
        turn.turn_id,
        turn.parent_session_id !== null,
      );

      for (const e of stored) {
        if (ended.has(e.id)) continue;
        if (e.type === 'llm.call_started' && (resumption === 0 || capped)) {
          events.emit('llm.call_failed', e.id, {
            model: e.payload.model,
            provider: e.payload.provider,
            error_class: 'other',
            error_message_redacted: STOPPED,
            retry_count: 0,
            latency_ms: latency(e),
          });
          report.modelCalls += 1;
        } else if (e.type === 'delegate.started') {
          const workerId = String(e.payload.worker_session_id);
          events.emit('delegate.failed', e.id, {
            tool_use_id: e.payload.tool_use_id,
            worker_session_id: workerId,
            failure_mode: 'worker_error',
            error_message: resumption === 0 || capped ? STOPPED : INTERRUPTED,
            worker_total_cost_usd: usdDecimal(planned.workerCosts.get(workerId) ?? 0),
            pricing_version: options.pricingVersion,
          });
          cutWorkers.push(workerId);
          report.delegations += 1;
        }
      }
      if (planned.resume !== null) {
        const { messages, toolRows, streamed } = planned.resume;
        const cut = planResume({
          sessionId: turn.session_id,
          turnId: turn.turn_id,
          turnStartedId: turn.id,
          events: stored,
          messages,
          toolRow: (id) => toolRows.get(id) ?? null,
          streamed,
          resumption,
          maxResumptions,
        });
        report.resumable.push(
          closeCutCall(cut, { bus, sessions, archive: deps.archive, pricingVersion: options.pricingVersion }),
        );
        continue;
      }
      for (const e of stored) {
        if (ended.has(e.id) || e.type !== 'tool.called') continue;
        events.emit('tool.failed', e.id, {
          tool_use_id: e.payload.tool_use_id,
          error_class: 'execution_error',
          error_message: STOPPED,
          latency_ms: latency(e),
        });
        report.toolCalls += 1;
      }
      const completed = stored.filter((e) => e.type === 'llm.call_completed');
      events.emit('turn.completed', turn.id, {
        stop_reason: 'end_turn',
        llm_call_count: stored.filter((e) => e.type === 'llm.call_started').length,
        tool_call_count: stored.filter((e) => e.type === 'tool.called').length,
        total_input_tokens: sum(completed, 'input_tokens'),
        total_output_tokens: sum(completed, 'output_tokens'),
        total_cost_usd: sum(completed, 'cost_usd'),
        wall_time_seconds: Math.max(0, lastUs - (stored[0]?.timestamp_us ?? lastUs)) / 1_000_000,
        signals_extra: capped
          ? {
              failure: 'resumption_cap_reached',
              resumptions: resumption - 1,
              max_resumptions: maxResumptions,
            }
          : { failure: 'server_stopped' },
      });
      report.turns += 1;
      if (capped) report.capReached += 1;
    } catch (error) {
      options.logger.error(
        { session_id: turn.session_id, turn_id: turn.turn_id, err: error },
        'could not close a turn the last run left open',
      );
    }
  }

  for (const workerId of cutWorkers) {
    const worker = plan.workers.get(workerId);
    if (worker === undefined || worker.session === null || worker.session.status === 'ended') continue;
    sessions.endSession(workerId, 'error');
    new TurnEvents(bus, streaming, workerId, null, false).emit('session.ended', null, {
      disposition: 'error',
      turn_count: worker.turnCount,
      total_cost_usd: worker.storedCost,
      duration_seconds: Math.max(0, nowMicros() - worker.session.created_at_us) / 1_000_000,
    });
    report.workerSessions += 1;
  }

  // A resumed turn's rows are its resumption's to settle (ToolDispatcher.resume).
  const resuming = new Set(report.resumable.map((t) => t.sessionId));
  for (const { session_id: sessionId, open_calls: open } of plan.openToolRows.filter(
    (row) => !resuming.has(row.session_id),
  )) {
    // Counted as the plan read them; the close itself queues behind the rows written before it.
    report.toolCallRows += open;
    sessions.closeOpenToolCalls(sessionId, {
      status: 'failed',
      errorClass: 'execution_error',
      output: STOPPED,
    });
  }
  if (report.turns > 0 || report.toolCallRows > 0 || report.resumable.length > 0) {
    const { resumable, ...counts } = report;
    options.logger.warn(
      { ...counts, resuming: resumable.length },
      'closed what the last run left open when it stopped; the turns it cut resume',
    );
  }
  return report;
}

function sum(events: readonly StoredEvent[], field: string): number {
  return events.reduce((total, e) => total + (Number(e.payload[field]) || 0), 0);
}
