import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { workingCopyPath } from '../../src/core/store/postgres/working-copy.js';
import { copyStore } from '../../src/core/store/store-copy.js';
import { clusterRequest, startClusterNode, until } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 35, operations online: `metis trace prune --store` while the nodes of a cluster serve. Every
 * node's working copy loses the rows the store lost, exactly one node records `trace.swept`, and turns
 * run on both nodes meanwhile. Real nats-server, PostgreSQL and `metis serve` nodes.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

function countIn(path: string, sql: string): number {
  const db = openDatabase(path, { readonly: true });
  try {
    return db.prepare(sql).pluck().get() as number;
  } finally {
    db.close();
  }
}

inCluster('metis trace prune --store beside a running cluster', () => {
  it('prunes every node’s working copy, records trace.swept once, and the nodes keep serving', async () => {
    const nats = await startNats();
    onTestFinished(() => nats.destroy());
    const aged = join(tempDir(), 'aged.db');
    const seed = openDatabase(aged, { create: true });
    insertOldEvents(seed, { sessionId: 'sess_old', ageDays: 100, count: 600 });
    insertOldEvents(seed, { sessionId: 'sess_new', ageDays: 1, count: 5 });
    seed.close();
    const store = freshDatabase(pg);
    await copyStore({ from: aged, to: store });
    const nodes = [
      await startClusterNode(store, nats.url, 'node-a'),
      await startClusterNode(store, nats.url, 'node-b'),
    ];
    const copies = nodes.map((node) => workingCopyPath(node.home, store));
    // A node starts with none of the store's sessions in its copy (its start does not grow with the
    // store); it holds the sessions it runs or reads: each node reads the old session once.
    for (const copy of copies) {
      expect(existsSync(copy), copy).toBe(true);
      expect(countIn(copy, "SELECT count(*) FROM events WHERE session_id <> 'system'")).toBe(0);
    }
    for (const node of nodes)
      expect((await clusterRequest(node.url, 'GET', '/sessions/sess_old/trace')).status).toBe(200);
    for (const copy of copies) {
      expect(existsSync(copy), copy).toBe(true);
      expect(countIn(copy, "SELECT count(*) FROM events WHERE session_id = 'sess_old'")).toBe(600);
    }

    // Turns on both nodes while the prune runs.
    const sessions = await Promise.all(
      nodes.map(async (node) => (await clusterRequest(node.url, 'POST', '/sessions', {})).body.session_id),
    );
    const turns = sessions.map((sessionId, i) =>
      clusterRequest(nodes[i]!.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'slow: hello' }),
    );
    const pruned = await runCli(['trace', 'prune', '--store', store, '--days', '30', '--json'], tempDir());
    expect(pruned.exitCode, pruned.stderr).toBe(0);
    const result = JSON.parse(pruned.stdout);
    expect(result.rows_deleted).toBe(600);
    expect(['node-a', 'node-b']).toContain(result.recorded_by_server);
    for (const turn of await Promise.all(turns)) expect(turn.status).toBe(202);

    const inStore = (sql: string) => pg.psql(sql, new URL(store).pathname.slice(1)).trim();
    for (const copy of copies)
      await until(
        async () => countIn(copy, "SELECT count(*) FROM events WHERE session_id = 'sess_old'") === 0,
        `the working copy ${copy} to lose the pruned rows`,
      );
    await until(
      async () => inStore("SELECT count(*) FROM events WHERE type = 'trace.swept'") === '1',
      'trace.swept to reach the store',
    );
    for (const [i, sessionId] of sessions.entries())
      await until(
        async () =>
          (await clusterRequest(nodes[i]!.url, 'GET', `/sessions/${sessionId}/trace`)).body.events.some(
            (event: { type: string }) => event.type === 'turn.completed',
          ),
        `the turn on ${nodes[i]!.nodeId} to complete`,
      );
    // Recorded once, by one node, in the system session as the store numbers it: no second record later.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(inStore("SELECT count(*) FROM events WHERE type = 'trace.swept'")).toBe('1');
    expect(inStore("SELECT count(*) FROM events WHERE session_id = 'sess_new'")).toBe('5');
    expect(inStore("SELECT count(*) FROM events WHERE session_id = 'sess_old'")).toBe('0');
  }, 120_000);
});
