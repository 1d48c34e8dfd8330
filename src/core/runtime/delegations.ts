import type { EventBus } from '../bus/event-bus.js';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import type { PayloadOf } from '../events/catalog/index.js';
import { newId } from '../events/ids.js';
import type { ModelRegistry } from './models/model-registry.js';
import { usdDecimal } from './pricing.js';
import type { StreamingChannel } from './streaming-channel.js';
import { type DelegateInput, WORKER_FORBIDDEN_TOOLS } from './tools/delegate.js';
import { type ToolContext, ToolError, type ToolOutput } from './tools/tool.js';
import { TurnEvents } from './turn-events.js';
import {
  type CancelReason,
  cancelTurnState,
  isCancelReason,
  type TurnOutcome,
  type TurnState,
} from './turn-state.js';

/** What delegation needs from the runtime, without a dependency on the Runtime class. */
export interface DelegationHost {
  startWorker(parent: { id: string; workspacePath: string }, model: string, sessionId: string): unknown;
  runWorkerTurn(
    sessionId: string,
    task: string,
    model: string,
    state: TurnState,
    excludedTools: ReadonlySet<string>,
  ): Promise<TurnOutcome>;
  endWorker(sessionId: string, disposition: 'completed' | 'abandoned' | 'error'): void;
  session(id: string): { id: string; workspacePath: string };
  /** Every tool the runtime has, by name. */
  toolNames(): readonly string[];
}

/** The tools a worker keeps, the ones it is denied, and the ones asked for that it will not get. */
interface WorkerTools {
  readonly kept: readonly string[];
  readonly excluded: ReadonlySet<string>;
  readonly dropped: readonly string[];
}

/**
 * Runs delegated sub-tasks (bus §6.8, streaming §6.4, §7): a worker session with `parent_session_id`,
 * its model from the tier map, `delegate.started` then `delegate.completed` or `delegate.failed` in the
 * planner's session. A cancelled planner cancels the worker for the same reason (user, disconnect or
 * timeout); the delegation fails with `cancelled_by_user` and the worker session ends `abandoned`.
 */
export class Delegations {
  constructor(
    private readonly bus: EventBus,
    private readonly streaming: StreamingChannel,
    private readonly config: RuntimeConfig,
    private readonly models: ModelRegistry,
    private readonly host: DelegationHost,
  ) {}

  async run(input: DelegateInput, context: ToolContext): Promise<ToolOutput> {
    const planner = new TurnEvents(this.bus, this.streaming, context.sessionId, context.turnId, false);
    const model = this.config.worker_tiers[input.tier];
    const failed = (
      parent: string | null,
      workerId: string | null,
      mode: PayloadOf<'delegate.failed'>['failure_mode'],
      message: string,
      cost = 0,
    ) =>
      planner.emit('delegate.failed', parent, {
        tool_use_id: context.toolUseId,
        worker_session_id: workerId,
        failure_mode: mode,
        error_message: message,
        worker_total_cost_usd: usdDecimal(cost),
        pricing_version: this.config.pricing_version,
      });

    if (!this.models.resolve(model).ok) {
      failed(
        context.callCompletedEventId,
        null,
        'no_model_available_for_tier',
        `no model can serve tier ${input.tier}`,
      );
      throw new ToolError('execution_error', `no model available for tier ${input.tier}`);
    }
    const tools = this.workerTools(input.allowed_tools);
    const workerId = newId('sess');
    const started = planner.emit('delegate.started', context.callCompletedEventId, {
      tool_use_id: context.toolUseId,
      worker_session_id: workerId,
      tier: input.tier,
      resolved_model: model,
      context_mode: input.context_mode,
      context_reference_count: input.context_references.length,
      task_size_tokens: Math.ceil(input.task.length / 4),
      allowed_tool_count: tools.kept.length,
      dropped_tools: [...tools.dropped],
    });
    const parent = this.host.session(context.sessionId);
    this.host.startWorker(parent, model, workerId);

    const state: TurnState = { turnId: newId('turn'), controller: new AbortController(), cancelReason: null };
    const cancelWorker = () => cancelTurnState(state, cancelReasonOf(context.signal));
    if (context.signal.aborted) cancelWorker();
    context.signal.addEventListener('abort', cancelWorker, { once: true });
    let outcome: TurnOutcome;
    try {
      outcome = await this.host.runWorkerTurn(workerId, input.task, model, state, tools.excluded);
    } catch (error) {
      this.host.endWorker(workerId, 'error');
      failed(started.id, workerId, 'worker_error', (error as Error).message);
      throw new ToolError('execution_error', `the worker failed: ${(error as Error).message}`);
    } finally {
      context.signal.removeEventListener('abort', cancelWorker);
    }

    if (outcome.status !== 'completed') {
      const cancelled = outcome.status === 'cancelled';
      // A cancelled worker did not fail: its planner gave the work up (docs/decisions.md).
      this.host.endWorker(workerId, cancelled ? 'abandoned' : 'error');
      failed(
        started.id,
        workerId,
        cancelled ? 'cancelled_by_user' : 'worker_error',
        cancelled ? 'the planner turn was cancelled' : 'the worker turn failed',
        outcome.costUsd,
      );
      throw new ToolError(
        cancelled ? 'cancelled' : 'execution_error',
        `the worker turn was ${outcome.status}`,
      );
    }
    this.host.endWorker(workerId, 'completed');
    planner.emit('delegate.completed', started.id, {
      tool_use_id: context.toolUseId,
      worker_session_id: workerId,
      success: true,
      output_size_bytes: Buffer.byteLength(outcome.finalText),
      worker_total_cost_usd: usdDecimal(outcome.costUsd),
      pricing_version: this.config.pricing_version,
      turn_count: 1,
      llm_call_count: outcome.llmCalls,
      tool_call_count: outcome.toolCalls,
      wall_time_seconds: outcome.wallTimeSeconds,
      model,
    });
    return { content: outcome.finalText };
  }

  /**
   * What a worker may use: without `allowed_tools`, every tool a worker may have; with it, those of the
   * named tools that exist and are not forbidden to workers. The rest of the names are `dropped_tools`.
   */
  private workerTools(allowed: readonly string[] | null): WorkerTools {
    const workerMay = this.host.toolNames().filter((name) => !WORKER_FORBIDDEN_TOOLS.has(name));
    const asked = allowed === null ? null : [...new Set(allowed)];
    const kept = asked === null ? workerMay : asked.filter((name) => workerMay.includes(name));
    return {
      kept,
      excluded: new Set(this.host.toolNames().filter((name) => !kept.includes(name))),
      dropped: asked === null ? [] : asked.filter((name) => !kept.includes(name)),
    };
  }
}

/** Why the planner's turn was cancelled, from its aborted signal (user_cancel if it does not say). */
function cancelReasonOf(signal: AbortSignal): CancelReason {
  return isCancelReason(signal.reason) ? signal.reason : 'user_cancel';
}
