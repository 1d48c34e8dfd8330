import type { Logger } from 'pino';
import type { AdapterResult } from './model-adapter.js';
import type { CallResult } from './model-call.js';
import type { TurnEvents } from './turn-events.js';
import type { TurnOutcome, TurnState } from './turn-state.js';

/** What a turn whose runner itself threw ends as (Runtime.runTurn's last line), logged. */
export function failedOutsideTheLoop(
  logger: Logger,
  sessionId: string,
  turnId: string,
): (error: unknown) => TurnOutcome {
  return (error) => {
    logger.error(
      { session_id: sessionId, turn_id: turnId, err: error },
      'turn failed outside the agent loop',
    );
    return {
      status: 'failed',
      model: '',
      finalText: '',
      llmCalls: 0,
      toolCalls: 0,
      costUsd: 0,
      wallTimeSeconds: 0,
    };
  };
}

/** What a turn has done so far, which model serves it now, and its two terminal events. */
export class TurnProgress {
  llmCalls = 0;
  toolCalls = 0;
  private inputTokens = 0;
  private outputTokens = 0;
  private costUsd = 0;
  private finalText = '';

  constructor(
    private readonly events: TurnEvents,
    private readonly state: TurnState,
    private readonly turnStartedId: string | null,
    private readonly startedAt: number,
    /** Empty only when no model can serve the turn; an override changes it. */
    public model: string,
  ) {}

  /** A resumed turn starts from what its stored events count (turn-resume-plan.ts). */
  seed(totals: {
    llmCalls: number;
    toolCalls: number;
    inputTokens: number;
    outputTokens: number;
    costUsd: number;
  }): this {
    this.llmCalls = totals.llmCalls;
    this.toolCalls = totals.toolCalls;
    this.inputTokens = totals.inputTokens;
    this.outputTokens = totals.outputTokens;
    this.costUsd = totals.costUsd;
    return this;
  }

  addCall(call: CallResult): void {
    this.llmCalls += 1;
    this.inputTokens += call.usage.input_tokens;
    this.outputTokens += call.usage.output_tokens;
    this.costUsd += call.costUsd;
    this.finalText = call.text || this.finalText;
  }

  cancelled(): TurnOutcome {
    this.state.ending = true;
    this.events.emit('turn.cancelled', this.turnStartedId, {
      reason: this.state.cancelReason ?? 'user_cancel',
      partial_llm_calls: this.llmCalls,
      partial_tool_calls: this.toolCalls,
    });
    return this.outcome('cancelled');
  }

  /** `turn.completed`, which also ends a turn that failed (`status`). */
  completed(
    stopReason: AdapterResult['stop_reason'],
    status: TurnOutcome['status'],
    signalsExtra?: Record<string, unknown>,
  ): TurnOutcome {
    this.state.ending = true;
    this.events.emit('turn.completed', this.turnStartedId, {
      stop_reason: stopReason,
      llm_call_count: this.llmCalls,
      tool_call_count: this.toolCalls,
      total_input_tokens: this.inputTokens,
      total_output_tokens: this.outputTokens,
      total_cost_usd: this.costUsd,
      wall_time_seconds: (performance.now() - this.startedAt) / 1000,
      ...(signalsExtra === undefined ? {} : { signals_extra: signalsExtra }),
    });
    return this.outcome(status);
  }

  private outcome(status: TurnOutcome['status']): TurnOutcome {
    return {
      status,
      model: this.model,
      finalText: this.finalText,
      llmCalls: this.llmCalls,
      toolCalls: this.toolCalls,
      costUsd: this.costUsd,
      wallTimeSeconds: (performance.now() - this.startedAt) / 1000,
    };
  }
}
