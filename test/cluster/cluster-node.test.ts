import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type Msg } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { newEventId } from '../../src/core/events/ids.js';
import { openClusterMessage, until } from '../helpers/cluster.js';
import { freePort } from '../helpers/free-port.js';
import { jsonRequest } from '../helpers/http.js';
import { type NatsServer, natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 20, first step: `metis serve --nats` as a node of a cluster on a PostgreSQL store. The node
 * registers in the store and beats, names itself and its peers, reports store and broker in /healthz,
 * publishes its sessions' events on NATS (one subject per session, both families, the frame's bytes),
 * refuses a name a live node has and an unreachable broker, and keeps serving through a broker outage.
 * Everything real: PostgreSQL, nats-server, `metis serve` as a child process, the NATS client.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

async function withNats<T>(work: (nats: NatsServer) => Promise<T>, args: string[] = []): Promise<T> {
  const nats = await startNats(args);
  try {
    return await work(nats);
  } finally {
    await nats.destroy();
  }
}

/** A config file with fast beats, so that a killed node goes silent within the test. */
function fastBeats(dir: string): string {
  const path = join(dir, 'metis.config.json');
  writeFileSync(path, JSON.stringify({ cluster: { heartbeat_ms: 200, node_timeout_ms: 1_000 } }));
  return path;
}

async function node(store: string, nats: string, nodeId: string, extra: string[] = []) {
  const home = tempDir();
  const served = await serveCli(home, ['--store', store, '--nats', nats, '--node-id', nodeId, ...extra]);
  const banner = JSON.parse(served.stdout().split('\n')[0]!) as {
    node_id: string;
    peers: { node_id: string }[];
  };
  return { ...served, home, banner };
}

async function clusterStatus(store: string, home: string, extra: string[] = []) {
  const result = await runCli(['cluster', 'status', '--store', store, '--json', ...extra], home);
  expect(result.exitCode, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as {
    nodes: { node_id: string; state: string; url: string; backlog: number; shipped_at: string | null }[];
    leases: { session_id: string; node_id: string; held: boolean }[];
  };
}

/** The token a node made in its home (these nodes have no configured one), which seals its messages. */
function tokenOf(home: string): string {
  return readFileSync(join(home, 'token'), 'utf8').trim();
}

function psqlIn(url: string, sql: string): string {
  return pg.psql(sql, new URL(url).pathname.slice(1)).trim();
}

inCluster('a metis serve node of a cluster', () => {
  it('registers, reports store and broker in /healthz, and is listed alive, then stopped', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      expect(a.banner).toMatchObject({ node_id: 'node-a', peers: [] });
      const health = await jsonRequest(a.url, 'GET', '/healthz');
      // States only: no name (a default one holds the host name) and no address.
      expect(health.body).toEqual({ status: 'ok', store: { state: 'ok' }, broker: { state: 'connected' } });
      const running = await clusterStatus(store, a.home);
      expect(running.nodes).toEqual([
        expect.objectContaining({ node_id: 'node-a', state: 'alive', url: a.url }),
      ]);
      expect(await a.stop('SIGTERM')).toBe(0);
      expect((await clusterStatus(store, a.home)).nodes[0]).toMatchObject({
        node_id: 'node-a',
        state: 'stopped',
      });
    });
  });

  it("publishes each session's events on its subject: the stored ones in id order, live deltas too", async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      const watcher = await connect({ servers: nats.url });
      const received: Msg[] = [];
      const subscription = watcher.subscribe('metis.session.>', {
        callback: (_, msg) => void received.push(msg),
      });
      await watcher.flush();
      const created = await jsonRequest(a.url, 'POST', '/sessions', {}, {});
      expect(created.status).toBe(201);
      const sessionId = created.body.session_id as string;
      const turn = await jsonRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'hello there',
      });
      expect(turn.status).toBe(202);
      // Sealed under the node's token (message-seal.ts): opened as another node of the cluster opens them.
      const token = tokenOf(a.home);
      const opened = (m: Msg) => openClusterMessage(m, token) ?? '';
      await until(
        () => received.some((m) => opened(m).includes('"type":"turn.completed"')),
        'turn.completed on NATS',
      );
      await a.stop('SIGTERM');
      subscription.unsubscribe();
      await watcher.close();

      const mine = received.filter((m) => m.subject === `metis.session.${sessionId}`);
      expect(mine.every((m) => m.headers?.get('Metis-Node') === 'node-a')).toBe(true);
      const bus = mine.filter((m) => m.headers?.get('Metis-Family') === 'bus').map(opened);
      const stream = mine
        .filter((m) => m.headers?.get('Metis-Family') === 'stream')
        .map((m) => JSON.parse(opened(m)) as { type: string });
      expect(stream.some((e) => e.type === 'text.delta')).toBe(true);
      // What the store holds of the session, exported from PostgreSQL: the same envelopes, byte for byte.
      const exported = await runCli(['export', '--store', store, '--session', sessionId], a.home);
      expect(exported.exitCode, exported.stderr).toBe(0);
      expect(bus).toEqual(exported.stdout.trim().split('\n'));
      const ids = bus.map((line) => (JSON.parse(line) as { id: string }).id);
      expect(ids).toEqual([...ids].sort());
    });
  });

  it('a second node under a live name is refused naming the first; another name joins; a lone server is refused', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      const twin = await runCli(
        ['serve', '--port', '0', '--store', store, '--nats', nats.url, '--node-id', 'node-a'],
        tempDir(),
      );
      expect(twin.exitCode).toBe(2);
      expect(twin.stderr).toContain('node "node-a" already runs');
      expect(twin.stderr).toContain(a.url);
      // Another name shares the store with node-a, and each names the other.
      const b = await node(store, nats.url, 'node-b');
      expect(b.banner.peers.map((peer) => peer.node_id)).toEqual(['node-a']);
      // A server outside the cluster, and anything that rewrites the store, must wait for every node.
      const lone = await runCli(['serve', '--port', '0', '--store', store], tempDir());
      expect(lone.exitCode).toBe(1);
      expect(lone.stderr).toContain('another metis serve (or a copy, restore or prune) is using');
      await a.stop('SIGTERM');
      await b.stop('SIGTERM');
    });
  });

  it('a node killed a moment ago on this host may start again at once under its name', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      await a.stop('SIGKILL');
      // Its row still looks alive (no goodbye, beat within the timeout), but its process is gone.
      expect((await clusterStatus(store, a.home)).nodes[0]).toMatchObject({ state: 'alive' });
      const again = await node(store, nats.url, 'node-a');
      expect(again.banner.node_id).toBe('node-a');
      await again.stop('SIGTERM');
    });
  });

  it('a killed node goes silent, and its name can be used again', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const home = tempDir();
      const config = fastBeats(home);
      const a = await node(store, nats.url, 'node-a', ['--config', config]);
      expect(await a.stop('SIGKILL')).toBeUndefined();
      await until(
        async () => (await clusterStatus(store, home, ['--config', config])).nodes[0]?.state === 'silent',
        'node-a to go silent',
      );
      const again = await node(store, nats.url, 'node-a', ['--config', config]);
      expect(again.banner.node_id).toBe('node-a');
      expect((await clusterStatus(store, home, ['--config', config])).nodes[0]).toMatchObject({
        state: 'alive',
        url: again.url,
      });
      await again.stop('SIGTERM');
    });
  });

  it('reaches a broker that wants a user and password, given in the URL (never printed)', async () => {
    await withNats(
      async (nats) => {
        const store = freshDatabase(pg);
        const port = new URL(nats.url).port;
        const a = await node(store, `nats://metis:s3cret-pass@127.0.0.1:${port}`, 'node-a');
        expect((await jsonRequest(a.url, 'GET', '/healthz')).body.broker).toEqual({ state: 'connected' });
        await a.stop('SIGTERM');
        const wrong = await runCli(
          ['serve', '--port', '0', '--store', store, '--nats', `nats://metis:wrong-pass@127.0.0.1:${port}`],
          tempDir(),
        );
        expect(wrong.exitCode).toBe(2);
        expect(wrong.stderr).toContain(
          `--nats: cannot reach the NATS broker at nats://metis:***@127.0.0.1:${port}`,
        );
        expect(wrong.stderr).not.toContain('wrong-pass');
      },
      ['--user', 'metis', '--pass', 's3cret-pass'],
    );
  });

  it('keeps serving its own sessions while the broker is away, says so in /healthz, and rejoins', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      await nats.stop();
      await until(
        async () => (await jsonRequest(a.url, 'GET', '/healthz')).body.broker?.state === 'reconnecting',
        'the broker to be reported away',
      );
      expect((await jsonRequest(a.url, 'GET', '/healthz')).body.status).toBe('degraded');
      const created = await jsonRequest(a.url, 'POST', '/sessions', {}, {});
      expect(created.status).toBe(201);
      const turn = await jsonRequest(a.url, 'POST', `/sessions/${created.body.session_id}/turns`, {
        message: 'still here?',
      });
      expect(turn.status).toBe(202);
      await nats.start();
      await until(
        async () => (await jsonRequest(a.url, 'GET', '/healthz')).body.broker?.state === 'connected',
        'the broker to be back',
        30_000,
      );
      // Published again once back: a watcher sees the next turn's events.
      const watcher = await connect({ servers: nats.url });
      const seen: string[] = [];
      watcher.subscribe(`metis.session.${created.body.session_id}`, {
        callback: (_, m) => void seen.push(openClusterMessage(m, tokenOf(a.home)) ?? ''),
      });
      await watcher.flush();
      await jsonRequest(a.url, 'POST', `/sessions/${created.body.session_id}/turns`, { message: 'and now?' });
      await until(
        () => seen.some((text) => text.includes('"type":"turn.completed"')),
        'the next turn on NATS',
      );
      await watcher.close();
      await a.stop('SIGTERM');
    });
  });
});

inCluster('sessions and their owners', () => {
  it('a session created and run on a node is leased to it; the status shows owners and lag', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      const created = await jsonRequest(a.url, 'POST', '/sessions', {}, {});
      const sessionId = created.body.session_id as string;
      expect(
        (await jsonRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'hi' })).status,
      ).toBe(202);
      await until(async () => {
        const status = await clusterStatus(store, a.home);
        return status.nodes[0]?.shipped_at !== null && status.nodes[0]?.backlog === 0;
      }, 'a beat that reports the shipment');
      const status = await clusterStatus(store, a.home);
      expect(status.leases).toEqual([
        expect.objectContaining({ session_id: sessionId, node_id: 'node-a', held: true }),
      ]);
      expect(status.nodes[0]).toMatchObject({ node_id: 'node-a', sessions: 1, backlog: 0 });
      const human = await runCli(['cluster', 'status', '--store', store], a.home);
      expect(human.stdout).toMatch(/1 of 1 nodes alive/);
      expect(human.stdout).toMatch(
        /node-a\s+alive\s+http:\/\/127\.0\.0\.1:\d+\s+pid \d+ on .*\s1\s+0 waiting, last shipped \d+ s ago/,
      );
      expect(human.stdout).toContain(`${sessionId}`);
      await a.stop('SIGTERM');
      const after = await clusterStatus(store, a.home);
      expect(after.leases[0]).toMatchObject({ session_id: sessionId, held: false });
    });
  });

  it('a request for a session another live node owns is refused with 409, naming that node', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const first = await node(store, nats.url, 'node-a');
      const sessionId = (await jsonRequest(first.url, 'POST', '/sessions', {}, {})).body.session_id as string;
      await first.stop('SIGTERM');
      // node-z: alive by the store's clock (it beats, as a node does), and the session's owner now.
      const now = '(extract(epoch from clock_timestamp()) * 1000000)::bigint';
      psqlIn(
        store,
        `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us)
           VALUES ('node-z', 'http://10.0.0.9:8421', 'elsewhere', 7, 'test', ${now}, ${now});
         UPDATE metis_session_leases SET node_id = 'node-z' WHERE session_id = '${sessionId}'`,
      );
      const a = await node(store, nats.url, 'node-a');
      const expectElsewhere = (answer: { status: number; body: Record<string, any> }, what: string) => {
        expect(answer.status, what).toBe(409);
        expect(answer.body.error).toMatchObject({ code: 'METIS_ERR_SESSION_ELSEWHERE' });
        expect(answer.body.error.message).toContain('node node-z (http://10.0.0.9:8421');
      };
      // The AI SDK route names its session in the body: gated too.
      const chat = await jsonRequest(a.url, 'POST', '/api/chat', {
        id: sessionId,
        messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
      });
      expectElsewhere(chat, 'POST /api/chat');
      for (const [method, path, body] of [
        ['POST', `/sessions/${sessionId}/turns`, { message: 'hi' }],
        ['POST', `/sessions/${sessionId}/end`, {}],
        ['PUT', `/sessions/${sessionId}/model`, { model: 'scripted:demo' }],
      ] as const)
        expectElsewhere(await jsonRequest(a.url, method, path, body), `${method} ${path}`);
      // Unknown here: 404 as ever, and no lease taken for an id nobody made.
      expect(
        (await jsonRequest(a.url, 'POST', '/sessions/sess_nobody/turns', { message: 'hi' })).status,
      ).toBe(404);
      expect(
        psqlIn(store, "SELECT count(*) FROM metis_session_leases WHERE session_id = 'sess_nobody'"),
      ).toBe('0');
      // node-z falls silent: the session is free, and node-a takes it with its next request.
      psqlIn(store, `UPDATE metis_nodes SET heartbeat_at_us = ${now} - 60000000 WHERE node_id = 'node-z'`);
      const taken = await jsonRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'mine now' });
      expect(taken.status).toBe(202);
      expect((await clusterStatus(store, a.home)).leases).toEqual([
        expect.objectContaining({ session_id: sessionId, node_id: 'node-a', held: true }),
      ]);
      await a.stop('SIGTERM');
    });
  });
});

inCluster("the system session's seq in a shared store", () => {
  it("is given by the store at shipment: another node's system event in between leaves no repeat and no hole", async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      await until(
        () => Number(psqlIn(store, "SELECT count(*) FROM events WHERE session_id = 'system'")) > 0,
        "node-a's first system events in the store",
      );
      // Another node's system event, numbered after what the store has (as its shipper would).
      psqlIn(
        store,
        `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
         SELECT session_id, '${newEventId()}', seq + 1, timestamp_us, NULL, NULL, type, actor, sensitivity, payload_json
           FROM events WHERE session_id = 'system' ORDER BY seq DESC LIMIT 1`,
      );
      // Stopping emits node-a's own system events (its subscribers leave), shipped after that one.
      await a.stop('SIGTERM');
      const [count, distinct, low, high] = psqlIn(
        store,
        "SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events WHERE session_id = 'system'",
      ).split('|');
      expect(Number(count)).toBeGreaterThan(2);
      expect({ distinct: Number(distinct), span: Number(high) - Number(low) + 1 }).toEqual({
        distinct: Number(count),
        span: Number(count),
      });
    });
  });
});

inCluster('keys two nodes cannot both make', () => {
  it("a node's tool-call rows take their keys from its block, the same at every start, never a key twice", async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const rowIds = async (label: string) => {
        const a = await node(store, nats.url, 'node-a');
        const sessionId = (await jsonRequest(a.url, 'POST', '/sessions', {}, {})).body.session_id as string;
        expect(
          (await jsonRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'time' })).status,
        ).toBe(202);
        const ended = `SELECT count(*) FROM events WHERE session_id = '${sessionId}' AND type = 'turn.completed'`;
        await until(() => psqlIn(store, ended) === '1', `${label}: the turn to end in the store`);
        await a.stop('SIGTERM');
        const ids = psqlIn(store, `SELECT row_id FROM tool_calls WHERE session_id = '${sessionId}'`);
        expect(ids, label).not.toBe('');
        return ids.split('\n').map(Number);
      };
      const first = await rowIds('first start');
      const second = await rowIds('second start');
      const block = (id: number) => Math.floor(id / 2 ** 32);
      expect(first.every((id) => block(id) >= 1)).toBe(true);
      // A crash-looping node no longer uses a block per start (issue 35): it keeps its own and goes on
      // after the keys it handed out before.
      expect(new Set([...first, ...second].map(block)).size).toBe(1);
      expect(Math.min(...second)).toBeGreaterThan(Math.max(...first));
    });
  });
});

inCluster('the store away under a cluster node', () => {
  it('a running turn can still be cancelled; a request that needs the store to own its session gets 503', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const home = tempDir();
      const config = join(home, 'metis.config.json');
      writeFileSync(
        config,
        JSON.stringify({
          cluster: { heartbeat_ms: 100, node_timeout_ms: 1_000 },
          runtime: { scripted: { slow_token_delay_ms: 50, slow_tokens: 400 } },
        }),
      );
      const a = await node(store, nats.url, 'node-a', ['--config', config]);
      const sessionId = (await jsonRequest(a.url, 'POST', '/sessions', {}, {})).body.session_id as string;
      const other = (await jsonRequest(a.url, 'POST', '/sessions', {}, {})).body.session_id as string;
      const turn = await jsonRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: a long answer',
      });
      expect(turn.status).toBe(202);
      await pg.stop();
      try {
        // Past half the node timeout without a beat, the node no longer trusts what it holds.
        await new Promise((resolve) => setTimeout(resolve, 1_200));
        const cancel = await jsonRequest(
          a.url,
          'POST',
          `/sessions/${sessionId}/turns/${turn.body.turn_id}/cancel`,
          {},
        );
        expect(cancel.status, JSON.stringify(cancel.body)).toBe(202);
        const model = await jsonRequest(a.url, 'PUT', `/sessions/${other}/model`, { model: 'scripted:demo' });
        expect(model.status, JSON.stringify(model.body)).toBe(503);
        expect(model.body.error.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
      } finally {
        await pg.start();
      }
      await a.stop('SIGTERM');
    });
  });
});

inCluster('bad cluster settings', () => {
  it('an unreachable broker at start-up: exit 2 naming --nats and the broker', async () => {
    const store = freshDatabase(pg);
    const port = await freePort();
    const result = await runCli(
      ['serve', '--port', '0', '--store', store, '--nats', `nats://127.0.0.1:${port}`],
      tempDir(),
    );
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`--nats: cannot reach the NATS broker at nats://127.0.0.1:${port}`);
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });

  it('--nats without a PostgreSQL store, a bad URL, a bad node name: exit 2 naming each', async () => {
    const home = tempDir();
    const noStore = await runCli(['serve', '--port', '0', '--nats', 'nats://127.0.0.1:4222'], home);
    expect(noStore.exitCode).toBe(2);
    expect(noStore.stderr).toContain("--nats: a cluster's nodes share a PostgreSQL store, and none is set");
    const badUrl = await runCli(['serve', '--nats', 'http://x'], home);
    expect(badUrl.exitCode).toBe(2);
    expect(badUrl.stderr).toContain('--nats: must be a nats:// URL');
    const badName = await runCli(['serve', '--nats', 'nats://127.0.0.1:1', '--node-id', 'a.b'], home);
    expect(badName.exitCode).toBe(2);
    expect(badName.stderr).toContain('--node-id: must be 1-63 letters, digits, - or _');
  });
});
