import type { Logger } from 'pino';
import type { EventBus } from '../../bus/event-bus.js';
import type { SubscriptionHandle } from '../../bus/subscription.js';
import type { EventType, PayloadOf } from '../../events/catalog/index.js';
import type { MetisEvent } from '../../events/envelope.js';
import { newId } from '../../events/ids.js';
import type { StorePort } from '../../store/store-port.js';
import { usdDecimal } from '../pricing.js';
import { type SessionEvidence, sessionEvidence } from './evidence.js';
import { HeuristicJudge, type Judge, JudgeError, type Verdict } from './judge.js';

/** A scored session, handed to what learns from outcomes (the pattern store). */
export interface ScoredSession {
  readonly evidence: SessionEvidence;
  /** Score of each turn that got a verdict, by turn id. */
  readonly turnScores: ReadonlyMap<string, number>;
  readonly sessionScore: number | null;
}

export interface EvaluatorOptions {
  readonly bus: EventBus;
  readonly store: Pick<StorePort, 'sessions' | 'lookups' | 'whenStored'>;
  readonly logger: Logger;
  readonly judge?: Judge;
  /** Called once a session's verdicts are out (pattern recording). */
  readonly onSessionScored?: (scored: ScoredSession) => void | Promise<void>;
}

/** What a verdict is about (the spec's tool_cycle and workload subjects are not scored here). */
type SubjectKind = 'turn' | 'session';

/** How long close() waits for verdicts in progress before giving up on them. */
const CLOSE_WAIT_MS = 5_000;

/**
 * The evaluator (bus §6.12) as a batch subscriber: when a session ends it scores each of its turns and
 * the session, and when the user rates a turn it scores that turn again (verdicts are append-only: a new
 * `eval_id`, the old verdict kept). It reads what it scores from the trace store once the event it
 * reacts to is committed, and emits `eval.started` then `eval.completed` (or `eval.failed`) in the
 * subject's session, outside any turn. Worker sessions are scored as part of their planner's turn.
 */
export class Evaluator {
  private readonly judge: Judge;
  private handle: SubscriptionHandle | null = null;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly options: EvaluatorOptions) {
    this.judge = options.judge ?? new HeuristicJudge();
  }

  attach(): void {
    this.handle = this.options.bus.subscribe({
      name: 'evaluator',
      filter: { event_types: ['session.ended', 'feedback.explicit'] },
      handler: (event) => {
        const work = this.react(event).catch((error: unknown) =>
          this.options.logger.warn({ err: error, event_id: event.id }, 'evaluation failed'),
        );
        this.inFlight.add(work);
        void work.finally(() => this.inFlight.delete(work));
      },
    });
  }

  /** Stops listening and waits (a bounded time) for verdicts in progress. */
  async close(): Promise<void> {
    if (this.handle !== null) this.options.bus.unsubscribe(this.handle, 'shutdown');
    this.handle = null;
    const pending = Promise.all(this.inFlight);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([pending, new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS)))]);
    clearTimeout(timer);
  }

  /** Resolves once every verdict started so far is out (tests, shutdown). */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all(this.inFlight);
  }

  private async react(event: MetisEvent): Promise<void> {
    if (event.session_id === 'system' || this.isWorker(event.session_id)) return;
    await this.options.store.whenStored(event.id);
    const evidence = await sessionEvidence(this.options.store.lookups, event.session_id);
    if (event.type === 'session.ended') {
      await this.scoreSession(evidence, event.id, 'batch');
      return;
    }
    const subjectTurn = (event.payload.subject_turn_id as string | null) ?? null;
    if (subjectTurn === null) {
      // A rating of a session that has ended changes its verdict; one still going is scored at its end.
      if (evidence.endEventId !== null)
        await this.scoreSession(evidence, event.id, 'feedback_arrived', false);
      return;
    }
    const turn = evidence.turns.find((t) => t.turnId === subjectTurn);
    if (turn === undefined) {
      await this.verdict(event.session_id, event.id, 'feedback_arrived', subjectTurn, 'turn', null, () => {
        throw new SubjectNotFound(`no stored events for turn ${subjectTurn}`);
      });
      return;
    }
    await this.verdict(event.session_id, event.id, 'feedback_arrived', turn.turnId, 'turn', null, () =>
      this.judge.judgeTurn(turn),
    );
  }

  /**
   * Scores a session: its verdict is started first so that each turn's verdict can name it as
   * `parent_eval_id` (turn → session rollup), and completed once the turns are scored.
   */
  private async scoreSession(
    evidence: SessionEvidence,
    parentEventId: string,
    trigger: 'batch' | 'feedback_arrived',
    withTurns = true,
  ): Promise<void> {
    const { sessionId } = evidence;
    const turnScores = new Map<string, number>();
    const turnVerdicts: Verdict[] = [];
    const sessionVerdict = await this.verdict(
      sessionId,
      parentEventId,
      trigger,
      sessionId,
      'session',
      null,
      async (sessionEvalId) => {
        for (const turn of evidence.turns) {
          const verdict = withTurns
            ? await this.verdict(
                sessionId,
                turn.endEventId ?? parentEventId,
                trigger,
                turn.turnId,
                'turn',
                sessionEvalId,
                () => this.judge.judgeTurn(turn),
              )
            : await this.judge.judgeTurn(turn);
          if (verdict === null) continue;
          turnVerdicts.push(verdict);
          turnScores.set(turn.turnId, verdict.score);
        }
        return this.judge.judgeSession(evidence, turnVerdicts);
      },
    );
    if (withTurns)
      await this.options.onSessionScored?.({
        evidence,
        turnScores,
        sessionScore: sessionVerdict?.score ?? null,
      });
  }

  /** One verdict: `eval.started`, the judge, then `eval.completed` or `eval.failed`. */
  private async verdict(
    sessionId: string,
    parentEventId: string,
    trigger: 'batch' | 'feedback_arrived',
    subjectId: string,
    subjectKind: SubjectKind,
    parentEvalId: string | null,
    judge: (evalId: string) => Verdict | Promise<Verdict>,
  ): Promise<Verdict | null> {
    const { bus } = this.options;
    const evalId = newId('eval');
    const subject = { eval_id: evalId, subject_kind: subjectKind, subject_id: subjectId };
    const rubric = { rubric_id: this.judge.rubricId, rubric_version: this.judge.rubricVersion };
    // In the subject's session, outside any turn (the turns it scores have ended).
    const emit = <T extends EventType>(type: T, parent: string, payload: PayloadOf<T>) =>
      bus.emit({
        type,
        session_id: sessionId,
        turn_id: null,
        parent_event_id: parent,
        actor: 'system',
        payload,
      });
    const started = emit('eval.started', parentEventId, {
      ...subject,
      ...rubric,
      judge_kind_planned: this.judge.kind,
      trigger,
    });
    if (started === null) return null;
    const begun = performance.now();
    let verdict: Verdict;
    try {
      verdict = await judge(evalId);
    } catch (error) {
      emit('eval.failed', started.id, {
        ...subject,
        failure_mode:
          error instanceof JudgeError
            ? error.failureMode
            : error instanceof SubjectNotFound
              ? 'subject_not_found'
              : 'judge_call_failed',
        error_message: (error as Error).message ?? String(error),
        judge_latency_ms: Math.round(performance.now() - begun),
      });
      return null;
    }
    const cost = verdict.costUsd ?? 0;
    emit('eval.completed', started.id, {
      ...subject,
      score: verdict.score,
      confidence: verdict.confidence,
      judge_kind: this.judge.kind,
      judge_model: this.judge.model,
      judge_cost_usd: usdDecimal(cost),
      judge_pricing_version: cost > 0 ? (verdict.pricingVersion ?? null) : null,
      judge_latency_ms: Math.round(performance.now() - begun),
      ...rubric,
      signals: verdict.signals,
      parent_eval_id: parentEvalId,
    });
    return verdict;
  }

  private isWorker(sessionId: string): boolean {
    const session = this.options.store.sessions.getSession(sessionId);
    return session !== null && session.parent_session_id !== null;
  }
}

class SubjectNotFound extends Error {}
