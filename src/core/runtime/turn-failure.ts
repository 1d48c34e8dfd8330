import type { Logger } from 'pino';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import type { SessionRows } from '../store/store-port.js';
import { unbilledUsage } from './pricing.js';
import type { TurnEvents } from './turn-events.js';
import type { TurnOutcome, TurnState } from './turn-state.js';

/** Heuristic scrub of provider messages (bus §10.4): emails, home paths, key-like tokens. */
export function redact(message: string): string {
  return message
    .replace(/[\w.+-]+@[\w-]+\.[\w.-]+/g, '[email]')
    .replace(/\/(?:home|Users)\/[^\s/]+/g, '/~')
    .replace(/\b(?:sk|pk|key|tok)[-_][A-Za-z0-9_-]{12,}\b/g, '[key]');
}

/** What names an unexpected error in logs and in `turn.completed.signals_extra`: its code, else its class. */
export function errorName(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  return error instanceof Error ? error.name : typeof error;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Ends a turn that threw out of the agent loop (a storage write refused, a bug, an event strict
 * validation rejected) the way every failed turn ends (streaming §9.1, docs/decisions.md "A turn that
 * fails for any reason"): what the client has open is closed — the streamed message with
 * `message.complete stop_reason: error`, the model call with `llm.call_failed`, each tool call with
 * `tool.failed` — then `turn.completed` with the totals so far (or `turn.cancelled` when the turn was
 * already cancelling). Each step is tried on its own: when storage is what failed, the events still
 * reach live clients, and one refused step does not keep the next from running. Never throws.
 */
export function closeFailedTurn(
  events: TurnEvents,
  state: TurnState,
  sessions: SessionRows,
  config: RuntimeConfig,
  logger: Logger,
  error: unknown,
  startedAt: number,
): TurnOutcome {
  const open = events.open;
  const context = { session_id: events.sessionId, turn_id: state.turnId };
  const reason = errorName(error);
  const message = redact(errorMessage(error));
  logger.error(
    { ...context, err: error, error_code: reason },
    `turn failed: ${message}; ending it as a failed turn`,
  );
  const attempt = (step: string, action: () => void) => {
    try {
      action();
    } catch (stepError) {
      logger.error({ ...context, step, err: stepError }, `could not ${step} of a failed turn`);
    }
  };
  const cancelling = state.cancelReason !== null;

  const openMessage = open.message;
  if (openMessage !== null) {
    const builder = openMessage.builder;
    const content = builder?.content() ?? [];
    const usage = unbilledUsage(config.pricing_version);
    let cutEventId: string | null = null;
    attempt('close the streamed message', () => {
      for (const use of builder?.openToolUses() ?? []) {
        events.stream('tool.use_end', openMessage.startId, {
          message_id: openMessage.messageId,
          content_block_index: use.index,
          tool_use_id: use.tool_use_id,
          final_input: use.final_input,
        });
      }
      // A partial message ends `cancelled` (§6.2.1); a failure says so with the class of its
      // llm.call_failed (docs/decisions.md "A failed call's message").
      cutEventId = events.stream('message.complete', openMessage.startId, {
        message_id: openMessage.messageId,
        stop_reason: 'cancelled',
        final_content: content,
        usage,
        ...(cancelling ? {} : { error_class: 'other' }),
      }).id;
    });
    attempt('store the cut message', () =>
      sessions.saveMessage(
        {
          id: openMessage.messageId,
          session_id: events.sessionId,
          turn_id: state.turnId,
          role: 'assistant',
          content,
          status: cancelling ? 'cancelled' : 'error',
          model: openMessage.model,
          usage,
        },
        cutEventId,
      ),
    );
  }
  const call = open.call;
  if (call !== null) {
    attempt('end the model call', () => {
      events.emit('llm.call_failed', call.startedId, {
        model: call.model,
        provider: call.provider,
        error_class: cancelling ? 'cancelled' : 'other',
        error_message_redacted: message,
        retry_count: 0,
        latency_ms: Math.round(performance.now() - call.startedAt),
      });
    });
  }
  for (const tool of [...open.tools.values()]) {
    attempt('end a tool call', () => {
      events.emit('tool.failed', tool.calledId, {
        tool_use_id: tool.toolUseId,
        error_class: cancelling ? 'cancelled' : 'execution_error',
        error_message: `the turn failed: ${message}`,
        latency_ms: Math.round(performance.now() - tool.startedAt),
      });
    });
  }
  attempt('close the stored tool calls', () =>
    sessions.closeOpenToolCalls(events.sessionId, {
      turnId: state.turnId,
      status: cancelling ? 'cancelled' : 'failed',
      errorClass: cancelling ? 'cancelled' : 'execution_error',
      output: `the turn failed: ${message}`,
    }),
  );
  const wallTimeSeconds = (performance.now() - startedAt) / 1000;
  if (open.turnStarted && !open.turnEnded) {
    attempt('end the turn', () => {
      if (state.cancelReason !== null) {
        events.emit('turn.cancelled', open.turnStartedId, {
          reason: state.cancelReason,
          partial_llm_calls: open.llmCalls,
          partial_tool_calls: open.toolCalls,
        });
        return;
      }
      events.emit('turn.completed', open.turnStartedId, {
        stop_reason: 'end_turn',
        llm_call_count: open.llmCalls,
        tool_call_count: open.toolCalls,
        total_input_tokens: open.inputTokens,
        total_output_tokens: open.outputTokens,
        total_cost_usd: open.costUsd,
        wall_time_seconds: wallTimeSeconds,
        signals_extra: { failure: 'internal_error', error_code: reason },
      });
    });
  }
  return {
    status: cancelling ? 'cancelled' : 'failed',
    model: open.model,
    finalText: '',
    llmCalls: open.llmCalls,
    toolCalls: open.toolCalls,
    costUsd: open.costUsd,
    wallTimeSeconds,
  };
}
