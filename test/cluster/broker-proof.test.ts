import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, headers, type Msg } from '@nats-io/transport-node';
import { describe, expect, it, onTestFinished } from 'vitest';
import { clusterKeys } from '../../src/core/cluster/cluster-keys.js';
import { type SignedForward, signForward } from '../../src/core/cluster/forwarded-proof.js';
import { newEventId } from '../../src/core/events/ids.js';
import {
  CLUSTER_TOKEN,
  type ClusterTestNode,
  clusterRequest,
  nodeBroker,
  openClusterMessage,
  startClusterNode,
  until,
} from '../helpers/cluster.js';
import { type NatsServer, natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { subscribeOn } from '../helpers/protocol.js';
import { runCli } from '../helpers/run-cli.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 34, observation 3: broker access was full control of every node. A client of the broker with
 * no metis token read every session's events on `metis.session.>` and approved a confirmation over
 * `metis.node.<id>.http`. Now a forwarded request runs only with the proof of the cluster's token (once,
 * in its time window), and every message on the broker is sealed under a key derived from it. Real
 * nats-server, PostgreSQL and `metis serve` nodes; the "raw" client is a plain NATS client.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

async function cluster(nodeIds: readonly string[]): Promise<{ nats: NatsServer; nodes: ClusterTestNode[] }> {
  const nats = await startNats();
  onTestFinished(() => nats.destroy());
  const store = freshDatabase(pg);
  const nodes: ClusterTestNode[] = [];
  for (const id of nodeIds) nodes.push(await startClusterNode(store, nats.url, id));
  return { nats, nodes };
}

/** A plain NATS client: what anyone the broker lets in can do, with no metis token. */
async function rawClient(nats: NatsServer) {
  const client = await connect({ servers: nats.url });
  onTestFinished(() => client.close());
  return client;
}

/** Sends a forwarded request as a node with the cluster's token would, and returns the answer. */
async function sendSigned(natsUrl: string, owner: string, signed: SignedForward) {
  const broker = await nodeBroker(natsUrl);
  return JSON.parse(await broker.request(`metis.node.${owner}.http`, JSON.stringify(signed), 10_000)) as {
    status: number;
    body: string;
    node: string;
    refused?: string;
  };
}

const FORWARDING_KEY = clusterKeys(CLUSTER_TOKEN).forwarding;
/** The text of an event a client of the broker forges. */
const FORGED = 'FORGED-BY-A-BROKER-CLIENT';

/** Signs a request as node-b would for node-a. */
const signedForA = (method: string, url: string, body: unknown, at?: number) =>
  signForward(FORWARDING_KEY, 'node-b', 'node-a', { method, url, body: JSON.stringify(body) }, at);

async function userMessages(url: string, sessionId: string): Promise<string[]> {
  const page = await clusterRequest(url, 'GET', `/sessions/${sessionId}/messages`);
  return (page.body.messages as { role: string; content: { type: string; text?: string }[] }[])
    .filter((message) => message.role === 'user')
    .map((message) => message.content.map((block) => block.text ?? '').join(''));
}

inCluster('a client of the broker without the token', () => {
  it('cannot approve a confirmation over metis.node.<id>.http, nor read the events of metis.session.>', async () => {
    const { nats, nodes } = await cluster(['node-a', 'node-b']);
    const [a, b] = nodes as [ClusterTestNode, ClusterTestNode];
    const raw = await rawClient(nats);
    const seen: Msg[] = [];
    raw.subscribe('metis.session.>', { callback: (_, message) => void seen.push(message) });
    await raw.flush();

    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const marker = join(tempDir(), 'ran-the-command');
    const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
      message: `run: touch ${marker}`,
    });
    expect(turn.status).toBe(202);
    let pending: { confirmation_request_id: string }[] = [];
    await until(async () => {
      pending = (await clusterRequest(a.url, 'GET', `/sessions/${sessionId}/confirmations`)).body
        .confirmations;
      return pending.length === 1;
    }, 'the confirmation to be asked');
    const confirmationId = pending[0]!.confirmation_request_id;
    const approve = {
      method: 'POST',
      url: `/sessions/${sessionId}/confirmations/${confirmationId}`,
      body: { decision: 'allow' },
    };

    // What used to run the command: the request as a node forwarded it, without a proof.
    const reply = await raw.request('metis.node.node-a.http', JSON.stringify(approve), { timeout: 10_000 });
    const answer = JSON.parse(reply.string());
    expect(answer).toMatchObject({ status: 401, node: 'node-a' });
    expect(JSON.parse(answer.body).error.code).toBe('METIS_ERR_UNAUTHORIZED');
    // Nothing changed: still pending, and the command did not run.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const still = await clusterRequest(a.url, 'GET', `/sessions/${sessionId}/confirmations`);
    expect(
      still.body.confirmations.map((c: { confirmation_request_id: string }) => c.confirmation_request_id),
    ).toEqual([confirmationId]);
    expect(existsSync(marker)).toBe(false);

    // The events went by (sealed), and nothing of them can be read: not the command, not the
    // confirmation's id, not even that they are JSON events.
    const ofSession = seen.filter((message) => message.subject === `metis.session.${sessionId}`);
    expect(ofSession.length).toBeGreaterThan(3);
    for (const message of ofSession) {
      const bytes = Buffer.from(message.data).toString('latin1');
      expect(bytes).not.toContain('ran-the-command');
      expect(bytes).not.toContain(confirmationId);
      expect(bytes).not.toContain('"type":');
    }
    // A node of the cluster reads them: the question is among them.
    expect(ofSession.map((message) => openClusterMessage(message)).join('\n')).toContain(confirmationId);

    // A client with the token approves through node B: forwarded with the proof, run by A.
    const approved = await clusterRequest(b.url, 'POST', approve.url, approve.body);
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.node).toBe('node-a');
    await until(() => existsSync(marker), 'the approved command to run');
  }, 120_000);

  it("cannot inject an event: a message published onto a session's subject does not reach a client on another node", async () => {
    const { nats, nodes } = await cluster(['node-a', 'node-b']);
    const [a, b] = nodes as [ClusterTestNode, ClusterTestNode];
    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const handshake = await clusterRequest(b.url, 'GET', `/sessions/${sessionId}`);
    const onB = await openClient(handshake.body.ws_url as string, {
      headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
    });
    await subscribeOn(onB, { filter: 'preset:full', since: null, snapshot: true });
    const ended = (turnId: string) => (frame: any) =>
      frame.type === 'event' && frame.event.turn_id === turnId && frame.event.type === 'turn.completed';
    const first = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'one' });
    await onB.waitFor(ended(first.body.turn_id), 20_000);
    // B follows the session in order: a delta of A's, as B received it, is the model for a forged one.
    const delta = onB.events().find((event) => event.type === 'text.delta');
    expect(delta).toBeDefined();

    const raw = await rawClient(nats);
    const forged = {
      ...delta,
      id: newEventId(),
      timestamp: new Date().toISOString(),
      payload: { ...delta.payload, text: FORGED },
    };
    const meta = headers();
    meta.set('Metis-Family', 'stream');
    meta.set('Metis-Node', 'node-a');
    raw.publish(`metis.session.${sessionId}`, JSON.stringify(forged), { headers: meta });
    await raw.flush();

    // A's next turn reaches B, after the forged message was there to be taken.
    const second = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'two' });
    await onB.waitFor(ended(second.body.turn_id), 20_000);
    expect(onB.events().filter((event) => event.id === forged.id || event.payload?.text === FORGED)).toEqual(
      [],
    );
    // Dropped, and said so in B's log.
    await until(() => b.stderr().includes("does not open with this cluster's key"), "B's log line");
    onB.close();
  }, 120_000);
});

inCluster('a forwarded request with the proof of the token', () => {
  it('runs once: replayed, out of its time window, changed, or meant for another node, it is refused', async () => {
    const { nats, nodes } = await cluster(['node-a']);
    const [a] = nodes as [ClusterTestNode];
    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const turns = `/sessions/${sessionId}/turns`;

    const signed = signedForA('POST', turns, { message: 'first' });
    const ran = await sendSigned(nats.url, 'node-a', signed);
    expect(ran.status, ran.body).toBe(202);
    expect(ran.refused).toBeUndefined();

    const replayed = await sendSigned(nats.url, 'node-a', signed);
    expect(replayed).toMatchObject({ status: 401, node: 'node-a', refused: 'it was sent before (a replay)' });

    const old = await sendSigned(
      nats.url,
      'node-a',
      signedForA('POST', turns, { message: 'from two minutes ago' }, Date.now() - 120_000),
    );
    expect(old.status).toBe(401);
    expect(old.refused).toMatch(/from this node's clock/);

    const changed = { ...signedForA('POST', turns, { message: 'harmless' }), body: '{"message":"changed"}' };
    expect((await sendSigned(nats.url, 'node-a', changed)).status).toBe(401);

    const forC = signForward(FORWARDING_KEY, 'node-b', 'node-c', {
      method: 'POST',
      url: turns,
      body: JSON.stringify({ message: 'for node-c' }),
    });
    const elsewhere = await sendSigned(nats.url, 'node-a', forC);
    expect(elsewhere).toMatchObject({ status: 401, refused: 'it is meant for node node-c' });

    // Only the first turn ran.
    await until(async () => (await userMessages(a.url, sessionId)).length > 0, 'the first turn to be stored');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await userMessages(a.url, sessionId)).toEqual(['first']);
  }, 120_000);
});

inCluster('a cluster node without a token', () => {
  it('is refused at start-up (exit 2), naming the setting and what to do', async () => {
    const nats = await startNats();
    onTestFinished(() => nats.destroy());
    const home = tempDir();
    const config = join(home, 'metis.config.json');
    writeFileSync(config, JSON.stringify({ server: { auth: 'none' } }));
    const result = await runCli(
      ['serve', '--port', '0', '--config', config, '--store', freshDatabase(pg), '--nats', nats.url],
      home,
    );
    expect(result.exitCode, result.stderr).toBe(2);
    expect(result.stderr).toContain('--nats: a cluster node needs the server token, the same on every node');
    expect(result.stderr).toContain('METIS_TOKEN');
  }, 60_000);
});
