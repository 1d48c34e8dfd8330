import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { AUDIT_EVENT_TYPES } from '../../src/core/events/catalog/index.js';
import { microsToIso } from '../../src/core/events/clock.js';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { type EventRow, rowToJson } from '../../src/core/store/event-rows.js';
import {
  CSV_HEADER,
  type ExportFlags,
  exportDatabase,
  exportToFile,
  parseExportFlags,
  writeExport,
} from '../../src/core/store/export.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { allRows, insertOldEvents } from '../helpers/old-events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/** A collecting stream; `highWaterMark` and `delayMs` make it slow so backpressure kicks in. */
function sink(options: { highWaterMark?: number; delayMs?: number } = {}) {
  const chunks: string[] = [];
  let drains = 0;
  const stream = new Writable({
    highWaterMark: options.highWaterMark ?? 16_384,
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      if (options.delayMs) setTimeout(done, options.delayMs);
      else done();
    },
  });
  stream.on('drain', () => {
    drains += 1;
  });
  return { stream, text: () => chunks.join(''), drains: () => drains };
}

async function seeded(): Promise<{ db: Db; rows: EventRow[] }> {
  const context = tempTraceContext();
  insertOldEvents(context.db, {
    sessionId: 'sess_a',
    ageDays: 3,
    type: 'tool.confirmation_resolved',
    count: 2,
  });
  insertOldEvents(context.db, {
    sessionId: 'sess_b',
    ageDays: 2,
    type: 'turn.started',
    sensitivity: 'aggregatable',
  });
  insertOldEvents(context.db, {
    sessionId: 'sess_b',
    ageDays: 1,
    type: 'trace.swept',
    sensitivity: 'pseudonymous',
    payload: { quote: 'a "b", c\nd' },
  });
  for (const id of ['sess_a', 'sess_b']) {
    context.bus.emit(sessionCreated(id));
    const started = context.bus.emit(turnStarted(id, id === 'sess_a' ? 'shared text' : null))!;
    context.bus.emit(turnCompleted(id, started.id));
  }
  await context.flush();
  return { db: context.db, rows: allRows(context.db) };
}

async function run(db: Db, flags: ExportFlags): Promise<string> {
  const out = sink();
  await writeExport(db, parseExportFlags(flags), out.stream);
  return out.text();
}

const jsonl = (rows: readonly EventRow[]) => rows.map((r) => `${rowToJson(r)}\n`).join('');

/** A small RFC 4180 parser: quoted fields may hold commas, quotes ("") and line breaks; records end in CRLF. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const next = text[i + 1];
    i += 1;
    if (quoted && c === '"' && next === '"') {
      field += '"';
      i += 1;
    } else if (c === '"') {
      quoted = !quoted;
    } else if (quoted) {
      field += c;
    } else if (c === ',') {
      record.push(field);
      field = '';
    } else if (c === '\r' && next === '\n') {
      records.push([...record, field]);
      record = [];
      field = '';
      i += 1;
    } else {
      field += c;
    }
  }
  return records;
}

describe('export', () => {
  it('writes every event in id order, each line byte-equal to rowToJson', async () => {
    const { db, rows } = await seeded();
    expect(await run(db, {})).toBe(jsonl(rows));
  });

  it('filters by session, type, since (id: exclusive, ISO: inclusive), until (inclusive) and audit', async () => {
    const { db, rows } = await seeded();
    const pick = (keep: (r: EventRow) => boolean) => jsonl(rows.filter(keep));
    expect(await run(db, { session: 'sess_b' })).toBe(pick((r) => r[2] === 'sess_b'));
    expect(await run(db, { type: ['turn.started', 'turn.completed'] })).toBe(
      pick((r) => r[5].startsWith('turn.')),
    );
    expect(await run(db, { type: ['turn.started,session.created'], session: 'sess_a' })).toBe(
      pick((r) => r[2] === 'sess_a' && (r[5] === 'turn.started' || r[5] === 'session.created')),
    );
    const middle = rows[3]!;
    expect(await run(db, { since: middle[0] })).toBe(jsonl(rows.slice(4)));
    expect(await run(db, { since: microsToIso(middle[1]) })).toBe(pick((r) => r[1] >= middle[1]));
    expect(await run(db, { until: microsToIso(middle[1]) })).toBe(pick((r) => r[1] <= middle[1]));
    expect(await run(db, { audit: true })).toBe(pick((r) => AUDIT_EVENT_TYPES.has(r[5])));
    expect(await run(db, { audit: true, type: ['turn.started', 'trace.swept'] })).toBe(
      pick((r) => r[5] === 'trace.swept'),
    );
    expect(await run(db, { since: '2000-01-01', until: '2000-12-31T23:59:59.999999Z' })).toBe('');
  });

  it('--max-sensitivity leaves out every event more private than the level', async () => {
    const { db, rows } = await seeded();
    const order = ['private', 'user_controlled', 'pseudonymous', 'aggregatable'];
    for (const level of order) {
      const allowed = order.slice(order.indexOf(level));
      expect(await run(db, { maxSensitivity: level })).toBe(
        jsonl(rows.filter((r) => allowed.includes(r[7]))),
      );
    }
    const pseudonymous = await run(db, { maxSensitivity: 'pseudonymous' });
    expect(pseudonymous).not.toContain('"sensitivity":"private"');
    expect(pseudonymous).not.toContain('"sensitivity":"user_controlled"');
    expect(pseudonymous).toContain('"sensitivity":"aggregatable"');
  });

  it('writes CSV that parses back to the stored rows', async () => {
    const { db, rows } = await seeded();
    const records = parseCsv(await run(db, { format: 'csv' }));
    expect(records[0]!.join(',')).toBe(CSV_HEADER);
    expect(records.slice(1)).toEqual(
      rows.map((r) => [
        r[0],
        microsToIso(r[1]),
        r[2],
        r[3] ?? '',
        r[4] ?? '',
        r[5],
        r[6],
        r[7],
        String(r[9]),
        r[8],
      ]),
    );
    const quoted = records.find((r) => r[5] === 'trace.swept')!;
    expect(JSON.parse(quoted[9]!)).toEqual({ quote: 'a "b", c\nd' });
  });

  it('waits for drain on a slow output and still writes everything in order', async () => {
    const context = tempTraceContext();
    insertOldEvents(context.db, {
      sessionId: 'sess_big',
      ageDays: 1,
      count: 3000,
      payload: { text: 'y'.repeat(100) },
    });
    // Opening the store emits its own startup event; it must be committed before the export reads, or
    // a loaded machine commits it in between and the count is one short (seen in CI).
    await context.flush();
    const out = sink({ highWaterMark: 1024, delayMs: 1 });
    const count = await writeExport(context.db, parseExportFlags({}), out.stream);
    expect(count).toBe(allRows(context.db).length);
    expect(out.drains()).toBeGreaterThan(0);
    expect(out.text()).toBe(jsonl(allRows(context.db)));
  });

  it('writes a new private file atomically and refuses to overwrite one', async () => {
    const { db, rows } = await seeded();
    const dir = tempDir();
    const path = join(dir, 'out.jsonl');
    const progress: number[] = [];
    const result = await exportToFile(db, parseExportFlags({}), path, (p) => progress.push(p.exported));
    expect(result).toEqual({ count: rows.length, path });
    expect(progress.at(-1)).toBe(rows.length);
    expect(readFileSync(path, 'utf8')).toBe(jsonl(rows));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    writeFileSync(join(dir, 'taken.csv'), 'keep');
    await expect(exportToFile(db, parseExportFlags({}), join(dir, 'taken.csv'))).rejects.toMatchObject({
      code: 'METIS_ERR_DEST_EXISTS',
    });
    expect(readFileSync(join(dir, 'taken.csv'), 'utf8')).toBe('keep');
    expect(readdirSync(dir).sort()).toEqual(['out.jsonl', 'taken.csv']);
  });

  it('exportDatabase opens the file read-only and refuses a missing one', async () => {
    const { rows } = await seeded();
    const context = tempTraceContext();
    await context.close();
    const out = sink();
    const db = openDatabase(context.dbPath, { readonly: true });
    const expected = jsonl(allRows(db));
    db.close();
    expect(
      await exportDatabase({ dbPath: context.dbPath, query: parseExportFlags({}), stream: out.stream }),
    ).toEqual({
      count: expected.split('\n').length - 1,
      path: null,
    });
    expect(out.text()).toBe(expected);
    expect(rows.length).toBeGreaterThan(0);
    await expect(
      exportDatabase({ dbPath: join(tempDir(), 'none.db'), query: parseExportFlags({}), stream: out.stream }),
    ).rejects.toMatchObject({ code: 'METIS_ERR_DB_NOT_FOUND' });
  });

  it('validates every flag and names the problem', () => {
    const bad = (flags: ExportFlags) => () => parseExportFlags(flags);
    expect(bad({ type: ['turn.started', 'nope.event'] })).toThrowError(/unknown event type "nope\.event"/);
    expect(bad({ type: ['text.delta'] })).toThrowError(
      /--type: text\.delta is streaming-only and never stored/,
    );
    expect(bad({ since: 'yesterday' })).toThrowError(/--since must be an ISO 8601 timestamp/);
    expect(bad({ since: '2026-05-01T12:00:00' })).toThrowError(/--since/); // no zone: ambiguous
    expect(bad({ since: 'evt_123' })).toThrowError(/--since: "evt_123" is not an event id/);
    expect(bad({ until: 'evt_01HNZX8JGFACFA36RBXDHEQN6E' })).toThrowError(/--until must be an ISO 8601/);
    expect(bad({ maxSensitivity: 'secret' })).toThrowError(
      /--max-sensitivity must be one of private, user_controlled, pseudonymous, aggregatable/,
    );
    expect(bad({ format: 'xml' })).toThrowError(/--format must be jsonl or csv/);
    expect(bad({ session: '' })).toThrowError(/--session/);
    expect(parseExportFlags({ since: '2026-05-01T12:00:00.123456+02:00' }).sinceUs).toBe(
      Date.parse('2026-05-01T10:00:00.123Z') * 1000 + 456,
    );
  });
});
