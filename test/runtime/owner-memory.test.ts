import { copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import { type ConversationMessage, estimateTokens } from '../../src/core/runtime/model-adapter.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import type { Db } from '../../src/core/store/database.js';
import type { StorePort } from '../../src/core/store/store-port.js';
import { sqliteRowSink } from '../../src/core/store/trace-writer.js';
import { SyncReadRefused, WriteOnlySessionRows } from '../../src/core/store/write-only-session-rows.js';
import { byType } from '../helpers/runtime.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/**
 * The store-port plan's step 4 (issue 35): a session the runtime takes up runs from what its family's
 * load brought into memory. The proof: a runtime whose store answers no read of sessions, messages or
 * tool calls (a backend over the network cannot answer them synchronously) runs a resumed session the
 * same as one reading a SQLite file does.
 */

/**
 * The session rows a store read only asynchronously gives the runtime (writes to the SQLite file here),
 * noting every read it refuses: one that reaches them fails the test.
 */
class NotedRows extends WriteOnlySessionRows {
  constructor(
    db: Db,
    private readonly reads: string[],
  ) {
    super(sqliteRowSink(db));
  }

  protected override refuse(read: string): never {
    this.reads.push(read);
    return super.refuse(read);
  }
}

/** Rows with every read refused, naming it: a read that reaches the store fails the test. */
function writesOnly<Rows extends object>(rows: Rows, writes: ReadonlySet<string>, reads: string[]): Rows {
  return new Proxy(rows, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function') return value;
      if (writes.has(String(name))) return value.bind(target);
      return (...args: unknown[]) => {
        reads.push(`${String(name)}(${String(args[0])})`);
        throw new Error(`read from the store: ${String(name)}`);
      };
    },
  });
}

function openProcess(dbPath: string, storeReads: 'answered' | 'refused') {
  const context = tempTraceContext({ dbPath });
  const committed: MetisEvent[] = [];
  context.writer.onCommit((batch) => committed.push(...batch));
  const reads: string[] = [];
  // The bus asks the store for a session's last seq at its first event, unless a load told it. (The
  // `system` session is every process's: a store shared by many numbers its events itself.)
  const bus =
    storeReads === 'answered'
      ? context.bus
      : new EventBus({
          lastSeq: (sessionId) => {
            if (sessionId === SYSTEM_SESSION_ID) return context.store.lastSeq(sessionId);
            reads.push(`lastSeq(${sessionId})`);
            throw new Error('read from the store: lastSeq');
          },
        });
  if (bus !== context.bus) context.writer.attach(bus);
  const store: StorePort =
    storeReads === 'answered'
      ? context.port
      : {
          ...context.port,
          sessions: new NotedRows(context.db, reads),
          budgets: writesOnly(context.port.budgets, new Set(['setCaps', 'addSpend']), reads),
          queues: writesOnly(context.port.queues, new Set(['setQueue']), reads),
        };
  const runtime = createRuntime({
    bus,
    store,
    config: { scripted: { token_delay_ms: 0 } },
  });
  onTestFinished(() => runtime.close());
  const flush = async () => {
    await bus.flush();
    await context.flush();
  };
  return {
    runtime,
    context,
    committed,
    reads,
    flush,
    stop: async () => {
      await runtime.close();
      await flush();
      await context.close();
    },
  };
}

/** A copy of a closed store, so that two processes can take up the same state. */
function copyStore(dbPath: string): string {
  const copy = join(tempDir(), 'metis.db');
  for (const suffix of ['', '-wal', '-shm'])
    if (existsSync(dbPath + suffix)) copyFileSync(dbPath + suffix, copy + suffix);
  return copy;
}

describe('a session taken up runs from its family load', () => {
  it('resumes, routes, remembers its history and ends the same as with a readable store, reading nothing', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const before = openProcess(dbPath, 'answered');
    const session = before.runtime.createSession({ workspacePath: workspace });
    before.runtime.setStickyModel(session.id, 'scripted:sticky');
    before.runtime.budgets.set(session.id, { tree: { tokens: 1_000_000 } });
    // A worker: the family loaded holds it, and the tree's spend counts it.
    await before.runtime.submitTurn(session.id, 'delegate: hello').done;
    const first = before.runtime.submitTurn(session.id, 'hello');
    await first.done;
    await before.runtime.submitTurn(session.id, 'time').done;
    await before.runtime.submitTurn(session.id, 'think: the weather').done;
    await before.stop();
    const copy = copyStore(dbPath);

    const runs = [];
    for (const [path, storeReads] of [
      [dbPath, 'answered'],
      [copy, 'refused'],
    ] as const) {
      const after = openProcess(path, storeReads);
      await after.runtime.open(session.id);
      expect(after.runtime.getSession(session.id)).toMatchObject({
        turn_count: 4,
        active_model: 'scripted:sticky',
        status: 'active',
      });
      // A turn of an earlier process has ended: a cancel of it is a no-op.
      expect(after.runtime.cancelTurn(session.id, first.turnId)).toBe('already_ended');
      await after.runtime.submitTurn(session.id, 'time').done;
      // This turn's history holds the messages the last one saved: memory follows its own writes.
      await after.runtime.submitTurn(session.id, 'hello again').done;
      after.runtime.endSession(session.id);
      await after.flush();
      runs.push({
        events: after.committed.filter((e) => e.session_id === session.id),
        reads: after.reads,
        budget: after.runtime.budgets.view(session.id),
      });
      await after.stop();
    }
    const [readable, memory] = runs;
    expect(memory!.reads).toEqual([]);
    expect(readable!.budget.tree).toMatchObject({ caps: { tokens: 1_000_000 } });
    expect(readable!.budget.tree.spent_tokens).toBeGreaterThan(readable!.budget.session.spent_tokens);
    expect(memory!.budget).toEqual(readable!.budget);
    const summary = (events: MetisEvent[]) => ({
      types: events.map((e) => e.type),
      // Numbered after the store's last seq, whether the bus asked the store or the load told it.
      seqs: events.map((e) => e.seq),
      resumed: byType(events, 'session.resumed')[0]!.payload,
      route: byType(events, 'route.decided')[0]!.payload.chosen_model,
      // The history the model was given: its size is what the scripted model counts as input tokens.
      inputTokens: byType(events, 'llm.call_completed').map((e) => e.payload.input_tokens),
      ended: byType(events, 'session.ended')[0]!.payload,
    });
    const expected = summary(readable!.events);
    expect(expected.ended).toMatchObject({ turn_count: 6 });
    expect(expected.route).toBe('scripted:sticky');
    const got = summary(memory!.events);
    expect({ ...got, ended: { ...got.ended, duration_seconds: 0 } }).toEqual({
      ...expected,
      ended: { ...expected.ended, duration_seconds: 0 },
    });
    // Both runs above hold the session in memory: the history each turn was given is checked against the
    // store's own messages too (its size is `turn.started.estimated_input_tokens`).
    const stored = tempTraceContext({ dbPath: copy });
    onTestFinished(() => stored.close());
    // What memory answered for the budget after the session ended is what the store counted.
    const storedOwn = stored.port.budgets.spentBy(session.id);
    const storedTree = stored.port.budgets.spentByTree(session.id);
    expect(memory!.budget.session.spent_tokens).toBe(storedOwn.tokens);
    expect(memory!.budget.tree.spent_tokens).toBe(storedTree.tokens);
    const turns = byType(memory!.events, 'turn.started');
    expect(turns).toHaveLength(2);
    for (const turn of turns) {
      const asked = stored.port.sessions
        .messages(session.id, { limit: 1000 })
        .find((m) => m.turn_id === turn.turn_id && m.role === 'user')!;
      const history = stored.port.sessions
        .messages(session.id, { beforeId: asked.id, limit: 50 })
        .filter((m) => m.status === 'complete');
      const conversation = [...history, asked].map((m) => ({
        role: m.role,
        content: m.content as ConversationMessage['content'],
      }));
      expect(history.length).toBeGreaterThan(4);
      expect(turn.payload.estimated_input_tokens).toBe(estimateTokens(conversation));
    }
  });

  it('a worker opened alone holds its tree: its budget walks up to the cap above it, reading nothing', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const before = openProcess(dbPath, 'answered');
    const planner = before.runtime.createSession({ workspacePath: tempDir('metis-ws-') });
    before.runtime.budgets.set(planner.id, { tree: { tokens: 1_000_000 } });
    await before.runtime.submitTurn(planner.id, 'delegate: hello').done;
    const [worker] = before.context.port.sessions.childSessionIds(planner.id);
    await before.stop();

    const after = openProcess(dbPath, 'refused');
    await after.runtime.open(worker!);
    const view = after.runtime.budgets.view(worker!);
    await after.stop();
    expect(after.reads).toEqual([]);
    // The worker's tree is the planner's: its cap, and the spend of both.
    expect(view.tree).toMatchObject({ caps: { tokens: 1_000_000 } });
    expect(view.session.spent_tokens).toBeGreaterThan(0);
    expect(view.tree.spent_tokens).toBeGreaterThan(view.session.spent_tokens);
  });

  it('messages a stopped process left queued are taken up from the load, reading nothing', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const before = openProcess(dbPath, 'answered');
    const session = before.runtime.createSession({ workspacePath: tempDir('metis-ws-') });
    // As the turn queue stores what waits behind a running turn (turn-queue.ts), for a restart to serve.
    before.context.port.queues.setQueue(session.id, {
      turns: [{ queued_id: 'q_1', mode: 'enqueue', message: 'time', model: null, queued_at_us: 1 }],
      steers: [],
    });
    await before.stop();

    const after = openProcess(dbPath, 'refused');
    await after.runtime.open(session.id);
    after.runtime.turnQueues.restore(session.id);
    const started = after.runtime.currentTurn(session.id);
    expect(started).not.toBeNull();
    expect((await started!.done).status).toBe('completed');
    expect(after.runtime.turnQueues.list(session.id)).toEqual([]);
    // Memory followed the queue's write: taken up again, nothing is left to serve twice.
    after.runtime.turnQueues.restore(session.id);
    expect(after.runtime.currentTurn(session.id)).toBeNull();
    await after.stop();
    expect(after.reads).toEqual([]);
    const stored = tempTraceContext({ dbPath });
    onTestFinished(() => stored.close());
    const asked = stored.port.sessions.messages(session.id).filter((m) => m.role === 'user');
    expect(asked.map((m) => m.content)).toEqual([[{ type: 'text', text: 'time' }]]);
    // Served: nothing is left queued for the next start.
    expect(stored.port.queues.queueOf(session.id)).toBeNull();
  });

  it('without a load, the store is read: the check above would see it', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const before = openProcess(dbPath, 'answered');
    const session = before.runtime.createSession({ workspacePath: tempDir('metis-ws-') });
    await before.stop();
    const after = openProcess(dbPath, 'refused');
    expect(() => after.runtime.getSession(session.id)).toThrow(SyncReadRefused);
    expect(after.reads).toEqual([`getSession(${session.id})`]);
  });
});
