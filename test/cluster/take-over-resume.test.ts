import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import {
  CLUSTER_TOKEN,
  type ClusterTestNode,
  clusterRequest,
  startClusterNode,
  storedSessionEvents,
} from '../helpers/cluster.js';
import { accountFor, FollowingClient, turnEnd, turnOutcome } from '../helpers/following-client.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { eventually, subscribeOn } from '../helpers/protocol.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 31 part 1 on a cluster (docs/scale-out.md "A node that dies"): a node SIGKILLed mid-turn, and
 * the node that takes its session over resumes the turn as a restarting node would (docs/runtime.md
 * "Durable turns"): the stored tool result reused, the shell command that was running not run again,
 * the turn completed once, seq whole, and every client's conversation the store's. With
 * `runtime.on_restart: fail` the taking node closes the turn as failed, as before.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun || process.platform !== 'linux');

const ALLOW_SHELL = { tool_confirmation: { execute: 'allow' } };

/** The conversation a client shows from its frames, as `metis tail` renders it (src/client/reducer.ts). */
function conversation(frames: readonly Frame[]): unknown[] {
  const state = frames.reduce(reduce, initialState);
  // The model's messages: a live client renders user and tool messages only from a snapshot.
  return state.messages
    .filter((message) => message.role === 'assistant')
    .map(({ id, status, blocks }) => ({ id, status, blocks }));
}

inCluster('a node taking over a dead node’s session', () => {
  it('resumes the turn it cut: completed once, no command run twice, each client shown the store', async () => {
    const nats = await startNats();
    const nodes: ClusterTestNode[] = [];
    const pidFile = join(tempDir(), 'sleep.pid');
    try {
      const store = freshDatabase(pg);
      const psql = (sql: string) => pg.psql(sql, new URL(store).pathname.slice(1)).trim();
      for (const id of ['node-a', 'node-b', 'node-c'])
        nodes.push(await startClusterNode(store, nats.url, id, { runtime: ALLOW_SHELL }));
      const [a, b, c] = nodes as [ClusterTestNode, ClusterTestNode, ClusterTestNode];
      const workspace = tempDir();
      const out = join(workspace, 'once.txt');
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', { workspace_path: workspace })).body
        .session_id as string;
      const clients = [new FollowingClient(sessionId, () => [b]), new FollowingClient(sessionId, () => [c])];
      await clients[0]!.attach(b, null);
      await clients[1]!.attach(c, null);
      // Sent to B, run by A (the lease's holder); its second command is running when A dies.
      const turn = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: `run-each: echo once >> ${out} ;; echo $$ > ${pidFile}; exec sleep 60`,
      });
      expect(turn.status, JSON.stringify(turn.body)).toBe(202);
      expect(turn.node).toBe('node-a');
      const turnId = turn.body.turn_id as string;
      expect(
        await eventually(
          () =>
            existsSync(pidFile) &&
            psql(`SELECT count(*) FROM events WHERE turn_id = '${turnId}' AND type = 'tool.completed'`) ===
              '1' &&
            psql(
              `SELECT count(*) FROM tool_calls WHERE session_id = '${sessionId}' AND status = 'running'`,
            ) === '1',
          20_000,
        ),
      ).toBe(true);
      a.process.kill('SIGKILL');
      await a.exited();

      for (const client of clients) {
        const ended = await client.waitFor(turnEnd(turnId), 'the end of the resumed turn');
        expect(turnOutcome(ended)).toBe('completed');
        expect(ended.payload.tool_call_count).toBe(2);
      }
      const owner = psql(`SELECT node_id FROM metis_session_leases WHERE session_id = '${sessionId}'`);
      expect(['node-b', 'node-c']).toContain(owner);
      // Shipped by the new owner: the store has the turn's end once, the session's seq whole.
      expect(
        await eventually(
          () =>
            psql(`SELECT count(*) FROM events WHERE turn_id = '${turnId}' AND type = 'turn.completed'`) ===
            '1',
          10_000,
        ),
      ).toBe(true);
      expect(
        psql(
          `SELECT count(*) = max(seq) AND count(DISTINCT seq) = count(*) FROM events WHERE session_id = '${sessionId}'`,
        ),
      ).toBe('t');
      // The take-over counted as a resumption (the cap counts these), and the running command was
      // reported interrupted, not run again.
      expect(
        Number(
          psql(`SELECT count(*) FROM events WHERE session_id = '${sessionId}' AND type = 'session.resumed'`),
        ),
      ).toBeGreaterThanOrEqual(1);
      expect(
        psql(
          `SELECT payload_json::json->>'error_message' FROM events WHERE turn_id = '${turnId}' AND type = 'tool.failed'`,
        ),
      ).toMatch(/^interrupted/);
      expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['once']);

      const events = storedSessionEvents(psql, sessionId);
      // What the store holds, as a client attaching now renders it from its snapshot.
      const handshake = await clusterRequest(b.url, 'GET', `/sessions/${sessionId}`);
      const fresh = await openClient(handshake.body.ws_url as string, {
        headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
      });
      const stored = conversation([(await subscribeOn(fresh, { snapshot: true })).snapshot]);
      fresh.close();
      expect(stored.length).toBeGreaterThanOrEqual(2);
      for (const [k, client] of clients.entries()) {
        const what = `client on ${k === 0 ? 'node-b' : 'node-c'}`;
        expect(accountFor(client, events), what).toEqual({ lost: [], duplicated: [], unexpected: [] });
        const ids = client.events.map((event) => event.id as string);
        expect(ids, what).toEqual([...new Set(ids)].sort());
        const live = [client.snapshot, ...client.events.map((event) => ({ type: 'event', event }))];
        expect(conversation(live), what).toEqual(stored);
        client.close();
      }
      console.log(
        `take-over resume: ${events.length} stored events, turn resumed on ${owner}, ` +
          clients
            .map((client) => `${client.events.length} received (${client.reconnects} reconnects)`)
            .join(', '),
      );
    } finally {
      if (existsSync(pidFile)) {
        try {
          process.kill(Number(readFileSync(pidFile, 'utf8').trim()), 'SIGKILL');
        } catch {}
      }
      for (const node of nodes.slice(1)) await node.stop('SIGTERM').catch(() => {});
      await nats.destroy();
    }
  }, 60_000);
  it('with runtime.on_restart: fail, closes the turn it cut as failed, as before', async () => {
    const nats = await startNats();
    const nodes: ClusterTestNode[] = [];
    try {
      const store = freshDatabase(pg);
      const psql = (sql: string) => pg.psql(sql, new URL(store).pathname.slice(1)).trim();
      for (const id of ['node-a', 'node-b'])
        nodes.push(await startClusterNode(store, nats.url, id, { runtime: { on_restart: 'fail' } }));
      const [a, b] = nodes as [ClusterTestNode, ClusterTestNode];
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const client = new FollowingClient(sessionId, () => [b]);
      await client.attach(b, null);
      const turn = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: a long answer',
      });
      expect(turn.node).toBe('node-a');
      const turnId = turn.body.turn_id as string;
      expect(
        await eventually(
          () =>
            psql(`SELECT count(*) FROM events WHERE turn_id = '${turnId}' AND type = 'llm.call_started'`) ===
            '1',
          10_000,
        ),
      ).toBe(true);
      a.process.kill('SIGKILL');
      await a.exited();
      const ended = await client.waitFor(turnEnd(turnId), 'the end of the cut turn');
      expect(turnOutcome(ended)).toBe('failed: server_stopped');
      expect(
        psql(`SELECT count(*) FROM events WHERE session_id = '${sessionId}' AND type = 'session.resumed'`),
      ).toBe('0');
      expect(
        await eventually(
          () =>
            psql(`SELECT count(*) FROM events WHERE turn_id = '${turnId}' AND type = 'turn.completed'`) ===
            '1',
          10_000,
        ),
      ).toBe(true);
      expect(psql(`SELECT count(*) = max(seq) FROM events WHERE session_id = '${sessionId}'`)).toBe('t');
      client.close();
    } finally {
      for (const node of nodes.slice(1)) await node.stop('SIGTERM').catch(() => {});
      await nats.destroy();
    }
  }, 60_000);
});
