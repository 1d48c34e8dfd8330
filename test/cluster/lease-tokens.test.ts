import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { BrokerLifecycle } from '../../src/core/cluster/broker.js';
import { joinCluster } from '../../src/core/cluster/cluster-node.js';
import { silentLogger } from '../../src/core/logger.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Store-port step 9: a node on PostgreSQL alone fences its writes with each lease's token, so the node
 * tells its writer of every lease it is granted, with the token, before anything of the session runs or
 * is taken over there, and of every lease it loses. Two real nodes on a real PostgreSQL.
 */

const server = postgresForFile();

/** The broker's part a node's registration uses: its state and its close (the broker is not needed). */
const noBroker = {
  state: 'connected',
  close: async () => {},
  onReconnect: () => () => {},
  onDisconnect: () => () => {},
  flush: async () => {},
} as unknown as BrokerLifecycle;

async function node(storeUrl: string, nodeId: string, heard: string[]) {
  const joined = await joinCluster({
    storeUrl,
    nodeId,
    url: `http://${nodeId}.invalid:8421`,
    broker: noBroker,
    timing: { heartbeatMs: 200, nodeTimeoutMs: 1_000 },
    logger: silentLogger(),
    lag: () => ({ backlog: 0, shippedAtUs: null }),
    rowIdBlock: () => {},
    onLease: (sessionId, token) => heard.push(`lease ${sessionId} ${token}`),
    takeOver: async (sessionId, _read, token) => {
      heard.push(`take ${sessionId} ${token}`);
      return undefined;
    },
  });
  onTestFinished(() => joined.close());
  return joined;
}

describe.skipIf(!postgresTestsRun)("a node's leases and their fencing tokens", () => {
  it('hears each granted token before a take-over, a new one per owner, and each lease lost', async () => {
    const url = freshDatabase(server);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await migratePostgres(client);
    await client.end();
    const heardA: string[] = [];
    const heardB: string[] = [];
    const a = await node(url, 'node-a', heardA);
    await a.ownSession('sess_one');
    await a.ownSession('sess_one');
    expect(heardA).toHaveLength(1);
    const [, , first] = heardA[0]!.split(' ');
    expect(heardA).toEqual([`lease sess_one ${first}`]);

    // Node A says goodbye: B takes the session over, under a token of its own, told first.
    await a.close();
    const b = await node(url, 'node-b', heardB);
    await b.ownSession('sess_one');
    const [, , second] = heardB[0]!.split(' ');
    expect(second).not.toBe(first);
    expect(heardB).toEqual([`lease sess_one ${second}`, `take sess_one ${second}`]);

    b.lost(['sess_one']);
    expect(heardB.at(-1)).toBe('lease sess_one null');
  }, 30_000);
});
