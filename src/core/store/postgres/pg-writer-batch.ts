import type pg from 'pg';
import { nowMicros } from '../../events/clock.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../../events/envelope.js';
import type { WriteItem } from '../batch-committer.js';
import { batchQuery, type TextRows } from './pg-batch-query.js';
import { applyRowChanges, renderRowChanges } from './pg-row-applier.js';
import type { PgStatement } from './pg-row-statements.js';
import { checkOut, copyTextField, quoteLiteral } from './pg-util.js';
import { numberSystemEvents } from './system-seq.js';

/**
 * A writer's fence in a cluster (docs/plans/store-port.md §4): which family root and lease token each
 * session's writes need. A single server holds the serve lock and has none.
 */
export interface WriterFence {
  /** This node's name, as its lease rows carry it. */
  readonly nodeId: string;
  /** The lease a session's writes depend on; null for a session no lease covers (`system`). */
  leaseOf(sessionId: string): { readonly root: string; readonly token: number } | null;
  /** Told of the family roots whose writes were refused because the lease is no longer this node's. */
  onFenced?(roots: readonly string[]): void;
}

/** A family whose lease is not (node, token) any more: who holds it now, if anyone. */
export interface FencedFamily {
  readonly root: string;
  readonly holder: string | null;
}

/** One group commit as the writer hands it over: the same items and number on every attempt. */
export interface PgBatchPlan {
  readonly writerId: string;
  readonly batchNo: number;
  readonly items: readonly WriteItem[];
  readonly fence: WriterFence | null;
  readonly numberSystemEvents: boolean;
}

/** What became of a batch's items: the rest committed. */
export interface PgBatchOutcome {
  /** Items of families another node (or token) holds: not written. */
  readonly fenced: ReadonlyMap<WriteItem, FencedFamily>;
  /** Items the store refused for their own sake (SQLSTATE class 22 or 23), each left out alone. */
  readonly refused: ReadonlyMap<WriteItem, unknown>;
  /** Events stored other than queued: `system` events numbered by the store. */
  readonly renumbered: ReadonlyMap<WriteItem, MetisEvent>;
}

/**
 * PostgreSQL error classes no retry can cure (data exceptions, integrity violations): the batch is run
 * again item by item so only the culprit is refused. Anything else (a lost connection, a restart, a
 * timeout) is the store being away: the writer retries the batch.
 */
export function isPermanent(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}

/** An event of the queue, with its row parameters. */
type EventItem = Extract<WriteItem, { readonly event: MetisEvent }>;

const COLUMNS =
  'session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json';

/**
 * Commits `plan` in one transaction: the commit mark, the bare session rows events need and the fence
 * (one statement), the rows (applyRowChanges), the events (one COPY). A permanent error runs it again
 * with a savepoint per item. `commitSent` is called with the outcome just before COMMIT goes out: if
 * its answer is lost, that outcome is what committed (the writer learns so from the commit mark).
 * @throws whatever the store answered when it is away: the writer keeps the batch and retries it
 */
export async function commitPgBatch(
  pool: pg.Pool,
  plan: PgBatchPlan,
  commitSent: (outcome: PgBatchOutcome) => void,
): Promise<PgBatchOutcome> {
  try {
    return await inBatchTransaction(pool, plan, commitSent, 'grouped');
  } catch (error) {
    if (!isPermanent(error)) throw error;
    return await inBatchTransaction(pool, plan, commitSent, 'isolated');
  }
}

/** The highest batch `writerId` committed (0 for none): asked at start and after a lost answer. */
export async function lastCommittedBatch(pool: pg.Pool, writerId: string): Promise<number> {
  const result = await pool.query<{ batch_no: number }>(
    'SELECT batch_no FROM metis_writer_commits WHERE writer_id = $1',
    [writerId],
  );
  return Number(result.rows[0]?.batch_no ?? 0);
}

/**
 * The SQLSTATE metis_hold_leases (schema 16) raises when a family of the batch is not this node's with
 * its token any more: a class of its own, neither permanent (22, 23) nor the store being away.
 */
const FENCE_LOST_SQLSTATE = 'MF001';

/** Whether `error` is the store's fence check refusing the batch (the rest of its query was skipped). */
function isFenceLost(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === FENCE_LOST_SQLSTATE;
}

/** Tries of one transaction whose fence changed between its reads before the batch is retried later. */
const MAX_FENCE_READS = 4;

const COPY_EVENTS_SQL = `COPY events (${COLUMNS}) FROM STDIN`;

/** The transaction, on a connection of its own: discarded, not reused, when anything in it failed. */
async function inBatchTransaction(
  pool: pg.Pool,
  plan: PgBatchPlan,
  commitSent: (outcome: PgBatchOutcome) => void,
  mode: 'grouped' | 'isolated',
): Promise<PgBatchOutcome> {
  const { client, release } = await checkOut(pool);
  let broken = false;
  try {
    const commit = mode === 'grouped' ? groupedCommit : isolatedCommit;
    return await commit(client, plan, familiesOf(plan), commitSent);
  } catch (error) {
    broken = true;
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    release(broken);
  }
}

type BatchCommit = (
  client: pg.PoolClient,
  plan: PgBatchPlan,
  families: Families,
  commitSent: (outcome: PgBatchOutcome) => void,
) => Promise<PgBatchOutcome>;

/**
 * The whole batch in one query (batchQuery): BEGIN, the mark and the fence, the rows, the events by
 * one COPY, and COMMIT: two round trips where one a statement took four. The store checks the fence
 * itself (metis_hold_leases, schema 16), so COMMIT rides in the query with families to fence too: when
 * one of them is lost the check's error (FENCE_LOST_SQLSTATE) skips the rest, COMMIT included, and the
 * batch is rolled back and written again without the families lost (fencedCommit).
 */
const groupedCommit: BatchCommit = async (client, plan, families, commitSent) => {
  try {
    const { outcome } = await writeBatch(client, plan, families, new Map(), commitSent);
    return outcome;
  } catch (error) {
    if (!isFenceLost(error)) throw error;
  }
  return await fencedCommit(client, plan, families, commitSent);
};

/**
 * A batch with a family lost, the transaction the check aborted still open: rolled back, the leases
 * read, then the batch written on the guess that the families fenced are the ones that read found,
 * and COMMIT sent once the fence read under the lock proved the guess (three round trips); a guess it
 * proves wrong is rolled back and made again with what it found.
 */
const fencedCommit: BatchCommit = async (client, plan, families, commitSent) => {
  const [read] = await batchQuery(client, `ROLLBACK;\n${leaseReadSql(families, '')}`, null);
  let guess = lostFamilies(plan, families, read ?? []);
  for (let tries = 1; ; tries += 1) {
    const { outcome, leases } = await writeBatch(client, plan, families, guess, null);
    const lost = lostFamilies(plan, families, leases);
    const proven = fencedItems(families, lost);
    if (!sameKeys(outcome.fenced, proven)) {
      await client.query('ROLLBACK');
      if (tries >= MAX_FENCE_READS) throw new Error('the lease fence changed at every read of this commit');
      guess = lost;
      continue;
    }
    const committed = { ...outcome, fenced: proven };
    commitSent(committed);
    await client.query('COMMIT');
    return committed;
  }
};

/**
 * Sends the batch without the items of the families `guess` holds lost. With `commitSent`, the store
 * checks the fence and COMMIT ends the query (commitSent is told first); without, the lease rows are
 * read FOR SHARE and returned, and the transaction is left open. Rows before events: rows need their
 * sessions (foreign keys), events need nothing, and the whole batch becomes visible at once, so a row
 * queued after an event is never seen before it.
 */
async function writeBatch(
  client: pg.PoolClient,
  plan: PgBatchPlan,
  families: Families,
  guess: ReadonlyMap<string, FencedFamily>,
  commitSent: ((outcome: PgBatchOutcome) => void) | null,
): Promise<{ outcome: PgBatchOutcome; leases: TextRows }> {
  const fenced = fencedItems(families, guess);
  const kept = plan.items.filter((item) => !fenced.has(item));
  const events = kept.filter((item): item is EventItem => 'event' in item);
  const rows = kept.filter((item) => 'row' in item);
  // The store numbers `system` events inside the transaction, before their COPY lines exist.
  const numbered =
    plan.numberSystemEvents && events.some((item) => item.event.session_id === SYSTEM_SESSION_ID);
  if (numbered) await client.query('BEGIN');
  const { lines, renumbered } = await copyLines(client, plan, events);
  const statements = [
    ...(numbered ? [] : ['BEGIN']),
    markAndFenceSql(plan, families, rows, commitSent === null ? 'read' : 'check'),
    ...(lines.length > 0 ? [COPY_EVENTS_SQL] : []),
    ...(commitSent === null ? [] : ['COMMIT']),
  ];
  const outcome = { fenced, refused: new Map<WriteItem, unknown>(), renumbered };
  commitSent?.(outcome);
  const [leases] = await batchQuery(client, statements.join(';\n'), lines.length > 0 ? lines.join('') : null);
  return { outcome, leases: leases ?? [] };
}

/** After a permanent error: the mark and the fence, then each item alone (writeIsolated), then COMMIT. */
const isolatedCommit: BatchCommit = async (client, plan, families, commitSent) => {
  const [leases] = await batchQuery(client, `BEGIN;\n${markAndFenceSql(plan, families, [], 'read')}`, null);
  const fenced = fencedItems(families, lostFamilies(plan, families, leases ?? []));
  const outcome = { fenced, ...(await writeIsolated(client, plan, fenced)) };
  commitSent(outcome);
  await client.query('COMMIT');
  return outcome;
};

/** Each item in queue order under a savepoint of its own: only the items the store refuses are left out. */
async function writeIsolated(
  client: pg.PoolClient,
  plan: PgBatchPlan,
  fenced: ReadonlyMap<WriteItem, FencedFamily>,
): Promise<Pick<PgBatchOutcome, 'refused' | 'renumbered'>> {
  const refused = new Map<WriteItem, unknown>();
  const kept = plan.items.filter((item) => !fenced.has(item));
  const events = kept.filter((item): item is EventItem => 'event' in item);
  const { lines, renumbered } = await copyLines(client, plan, events);
  const lineOf = new Map(events.map((item, i) => [item as WriteItem, lines[i]!]));
  for (const item of kept) {
    await client.query('SAVEPOINT metis_item');
    try {
      if ('row' in item) await applyRowChanges(client, [item.row.change]);
      else await copyEvents(client, lineOf.get(item)!);
      await client.query('RELEASE SAVEPOINT metis_item');
    } catch (error) {
      if (!isPermanent(error)) throw error;
      await client.query('ROLLBACK TO SAVEPOINT metis_item');
      refused.set(item, error);
      renumbered.delete(item);
    }
  }
  return { refused, renumbered };
}

/** The leases each item's writes depend on (fence.leaseOf), and the token of each family root. */
interface Families {
  readonly leasesOf: ReadonlyMap<WriteItem, readonly { root: string; token: number }[]>;
  readonly tokens: ReadonlyMap<string, number>;
}

function familiesOf(plan: PgBatchPlan): Families {
  const leasesOf = new Map<WriteItem, { root: string; token: number }[]>();
  const tokens = new Map<string, number>();
  if (plan.fence === null) return { leasesOf, tokens };
  for (const item of plan.items) {
    const leases: { root: string; token: number }[] = [];
    for (const session of sessionsOf(item)) {
      const lease = plan.fence.leaseOf(session);
      if (lease === null) continue;
      leases.push(lease);
      tokens.set(lease.root, lease.token);
    }
    if (leases.length > 0) leasesOf.set(item, leases);
  }
  return { leasesOf, tokens };
}

/** Whether `a` and `b` fence the same items (who holds a family now may differ). */
function sameKeys(a: ReadonlyMap<WriteItem, unknown>, b: ReadonlyMap<WriteItem, unknown>): boolean {
  if (a.size !== b.size) return false;
  for (const item of a.keys()) if (!b.has(item)) return false;
  return true;
}

function fencedItems(
  families: Families,
  lost: ReadonlyMap<string, FencedFamily>,
): ReadonlyMap<WriteItem, FencedFamily> {
  const fenced = new Map<WriteItem, FencedFamily>();
  if (lost.size === 0) return fenced;
  for (const [item, leases] of families.leasesOf) {
    const family = leases.map((lease) => lost.get(lease.root)).find((found) => found !== undefined);
    if (family !== undefined) fenced.set(item, family);
  }
  return fenced;
}

/**
 * The statements after BEGIN that open a batch (simple protocol, values as literals): the commit mark
 * upserted, a bare `sessions` row for each session with events and no `session.create` in the batch
 * (as SQLite's committer makes one: the session list and the rows after need it), and the fence; then
 * `rows`' statements. The fence locks every lease row of the batch's families FOR SHARE, this node's
 * own too, so that a take-over waits for this commit or this commit sees the take-over: `read` returns
 * the rows (the first statement returning rows: lostFamilies reads them), `check` has the store raise
 * FENCE_LOST_SQLSTATE unless each is this node's with the token the writer holds.
 */
function markAndFenceSql(
  plan: PgBatchPlan,
  families: Families,
  rows: readonly WriteItem[],
  fence: 'read' | 'check',
): string {
  const created = new Set<string>();
  const eventSessions = new Set<string>();
  for (const item of plan.items) {
    if ('event' in item) eventSessions.add(item.event.session_id);
    else if (item.row.change.kind === 'session.create') created.add(item.row.change.sessionId);
  }
  const bare = [...eventSessions].filter((id) => !created.has(id));
  const now = nowMicros();
  const changes = rows.map((item) => (item as Extract<WriteItem, { row: unknown }>).row.change);
  const rowSql = changes.length === 0 ? '' : `;\n${renderRowChanges(changes).map(inlined).join(';\n')}`;
  const fenceSql =
    fence === 'check' && families.tokens.size > 0 && plan.fence !== null
      ? `SELECT metis_hold_leases(${quoteLiteral(plan.fence.nodeId)}, ${literal([...families.tokens.keys()])}::text[], ${literal([...families.tokens.values()])}::bigint[])`
      : leaseReadSql(families, ' FOR SHARE');
  return `WITH mark AS (
       INSERT INTO metis_writer_commits (writer_id, batch_no, committed_at_us)
       VALUES (${quoteLiteral(plan.writerId)}, ${Math.trunc(plan.batchNo)}, ${now})
       ON CONFLICT (writer_id) DO UPDATE
         SET batch_no = excluded.batch_no, committed_at_us = excluded.committed_at_us
       RETURNING 1),
     bare AS (
       INSERT INTO sessions (id, created_at_us, updated_at_us) SELECT id, ${now}, ${now} FROM unnest(${literal(bare)}::text[]) id
       ON CONFLICT (id) DO NOTHING
       RETURNING 1)
     ${fenceSql}${rowSql}`;
}

/** The lease rows of the batch's families, in root order (the order their locks are taken in). */
function leaseReadSql(families: Families, lock: '' | ' FOR SHARE'): string {
  return `SELECT session_id, node_id, token FROM metis_session_leases
      WHERE session_id = ANY(${literal([...families.tokens.keys()])}::text[]) ORDER BY session_id${lock}`;
}

/** The families whose lease is lost, from the lease rows markAndFenceSql read (as text). */
function lostFamilies(
  plan: PgBatchPlan,
  families: Families,
  leases: TextRows,
): ReadonlyMap<string, FencedFamily> {
  const lost = new Map<string, FencedFamily>();
  if (plan.fence === null || families.tokens.size === 0) return lost;
  const held = new Map(leases.map(([sessionId, nodeId, token]) => [sessionId!, { nodeId: nodeId!, token }]));
  for (const [root, token] of families.tokens) {
    const lease = held.get(root);
    // No lease row: this node cannot show it holds the family, so it writes nothing of it.
    if (lease === undefined) lost.set(root, { root, holder: null });
    else if (lease.nodeId !== plan.fence.nodeId || Number(lease.token) !== token)
      lost.set(root, { root, holder: lease.nodeId });
  }
  return lost;
}

/** A statement with its parameters written in as literals, for the simple protocol. */
function inlined(statement: PgStatement): string {
  return statement.text.replace(/\$(\d+)/g, (_, n: string) => literal(statement.values[Number(n) - 1]));
}

/** A value as SQL: every parameter the row statements take is a string, a number, null or an array. */
function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) return `ARRAY[${value.map(literal).join(', ')}]`;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : `'${value}'`;
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  return quoteLiteral(String(value));
}

/** The sessions an item writes: its event's, or the ones its row change names. */
function sessionsOf(item: WriteItem): readonly string[] {
  if ('event' in item) return [item.event.session_id];
  const change = item.row.change;
  if ('sessionId' in change) return [change.sessionId];
  if (change.kind === 'archive.insert') return [...new Set(change.events.map((event) => event.sessionId))];
  if (change.kind === 'archive.prune') return change.sessionIds;
  return [];
}

/**
 * The events as COPY text lines, in the order given, `system` events numbered by the store when the
 * writer shares that session with other nodes. Built field by field from the queued parameters (in
 * COLUMNS order: event-rows.ts `eventToParams`), whose payload JSON was made once at queue time.
 */
async function copyLines(
  client: pg.PoolClient,
  plan: PgBatchPlan,
  events: readonly EventItem[],
): Promise<{ lines: string[]; renumbered: Map<WriteItem, MetisEvent> }> {
  const renumbered = new Map<WriteItem, MetisEvent>();
  const seqs = plan.numberSystemEvents
    ? await numberSystemEvents(
        client,
        events.map((item) => ({ item, seq: item.event.seq })),
        (entry) => entry.item.event.session_id,
        (entry, seq) => ({ item: entry.item, seq }),
      )
    : null;
  const f = copyTextField;
  const lines = events.map((item, i) => {
    const p = item.params;
    const seq = seqs === null ? p[2] : seqs[i]!.seq;
    if (seq !== p[2]) renumbered.set(item, { ...item.event, seq: seq as number });
    return `${f(p[0])}\t${f(p[1])}\t${seq}\t${p[3]}\t${f(p[4])}\t${f(p[5])}\t${f(p[6])}\t${f(p[7])}\t${f(p[8])}\t${f(p[9])}\n`;
  });
  return { lines, renumbered };
}

async function copyEvents(client: pg.PoolClient, text: string): Promise<void> {
  await batchQuery(client, COPY_EVENTS_SQL, text);
}
