import type { EventBus } from '../bus/event-bus.js';
import { CATALOG, type EventType, type PayloadOf } from '../events/catalog/index.js';
import type { MetisEvent } from '../events/envelope.js';
import type { MessageBuilder } from './message-builder.js';
import { StreamingChannel } from './streaming-channel.js';

/**
 * What `emit` hands back: the event's id, to be the parent of what follows. An event that lenient
 * validation dropped (bus §3.5) has no id of its own; it stands in with its parent's, so what follows
 * hangs from the nearest ancestor that exists instead of from an id no store or client will ever see.
 */
export interface EmittedEvent {
  readonly id: string | null;
  /** The event as the bus sequenced it; null when lenient validation dropped it. */
  readonly event: MetisEvent | null;
}

/** A model call whose `llm.call_started` is out and whose end is not. */
export interface OpenCall {
  readonly startedId: string | null;
  readonly model: string;
  readonly provider: string;
  readonly startedAt: number;
}

/** A streamed assistant message whose `message.start` is out and whose `message.complete` is not. */
export interface OpenMessage {
  readonly messageId: string;
  readonly startId: string;
  readonly model: string;
  builder: MessageBuilder | null;
}

/** A tool call whose `tool.called` is out and whose `tool.completed`/`tool.failed` is not. */
export interface OpenToolCall {
  readonly toolUseId: string;
  readonly calledId: string | null;
  readonly startedAt: number;
}

/**
 * What one turn has opened and not closed yet, and its running totals, read off the events as they are
 * emitted. A turn that fails in an unexpected place (a storage error, a bug) is closed from this record:
 * the code that failed cannot be trusted to know what it left open.
 */
export class OpenTurnRecord {
  turnStartedId: string | null = null;
  turnStarted = false;
  turnEnded = false;
  /** The model serving the turn (`route.decided.chosen_model`); empty until routed. */
  model = '';
  call: OpenCall | null = null;
  message: OpenMessage | null = null;
  readonly tools = new Map<string | null, OpenToolCall>();
  llmCalls = 0;
  toolCalls = 0;
  inputTokens = 0;
  outputTokens = 0;
  costUsd = 0;

  noteEmitted(
    type: string,
    parent: string | null,
    id: string | null,
    payload: Record<string, unknown>,
  ): void {
    switch (type) {
      case 'turn.started':
        this.turnStarted = true;
        this.turnStartedId = id;
        return;
      case 'turn.completed':
      case 'turn.cancelled':
        this.turnEnded = true;
        return;
      case 'route.decided':
        this.model = String(payload.chosen_model ?? '');
        return;
      case 'llm.call_started':
        this.llmCalls += 1;
        this.call = {
          startedId: id,
          model: String(payload.model),
          provider: String(payload.provider),
          startedAt: performance.now(),
        };
        return;
      case 'llm.call_completed':
        this.inputTokens += Number(payload.input_tokens) || 0;
        this.outputTokens += Number(payload.output_tokens) || 0;
        this.costUsd += Number(payload.cost_usd) || 0;
        this.call = null;
        return;
      case 'llm.call_failed':
        this.call = null;
        return;
      case 'tool.called':
        this.toolCalls += 1;
        this.tools.set(id, {
          toolUseId: String(payload.tool_use_id),
          calledId: id,
          startedAt: performance.now(),
        });
        return;
      case 'tool.completed':
      case 'tool.failed':
        // Their parent is the call's `tool.called`: that, not the provider's tool_use id, is unique.
        this.tools.delete(parent);
        return;
    }
  }

  noteStreamed(type: string, id: string, payload: Record<string, unknown>): void {
    if (type === 'message.start') {
      this.message = {
        messageId: String(payload.message_id),
        startId: id,
        model: String(payload.model),
        builder: null,
      };
    } else if (type === 'message.complete') {
      this.message = null;
    }
  }
}

/** Where a frozen turn's streaming events go: nowhere (an event still has an id, for what follows). */
const FROZEN_CHANNEL = new StreamingChannel(false);

/**
 * Emits the events of one turn with its session and turn ids filled in. In a worker session the
 * agent's events carry the `worker` actor, so a planner's stream can tell them apart. It also keeps the
 * turn's {@link OpenTurnRecord}.
 */
export class TurnEvents {
  readonly open = new OpenTurnRecord();
  private fallingBack = false;
  /**
   * Set when a stop hands the turn over to the next start (turn-drain.ts): from then on nothing of it
   * is emitted, so the store keeps it exactly as it stood, for the next start to resume.
   */
  frozen = false;

  constructor(
    private readonly bus: EventBus,
    private readonly streaming: StreamingChannel,
    readonly sessionId: string,
    readonly turnId: string | null,
    private readonly isWorker: boolean,
  ) {}

  /**
   * Emits a catalog event. Strict validation throws (the turn then fails and is closed); lenient
   * validation drops the event, which the bus logs at ERROR, and the turn goes on (bus §3.5).
   */
  emit<T extends EventType>(type: T, parent: string | null, payload: PayloadOf<T>): EmittedEvent {
    if (this.frozen) return { id: parent, event: null };
    const typical = CATALOG.get(type)?.actors[0];
    const event = this.bus.emit({
      type,
      session_id: this.sessionId,
      turn_id: this.turnId,
      parent_event_id: parent,
      actor: this.isWorker && typical === 'agent' ? 'worker' : typical,
      payload,
    });
    if (event === null && (type === 'turn.completed' || type === 'turn.cancelled') && !this.fallingBack) {
      this.fallingBack = true;
      return this.emitFallbackEnd(parent);
    }
    const id = event?.id ?? parent;
    this.open.noteEmitted(type, parent, id, payload as Record<string, unknown>);
    return { id, event };
  }

  /**
   * A turn always ends: when lenient validation dropped its terminal event (a total no schema
   * accepts), the turn ends with a `turn.completed` that carries nothing but the failure.
   */
  private emitFallbackEnd(parent: string | null): EmittedEvent {
    const payload = {
      stop_reason: 'end_turn' as const,
      llm_call_count: this.open.llmCalls,
      tool_call_count: this.open.toolCalls,
      total_input_tokens: 0,
      total_output_tokens: 0,
      total_cost_usd: 0,
      wall_time_seconds: 0,
      signals_extra: { failure: 'invalid_terminal_event' },
    };
    return this.emit('turn.completed', parent, payload);
  }

  /** The message being streamed is rebuilt by `builder`: a failure closes it with what it holds. */
  trackContent(builder: MessageBuilder): void {
    if (this.open.message !== null) this.open.message.builder = builder;
  }

  stream(type: string, parent: string | null, payload: Record<string, unknown>): MetisEvent {
    const event = (this.frozen ? FROZEN_CHANNEL : this.streaming).publish({
      type,
      session_id: this.sessionId,
      turn_id: this.turnId,
      parent_event_id: parent,
      payload,
    });
    this.open.noteStreamed(type, event.id, payload);
    return event;
  }
}
