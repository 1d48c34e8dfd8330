import type { EventBus } from '../bus/event-bus.js';
import { CATALOG } from '../events/catalog/index.js';
import type { MetisEvent } from '../events/envelope.js';
import type { StreamingChannel } from './streaming-channel.js';

/**
 * Emits the events of one turn with its session and turn ids filled in. In a worker session the
 * agent's events carry the `worker` actor, so a planner's stream can tell them apart.
 */
export class TurnEvents {
  constructor(
    private readonly bus: EventBus,
    private readonly streaming: StreamingChannel,
    readonly sessionId: string,
    readonly turnId: string | null,
    private readonly isWorker: boolean,
  ) {}

  emit(type: string, parent: string | null, payload: Record<string, unknown>): MetisEvent {
    const typical = CATALOG.get(type)?.actors[0];
    const event = this.bus.emit({
      type,
      session_id: this.sessionId,
      turn_id: this.turnId,
      parent_event_id: parent,
      actor: this.isWorker && typical === 'agent' ? 'worker' : typical,
      payload,
    });
    if (event === null) throw new Error(`event ${type} was dropped by lenient validation`);
    return event;
  }

  stream(type: string, parent: string | null, payload: Record<string, unknown>): MetisEvent {
    return this.streaming.publish({
      type,
      session_id: this.sessionId,
      turn_id: this.turnId,
      parent_event_id: parent,
      payload,
    });
  }
}
