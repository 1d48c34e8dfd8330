import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { connectBroker } from '../../src/core/cluster/broker.js';
import { joinCluster } from '../../src/core/cluster/cluster-node.js';
import { silentLogger } from '../../src/core/logger.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * A node asking for a session another node held: one question per session at a time (a second request
 * waits for the first, and for the session to be brought in), and a take-over that failed is tried
 * again by the next request. Real PostgreSQL and nats-server.
 */

const server = postgresForFile();

async function nodeWithTakeOver(takeOver: (sessionId: string) => Promise<void>) {
  const url = freshDatabase(server);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  onTestFinished(() => admin.end());
  await migratePostgres(admin);
  // node-z held sess_1 and stopped: the lease is free to take, and taking it means bringing it in.
  await admin.query(
    `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us, stopped_at_us)
       VALUES ('node-z', 'http://z', 'z', 1, 'test', 1, 1, 2);
     INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us) VALUES ('sess_1', 'node-z', 1)`,
  );
  const nats = await startNats();
  onTestFinished(() => nats.destroy());
  const broker = await connectBroker({
    url: nats.url,
    nodeId: 'node-a',
    setting: 'test',
    logger: silentLogger(),
  });
  const node = await joinCluster({
    storeUrl: url,
    nodeId: 'node-a',
    url: 'http://a',
    broker,
    timing: { heartbeatMs: 1_000, nodeTimeoutMs: 10_000 },
    logger: silentLogger(),
    lag: () => ({ backlog: 0, shippedAtUs: null }),
    rowIdBlock: () => {},
    takeOver: async (sessionId) => {
      await takeOver(sessionId);
      return undefined;
    },
  });
  onTestFinished(() => node.close());
  return node;
}

describe.skipIf(!postgresTestsRun || !natsTestsRun)('a node taking a session', () => {
  it('brings it in once, however many requests ask at the same time', async () => {
    let calls = 0;
    let inProgress = false;
    const node = await nodeWithTakeOver(async () => {
      calls += 1;
      inProgress = true;
      await new Promise((resolve) => setTimeout(resolve, 200));
      inProgress = false;
    });
    const answers = await Promise.all(
      [0, 1, 2].map(async () => {
        await node.ownSession('sess_1');
        return inProgress; // each request goes on only once the session is in
      }),
    );
    expect(answers).toEqual([false, false, false]);
    expect(calls).toBe(1);
    await node.ownSession('sess_1');
    expect(calls).toBe(1);
  });

  it('tries a failed take-over again with the next request', async () => {
    let calls = 0;
    const node = await nodeWithTakeOver(async () => {
      calls += 1;
      if (calls === 1) throw new Error('the store went away mid-read');
    });
    await expect(node.ownSession('sess_1')).rejects.toThrow('the store went away mid-read');
    await node.ownSession('sess_1');
    expect(calls).toBe(2);
  });
});
