import { describe, expect, it } from 'vitest';
import type { NewOutcome, PatternRows, StoredFingerprint } from '../../src/core/store/pattern-rows.js';
import { PgPatternRows } from '../../src/core/store/postgres/pg-pattern-rows.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * The learned patterns a server routes from are the same whichever store keeps them (store-port plan
 * step 8): the same writes through SQLite's trace writer and through PostgreSQL's writer leave the same
 * rows, as each store's `load` reads them back at the next start.
 */

const server = postgresForFile();

const outcome = (
  fingerprint: string,
  model: string,
  atUs: number,
  score: number | null = 0.5,
): NewOutcome => ({
  fingerprintId: `fp_${fingerprint}`,
  key: `key-${fingerprint}`,
  featuresJson: JSON.stringify({ words: [fingerprint], tools: [] }),
  model,
  sessionId: `sess_${atUs}`,
  score,
  costUsd: atUs / 10_000,
  turns: 1 + (atUs % 3),
  atUs,
});

/** What a pattern store learns and forgets over a while: shared fingerprints, a cap, an age trim. */
function learn(rows: PatternRows): void {
  rows.insertOutcome(outcome('a', 'm1', 100));
  rows.insertOutcome(outcome('a', 'm2', 200, null));
  rows.insertOutcome(outcome('b', 'm1', 300, 1));
  rows.deleteOldest(1);
  rows.deleteRecordedBefore(250);
  rows.insertOutcome(outcome('c', 'm2', 400, 0));
  rows.insertOutcome(outcome('a', 'm1', 500, 0.25));
}

const byId = (a: StoredFingerprint, b: StoredFingerprint) => (a.id < b.id ? -1 : 1);

describe.runIf(postgresTestsRun)('pattern rows on SQLite and on PostgreSQL', () => {
  it('the same writes leave the same patterns, read back at the next start', async () => {
    const sqlite = tempTraceContext();
    learn(sqlite.port.patterns);
    await sqlite.flush();
    const expected = sqlite.port.patterns.load();

    const pg = await openPgWriter(server);
    const sink = { write: pg.writer.writeRow.bind(pg.writer), nextRowId: () => null };
    const first = await PgPatternRows.open(pg.pool, sink);
    expect(first.load()).toEqual({ fingerprints: [], outcomes: [] });
    learn(first);
    await pg.flush();
    const reopened = (await PgPatternRows.open(pg.pool, sink)).load();

    expect(expected.outcomes.map((o) => [o.model, o.recorded_at_us])).toEqual([
      ['m1', 300],
      ['m2', 400],
      ['m1', 500],
    ]);
    expect(reopened.outcomes).toEqual(expected.outcomes);
    expect([...reopened.fingerprints].sort(byId)).toEqual([...expected.fingerprints].sort(byId));
    // What was read at open is what `load` answers, whatever is written after.
    expect(first.load()).toEqual({ fingerprints: [], outcomes: [] });
  });

  it('a clear leaves nothing on either store', async () => {
    const sqlite = tempTraceContext();
    learn(sqlite.port.patterns);
    sqlite.port.patterns.deleteAll();
    await sqlite.flush();
    const pg = await openPgWriter(server);
    const sink = { write: pg.writer.writeRow.bind(pg.writer), nextRowId: () => null };
    const rows = await PgPatternRows.open(pg.pool, sink);
    learn(rows);
    rows.deleteAll();
    await pg.flush();
    const left = sqlite.port.patterns.load();
    expect(left.outcomes).toEqual([]);
    expect((await PgPatternRows.open(pg.pool, sink)).load()).toEqual(left);
  });
});
