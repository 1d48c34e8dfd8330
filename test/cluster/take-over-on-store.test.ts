import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { takeOverFromStore } from '../../src/core/cluster/take-over-on-store.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { eventIdFloor, newId } from '../../src/core/events/ids.js';
import { silentLogger } from '../../src/core/logger.js';
import { resumeCutTurns } from '../../src/core/runtime/resume-cut-turns.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import { LeaseTable } from '../../src/core/store/postgres/lease-table.js';
import { registerNode } from '../../src/core/store/postgres/node-registry.js';
import { openPostgresContext, type PostgresContext } from '../../src/core/store/postgres/pg-context.js';
import { BIGINT_AS_NUMBER } from '../../src/core/store/postgres/pg-util.js';
import { acquireLease } from '../../src/core/store/postgres/session-leases.js';
import { rootSession } from '../../src/core/store/session-lineage.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

/**
 * Issue 35, store-port step 9: a node on PostgreSQL alone takes a family over from a node that stopped
 * mid-turn, with no working copy: the cut turn is closed (or resumed) from what PostgreSQL holds, the
 * family's seq and ids go on after it, and the old owner's writer, still alive, is refused by the fence.
 * Two nodes in one process, each a context, a lease table and a runtime on the same store.
 */
describe.runIf(postgresTestsRun)('a take-over on PostgreSQL alone', () => {
  const postgres = postgresForFile();
  /** A silent node's leases go to whoever asks once it missed beats for this long. */
  const NODE_TIMEOUT_MS = 1;

  interface Node {
    readonly id: string;
    readonly context: PostgresContext;
    readonly runtime: Runtime;
    readonly leases: LeaseTable;
    /** Roots the fence told this node it lost. */
    readonly lost: string[];
    /** Takes `root`'s lease on the shared store: its token. */
    acquire(root: string): Promise<number>;
  }

  async function nodeOn(url: string, id: string, config: RuntimeConfigInput): Promise<Node> {
    let runtime: Runtime | null = null;
    // The runtime's memory places a session it holds (a worker created here) under its family's root.
    const leases = new LeaseTable((sessionId) =>
      runtime?.sessions.holds(sessionId) ? rootSession(runtime.sessions, sessionId) : null,
    );
    const lost: string[] = [];
    leases.onLost((roots) => lost.push(...roots));
    const context = await openPostgresContext({
      url,
      setting: '--store',
      lease: { nodeId: id, table: leases },
    });
    runtime = createRuntime({ bus: context.bus, store: context.port, config: testRuntimeConfig(config) });
    const client = new pg.Client({ connectionString: url, types: BIGINT_AS_NUMBER });
    await client.connect();
    await registerNode(client, { node_id: id, url: `http://${id}`, host: 'h', pid: 1, version: 'test' });
    const running = runtime;
    onTestFinished(async () => {
      await running.close();
      await context.close();
      await client.end();
    });
    return {
      id,
      context,
      runtime,
      leases,
      lost,
      acquire: async (root) => {
        // The other node stopped beating (the test does not beat at all): its lease is free past the timeout.
        await new Promise((resolve) => setTimeout(resolve, NODE_TIMEOUT_MS + 5));
        const outcome = await acquireLease(client, root, id, NODE_TIMEOUT_MS);
        if (!outcome.held) throw new Error(`${id} could not take ${root}`);
        return outcome.token;
      },
    };
  }

  /** Takes `root` over on `node` under `token`, with the test's pricing and no log (and `more`). */
  function takeOverOn(
    node: Node,
    root: string,
    token: number,
    more: Partial<Parameters<typeof takeOverFromStore>[0]> = {},
  ): ReturnType<typeof takeOverFromStore> {
    return takeOverFromStore(
      {
        trace: node.context,
        runtime: node.runtime,
        leases: node.leases,
        pricingVersion: 'test',
        logger: silentLogger(),
        ...more,
      },
      root,
      token,
    );
  }

  const query = async <T>(context: PostgresContext, text: string, values: unknown[]): Promise<T[]> =>
    (await context.pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows as T[];

  const stored = (context: PostgresContext, sessionId: string) =>
    query<{ id: string; seq: number; type: string; turn_id: string | null; payload_json: string }>(
      context,
      'SELECT id, seq, type, turn_id, payload_json FROM events WHERE session_id = $1 ORDER BY id',
      [sessionId],
    );

  const endsOf = async (context: PostgresContext, turnId: string) =>
    (
      await query<{ type: string; payload_json: string }>(
        context,
        `SELECT type, payload_json FROM events WHERE turn_id = $1 AND type IN ('turn.completed', 'turn.cancelled')`,
        [turnId],
      )
    ).map((row) => ({ type: row.type, payload: JSON.parse(row.payload_json) }));

  /** Node A runs a session of its own (its lease first) into a slow turn, stored up to its model call. */
  async function slowTurnOn(a: Node): Promise<{ root: string; turnId: string; tokenA: number }> {
    const root = newId('sess');
    const tokenA = await a.acquire(root);
    a.leases.hold(root, tokenA);
    a.runtime.createSession({ sessionId: root });
    const { turnId } = a.runtime.submitTurn(root, 'slow: the long answer');
    await expect
      .poll(async () => (await stored(a.context, root)).some((e) => e.type === 'llm.call_started'), {
        timeout: 10_000,
      })
      .toBe(true);
    return { root, turnId, tokenA };
  }

  /**
   * An event of the family stored with an id ahead of this process's clock, as by a node whose clock
   * runs ahead: what the taker writes next must still sort after it. Stored while A's turn streams
   * (no bus event of A's meanwhile), numbered after A's.
   */
  async function storeEventAhead(a: Node, root: string): Promise<string> {
    const id = `${eventIdFloor(Date.now() + 5_000)}0000000000000000`;
    await a.context.pool.query(
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       SELECT session_id, $2, (SELECT max(seq) + 1 FROM events WHERE session_id = $1), timestamp_us, NULL, NULL,
              'session.resumed', actor, sensitivity,
              json_build_object('workspace_hash', payload_json::json ->> 'workspace_hash', 'last_event_id_at_resume', NULL)::text
         FROM events WHERE session_id = $1 AND type = 'session.created'`,
      [root, id],
    );
    return id;
  }

  it('nodes share the store (each under its own row-id block); a single server beside them is refused', async () => {
    const url = freshDatabase(postgres);
    const a = await nodeOn(url, 'node-a', {});
    await nodeOn(url, 'node-b', {});
    const single = openPostgresContext({ url, setting: 'store.url' });
    await expect(single).rejects.toMatchObject({ code: 'METIS_ERR_DB_LOCKED' });
    const blocks = await query<{ node_id: string; block: number }>(
      a.context,
      'SELECT node_id, block FROM metis_node_row_blocks ORDER BY node_id',
      [],
    );
    expect(blocks.map((row) => row.node_id)).toEqual(['node-a', 'node-b']);
    expect(new Set(blocks.map((row) => row.block)).size).toBe(2);
  });

  it('closes the cut turn once, goes on after the family, and the old owner is fenced off', async () => {
    const url = freshDatabase(postgres);
    const a = await nodeOn(url, 'node-a', { scripted: { slow_tokens: 4000 } });
    const b = await nodeOn(url, 'node-b', {});
    const { root, turnId } = await slowTurnOn(a);
    // A second family of A's, its turn cut too: not B's to close.
    const other = await slowTurnOn(a);
    const givenThrough = (await stored(a.context, root)).find((e) => e.type === 'turn.started')!.id;
    const aheadId = await storeEventAhead(a, root);
    const beforeTakeOver = await stored(a.context, root);

    const tokenB = await b.acquire(root);
    const report = await takeOverOn(b, root, tokenB, {
      // B's clients were given the family up to its turn.started (B watched it while A ran it).
      released: (sessionId) => (sessionId === root ? givenThrough : undefined),
    });
    expect(report.recoveredTurns).toBe(1);
    expect(report.sessionIds).toEqual([root]);
    expect(report.resumable).toEqual([]);
    // What B's clients missed: every stored event of the family after their mark, none of B's own.
    expect(report.missed.map((e) => e.id)).toEqual(
      beforeTakeOver.filter((e) => e.id > givenThrough).map((e) => e.id),
    );
    expect(b.leases.tokenOf(root)).toBe(tokenB);

    const ends = await endsOf(b.context, turnId);
    expect(ends).toEqual([
      {
        type: 'turn.completed',
        payload: expect.objectContaining({ signals_extra: { failure: 'server_stopped' } }),
      },
    ]);
    const afterTakeOver = await stored(b.context, root);
    expect(afterTakeOver.map((e) => e.seq)).toEqual(afterTakeOver.map((_, index) => index + 1));
    // Everything B wrote sorts after the family's newest event, however far ahead that one was.
    const written = afterTakeOver.slice(beforeTakeOver.length);
    expect(written.length).toBeGreaterThan(0);
    for (const event of written) expect(event.id > aheadId).toBe(true);
    // The other family's cut turn is left as it was: A still holds it.
    expect(await endsOf(b.context, other.turnId)).toEqual([]);

    // A, its turn still running, cannot take the family back before that turn ends; its leases are as they were.
    const tokenA = a.leases.tokenOf(root);
    await expect(takeOverOn(a, root, tokenB + 1)).rejects.toMatchObject({ code: 'METIS_ERR_TURN_IN_FLIGHT' });
    expect(a.leases.tokenOf(root)).toBe(tokenA);

    // A wakes up and ends its turns: the one of the family B took is refused by the fence, the other stored.
    a.runtime.cancelTurn(root, turnId, 'user_cancel');
    a.runtime.cancelTurn(other.root, other.turnId, 'user_cancel');
    await a.runtime.currentTurn(root)?.done;
    await a.runtime.currentTurn(other.root)?.done;
    await a.context.flush();
    // Told once, though each of A's later commits of the family is refused again.
    expect(a.lost).toEqual([root]);
    expect(a.leases.tokenOf(root)).toBeUndefined();
    // Whatever else A's writer still has of the family is refused too, its waiters told where it runs.
    const late = Array.from({ length: 12 }, () =>
      a.context.bus.emit({
        type: 'session.resumed',
        session_id: root,
        payload: { workspace_hash: 'a'.repeat(64), last_event_id_at_resume: null },
      }),
    );
    await expect(a.context.writer.whenCommitted(late.at(-1)!.id, 5_000)).rejects.toMatchObject({
      code: 'METIS_ERR_SESSION_ELSEWHERE',
    });
    await a.context.flush();
    expect(await stored(b.context, root)).toEqual(afterTakeOver);
    expect((await endsOf(b.context, other.turnId)).map((end) => end.type)).toEqual(['turn.cancelled']);

    // The family goes on at B: a new turn, numbered after everything stored.
    const next = b.runtime.submitTurn(root, 'and now?');
    await next.done;
    await b.context.flush();
    expect((await endsOf(b.context, next.turnId)).map((end) => end.type)).toEqual(['turn.completed']);
    const whole = await stored(b.context, root);
    expect(whole.map((e) => e.seq)).toEqual(whole.map((_, index) => index + 1));
    expect(b.lost).toEqual([]);

    // B goes silent in turn and A takes the family back: the seq its bus gave the events the fence
    // refused is not the store's, so its next turn is numbered after what PostgreSQL holds.
    const tokenBack = await a.acquire(root);
    const back = await takeOverOn(a, root, tokenBack);
    expect(back.recoveredTurns).toBe(0);
    const again = a.runtime.submitTurn(root, 'back at A');
    await again.done;
    await a.context.flush();
    expect((await endsOf(a.context, again.turnId)).map((end) => end.type)).toEqual(['turn.completed']);
    const last = await stored(a.context, root);
    expect(last.length).toBeGreaterThan(whole.length);
    expect(last.map((e) => e.seq)).toEqual(last.map((_, index) => index + 1));
  }, 30_000);

  it('a family cut mid-delegation: the worker and its planner are closed at the new owner, under the root', async () => {
    const url = freshDatabase(postgres);
    const a = await nodeOn(url, 'node-a', { scripted: { slow_tokens: 4000 } });
    const b = await nodeOn(url, 'node-b', {});
    const root = newId('sess');
    a.leases.hold(root, await a.acquire(root));
    a.runtime.createSession({ sessionId: root });
    const { turnId } = a.runtime.submitTurn(root, 'delegate: slow: the long answer');
    // The worker's rows and events pass A's fence under the root's lease (its memory places the worker).
    const workerOf = async () =>
      (
        await query<{ id: string }>(a.context, 'SELECT id FROM sessions WHERE parent_session_id = $1', [root])
      )[0]?.id;
    await expect.poll(workerOf, { timeout: 10_000 }).toBeDefined();
    const worker = (await workerOf())!;
    await expect
      .poll(async () => (await stored(a.context, worker)).some((e) => e.type === 'llm.call_started'), {
        timeout: 10_000,
      })
      .toBe(true);
    const workerTurn = (await stored(a.context, worker)).find((e) => e.type === 'turn.started')!.turn_id!;

    const report = await takeOverOn(b, root, await b.acquire(root));
    expect(report.sessionIds).toEqual([root, worker]);
    expect(report.recoveredTurns).toBe(2);
    // B's writes into the worker, which its runtime did not hold yet, went under the root's lease.
    expect(b.lost).toEqual([]);
    expect((await endsOf(b.context, workerTurn)).map((end) => end.type)).toEqual(['turn.completed']);
    expect((await endsOf(b.context, turnId)).map((end) => end.type)).toEqual(['turn.completed']);
    const workerEvents = await stored(b.context, worker);
    expect(workerEvents.at(-1)).toMatchObject({ type: 'session.ended' });
    for (const sessionId of [root, worker]) {
      const seqs = (await stored(b.context, sessionId)).map((e) => e.seq);
      expect(seqs).toEqual(seqs.map((_, index) => index + 1));
    }
    const planner = await stored(b.context, root);
    expect(planner.filter((e) => e.type === 'delegate.failed')).toHaveLength(1);
  }, 30_000);

  it('with on_restart resume, the cut turn goes on at the new owner and ends once', async () => {
    const url = freshDatabase(postgres);
    const a = await nodeOn(url, 'node-a', { scripted: { slow_tokens: 4000 } });
    const b = await nodeOn(url, 'node-b', { scripted: { slow_tokens: 200, slow_token_delay_ms: 2 } });
    const { root, turnId } = await slowTurnOn(a);

    const tokenB = await b.acquire(root);
    const report = await takeOverOn(b, root, tokenB, {
      durableTurns: { onRestart: 'resume', maxResumptions: 3 },
    });
    expect(report.recoveredTurns).toBe(0);
    expect(report.resumable.map((cut) => cut.turnId)).toEqual([turnId]);
    expect(report.missed).toEqual([]);
    resumeCutTurns(b.runtime, report.resumable, silentLogger(), 'after a take-over', report.sessionIds);
    await expect.poll(() => b.runtime.currentTurn(root), { timeout: 15_000 }).toBeNull();
    await b.context.flush();
    const ends = await endsOf(b.context, turnId);
    expect(ends.map((end) => end.type)).toEqual(['turn.completed']);
    expect(ends[0]!.payload.signals_extra?.failure).toBeUndefined();

    // The old owner's end of the same turn never reaches the store.
    a.runtime.cancelTurn(root, turnId, 'user_cancel');
    await a.runtime.currentTurn(root)?.done;
    await a.context.flush();
    expect(a.lost).toEqual([root]);
    expect((await endsOf(b.context, turnId)).map((end) => end.type)).toEqual(['turn.completed']);
    const whole = await stored(b.context, root);
    expect(whole.map((e) => e.seq)).toEqual(whole.map((_, index) => index + 1));
  }, 30_000);
});
