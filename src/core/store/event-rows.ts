import { isoToMicros, microsToIso } from '../events/clock.js';
import type { Actor, MetisEvent, Sensitivity } from '../events/envelope.js';
import { payloadJson } from '../events/event-json.js';

/** Columns of the `events` table in `SELECT` order, shared by every query that returns events. */
export const EVENT_COLUMNS =
  'id, timestamp_us, session_id, turn_id, parent_event_id, type, actor, sensitivity, payload_json, seq';

/** A stored event as `raw()` statements return it: an array in EVENT_COLUMNS order. */
export type EventRow = [
  id: string,
  timestamp_us: number,
  session_id: string,
  turn_id: string | null,
  parent_event_id: string | null,
  type: string,
  actor: string,
  sensitivity: string,
  payload_json: string,
  seq: number,
];

export function eventToParams(event: MetisEvent): unknown[] {
  return [
    event.session_id,
    event.id,
    event.seq,
    isoToMicros(event.timestamp),
    event.turn_id,
    event.parent_event_id,
    event.type,
    event.actor,
    event.sensitivity,
    payloadJson(event),
  ];
}

export function rowToEvent(row: EventRow): MetisEvent {
  return {
    id: row[0],
    timestamp: microsToIso(row[1]),
    session_id: row[2],
    turn_id: row[3],
    parent_event_id: row[4],
    type: row[5],
    actor: row[6] as Actor,
    payload: JSON.parse(row[8]) as Record<string, unknown>,
    sensitivity: row[7] as Sensitivity,
    seq: row[9],
  };
}

/**
 * The JSON envelope of a stored event, built around the stored payload text so the replay and export
 * paths never parse and re-encode payloads. Field order matches `JSON.stringify` of a MetisEvent.
 */
export function rowToJson(row: EventRow): string {
  return (
    `{"id":${JSON.stringify(row[0])},"timestamp":"${microsToIso(row[1])}","session_id":${JSON.stringify(row[2])}` +
    `,"turn_id":${row[3] === null ? 'null' : JSON.stringify(row[3])}` +
    `,"parent_event_id":${row[4] === null ? 'null' : JSON.stringify(row[4])}` +
    `,"type":${JSON.stringify(row[5])},"actor":"${row[6]}","payload":${row[8]}` +
    `,"sensitivity":"${row[7]}","seq":${row[9]}}`
  );
}

/**
 * The same JSON envelope as rowToJson, built by SQLite in the query. A replay then hands JavaScript one
 * string per row instead of ten values, which is what a 10,000-event replay spends most of its time on
 * (creating the values and collecting them). json_quote escapes as JSON.stringify does, and strftime
 * with a six-digit fraction matches microsToIso, so both encoders give byte-identical frames (tested).
 * Timestamps before 1970 or past MAX_SQL_TIMESTAMP_US give NULL, and the caller encodes that row with
 * rowToJson instead (a restored or hand-edited store; metis never writes one).
 */
/**
 * Up to here (year 2255) a timestamp is an exact JavaScript number and strftime formats it; beyond it
 * (or below 1970) the SQL expression gives NULL and rowToJson encodes the row.
 */
const MAX_SQL_TIMESTAMP_US = Number.MAX_SAFE_INTEGER;

export const EVENT_JSON_SQL = `CASE WHEN timestamp_us BETWEEN 0 AND ${MAX_SQL_TIMESTAMP_US} THEN '{"id":' || json_quote(id)
  || ',"timestamp":"' || strftime('%Y-%m-%dT%H:%M:%S', timestamp_us / 1000000, 'unixepoch')
  || printf('.%06dZ', timestamp_us % 1000000)
  || '","session_id":' || json_quote(session_id)
  || ',"turn_id":' || json_quote(turn_id)
  || ',"parent_event_id":' || json_quote(parent_event_id)
  || ',"type":' || json_quote(type)
  || ',"actor":"' || actor || '","payload":' || payload_json
  || ',"sensitivity":"' || sensitivity || '","seq":' || seq || '}' END`;

/** A replayed event as the JSON statements return it: its id (to merge by) and its envelope JSON. */
export type EventJsonRow = [id: string, json: string];
