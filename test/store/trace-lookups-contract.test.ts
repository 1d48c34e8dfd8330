import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ulid } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { PgTraceLookups } from '../../src/core/store/postgres/pg-trace-lookups.js';
import { SqliteTraceLookups, type TraceLookups } from '../../src/core/store/trace-lookups.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { copiedToPostgres, keepStore, openPair, type StorePair } from '../helpers/store-pair.js';
import { writtenStore } from '../helpers/written-store.js';

/**
 * The trace lookups (trace-lookups.ts) answer the same on both stores (docs/plans/store-port.md step 8):
 * a store a real server wrote, with a model override added, is copied into PostgreSQL and every lookup
 * is asked of both for every session and turn, and for ones that do not exist.
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('TraceLookups on SQLite and on PostgreSQL answer the same', () => {
  let dir: string;
  let pair: StorePair | undefined;
  let sqlite: TraceLookups;
  let postgres: TraceLookups;
  let sessionIds: string[];
  let turns: { session_id: string; turn_id: string }[];
  let overridden: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-trace-lookups-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a server writes the store, a model is overridden, and it is copied into PostgreSQL', async () => {
    const written = await writtenStore(async (t, [first]) => {
      const turnId = await t.submit(first, 'slow: a long story');
      const cancelled = await t.request('POST', `/sessions/${first}/turns/${turnId}/cancel`, {});
      expect(cancelled.status).toBeLessThan(300);
      await t.runtime.currentTurn(first)?.done;
    });
    const dbPath = keepStore(written, dir);
    const writable = openDatabase(dbPath);
    // The newest routing event of the second session is an override: the lookup reads its other field.
    overridden = (
      writable
        .prepare("SELECT id FROM sessions WHERE id <> 'system' AND parent_session_id IS NULL ORDER BY id")
        .pluck()
        .all() as string[]
    )[1]!;
    writable
      .prepare(
        `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
         SELECT ?, ?, max(seq) + 1, max(timestamp_us) + 1, NULL, NULL, 'route.overridden', 'user', 'internal',
                '{"new_chosen_model":"scripted:override"}' FROM events WHERE session_id = ?`,
      )
      .run(overridden, `evt_${ulid()}`, overridden);
    // A session ended twice (ended, resumed elsewhere, ended again): the newest end is the answer.
    writable
      .prepare(
        `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
         SELECT session_id, ?, seq + 1000, timestamp_us + 1, turn_id, NULL, type, actor, sensitivity, payload_json
           FROM events WHERE type = 'session.ended' ORDER BY id LIMIT 1`,
      )
      .run(`evt_${ulid()}`);
    writable.close();
    pair = openPair(dbPath, await copiedToPostgres(dbPath, server));
    sqlite = new SqliteTraceLookups(pair.db);
    postgres = new PgTraceLookups(pair.pool);
    sessionIds = pair.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    turns = pair.db
      .prepare('SELECT DISTINCT session_id, turn_id FROM events WHERE turn_id IS NOT NULL ORDER BY turn_id')
      .all() as { session_id: string; turn_id: string }[];
    const types = new Set(pair.db.prepare('SELECT DISTINCT type FROM events').pluck().all());
    for (const type of [
      'route.decided',
      'route.overridden',
      'turn.cancelled',
      'session.ended',
      'delegate.started',
    ])
      expect(types, type).toContain(type);
  }, 120_000);

  it("each turn's start, end and user text; a turn asked of another session has none", async () => {
    const unknown = [
      { session_id: sessionIds[0]!, turn_id: 'turn_none' },
      { session_id: 'sess_none', turn_id: turns[0]!.turn_id },
      ...turns.map((turn, i) => ({
        ...turn,
        session_id: sessionIds[(sessionIds.indexOf(turn.session_id) + i + 1) % sessionIds.length]!,
      })),
    ];
    let started = 0;
    let ended = 0;
    let texts = 0;
    for (const { session_id, turn_id } of [...turns, ...unknown]) {
      const at = `${session_id} ${turn_id}`;
      const [start, end, text] = await Promise.all([
        sqlite.turnStartedId(session_id, turn_id),
        sqlite.turnEndId(session_id, turn_id),
        sqlite.userTextOfTurn(session_id, turn_id),
      ]);
      expect(await postgres.turnStartedId(session_id, turn_id), at).toBe(start);
      expect(await postgres.turnEndId(session_id, turn_id), at).toBe(end);
      expect(await postgres.userTextOfTurn(session_id, turn_id), at).toBe(text);
      if (start !== null) started += 1;
      if (end !== null) ended += 1;
      if (text !== null) texts += 1;
    }
    expect(started).toBeGreaterThanOrEqual(5);
    expect(ended).toBeGreaterThanOrEqual(5);
    expect(texts).toBeGreaterThanOrEqual(5);
    expect(await sqlite.userTextOfTurn(sessionIds[0]!, 'turn_none')).toBeNull();
  });

  it("each session's end, events of given types and last routed model", async () => {
    const typeSets = [
      ['turn.started', 'turn.completed', 'turn.cancelled'],
      ['llm.call_completed', 'delegate.completed', 'tool.confirmation_requested'],
      ['route.decided'],
      ['no.such_type'],
      [],
    ];
    let endedSessions = 0;
    let routed = 0;
    let found = 0;
    for (const sessionId of [...sessionIds, 'sess_none']) {
      const end = await sqlite.sessionEndedId(sessionId);
      expect(await postgres.sessionEndedId(sessionId), sessionId).toBe(end);
      if (end !== null) endedSessions += 1;
      const model = await sqlite.lastRoutedModel(sessionId);
      expect(await postgres.lastRoutedModel(sessionId), sessionId).toBe(model);
      if (model !== null) routed += 1;
      for (const types of typeSets) {
        const events = await sqlite.eventsOfTypes(sessionId, types);
        expect(await postgres.eventsOfTypes(sessionId, types), `${sessionId} ${types}`).toEqual(events);
        found += events.length;
      }
    }
    expect(endedSessions).toBeGreaterThanOrEqual(1);
    expect(routed).toBeGreaterThanOrEqual(2);
    expect(found).toBeGreaterThan(10);
    expect(await postgres.lastRoutedModel(overridden)).toBe('scripted:override');
  });
});
