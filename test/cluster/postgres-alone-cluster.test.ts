import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type ClusterTestNode,
  clusterRequest,
  startClusterNode,
  storedSessionEvents,
} from '../helpers/cluster.js';
import { accountFor, FollowingClient, turnEnd, turnOutcome } from '../helpers/following-client.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { eventually } from '../helpers/protocol.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Store-port step 9 (issue 35): a cluster whose nodes run on PostgreSQL alone (`store.working_copy:
 * false`): no node keeps a file of the store; a session created on one node is answered by another at
 * once; a client on a node that does not run the session follows its turns live (from the broker, with
 * catch-up from PostgreSQL); a node killed mid-turn has its session taken over from PostgreSQL, the cut
 * turn resumed and completed once, and the other node's client shown every stored event once.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun || process.platform !== 'linux');
const ON_POSTGRES_ALONE = { working_copy: false };

inCluster('a cluster on PostgreSQL alone', () => {
  it('serves as one: no node keeps the store, any node answers, a client elsewhere follows live; a killed node’s turn resumes once', async () => {
    const nats = await startNats();
    const nodes: ClusterTestNode[] = [];
    try {
      const store = freshDatabase(pg);
      const psql = (sql: string) => pg.psql(sql, new URL(store).pathname.slice(1)).trim();
      for (const id of ['node-a', 'node-b'])
        nodes.push(
          await startClusterNode(store, nats.url, id, {
            store: ON_POSTGRES_ALONE,
            runtime: { tool_confirmation: { execute: 'allow' } },
          }),
        );
      const [a, b] = nodes as [ClusterTestNode, ClusterTestNode];
      const workspace = tempDir();
      const created = await clusterRequest(a.url, 'POST', '/sessions', { workspace_path: workspace });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const sessionId = created.body.session_id as string;
      // Made on A a moment ago, answered by B at once.
      const described = await clusterRequest(b.url, 'GET', `/sessions/${sessionId}`);
      expect(described.status, JSON.stringify(described.body)).toBe(200);

      // A cap set through B (the owner, A, sets it): B's snapshot shows the budget as A has it.
      const capped = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/budget`, { usd: 5 });
      expect(capped.status, JSON.stringify(capped.body)).toBe(200);
      const client = new FollowingClient(sessionId, () => [b]);
      await client.attach(b, null);
      const { session_id: _, ...asOwnerHasIt } = capped.body;
      expect(client.snapshot.budget).toEqual(asOwnerHasIt);
      const first = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'think: time',
      });
      expect(first.status, JSON.stringify(first.body)).toBe(202);
      expect(first.node).toBe('node-a');
      expect(turnOutcome(await client.waitFor(turnEnd(first.body.turn_id as string), 'the first turn'))).toBe(
        'completed',
      );

      // A runs a long command when it is killed; B takes the session over and resumes the turn.
      const out = join(workspace, 'once.txt');
      const cut = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: `run-each: echo once >> ${out} ;; exec sleep 60`,
      });
      expect(cut.status, JSON.stringify(cut.body)).toBe(202);
      const cutId = cut.body.turn_id as string;
      expect(
        await eventually(
          () =>
            psql(`SELECT count(*) FROM events WHERE turn_id = '${cutId}' AND type = 'tool.completed'`) ===
            '1',
          20_000,
        ),
      ).toBe(true);
      a.process.kill('SIGKILL');
      await a.exited();
      const ended = await client.waitFor(turnEnd(cutId), 'the end of the resumed turn');
      expect(turnOutcome(ended)).toBe('completed');
      expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['once']);
      expect(psql(`SELECT node_id FROM metis_session_leases WHERE session_id = '${sessionId}'`)).toBe(
        'node-b',
      );
      expect(
        psql(
          `SELECT count(*) FROM events WHERE turn_id = '${cutId}' AND type IN ('turn.completed', 'turn.cancelled')`,
        ),
      ).toBe('1');
      expect(
        psql(
          `SELECT count(*) = max(seq) AND count(DISTINCT seq) = count(*) FROM events WHERE session_id = '${sessionId}'`,
        ),
      ).toBe('t');
      const events = storedSessionEvents(psql, sessionId);
      expect(accountFor(client, events)).toEqual({ lost: [], duplicated: [], unexpected: [] });
      const ids = client.events.map((event) => event.id as string);
      expect(ids).toEqual([...new Set(ids)].sort());
      client.close();
      // No node kept a file of the store in its data folder.
      for (const node of nodes)
        expect(
          readdirSync(node.home).filter((name) => name.endsWith('.db')),
          node.nodeId,
        ).toEqual([]);
    } finally {
      for (const node of nodes) await node.stop('SIGKILL').catch(() => {});
      await nats.stop();
    }
  }, 120_000);
});
