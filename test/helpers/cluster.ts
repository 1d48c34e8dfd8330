import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Msg } from '@nats-io/transport-node';
import { onTestFinished } from 'vitest';
import { connectBroker } from '../../src/core/cluster/broker.js';
import { clusterKeys } from '../../src/core/cluster/cluster-keys.js';
import { associatedData, messageSealer } from '../../src/core/cluster/message-seal.js';
import { type SealedBroker, sealBroker } from '../../src/core/cluster/sealed-broker.js';
import { silentLogger } from '../../src/core/logger.js';
import { startNats } from './nats.js';
import { freshDatabase, type PostgresServer } from './postgres.js';
import { subscribeOn } from './protocol.js';
import { type CliChild, spawnCli } from './run-cli.js';
import { openClient, type TestClient } from './server.js';
import { tempDir } from './tmp.js';

/** One `metis serve --nats` child of a test cluster. */
export interface ClusterTestNode extends CliChild {
  readonly nodeId: string;
  readonly url: string;
  readonly home: string;
  readonly banner: { node_id: string; peers: { node_id: string; url: string }[] };
}

/** The token every node of a test cluster shares (nodes behind one load balancer share one). */
export const CLUSTER_TOKEN = 'cluster-test-token-0123456789abcdef';

/**
 * Starts a node of a cluster on `store` and `nats` as a child process, with fast beats (a killed node
 * is gone within a second) and the shared token; resolves once it printed its banner.
 */
export async function startClusterNode(
  store: string,
  nats: string,
  nodeId: string,
  options: {
    home?: string;
    heartbeatMs?: number;
    nodeTimeoutMs?: number;
    /** More `runtime` settings (on_restart, tool_confirmation, ...). */
    runtime?: Record<string, unknown>;
    /** `store` settings (`{ working_copy: false }`: the node runs on PostgreSQL alone). */
    store?: Record<string, unknown>;
  } = {},
): Promise<ClusterTestNode> {
  const home = options.home ?? tempDir();
  const config = join(home, 'metis.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      cluster: { heartbeat_ms: options.heartbeatMs ?? 200, node_timeout_ms: options.nodeTimeoutMs ?? 1_000 },
      // A `slow:` turn lasts about 3 s: long enough to kill a node in the middle of it.
      runtime: { scripted: { slow_tokens: 120, slow_token_delay_ms: 25 }, ...options.runtime },
      ...(options.store === undefined ? {} : { store: options.store }),
    }),
  );
  const child = spawnCli(
    [
      'serve',
      '--port',
      '0',
      '--json',
      '--config',
      config,
      '--store',
      store,
      '--nats',
      nats,
      '--node-id',
      nodeId,
    ],
    home,
    { METIS_TOKEN: CLUSTER_TOKEN },
  );
  await child.waitForStdout((out) => out.includes('\n'), 60_000);
  const banner = JSON.parse(child.stdout().split('\n')[0]!) as ClusterTestNode['banner'] & { url: string };
  return Object.assign(child, { nodeId, url: banner.url, home, banner });
}

/** A JSON request to a node of a test cluster, with the shared token. */
export async function clusterRequest(
  url: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any; node: string | null }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${CLUSTER_TOKEN}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    body: text ? JSON.parse(text) : null,
    node: response.headers.get('metis-node'),
  };
}

/** Polls `check` until it holds; fails naming `what` after `timeoutMs`. */
export async function until(
  check: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A NATS message's headers as a record, by the names they came under. */
function headersOf(message: Msg): Record<string, string> {
  const found: Record<string, string> = {};
  for (const name of message.headers?.keys() ?? []) found[name] = message.headers!.get(name);
  return found;
}

/**
 * A message a node published, opened as a node of the cluster with `token` opens it (it is sealed:
 * message-seal.ts); null when it does not open.
 */
export function openClusterMessage(message: Msg, token = CLUSTER_TOKEN): string | null {
  return messageSealer(clusterKeys(token).sealing).open(
    associatedData('message', message.subject, headersOf(message)),
    message.data,
  );
}

/**
 * The broker as a node with `token` uses it (every message sealed), for a test that acts as a node:
 * closed when the test finishes.
 */
export async function nodeBroker(natsUrl: string, token = CLUSTER_TOKEN): Promise<SealedBroker> {
  const connection = await connectBroker({
    url: natsUrl,
    nodeId: 'test-as-node',
    setting: 'test',
    logger: silentLogger(),
  });
  onTestFinished(() => connection.close());
  return sealBroker(connection, clusterKeys(token).sealing, silentLogger());
}

/**
 * A client of one node following a session from its snapshot (`preset:full`), and the events it has
 * received so far, read at each call.
 */
export async function watchSession(
  nodeUrl: string,
  sessionId: string,
): Promise<{ client: TestClient; events: () => any[] }> {
  const handshake = await clusterRequest(nodeUrl, 'GET', `/sessions/${sessionId}`);
  if (handshake.status !== 200) throw new Error(`attach to ${sessionId}: ${handshake.status}`);
  const client = await openClient(handshake.body.ws_url as string, {
    headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
  });
  await subscribeOn(client, { filter: 'preset:full', since: null, snapshot: true });
  const events = () => client.frames.filter((frame) => frame.type === 'event').map((frame) => frame.event);
  return { client, events };
}

/**
 * What most cluster tests start from: a nats-server, a fresh database on `pg`, and nodes `node-a` and
 * `node-b` on them, all stopped when the test ends. `nats` and `store` let a test add nodes.
 */
export async function twoNodeCluster(pg: PostgresServer) {
  const nats = await startNats();
  onTestFinished(() => nats.destroy());
  const store = freshDatabase(pg);
  const a = await startClusterNode(store, nats.url, 'node-a');
  const b = await startClusterNode(store, nats.url, 'node-b');
  onTestFinished(async () => {
    await a.stop('SIGTERM');
    await b.stop('SIGTERM');
  });
  return { nats, store, a, b };
}

/**
 * A session's events as PostgreSQL holds them, in id order, with their payloads parsed: what every
 * client following it must account for (following-client.ts accountFor).
 */
export function storedSessionEvents(psql: (sql: string) => string, sessionId: string): any[] {
  return psql(
    `SELECT row_to_json(e)::text FROM (SELECT id, seq, session_id, turn_id, parent_event_id, type, payload_json FROM events WHERE session_id = '${sessionId}' ORDER BY id) e`,
  )
    .split('\n')
    .map((line) => {
      const row = JSON.parse(line);
      return {
        ...row,
        payload: typeof row.payload_json === 'string' ? JSON.parse(row.payload_json) : row.payload_json,
      };
    });
}
