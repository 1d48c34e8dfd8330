import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { searchSessions } from '../../src/core/store/session-search.js';
import { usageByBucket } from '../../src/core/store/usage-stats.js';
import { DROP_BUDGET_COLUMNS } from '../helpers/old-schema.js';
import { type Rig, startRig } from './trace-api-rig.js';

/**
 * Issue 30: a store written before migration 7 gets the same summaries, text index and usage rollup
 * from the migration's backfill as the triggers keep for a store written after it.
 */
describe('migration 7 on a store written before it', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig();
    const plain = await rig.createSession();
    await rig.runTurn(plain, 'think: time');
    await rig.runTurn(plain, 'an ocelot walks into a bar');
    const failing = await rig.createSession();
    await rig.runTurn(failing, 'fail: server_error');
    const suite = await rig.createSession({ model: 'scripted:conformance' });
    await rig.runTurn(suite, 'delegate: count the files');
    await new Promise((resolve) => setTimeout(resolve, 50));
    await rig.context.flush();
    await rig.server.close();
    await rig.runtime.close();
    await rig.context.close();
  }, 30_000);
  afterAll(async () => rig?.close().catch(() => undefined));

  const snapshot = (path: string) => {
    const db = openDatabase(path);
    try {
      const { rows } = searchSessions(db, { includeConformance: true, limit: 200 });
      return {
        sessions: rows.map(({ last_activity_at: _, ...row }) => row),
        ocelot: searchSessions(db, { includeConformance: true, limit: 200, q: 'ocelot' }).rows.map(
          (r) => r.id,
        ),
        usage: usageByBucket(db, { fromUs: 0, toUs: Date.now() * 1000 + 3.6e9, bucket: 'day' }),
      };
    } finally {
      db.close();
    }
  };

  it('backfills summaries, the conformance tag, the text index and the usage rollup', () => {
    const kept = snapshot(rig.dbPath);
    expect(kept.sessions.length).toBeGreaterThanOrEqual(4);
    expect(kept.ocelot).toHaveLength(1);
    expect(kept.sessions.filter((s) => s.tags.includes('conformance')).length).toBeGreaterThanOrEqual(2);

    // Back to version 6: what migration 7 made is gone, the events, messages and sessions stay.
    const db = openDatabase(rig.dbPath);
    for (const trigger of db
      .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
      .pluck()
      .all() as string[])
      db.exec(`DROP TRIGGER ${trigger}`);
    db.exec(`DROP TABLE session_summaries; DROP TABLE session_titles; DROP TABLE message_search;
             DROP TABLE usage_hourly; DROP INDEX idx_sessions_created; ${DROP_BUDGET_COLUMNS}`);
    db.pragma('user_version = 6');
    db.close();

    const migrated = snapshot(rig.dbPath);
    expect(migrated.sessions).toEqual(kept.sessions);
    expect(migrated.ocelot).toEqual(kept.ocelot);
    // Feedback and eval verdicts stored before the migration are not backfilled (none here).
    expect(migrated.usage).toEqual(kept.usage);
  });
});
