import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Db } from '../../src/core/store/database.js';
import { type EventRow, rowToJson } from '../../src/core/store/event-rows.js';
import { TraceStore } from '../../src/core/store/trace-store.js';
import { allRows } from '../helpers/old-events.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * TraceStore.replayJson builds each envelope in SQL (EVENT_JSON_SQL); the streaming server sends what it
 * returns as is. These tests hold it byte-equal to rowToJson, the JavaScript encoder that export and the
 * older replay path use, on the values where two JSON encoders can disagree.
 */

interface RawEvent {
  readonly sessionId: string;
  readonly id: string;
  readonly timestampUs: number;
  readonly turnId: string | null;
  readonly parentEventId: string | null;
  readonly type: string;
  readonly payloadJson: string;
}

function insertRaw(db: Db, events: readonly RawEvent[]): void {
  const insertSession = db.prepare(
    'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)',
  );
  const insert = db.prepare(
    `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
     VALUES (?, ?, ?, ?, ?, ?, ?, 'agent', 'private', ?)`,
  );
  db.transaction(() => {
    events.forEach((e, i) => {
      insertSession.run(e.sessionId);
      insert.run(e.sessionId, e.id, i + 1, e.timestampUs, e.turnId, e.parentEventId, e.type, e.payloadJson);
    });
  })();
}

/** Both encoders over every row of each session, in id order. */
function encodeBoth(db: Db, sessionIds: readonly string[]): { sql: string[]; js: string[] } {
  const store = new TraceStore(db);
  const replayed = store.replayJson({ sessionIds, afterId: null, limit: 100_000 });
  const rows = allRows(db).filter((row: EventRow) => sessionIds.includes(row[2]));
  return { sql: replayed.rows.map(([, json]) => json), js: rows.map(rowToJson) };
}

// Every character JSON must escape, the short escapes, a NUL, characters JSON.stringify leaves alone
// (DEL, U+2028/2029, non-BMP) and a lone surrogate (stored by SQLite as U+FFFD).
const AWKWARD = [
  'plain',
  'quote " and backslash \\ and slash /',
  'short escapes \b \f \n \r \t',
  'NUL \u0000 and \u0001 \u001f',
  'DEL \u007f, line separators \u2028 \u2029',
  'non-BMP 😀 and accents é ü',
  'lone surrogate \ud800 end',
];

describe('replay envelopes built in SQL', () => {
  it('are byte-equal to rowToJson on awkward strings, nulls and timestamps', () => {
    const { db } = tempTraceContext();
    const timestamps = [
      0, // the epoch
      999_999, // the last microsecond of the first second
      951_782_400_000_000, // 2000-02-29, a leap day
      1_795_000_000_123_456,
      4_102_444_799_999_999, // 2099-12-31T23:59:59.999999Z
    ];
    const events: RawEvent[] = [];
    AWKWARD.forEach((text, i) => {
      events.push({
        sessionId: 'sess_awkward',
        id: `evt_${String(i).padStart(3, '0')}`,
        timestampUs: timestamps[i % timestamps.length]!,
        turnId: i % 2 === 0 ? null : text,
        parentEventId: i % 3 === 0 ? null : text,
        type: text,
        payloadJson: JSON.stringify({ text, n: i }),
      });
    });
    insertRaw(db, events);
    const { sql, js } = encodeBoth(db, ['sess_awkward']);
    expect(sql).toHaveLength(AWKWARD.length);
    expect(sql).toEqual(js);
    // And each is the JSON of the stored event, not merely the same wrong text twice.
    const first = JSON.parse(sql[1]!) as Record<string, unknown>;
    expect(first).toMatchObject({
      id: 'evt_001',
      timestamp: '1970-01-01T00:00:00.999999Z',
      session_id: 'sess_awkward',
      turn_id: AWKWARD[1],
      type: AWKWARD[1],
      payload: { text: AWKWARD[1], n: 1 },
      seq: 2,
    });
    expect(JSON.parse(sql[0]!)).toMatchObject({ turn_id: null, parent_event_id: null });
  });

  it('are byte-equal to rowToJson for arbitrary strings and timestamps (property)', () => {
    const { db } = tempTraceContext();
    let next = 0;
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 40 }),
        fc.option(fc.string({ unit: 'binary', maxLength: 20 })),
        fc.integer({ min: 0, max: 4_102_444_799_999_999 }),
        (text, turnId, timestampUs) => {
          next += 1;
          const sessionId = `sess_p${next}`;
          insertRaw(db, [
            {
              sessionId,
              id: `evt_${String(next).padStart(6, '0')}`,
              timestampUs,
              turnId,
              parentEventId: null,
              type: text,
              payloadJson: JSON.stringify({ text }),
            },
          ]);
          const { sql, js } = encodeBoth(db, [sessionId]);
          expect(sql).toEqual(js);
          expect(sql).toHaveLength(1);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('encodes rows SQLite cannot format (before 1970, past 2^53 µs) as rowToJson does', () => {
    const { db } = tempTraceContext();
    const odd = [-1, -500_000, -86_400_000_001, Number.MAX_SAFE_INTEGER, 2n ** 53n + 2n];
    const insertSession = db.prepare(
      'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)',
    );
    const insert = db.prepare(
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES ('sess_odd', ?, ?, ?, NULL, NULL, 'turn.started', 'user', 'private', '{}')`,
    );
    insertSession.run('sess_odd');
    for (const [i, us] of odd.entries()) insert.run(`evt_${i}`, i + 1, us);
    const { sql, js } = encodeBoth(db, ['sess_odd']);
    expect(sql).toHaveLength(odd.length);
    expect(sql).toEqual(js);
    expect(JSON.parse(sql[0]!).timestamp).toBe('1969-12-31T23:59:59.999999Z');
    expect(JSON.parse(sql[1]!).timestamp).toBe('1969-12-31T23:59:59.500000Z');
  });

  it('returns the same events, filters and cap as replay', () => {
    const { db } = tempTraceContext();
    const events: RawEvent[] = [];
    for (let i = 0; i < 30; i += 1) {
      events.push({
        sessionId: i % 3 === 0 ? 'sess_x' : 'sess_y',
        id: `evt_${String(i).padStart(3, '0')}`,
        timestampUs: 1_795_000_000_000_000 + i,
        turnId: null,
        parentEventId: null,
        type: i % 2 === 0 ? 'turn.started' : 'turn.completed',
        payloadJson: '{}',
      });
    }
    insertRaw(db, events);
    const store = new TraceStore(db);
    for (const query of [
      { sessionIds: ['sess_x'], afterId: 'evt_005', limit: 100 },
      { sessionIds: ['sess_x', 'sess_y'], afterId: null, limit: 7 },
      { sessionIds: ['sess_y'], afterId: null, eventTypes: ['turn.completed'], limit: 100 },
    ]) {
      const rows = store.replay(query);
      const json = store.replayJson(query);
      expect(json.tooLarge).toBe(rows.tooLarge);
      expect(json.rows.map(([id]) => id)).toEqual(rows.rows.map((row) => row[0]));
      expect(json.rows.map(([, text]) => text)).toEqual(rows.rows.map(rowToJson));
    }
    expect(store.replayJson({ sessionIds: ['sess_x', 'sess_y'], afterId: null, limit: 7 }).tooLarge).toBe(
      true,
    );
  });
});
