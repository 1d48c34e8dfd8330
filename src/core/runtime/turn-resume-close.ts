import type { EventBus } from '../bus/event-bus.js';
import type { SessionWrites } from '../store/session-writes.js';
import type { StreamArchiveRows } from '../store/stream-archive-rows.js';
import { unbilledUsage } from './pricing.js';
import { StreamingChannel } from './streaming-channel.js';
import { TurnEvents } from './turn-events.js';
import type { CutTurn } from './turn-resume-plan.js';

/**
 * Closes the model call a stop cut, in a turn that resumes (docs/runtime.md "Durable turns"): the
 * message it was streaming ends `message.complete` (`stop_reason: cancelled`, `error_class: network`,
 * what had streamed), written straight to the stream archive, so a client replaying from its cursor
 * sees the message closed; the message is stored `error` (out of the history); then `llm.call_failed`
 * with the retryable class `network`. Done at start-up, before the runtime's provider health listens:
 * the provider did not fail, and must not be counted as failing. Returns the turn, its next step's
 * parent now the `llm.call_failed`.
 */
export function closeCutCall(
  cut: CutTurn,
  deps: { bus: EventBus; sessions: SessionWrites; archive: StreamArchiveRows; pricingVersion: string },
): CutTurn {
  const call = cut.cutCall;
  if (call === null) return cut;
  const channel = new StreamingChannel();
  const archived = channel.subscribe((event) => deps.archive.write([event], () => {}));
  const events = new TurnEvents(deps.bus, channel, cut.sessionId, cut.turnId, false);
  const usage = unbilledUsage(deps.pricingVersion);
  const save = (id: string, content: unknown[], visibleWith: string | null) =>
    deps.sessions.saveMessage(
      {
        id,
        session_id: cut.sessionId,
        turn_id: cut.turnId,
        role: 'assistant',
        content,
        status: 'error',
        model: call.model,
        usage,
      },
      visibleWith,
    );
  try {
    const message = call.message;
    if (message !== null) {
      const complete = events.stream('message.complete', message.startId, {
        message_id: message.messageId,
        stop_reason: 'cancelled',
        final_content: message.content,
        usage,
        error_class: 'network',
      });
      save(message.messageId, message.content, complete.id);
    }
    for (const stored of cut.cutMessages) save(stored.id, stored.content, null);
  } finally {
    archived();
  }
  const failed = events.emit('llm.call_failed', call.startedId, {
    model: call.model,
    provider: call.provider,
    error_class: 'network',
    error_message_redacted:
      `the server stopped during this call; the turn resumed at the next start ` +
      `(resumption ${cut.resumption} of at most ${cut.maxResumptions}) and issues it again`,
    retry_count: 0,
    latency_ms: Math.max(0, Math.round((call.cutUs - call.startedUs) / 1000)),
  });
  const step =
    cut.step.kind === 'call' && cut.step.parent === null
      ? { kind: 'call' as const, parent: failed.id }
      : cut.step;
  return { ...cut, step };
}
