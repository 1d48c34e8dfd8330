import type { SessionEvidence, TurnEvidence } from './evidence.js';

/** A judge's verdict on one subject (bus §6.12 `eval.completed`). */
export interface Verdict {
  /** In [0, 1]; 1 is a clear success. */
  readonly score: number;
  /** In [0, 1]; how sure the judge is of `score`. */
  readonly confidence: number;
  /** The evidence the score rests on (no message content for a heuristic judge). */
  readonly signals: Record<string, unknown>;
  /** What judging cost, in USD (0 for a judge that makes no model call). */
  readonly costUsd?: number;
  readonly pricingVersion?: string | null;
}

/**
 * Scores turns and sessions. The heuristic judge below reads events only; an LLM judge would implement
 * the same interface with `kind: 'llm'` and its `model`, and throw when its call fails or its answer does
 * not parse (`eval.failed` with `judge_call_failed` or `judge_output_invalid`).
 */
export interface Judge {
  readonly kind: 'heuristic' | 'llm' | 'hybrid';
  readonly model: string | null;
  readonly rubricId: string;
  readonly rubricVersion: string;
  judgeTurn(turn: TurnEvidence): Verdict | Promise<Verdict>;
  judgeSession(session: SessionEvidence, turns: readonly Verdict[]): Verdict | Promise<Verdict>;
}

/** A judge's answer could not be used: becomes `eval.failed` with this mode. */
export class JudgeError extends Error {
  constructor(
    readonly failureMode: 'judge_output_invalid' | 'judge_call_failed',
    message: string,
  ) {
    super(message);
  }
}

const BASE_BY_OUTCOME: Record<TurnEvidence['outcome'], number> = {
  completed: 1,
  failed: 0,
  cancelled: 0.2,
  running: 0.5,
};
/** What each signal of the user takes off a turn's score, times its confidence. */
const IMPLICIT_PENALTY: Record<string, number> = { retry: 0.5, edit_followup: 0.4, manual_swap: 0.2 };
const TOOL_FAILURE_PENALTY = 0.15;
const MAX_TOOL_PENALTY = 0.45;

/**
 * Scores from events alone (rubric `metis.outcome` v1, docs/decisions.md "Heuristic evaluator"): the
 * turn's outcome, less its tool failures and the retries or corrections that followed it; an explicit
 * rating decides. A session is the mean of its turns, moved by how it ended and by its own rating.
 */
export class HeuristicJudge implements Judge {
  readonly kind = 'heuristic' as const;
  readonly model = null;
  readonly rubricId = 'metis.outcome';
  readonly rubricVersion = '1';

  judgeTurn(turn: TurnEvidence): Verdict {
    const toolPenalty = Math.min(MAX_TOOL_PENALTY, turn.toolFailures * TOOL_FAILURE_PENALTY);
    const userPenalty = turn.implicit.reduce(
      (sum, s) => sum + (IMPLICIT_PENALTY[s.type] ?? 0) * s.confidence,
      0,
    );
    const heuristic = clamp(BASE_BY_OUTCOME[turn.outcome] - toolPenalty - userPenalty);
    const score = turn.rating === 'thumbs_up' ? 1 : turn.rating === 'thumbs_down' ? 0 : heuristic;
    const confidence = turn.rating !== null ? 0.95 : turn.implicit.length > 0 ? 0.7 : 0.5;
    return {
      score: round(score),
      confidence,
      signals: {
        outcome: turn.outcome,
        stop_reason: turn.stopReason,
        cancel_reason: turn.cancelReason,
        llm_calls: turn.llmCalls,
        failed_calls: turn.failedCalls,
        tool_calls: turn.toolCalls,
        tool_failures: turn.toolFailures,
        implicit: turn.implicit.map((s) => s.type),
        rating: turn.rating,
        heuristic_score: round(heuristic),
      },
    };
  }

  judgeSession(session: SessionEvidence, turns: readonly Verdict[]): Verdict {
    const mean = turns.length === 0 ? 0.5 : turns.reduce((sum, v) => sum + v.score, 0) / turns.length;
    const accepted = session.implicit.some((s) => s.type === 'accept');
    const abandoned = session.implicit.some((s) => s.type === 'abandon');
    let heuristic = mean;
    if (session.disposition === 'error') heuristic *= 0.5;
    if (abandoned) heuristic -= 0.1;
    if (accepted) heuristic += 0.05;
    heuristic = clamp(heuristic);
    const score = session.rating === 'thumbs_up' ? 1 : session.rating === 'thumbs_down' ? 0 : heuristic;
    const confidence =
      session.rating !== null ? 0.95 : turns.length === 0 ? 0.1 : Math.min(0.8, 0.4 + 0.1 * turns.length);
    return {
      score: round(score),
      confidence: round(confidence),
      signals: {
        disposition: session.disposition,
        turns: turns.length,
        mean_turn_score: round(mean),
        implicit: session.implicit.map((s) => s.type),
        rating: session.rating,
        heuristic_score: round(heuristic),
      },
    };
  }
}

function clamp(value: number): number {
  return Math.min(1, Math.max(0, value));
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}
