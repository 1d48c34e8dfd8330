import { describe, expect, it, onTestFinished } from 'vitest';
import { SqlitePatternRows } from '../../src/core/store/pattern-rows.js';
import { postgresClient } from '../../src/core/store/postgres/connect.js';
import { takeRowIdBlock, usedInRowIdBlock } from '../../src/core/store/postgres/node-registry.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { ROW_ID_BLOCK, useRowIdBlock } from '../../src/core/store/row-ids.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * Issue 35: a node took a new block of row ids at every start, so a crash-looping node used the 2^21
 * blocks up. A node now keeps its block from start to start and continues after the keys it handed out.
 */

const server = postgresForFile();

function outcome(atUs: number) {
  return {
    fingerprintId: 'fp_1',
    key: 'k1',
    featuresJson: '{}',
    model: 'scripted:a',
    sessionId: 'sess_1',
    score: 1,
    costUsd: 0,
    turns: 1,
    atUs,
  };
}

describe.skipIf(!postgresTestsRun)('row id blocks of cluster nodes', () => {
  it('a node gets the same block at every start, and another node a block of its own', async () => {
    const client = postgresClient(freshDatabase(server), 'cluster');
    await client.connect();
    onTestFinished(() => client.end());
    await migratePostgres(client);
    const first = await takeRowIdBlock(client, 'node-a');
    const again = await takeRowIdBlock(client, 'node-a');
    const other = await takeRowIdBlock(client, 'node-b');
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    // A hundred restarts of a crash-looping node use no block more.
    for (let start = 0; start < 100; start += 1) await takeRowIdBlock(client, 'node-a');
    expect(await takeRowIdBlock(client, 'node-c')).toBe(other + 1);
  }, 60_000);

  it('a block kept from an earlier start continues after the keys that start handed out', () => {
    const context = tempTraceContext();
    const rows = new SqlitePatternRows(context.db);
    const ids = () => context.db.prepare('SELECT id FROM pattern_outcomes ORDER BY id').pluck().all();
    useRowIdBlock(context.db, 3);
    rows.insertOutcome(outcome(1));
    rows.insertOutcome(outcome(2));
    // The next start of the node, on the same copy: no key is handed out twice.
    useRowIdBlock(context.db, 3);
    rows.insertOutcome(outcome(3));
    const base = 3 * ROW_ID_BLOCK;
    expect(ids()).toEqual([base + 1, base + 2, base + 3]);
  });

  it('continues after the keys the store holds from the block, which a new working copy lacks', async () => {
    const client = postgresClient(freshDatabase(server), 'cluster');
    await client.connect();
    onTestFinished(() => client.end());
    await migratePostgres(client);
    const block = await takeRowIdBlock(client, 'node-a');
    const base = block * ROW_ID_BLOCK;
    expect(await usedInRowIdBlock(client, block)).toBeNull();
    // A session this node ran before, and another node runs now: its rows are not in the node's copy.
    await client.query(
      "INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('sess_elsewhere', 1, 1)",
    );
    await client.query(
      `INSERT INTO tool_calls (row_id, id, session_id, tool_name, input_json, status, created_at_us, updated_at_us)
       VALUES ($1, 'call_1', 'sess_elsewhere', 'time', '{}', 'completed', 1, 1)`,
      [base + 7],
    );
    // Another node's block is not this one's business.
    await client.query(
      `INSERT INTO tool_calls (row_id, id, session_id, tool_name, input_json, status, created_at_us, updated_at_us)
       VALUES ($1, 'call_2', 'sess_elsewhere', 'time', '{}', 'completed', 1, 1)`,
      [base + ROW_ID_BLOCK + 1],
    );
    expect(await usedInRowIdBlock(client, block)).toBe(base + 7);
    const context = tempTraceContext();
    useRowIdBlock(context.db, block, await usedInRowIdBlock(client, block));
    new SqlitePatternRows(context.db).insertOutcome(outcome(1));
    expect(context.db.prepare('SELECT id FROM pattern_outcomes').pluck().all()).toEqual([base + 8]);
  }, 60_000);
});
