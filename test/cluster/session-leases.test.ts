import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { markStopped, registerNode } from '../../src/core/store/postgres/node-registry.js';
import { BIGINT_AS_NUMBER } from '../../src/core/store/postgres/pg-util.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { acquireLease } from '../../src/core/store/postgres/session-leases.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 20 point 2: a session's owner is a lease in PostgreSQL that lives as long as its node (renewed by
 * the node's beat, so it expires with the node timeout). Against a real PostgreSQL.
 */

const server = postgresForFile();
const TIMEOUT_MS = 10_000;
const now = () => Date.now() * 1000;

async function store(): Promise<pg.Client[]> {
  const url = freshDatabase(server);
  const clients = [0, 1].map(() => new pg.Client({ connectionString: url, types: BIGINT_AS_NUMBER }));
  for (const client of clients) {
    await client.connect();
    onTestFinished(() => client.end());
  }
  await migratePostgres(clients[0]!);
  for (const node_id of ['node-a', 'node-b'])
    await registerNode(clients[0]!, {
      node_id,
      url: `http://${node_id}:8421`,
      host: 'h',
      pid: 1,
      version: 'test',
    });
  return clients;
}

describe.skipIf(!postgresTestsRun)('session leases', () => {
  it('a live owner keeps its session; another node is told who owns it', async () => {
    const [client] = await store();
    const first = await acquireLease(client!, 'sess_1', 'node-a', TIMEOUT_MS);
    expect(first).toEqual({ held: true, taken: false, token: expect.any(Number) });
    // The same owner asking again keeps its token: nothing changed hands.
    expect(await acquireLease(client!, 'sess_1', 'node-a', TIMEOUT_MS)).toEqual(first);
    const refused = await acquireLease(client!, 'sess_1', 'node-b', TIMEOUT_MS);
    expect(refused).toMatchObject({ held: false, owner: { node_id: 'node-a', url: 'http://node-a:8421' } });
    // Each session's lease has a token of its own.
    const other = await acquireLease(client!, 'sess_2', 'node-a', TIMEOUT_MS);
    expect(other.held && first.held && other.token !== first.token).toBe(true);
  });

  it('a stopped or silent owner frees its sessions: the next node takes them over, with a new token', async () => {
    const [client] = await store();
    const before = await acquireLease(client!, 'sess_1', 'node-a', TIMEOUT_MS);
    await acquireLease(client!, 'sess_2', 'node-a', TIMEOUT_MS);
    const started = (
      await client!.query('SELECT started_at_us FROM metis_nodes WHERE node_id = $1', ['node-a'])
    ).rows[0].started_at_us as number;
    await markStopped(client!, 'node-a', started);
    const taken = await acquireLease(client!, 'sess_1', 'node-b', TIMEOUT_MS);
    expect(taken).toEqual({ held: true, taken: true, token: expect.any(Number) });
    // A write carrying node-a's token is told apart from node-b's, even if node-a held it again later.
    expect(before.held && taken.held && taken.token > before.token).toBe(true);
    // Silent: no beat for longer than the timeout (node-a came back, then stopped beating).
    await client!.query(
      'UPDATE metis_nodes SET stopped_at_us = NULL, heartbeat_at_us = $1 WHERE node_id = $2',
      [now() - (TIMEOUT_MS + 1_000) * 1000, 'node-a'],
    );
    expect(await acquireLease(client!, 'sess_2', 'node-b', TIMEOUT_MS)).toEqual({
      held: true,
      taken: true,
      token: expect.any(Number),
    });
    const owners = await client!.query(
      'SELECT session_id, node_id, token FROM metis_session_leases ORDER BY 1',
    );
    expect(owners.rows.map(({ session_id, node_id }) => ({ session_id, node_id }))).toEqual([
      { session_id: 'sess_1', node_id: 'node-b' },
      { session_id: 'sess_2', node_id: 'node-b' },
    ]);
    expect(Number(owners.rows[0].token)).toBe(taken.held ? taken.token : -1);
  });

  it('two nodes asking for a free session at once: exactly one gets it, the other is told which', async () => {
    const [first, second] = await store();
    for (let round = 0; round < 20; round += 1) {
      const session = `sess_race_${round}`;
      const outcomes = await Promise.all([
        acquireLease(first!, session, 'node-a', TIMEOUT_MS),
        acquireLease(second!, session, 'node-b', TIMEOUT_MS),
      ]);
      const winners = outcomes.filter((outcome) => outcome.held);
      expect(winners, `round ${round}`).toHaveLength(1);
      const loser = outcomes.find((outcome) => !outcome.held) as { owner: { node_id: string } };
      const owner = (
        await first!.query('SELECT node_id FROM metis_session_leases WHERE session_id = $1', [session])
      ).rows[0].node_id;
      expect(loser.owner.node_id).toBe(owner);
    }
  });
});
