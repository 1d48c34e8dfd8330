import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type Msg } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
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

async function withNats<T>(work: (nats: NatsServer) => Promise<T>): Promise<T> {
  const nats = await startNats();
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
  return JSON.parse(result.stdout) as { nodes: { node_id: string; state: string; url: string }[] };
}

async function until(check: () => Promise<boolean> | boolean, what: string, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

inCluster('a metis serve node of a cluster', () => {
  it('registers, reports store and broker in /healthz, and is listed alive, then stopped', async () => {
    await withNats(async (nats) => {
      const store = freshDatabase(pg);
      const a = await node(store, nats.url, 'node-a');
      expect(a.banner).toMatchObject({ node_id: 'node-a', peers: [] });
      const health = await jsonRequest(a.url, 'GET', '/healthz');
      expect(health.body).toEqual({
        status: 'ok',
        store: { state: 'ok' },
        node_id: 'node-a',
        broker: { state: 'connected' },
      });
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
      await until(
        () => received.some((m) => m.string().includes('"type":"turn.completed"')),
        'turn.completed on NATS',
      );
      await a.stop('SIGTERM');
      subscription.unsubscribe();
      await watcher.close();

      const mine = received.filter((m) => m.subject === `metis.session.${sessionId}`);
      expect(mine.every((m) => m.headers?.get('Metis-Node') === 'node-a')).toBe(true);
      const bus = mine.filter((m) => m.headers?.get('Metis-Family') === 'bus').map((m) => m.string());
      const stream = mine
        .filter((m) => m.headers?.get('Metis-Family') === 'stream')
        .map((m) => m.json<{ type: string }>());
      expect(stream.some((e) => e.type === 'text.delta')).toBe(true);
      // What the store holds of the session, exported from PostgreSQL: the same envelopes, byte for byte.
      const exported = await runCli(['export', '--store', store, '--session', sessionId], a.home);
      expect(exported.exitCode, exported.stderr).toBe(0);
      expect(bus).toEqual(exported.stdout.trim().split('\n'));
      const ids = bus.map((line) => (JSON.parse(line) as { id: string }).id);
      expect(ids).toEqual([...ids].sort());
    });
  });

  it('a second node under a live name is refused naming the first; another name waits its turn on the store', async () => {
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
      const other = await runCli(
        ['serve', '--port', '0', '--store', store, '--nats', nats.url, '--node-id', 'node-b'],
        tempDir(),
      );
      expect(other.exitCode).not.toBe(0);
      expect(other.stderr).toMatch(/served by node node-a \(http:\/\/127\.0\.0\.1:\d+/);
      await a.stop('SIGTERM');
      // Once node-a is gone, node-b runs, and sees node-a's sessions: it is the same store.
      const b = await node(store, nats.url, 'node-b');
      expect(b.banner.peers).toEqual([]);
      await b.stop('SIGTERM');
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
        callback: (_, m) => void seen.push(m.string()),
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
