import { microsToIso, nowMicros } from '../events/clock.js';
import type { MetisEvent } from '../events/envelope.js';
import { newEventId } from '../events/ids.js';
import { STREAMING } from '../events/streaming.js';

export type StreamingListener = (event: MetisEvent) => void;

export interface StreamingInput {
  readonly type: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly parent_event_id: string | null;
  readonly payload: Record<string, unknown>;
}

/**
 * The direct channel from the agent loop to the streaming server for streaming-only events (streaming
 * spec §5.1). Events take their id from the same generator as bus events, so one id order covers both
 * families (DESIGN.md invariant 1); they are never persisted and carry `seq: null`.
 */
export class StreamingChannel {
  private readonly listeners = new Set<StreamingListener>();

  constructor(private readonly validate = true) {}

  publish(input: StreamingInput): MetisEvent {
    const entry = STREAMING.get(input.type);
    if (entry === undefined) throw new TypeError(`"${input.type}" is not a streaming-only event type`);
    if (this.validate) {
      const result = entry.schema.safeParse(input.payload);
      if (!result.success) {
        const detail = result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
        throw new TypeError(`invalid payload for streaming event "${input.type}": ${detail}`);
      }
    }
    const event: MetisEvent = {
      id: newEventId(),
      timestamp: microsToIso(nowMicros()),
      session_id: input.session_id,
      turn_id: input.turn_id,
      parent_event_id: input.parent_event_id,
      type: input.type,
      actor: entry.actors[0],
      payload: input.payload,
      sensitivity: entry.sensitivity,
      seq: null,
    };
    for (const listener of this.listeners) listener(event);
    return event;
  }

  subscribe(listener: StreamingListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
