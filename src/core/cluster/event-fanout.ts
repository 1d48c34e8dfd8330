import type { MetisEvent } from '../events/envelope.js';
import { eventJson } from '../events/event-json.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { TraceWriter } from '../store/trace-writer.js';
import type { Broker } from './broker.js';

/** The prefix of every subject metis publishes on. */
export const SUBJECT_PREFIX = 'metis';

/** Header saying which family a message carries: `bus` (stored, after commit) or `stream` (live only). */
export const FAMILY_HEADER = 'Metis-Family';
/** Header naming the node that ran the turn. */
export const NODE_HEADER = 'Metis-Node';

/** A session id is one subject token: no dots, wildcards or spaces (metis's own ids never have them). */
const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+$/;

/** The one subject a session's events go on, both families, in the order this node delivers them. */
export function sessionSubject(sessionId: string): string | null {
  return SUBJECT_TOKEN.test(sessionId) ? `${SUBJECT_PREFIX}.session.${sessionId}` : null;
}

/**
 * Publishes what this node delivers to its own clients to NATS, at the same points: bus events once
 * committed (DESIGN.md invariant 2), streaming events live. Each message is the event's JSON envelope,
 * byte for byte the `event` of a stream frame. Returns the function that stops it.
 */
export function fanOutEvents(parts: {
  readonly writer: TraceWriter;
  readonly streaming: StreamingChannel;
  readonly broker: Broker;
  readonly nodeId: string;
}): () => void {
  const { broker, nodeId } = parts;
  const publish = (event: MetisEvent, family: 'bus' | 'stream') => {
    const subject = sessionSubject(event.session_id);
    if (subject === null) return;
    broker.publish(subject, eventJson(event), { [FAMILY_HEADER]: family, [NODE_HEADER]: nodeId });
  };
  const stopBus = parts.writer.onCommit((batch) => {
    for (const event of batch) publish(event, 'bus');
  });
  const stopStream = parts.streaming.subscribe((event) => publish(event, 'stream'));
  return () => {
    stopBus();
    stopStream();
  };
}
