import fc from 'fast-check';
import type { RowChange } from '../../src/core/store/row-change.js';
import { ROW_ID_BLOCK } from '../../src/core/store/row-ids.js';
import { bareSession, type Setup } from './row-applier-stores.js';

/**
 * Random sequences of RowChanges that both stores accept (every session they name has a row, no tool
 * call inserted twice), over few ids so that changes meet the same rows: upserts over earlier rows,
 * updates and closes of calls inserted before, spends adding up, trims of outcomes just recorded.
 * Changes come in runs of one kind, which PostgreSQL's applier merges into one statement.
 */

/** Sessions with a row before the changes; `sess_new` gets one only from a `session.create`. */
const SESSIONS = ['sess_a', 'sess_b', 'sess_c'] as const;
const NEW_SESSION = 'sess_new';

const sessionId = fc.constantFrom(...SESSIONS, NEW_SESSION);
const time = fc.integer({ min: 0, max: 10_000 });
/** Sums of these are not exact in binary: the order of additions shows. */
const money = fc.integer({ min: 0, max: 2_000 }).map((n) => n / 1000);
const json = (values: readonly string[]) => fc.constantFrom(...values.map((value) => JSON.stringify(value)));
const maybe = <T>(arbitrary: fc.Arbitrary<T>) => fc.option(arbitrary, { nil: null });
const callKey = fc.record({
  sessionId,
  turnId: maybe(fc.constantFrom('turn_1', 'turn_2')),
  messageId: maybe(fc.constantFrom('msg_1')),
  id: fc.constantFrom('call_1', 'call_2', 'call_3'),
});
const toolStatus = fc.constantFrom('pending', 'running', 'completed', 'failed', 'cancelled');

/** Tool calls and spends: where applying changes in turn differs most from applying them at once. */
const OFTEN = new WeakSet<fc.Arbitrary<RowChange>>();
function often(arbitrary: fc.Arbitrary<RowChange>): fc.Arbitrary<RowChange> {
  OFTEN.add(arbitrary);
  return arbitrary;
}

const KINDS: readonly fc.Arbitrary<RowChange>[] = [
  fc.record({
    kind: fc.constant('session.create'),
    sessionId,
    parentSessionId: maybe(sessionId),
    workspacePath: fc.constantFrom('/ws/1', '/ws/2'),
    workspaceHash: fc.constantFrom('h1', 'h2'),
    activeModel: maybe(fc.constantFrom('scripted:a', 'scripted:b')),
    stickyModel: maybe(fc.constantFrom('scripted:s')),
    atUs: time,
  }),
  fc.record({
    kind: fc.constant('session.sticky'),
    sessionId,
    model: fc.constantFrom('m1', 'm2'),
    atUs: time,
  }),
  fc.record({
    kind: fc.constant('session.end'),
    sessionId,
    disposition: fc.constantFrom('completed', 'x'),
    atUs: time,
  }),
  fc.record({
    kind: fc.constant('message.upsert'),
    id: fc.constantFrom('msg_1', 'msg_2', 'msg_3'),
    sessionId,
    turnId: maybe(fc.constantFrom('turn_1')),
    role: fc.constantFrom('user', 'assistant', 'tool'),
    contentJson: json(['a', 'b', 'c']),
    status: fc.constantFrom('complete', 'cancelled', 'error'),
    model: maybe(fc.constantFrom('scripted:a')),
    usageJson: maybe(json(['u1', 'u2'])),
    createdAtUs: time,
  }),
  often(
    fc
      .record({
        kind: fc.constant('toolCall.insert'),
        rowId: fc.constant(null),
        key: callKey,
        toolName: fc.constantFrom('read_file', 'shell'),
        inputJson: json(['i1', 'i2']),
        status: toolStatus,
        atUs: time,
      })
      .map(({ key, ...rest }) => ({ ...rest, ...key })),
  ),
  often(
    fc
      .record({
        kind: fc.constant('toolCall.update'),
        key: callKey,
        status: toolStatus,
        outputJson: maybe(json(['o1', 'o2'])),
        errorClass: maybe(fc.constantFrom('boom')),
        atUs: time,
      })
      .map(({ key, ...rest }) => ({ ...rest, ...key })),
  ),
  often(
    fc.record({
      kind: fc.constant('toolCall.closeOpen'),
      sessionId,
      turnId: maybe(fc.constantFrom('turn_1', 'turn_2')),
      status: fc.constantFrom('failed' as const, 'cancelled' as const),
      errorClass: fc.constantFrom('cut'),
      outputJson: json(['closed']),
      atUs: time,
    }),
  ),
  fc.record({ kind: fc.constant('budget.caps'), sessionId, capsJson: json(['c1', 'c2']) }),
  often(
    fc.record({
      kind: fc.constant('budget.spend'),
      sessionId,
      usd: money,
      tokens: fc.integer({ min: 0, max: 100 }),
    }),
  ),
  fc.record({ kind: fc.constant('queue.save'), sessionId, queueJson: maybe(json(['q1', 'q2'])) }),
  fc
    .record({
      kind: fc.constant('pattern.insert'),
      rowId: fc.constant(null),
      n: fc.integer({ min: 1, max: 4 }),
      featuresJson: json(['f']),
      model: fc.constantFrom('scripted:a', 'scripted:b'),
      sessionId,
      score: maybe(fc.integer({ min: 0, max: 100 }).map((n) => n / 100)),
      costUsd: money,
      turns: fc.integer({ min: 1, max: 5 }),
      atUs: time,
    })
    .map(({ n, ...rest }) => ({ ...rest, fingerprintId: `fp_${n}`, key: `key_${n}` })),
  fc.record({ kind: fc.constant('pattern.deleteRecordedBefore'), cutoffUs: time }),
  fc.record({ kind: fc.constant('pattern.deleteOldest'), count: fc.integer({ min: -1, max: 4 }) }),
  fc.record({ kind: fc.constant('pattern.deleteAll') }),
  fc.record({
    kind: fc.constant('archive.insert'),
    events: fc.array(
      fc.record({
        sessionId,
        id: fc.integer({ min: 0, max: 20 }).map((n) => `evt_${String(n).padStart(2, '0')}`),
        timestampUs: fc.integer({ min: 0, max: 100 }),
        eventJson: json(['e1', 'e2']),
      }),
      { maxLength: 5 },
    ),
  }),
  fc.record({
    kind: fc.constant('archive.prune'),
    sessionIds: fc.array(sessionId, { maxLength: 4 }),
    cutoffUs: fc.integer({ min: 0, max: 100 }),
    keep: fc.integer({ min: 0, max: 4 }),
  }),
  fc.record({
    kind: fc.constant('gap.reported'),
    sessionId,
    gapStartId: fc.constantFrom('evt_01', 'evt_02'),
    gapEndId: fc.constantFrom('evt_05', 'evt_09'),
    missingCount: fc.integer({ min: 1, max: 9 }),
    atUs: time,
  }),
  fc.record({
    kind: fc.constant('title.set'),
    sessionId,
    title: maybe(fc.constantFrom('T1', 'T2')),
    atUs: time,
  }),
] as fc.Arbitrary<RowChange>[];

/** A tool call whose key has no null is unique in both stores; a second insert of it is refused. */
function keyOf(change: Extract<RowChange, { kind: 'toolCall.insert' }>): string | null {
  const { sessionId: s, turnId, messageId, id } = change;
  return turnId === null || messageId === null ? null : JSON.stringify([s, turnId, messageId, id]);
}

/** What would need `sess_new`'s row before it has one (a foreign key); its updates stay: no-ops. */
function needsMissingRow(change: RowChange, created: boolean): boolean {
  if (created) return false;
  if (change.kind === 'session.create') return change.parentSessionId === NEW_SESSION;
  return (
    (change.kind === 'message.upsert' || change.kind === 'toolCall.insert') &&
    change.sessionId === NEW_SESSION
  );
}

/**
 * The changes both stores accept: no row before the session it belongs to, no tool call inserted
 * twice; keys from a node's row id block for every inserted row, or none (each store chooses).
 */
function validSequence(changes: readonly RowChange[], fromBlock: boolean): RowChange[] {
  let next = 3 * ROW_ID_BLOCK;
  let created = false;
  const inserted = new Set<string>();
  const valid: RowChange[] = [];
  for (const change of changes) {
    if (needsMissingRow(change, created)) continue;
    if (change.kind === 'session.create' && change.sessionId === NEW_SESSION) created = true;
    if (change.kind === 'toolCall.insert') {
      const key = keyOf(change);
      if (key !== null && inserted.has(key)) continue;
      if (key !== null) inserted.add(key);
    }
    if ((change.kind === 'toolCall.insert' || change.kind === 'pattern.insert') && fromBlock) {
      next += 1;
      valid.push({ ...change, rowId: next });
    } else {
      valid.push(change);
    }
  }
  return valid;
}

export interface ChangeSequence {
  readonly setup: Setup;
  readonly changes: readonly RowChange[];
  /** Sizes of PostgreSQL's calls (a writer's batch boundaries). */
  readonly chunks: readonly number[];
}

export function randomChangeSequences(): fc.Arbitrary<ChangeSequence> {
  const run = fc.oneof(
    ...KINDS.map((kind) => ({
      arbitrary: fc.array(kind, { minLength: 1, maxLength: 4 }),
      weight: OFTEN.has(kind) ? 3 : 1,
    })),
  );
  return fc
    .record({
      runs: fc.array(run, { maxLength: 20 }),
      fromBlock: fc.boolean(),
      created: fc.tuple(time, time, time),
      horizon: maybe(fc.constantFrom('evt_00', 'evt_10', 'evt_99')),
      // Mostly few calls: a call is as far as the applier regroups changes.
      chunks: fc.oneof(fc.constant([]), fc.array(fc.integer({ min: 1, max: 20 }), { maxLength: 3 })),
    })
    .map(({ runs, fromBlock, created, horizon, chunks }) => ({
      setup: [
        ...SESSIONS.map((id, n) => bareSession(id, created[n])),
        ...(horizon === null
          ? []
          : [`INSERT INTO stream_horizon (session_id, before_id) VALUES ('sess_a', '${horizon}')`]),
      ],
      changes: validSequence(runs.flat(), fromBlock),
      chunks,
    }));
}
