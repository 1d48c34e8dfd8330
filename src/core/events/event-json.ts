import type { MetisEvent } from './envelope.js';

/**
 * Each event's JSON, encoded once however many consumers need it (issue 19 point 6): the trace writer
 * stores the payload's text, the stream frames and the stream archive the whole envelope, and the
 * envelope is built around that same payload text instead of encoding the payload again.
 *
 * Caches are keyed by the event object (weakly: an event no one holds is collected with its text).
 * Events are never mutated after the bus stamps them, so a cached text stays right.
 */
const payloads = new WeakMap<MetisEvent, string>();
const envelopes = new WeakMap<MetisEvent, string>();

/** The envelope's keys in the order the bus stamps them, which is the order `JSON.stringify` writes. */
const ENVELOPE_KEYS = [
  'id',
  'timestamp',
  'session_id',
  'turn_id',
  'parent_event_id',
  'type',
  'actor',
  'payload',
  'sensitivity',
  'seq',
] as const;

/** `JSON.stringify(event.payload)`, once per event. */
export function payloadJson(event: MetisEvent): string {
  let text = payloads.get(event);
  if (text === undefined) {
    text = JSON.stringify(event.payload);
    payloads.set(event, text);
  }
  return text;
}

/**
 * `JSON.stringify(event)`, byte for byte, once per event. An event shaped as the bus stamps it is
 * written around `payloadJson`; any other object (a test's, one with more keys) goes to JSON.stringify.
 */
export function eventJson(event: MetisEvent): string {
  let text = envelopes.get(event);
  if (text === undefined) {
    text = hasEnvelopeShape(event) ? envelopeAround(event, payloadJson(event)) : JSON.stringify(event);
    envelopes.set(event, text);
  }
  return text;
}

function hasEnvelopeShape(event: MetisEvent): boolean {
  const keys = Object.keys(event);
  if (keys.length !== ENVELOPE_KEYS.length) return false;
  for (let i = 0; i < keys.length; i += 1) if (keys[i] !== ENVELOPE_KEYS[i]) return false;
  // Values JSON.stringify would write differently from the template (undefined dropped, NaN as null).
  const nullableString = (value: unknown) => value === null || typeof value === 'string';
  return (
    nullableString(event.turn_id) &&
    nullableString(event.parent_event_id) &&
    (event.seq === null || Number.isFinite(event.seq)) &&
    typeof event.payload === 'object' &&
    event.payload !== null
  );
}

function envelopeAround(event: MetisEvent, payload: string): string {
  const nullable = (value: string | null) => (value === null ? 'null' : JSON.stringify(value));
  return (
    `{"id":${JSON.stringify(event.id)},"timestamp":${JSON.stringify(event.timestamp)}` +
    `,"session_id":${JSON.stringify(event.session_id)},"turn_id":${nullable(event.turn_id)}` +
    `,"parent_event_id":${nullable(event.parent_event_id)},"type":${JSON.stringify(event.type)}` +
    `,"actor":${JSON.stringify(event.actor)},"payload":${payload}` +
    `,"sensitivity":${JSON.stringify(event.sensitivity)},"seq":${event.seq === null ? 'null' : event.seq}}`
  );
}
