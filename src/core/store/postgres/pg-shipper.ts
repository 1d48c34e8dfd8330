import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { Logger } from 'pino';
import { MetisError } from '../../errors.js';
import { nowMicros } from '../../events/clock.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../../events/envelope.js';
import { rootSession } from '../../runtime/session-lineage.js';
import type { Db } from '../database.js';
import { SessionStore } from '../session-store.js';
import { COPIED_TABLES, type CopiedTable, copiedRowToEvent } from '../store-copy.js';
import type { StoreUpstream } from '../trace-context.js';
import { copyTextField, inTransaction } from './pg-util.js';
import { writePulled } from './working-copy.js';

export interface ShipperOptions {
  /** Outbox entries per shipment at most: after an outage the backlog goes in transactions of this size. */
  readonly batchRows?: number;
  /** How often the shipper looks for changes a commit did not announce, and pings an idle store. */
  readonly pollMs?: number;
  /** First and longest pause between attempts while the store refuses. */
  readonly retry?: { readonly minMs: number; readonly maxMs: number };
  /**
   * Number the `system` session's events in the store, not in the copy (a cluster: every node emits
   * into `system`, each with its own counter; the store's order is the one that stays whole).
   */
  readonly numberSystemEvents?: boolean;
  /**
   * A cluster node's name: changes of a session whose lease (its family root's) names another node
   * are not shipped. A node cut off past the node timeout may still be running a session another node
   * has taken since; what it did meanwhile would contradict the new owner's (docs/scale-out.md).
   */
  readonly fenceFor?: string;
}

/** Events left out of a shipment because another node runs their session now, and those sessions. */
export interface Fenced {
  readonly events: readonly MetisEvent[];
  readonly sessionIds: readonly string[];
}

interface OutboxEntry {
  readonly n: number;
  readonly tbl: string;
  readonly row_key: string | number;
  readonly op: 'upsert' | 'delete';
}

const EVENTS = COPIED_TABLES.find((table) => table.name === 'events')!;
const EVENT_ID = EVENTS.columns.indexOf('id');
const EVENT_SESSION = EVENTS.columns.indexOf('session_id');
const EVENT_SEQ = EVENTS.columns.indexOf('seq');

/** Taken by every shipment that numbers `system` events, so that two nodes never give out one seq. */
const SYSTEM_SEQ_LOCK_SQL = "hashtext('metis_system_seq')";

/**
 * The rows with their `system` events numbered after the store's last one, in id order (the order they
 * are shipped in). Runs inside the shipment's transaction, under a lock held to its end.
 */
async function numberSystemEvents(
  client: pg.PoolClient,
  rows: readonly unknown[][],
): Promise<readonly unknown[][]> {
  if (!rows.some((row) => row[EVENT_SESSION] === SYSTEM_SESSION_ID)) return rows;
  await client.query(`SELECT pg_advisory_xact_lock(${SYSTEM_SEQ_LOCK_SQL})`);
  let seq = (
    await client.query<{ last: number }>(
      'SELECT coalesce(max(seq), 0)::bigint AS last FROM events WHERE session_id = $1',
      [SYSTEM_SESSION_ID],
    )
  ).rows[0]!.last;
  return rows.map((row) => {
    if (row[EVENT_SESSION] !== SYSTEM_SESSION_ID) return row;
    const numbered = [...row];
    seq += 1;
    numbered[EVENT_SEQ] = seq;
    return numbered;
  });
}

/** Events in COPY's text format, in the table's column order. */
async function copyEvents(client: pg.PoolClient, rows: readonly unknown[][]): Promise<void> {
  const text = `${rows.map((row) => row.map(copyTextField).join('\t')).join('\n')}\n`;
  await pipeline(
    Readable.from([text]),
    client.query(copyFrom(`COPY events (${EVENTS.columns.join(', ')}) FROM STDIN`)),
  );
}

/** The column naming the session a table's row belongs to. */
const SESSION_COLUMN: Readonly<Record<string, string>> = {
  sessions: 'id',
  messages: 'session_id',
  tool_calls: 'session_id',
};

/** Tables whose rows are named by an integer. */
const NUMERIC_KEYS = new Set(['tool_calls', 'pattern_outcomes']);

/** Polls between pings of an idle store: a store that went away is known within about a second. */
const PINGS_EVERY_POLLS = 5;

/**
 * Ships a working copy's changes (working-copy.ts) to PostgreSQL, oldest first. Each shipment is one
 * transaction: the events committed since the last one (read by id: the server commits them in id
 * order) by COPY, the outbox stretch's deletes (children first) and rows in their current state
 * (parents first), and both positions reached. Only then is the stretch trimmed locally; at a
 * start the positions are read back from PostgreSQL, so a crash between the commit and the trim neither
 * loses nor repeats anything. A shipment the store refuses is retried with backoff until it goes
 * through: nothing committed locally is dropped.
 */
export class PgShipper implements StoreUpstream {
  private shipped: number;
  private eventsShipped: string;
  private lastError: Error | null = null;
  private lastShippedAtUs: number | null = null;
  /** What was left unshipped when the shipper closed (the database may be closed after it). */
  private leftAtClose: number | null = null;
  private attempts = 0;
  private outageStarted = 0;
  private running: Promise<void> | null = null;
  private waiters: {
    readonly target: number;
    readonly eventTarget: string;
    readonly resolve: (shipped: boolean) => void;
  }[] = [];
  private timer: NodeJS.Timeout | null = null;
  private polls = 0;
  private closed = false;
  /** A kick that came while a ping ran: the drain starts when the ping ends. */
  private kickWaiting = false;
  private readonly shippedListeners = new Set<(eventsThrough: string) => void>();
  private readonly fencedListeners = new Set<(fenced: Fenced) => void>();
  /** Cuts a retry's backoff short when the shipper closes. */
  private readonly stopping = new AbortController();
  private readonly readBatch: (limit: number) => OutboxEntry[];
  private readonly readEvents: (after: string, limit: number) => unknown[][];
  private readonly newest: () => number;
  private readonly newestEvent: () => string;
  private readonly pulled: () => boolean;
  private readonly saveEventsPosition: ReturnType<Db['prepare']>;
  private readonly trimPulled: ReturnType<Db['prepare']>;

  constructor(
    private readonly db: Db,
    private readonly pool: pg.Pool,
    private readonly copy: {
      readonly copyId: string;
      readonly shippedThrough: number;
      readonly eventsThrough: string;
      readonly label: string;
    },
    private readonly logger: Logger,
    private readonly options: ShipperOptions = {},
  ) {
    this.shipped = copy.shippedThrough;
    this.eventsShipped = copy.eventsThrough;
    const outbox = db.prepare('SELECT n, tbl, row_key, op FROM pg_outbox ORDER BY n LIMIT ?');
    this.readBatch = (limit) => outbox.all(limit) as OutboxEntry[];
    // Events brought in from the store (a cluster node taking a session over) are skipped; the plain
    // statements serve while there are none, which is nearly always (the check costs one probe).
    const anyPulled = db.prepare('SELECT EXISTS (SELECT 1 FROM pg_pulled_events)').pluck();
    this.pulled = () => anyPulled.get() === 1;
    const columns = EVENTS.columns.join(', ');
    const events = db.prepare(`SELECT ${columns} FROM events WHERE id > ? ORDER BY id LIMIT ?`).raw();
    const ownEvents = db
      .prepare(
        `SELECT ${columns} FROM events e WHERE id > ?
           AND NOT EXISTS (SELECT 1 FROM pg_pulled_events p WHERE p.id = e.id) ORDER BY id LIMIT ?`,
      )
      .raw();
    this.readEvents = (after, limit) => (this.pulled() ? ownEvents : events).all(after, limit) as unknown[][];
    const newest = db.prepare('SELECT coalesce(max(n), 0) FROM pg_outbox').pluck();
    this.newest = () => newest.get() as number;
    this.saveEventsPosition = db.prepare('UPDATE pg_working_copy SET events_through = ?');
    this.trimPulled = db.prepare('DELETE FROM pg_pulled_events WHERE id <= ?');
    // The newest event of this copy's own: one brought in from the store is not waited for.
    const newestEvent = db.prepare("SELECT coalesce(max(id), '') FROM events").pluck();
    const newestOwnEvent = db
      .prepare(
        `SELECT coalesce((SELECT id FROM events e WHERE NOT EXISTS (SELECT 1 FROM pg_pulled_events p WHERE p.id = e.id)
           ORDER BY id DESC LIMIT 1), '')`,
      )
      .pluck();
    this.newestEvent = () => (this.pulled() ? newestOwnEvent : newestEvent).get() as string;
  }

  get label(): string {
    return this.copy.label;
  }

  onShipped(listener: (eventsThrough: string) => void): () => void {
    this.shippedListeners.add(listener);
    return () => this.shippedListeners.delete(listener);
  }

  onFenced(listener: (fenced: Fenced) => void): () => void {
    this.fencedListeners.add(listener);
    return () => this.fencedListeners.delete(listener);
  }

  /** Why the store cannot be written now (the last shipment or ping failed); null while it can. */
  get failure(): Error | null {
    return this.lastError;
  }

  get shippedAtUs(): number | null {
    return this.lastShippedAtUs;
  }

  /** Changes committed locally and not yet in PostgreSQL (outbox entries and events). */
  get backlog(): number {
    if (this.leftAtClose !== null) return this.leftAtClose;
    const events = this.db
      .prepare(
        'SELECT count(*) FROM events e WHERE id > ? AND NOT EXISTS (SELECT 1 FROM pg_pulled_events p WHERE p.id = e.id)',
      )
      .pluck()
      .get(this.eventsShipped);
    return Math.max(0, this.newest() - this.shipped) + (events as number);
  }

  private pending(): boolean {
    return this.newest() > this.shipped || this.newestEvent() > this.eventsShipped;
  }

  start(): void {
    // A crash after a shipment committed and before the outbox was trimmed leaves it shipped twice over.
    this.db.prepare('DELETE FROM pg_outbox WHERE n <= ?').run(this.shipped);
    this.timer = setInterval(() => this.poll(), this.options.pollMs ?? 200);
    this.timer.unref();
    this.kick();
  }

  /** Starts a shipment unless one runs (called after each local commit). */
  kick(): void {
    if (this.closed) return;
    if (this.running !== null) {
      this.kickWaiting = true;
      return;
    }
    this.kickWaiting = false;
    this.running = this.drain().finally(() => this.ended());
  }

  private ended(): void {
    this.running = null;
    if (this.kickWaiting) this.kick();
  }

  /** Resolves true once everything committed locally so far is in PostgreSQL; false after `timeoutMs`. */
  whenShipped(timeoutMs: number): Promise<boolean> {
    const target = this.newest();
    const eventTarget = this.newestEvent();
    if (this.reached(target, eventTarget)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = { target, eventTarget, resolve };
      this.waiters.push(waiter);
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      timer.unref();
      this.kick();
    });
  }

  /** Ships what is left (for at most `timeoutMs` while the store refuses), then stops. */
  async close(timeoutMs: number): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    const done = await this.whenShipped(timeoutMs);
    this.leftAtClose = done ? 0 : this.backlog;
    this.closed = true;
    this.stopping.abort();
    if (!done)
      this.logger.error(
        { store: this.label, backlog: this.backlog },
        'stopping while the PostgreSQL store is unreachable: the changes not sent stay in the working copy and go at the next start',
      );
    await this.running;
  }

  private poll(): void {
    // A forced stop closes the database without closing the shipper.
    if (!this.db.open) this.closed = true;
    if (this.running !== null || this.closed) return;
    this.polls += 1;
    if (this.pending()) {
      this.kick();
      return;
    }
    if (this.polls % PINGS_EVERY_POLLS !== 0) return;
    this.running = this.pool
      .query('SELECT 1')
      .then(
        () => this.recovered(),
        (error: unknown) => this.failed(error),
      )
      .finally(() => this.ended());
  }

  private async drain(): Promise<void> {
    const limit = this.options.batchRows ?? 5_000;
    for (;;) {
      const entries = this.readBatch(limit);
      const events = this.readEvents(this.eventsShipped, limit);
      if (entries.length === 0 && events.length === 0) return this.settleWaiters();
      const through = entries.at(-1)?.n ?? this.shipped;
      const eventsThrough = (events.at(-1)?.[EVENT_ID] as string | undefined) ?? this.eventsShipped;
      try {
        const fenced = await this.ship(entries, events, through, eventsThrough);
        if (fenced.size > 0) this.dropFenced(events, fenced);
      } catch (error) {
        this.failed(error);
        if (this.closed) return;
        const { minMs, maxMs } = this.options.retry ?? { minMs: 100, maxMs: 5_000 };
        await sleep(Math.min(maxMs, minMs * 2 ** Math.min(this.attempts - 1, 16)), undefined, {
          signal: this.stopping.signal,
        }).catch(() => {});
        if (this.closed) return;
        // The failed attempt may have committed before its answer was lost: resume from the store's word.
        await this.readPositions().catch(() => {});
        continue;
      }
      this.lastShippedAtUs = nowMicros();
      this.shippedTo(through, eventsThrough);
      this.recovered();
    }
  }

  /** Records what PostgreSQL now holds: the outbox is trimmed, the events position kept locally too. */
  private shippedTo(through: number, eventsThrough: string): void {
    if (through > this.shipped) this.db.prepare('DELETE FROM pg_outbox WHERE n <= ?').run(through);
    if (eventsThrough !== this.eventsShipped) {
      this.saveEventsPosition.run(eventsThrough);
      // Events brought in from the store at or below the position need no mark any more.
      this.trimPulled.run(eventsThrough);
    }
    const moved = eventsThrough > this.eventsShipped;
    this.shipped = through;
    this.eventsShipped = eventsThrough;
    this.settleWaiters();
    if (moved) for (const listener of this.shippedListeners) listener(eventsThrough);
  }

  private async readPositions(): Promise<void> {
    const row = (
      await this.pool.query<{ shipped_through: number; events_through: string }>(
        'SELECT shipped_through, events_through FROM metis_working_copies WHERE copy_id = $1',
        [this.copy.copyId],
      )
    ).rows[0];
    if (row !== undefined) this.shippedTo(row.shipped_through, row.events_through);
  }

  private settleWaiters(): void {
    const ready = this.waiters.filter((waiter) => this.reached(waiter.target, waiter.eventTarget));
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((waiter) => !ready.includes(waiter));
    for (const waiter of ready) waiter.resolve(true);
  }

  private reached(target: number, eventTarget: string): boolean {
    return target <= this.shipped && eventTarget <= this.eventsShipped;
  }

  /**
   * One transaction: the new events (COPY: each is shipped once, the position committed with it), the
   * outbox's deletes (children first), its rows' current state (parents first), and the positions.
   */
  private async ship(
    entries: readonly OutboxEntry[],
    events: readonly unknown[][],
    through: number,
    eventsThrough: string,
  ): Promise<ReadonlySet<string>> {
    let fenced: ReadonlySet<string> = new Set();
    const latest = new Map<string, Map<string | number, OutboxEntry['op']>>();
    for (const entry of entries) {
      const ops = latest.get(entry.tbl) ?? new Map<string | number, OutboxEntry['op']>();
      latest.set(entry.tbl, ops);
      ops.delete(entry.row_key); // keep the order of the last change
      ops.set(entry.row_key, entry.op);
    }
    await inTransaction(this.pool, async (client) => {
      if (this.options.fenceFor !== undefined)
        fenced = await this.fencedSessions(client, this.options.fenceFor, events, entries);
      const kept =
        fenced.size === 0 ? events : events.filter((row) => !fenced.has(row[EVENT_SESSION] as string));
      const shipped = this.options.numberSystemEvents ? await numberSystemEvents(client, kept) : kept;
      if (shipped.length > 0) await copyEvents(client, shipped);
      // Deletes first (children before parents): a row deleted and one inserted under another key with
      // the same unique value (a pattern fingerprint's key) must not meet in the store.
      for (const table of [...COPIED_TABLES].reverse()) {
        const keys = [...(latest.get(table.name) ?? [])]
          .filter(([, op]) => op === 'delete')
          .map(([key]) => key);
        if (keys.length > 0)
          await client.query(
            `DELETE FROM ${table.name} WHERE ${table.pk} = ANY($1::${NUMERIC_KEYS.has(table.name) ? 'bigint' : 'text'}[])`,
            [keys],
          );
      }
      for (const table of COPIED_TABLES) {
        const keys = [...(latest.get(table.name) ?? [])]
          .filter(([, op]) => op === 'upsert')
          .map(([key]) => key);
        if (keys.length > 0) await this.upsert(client, table, keys, fenced);
      }
      const registered = await client.query(
        'UPDATE metis_working_copies SET shipped_through = $2, events_through = $3, updated_at_us = $4 WHERE copy_id = $1',
        [this.copy.copyId, through, eventsThrough, nowMicros()],
      );
      if (registered.rowCount !== 1)
        throw new MetisError(
          'METIS_ERR_STORE_DIVERGED',
          `${this.label} no longer knows this server's working copy: something else changed the store while this server ran (a restore, a copy into it, a prune, or another server that started on it)`,
        );
    });
    return fenced;
  }

  private async upsert(
    client: pg.PoolClient,
    table: CopiedTable,
    keys: readonly (string | number)[],
    fenced: ReadonlySet<string>,
  ) {
    const columns = table.columns.join(', ');
    const sessionColumn = SESSION_COLUMN[table.name];
    const rows = (
      this.db
        .prepare(`SELECT ${columns} FROM ${table.name} WHERE ${table.pk} IN (SELECT value FROM json_each(?))`)
        .all(JSON.stringify(keys)) as Record<string, unknown>[]
    ).filter((row) => sessionColumn === undefined || !fenced.has(row[sessionColumn] as string));
    // A row gone since (deleted later, its delete further on in the outbox) has nothing to upsert.
    if (rows.length === 0) return;
    const updates = table.columns
      .filter((column) => column !== table.pk)
      .map((column) => `${column} = EXCLUDED.${column}`)
      .join(', ');
    await client.query(
      `INSERT INTO ${table.name} (${columns})
       SELECT ${columns} FROM json_populate_recordset(NULL::${table.name}, $1::json)
       ON CONFLICT (${table.pk}) DO UPDATE SET ${updates}`,
      [JSON.stringify(rows)],
    );
  }

  /**
   * The sessions of this shipment whose family root is leased to another node (the lease rows read
   * FOR SHARE: a node taking one over waits for this shipment, or this shipment sees it taken).
   */
  private async fencedSessions(
    client: pg.PoolClient,
    nodeId: string,
    events: readonly unknown[][],
    entries: readonly OutboxEntry[],
  ): Promise<ReadonlySet<string>> {
    const sessions = new Set<string>();
    for (const row of events) sessions.add(row[EVENT_SESSION] as string);
    const ownerOf = new Map<string, ReturnType<Db['prepare']>>();
    for (const entry of entries) {
      const column = SESSION_COLUMN[entry.tbl];
      if (column === undefined || entry.op !== 'upsert') continue;
      let owner = ownerOf.get(entry.tbl);
      if (owner === undefined) {
        const pk = COPIED_TABLES.find((table) => table.name === entry.tbl)!.pk;
        owner = this.db.prepare(`SELECT ${column} FROM ${entry.tbl} WHERE ${pk} = ?`).pluck();
        ownerOf.set(entry.tbl, owner);
      }
      const session = owner.get(entry.row_key) as string | undefined;
      if (session !== undefined) sessions.add(session);
    }
    sessions.delete(SYSTEM_SESSION_ID);
    if (sessions.size === 0) return new Set();
    const lineage = new SessionStore(this.db);
    const rootOf = new Map([...sessions].map((id) => [id, rootSession(lineage, id)] as const));
    const taken = new Set(
      (
        await client.query<{ session_id: string }>(
          `SELECT session_id FROM metis_session_leases WHERE session_id = ANY($1::text[]) AND node_id <> $2
           FOR SHARE`,
          [[...new Set(rootOf.values())], nodeId],
        )
      ).rows.map((row) => row.session_id),
    );
    return new Set([...sessions].filter((id) => taken.has(rootOf.get(id)!)));
  }

  /**
   * Events left out of a shipment are taken out of the copy too (another node numbers their session
   * now, and brings it in when this node runs it again), and said to be dropped, never published.
   */
  private dropFenced(events: readonly unknown[][], fenced: ReadonlySet<string>): void {
    const dropped = events.filter((row) => fenced.has(row[EVENT_SESSION] as string));
    const remove = this.db.prepare('DELETE FROM events WHERE id = ?');
    writePulled(this.db, () => {
      for (const row of dropped) remove.run(row[EVENT_ID]);
    });
    this.logger.error(
      { sessions: [...fenced], events: dropped.length },
      'another node runs these sessions now: what this node did in them since is not sent to the store',
    );
    const report: Fenced = { events: dropped.map(copiedRowToEvent), sessionIds: [...fenced] };
    for (const listener of this.fencedListeners) listener(report);
  }

  private failed(error: unknown): void {
    this.attempts += 1;
    if (this.lastError === null) this.outageStarted = performance.now();
    this.lastError = error instanceof Error ? error : new Error(String(error));
    // The first failure of an outage, then attempts 2, 4, 8...: an hour-long outage logs about twenty lines.
    if ((this.attempts & (this.attempts - 1)) === 0)
      this.logger.warn(
        { store: this.label, attempt: this.attempts, backlog: this.backlog, err: this.lastError.message },
        'PostgreSQL store unreachable: changes wait in the working copy and are sent when it is back; new turns are refused meanwhile',
      );
  }

  private recovered(): void {
    if (this.lastError === null) return;
    this.logger.info(
      {
        store: this.label,
        outage_ms: Math.round(performance.now() - this.outageStarted),
        retries: this.attempts,
      },
      'PostgreSQL store reachable again; what waited is being sent',
    );
    this.lastError = null;
    this.attempts = 0;
  }
}
