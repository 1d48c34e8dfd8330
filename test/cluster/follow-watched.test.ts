import { describe, expect, it, onTestFinished } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { workingCopyPath } from '../../src/core/store/postgres/working-copy.js';
import { CLUSTER_TOKEN, clusterRequest, twoNodeCluster, until, watchSession } from '../helpers/cluster.js';
import { accountFor, FollowingClient, turnEnd } from '../helpers/following-client.js';
import { natsTestsRun } from '../helpers/nats.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';

/**
 * Issue 35, a cluster that partitions: a node follows a session over NATS only while one of its own
 * clients watches it. Node B writes nothing of a session nobody on B watches into its working copy; a
 * client attaching on B mid-turn gets its snapshot, then every stored event after it once, in order,
 * with the live deltas; once its last client left, B writes the session's new events no more. Real
 * nats-server, PostgreSQL and `metis serve` nodes.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

function eventsInCopy(path: string, sessionId: string): number {
  const db = openDatabase(path, { readonly: true });
  try {
    return db.prepare('SELECT count(*) FROM events WHERE session_id = ?').pluck().get(sessionId) as number;
  } finally {
    db.close();
  }
}

/** The stream connections a node has open, from its metrics. */
async function openStreams(url: string): Promise<number> {
  const response = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${CLUSTER_TOKEN}` } });
  const line = (await response.text()).split('\n').find((l) => l.startsWith('metis_stream_connections '));
  return Number(line?.split(' ')[1]);
}

inCluster('a node follows only the sessions its own clients watch', () => {
  it('writes no event of an unwatched session, serves a watcher gap-free, and stops after the last detach', async () => {
    const { store, a, b } = await twoNodeCluster(pg);
    const copyOfB = workingCopyPath(b.home, store);
    const create = async () =>
      (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const turnOnA = async (sessionId: string, message: string) => {
      const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message });
      expect(turn.status, JSON.stringify(turn.body)).toBe(202);
      return turn.body.turn_id as string;
    };
    // A session B's client watches: its events reach B after any A published before them (one
    // publisher, one subscriber connection), so once B's client has its turn's end, B has had every
    // message of the other session that A sent before, had it followed it.
    const beacon = await create();
    const beaconClient = await watchSession(b.url, beacon);
    onTestFinished(() => beaconClient.client.close());
    const beaconTurn = async () => {
      const turnId = await turnOnA(beacon, 'hello beacon');
      await until(() => beaconClient.events().some(turnEnd(turnId)), 'the beacon turn to end on B');
    };

    const quiet = await create();
    const quietTurn = await turnOnA(quiet, 'hello there');
    await until(
      async () =>
        (await clusterRequest(a.url, 'GET', `/sessions/${quiet}/trace`)).body.events.some(turnEnd(quietTurn)),
      'the turn to end on A',
    );
    await beaconTurn();
    expect(eventsInCopy(copyOfB, quiet)).toBe(0);
    expect(eventsInCopy(copyOfB, beacon)).toBeGreaterThan(0);

    // A client attaching on B in the middle of a turn: snapshot, then every stored event once, in order.
    const slowTurn = await turnOnA(quiet, 'slow: a long answer');
    await until(
      async () => (await clusterRequest(a.url, 'GET', `/sessions/${quiet}/trace`)).body.events.length > 8,
      'the slow turn to start on A',
    );
    const follower = new FollowingClient(quiet, () => [b]);
    await follower.attach(b, null);
    await follower.waitFor(turnEnd(slowTurn), 'the end of the slow turn on B');
    expect(follower.events.some((event) => event.type === 'text.delta')).toBe(true);
    const exported = await runCli(['export', '--store', store, '--session', quiet], a.home);
    expect(exported.exitCode, exported.stderr).toBe(0);
    const stored = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { id: string; seq: number });
    expect(accountFor(follower, stored)).toMatchObject({ lost: [], duplicated: [], unexpected: [] });
    const ids = follower.events.map((event) => event.id as string);
    expect(ids).toEqual([...new Set(ids)].sort());
    expect(follower.reconnects).toBe(0);

    // The last client left: B writes the session's new events no more.
    follower.close();
    await until(async () => (await openStreams(b.url)) === 1, 'the client on B to be gone');
    const heldByB = eventsInCopy(copyOfB, quiet);
    expect(heldByB).toBe(stored.length);
    const afterTurn = await turnOnA(quiet, 'anyone there?');
    await until(
      async () =>
        (await clusterRequest(a.url, 'GET', `/sessions/${quiet}/trace`)).body.events.some(turnEnd(afterTurn)),
      'the last turn to end on A',
    );
    await beaconTurn();
    expect(eventsInCopy(copyOfB, quiet)).toBe(heldByB);
    // And B still answers for it as A does, brought up from the store when asked.
    const onB = await clusterRequest(b.url, 'GET', `/sessions/${quiet}/trace`);
    expect(onB.status).toBe(200);
    expect(onB.body.events.some(turnEnd(afterTurn))).toBe(true);
  }, 120_000);
});
