import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Logger } from 'pino';
import { backoffMs } from '../../backoff.js';
import { nowMicros } from '../../events/clock.js';
import type { Db } from '../database.js';
import { COPIED_TABLES, copiedRowToEvent, EVENT_ROW_AT } from '../store-copy.js';
import type { Fenced, StoreUpstream } from '../store-upstream.js';
import { type OutboxEntry, type ShipmentSource, ship } from './pg-shipment.js';
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

const EVENTS = COPIED_TABLES.find((table) => table.name === 'events')!;

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
  private readonly source: ShipmentSource;

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
    this.source = {
      db,
      copyId: copy.copyId,
      label: copy.label,
      numberSystemEvents: options.numberSystemEvents,
      fenceFor: options.fenceFor,
    };
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
      const eventsThrough = (events.at(-1)?.[EVENT_ROW_AT.id] as string | undefined) ?? this.eventsShipped;
      try {
        const fenced = await ship(this.pool, this.source, { entries, events, through, eventsThrough });
        if (fenced.size > 0) this.dropFenced(events, fenced);
      } catch (error) {
        this.failed(error);
        if (this.closed) return;
        const { minMs, maxMs } = this.options.retry ?? { minMs: 100, maxMs: 5_000 };
        await sleep(backoffMs({ baseMs: minMs, maxMs }, this.attempts - 1), undefined, {
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
   * Events left out of a shipment are taken out of the copy too (another node numbers their session
   * now, and brings it in when this node runs it again), and said to be dropped, never published.
   */
  private dropFenced(events: readonly unknown[][], fenced: ReadonlySet<string>): void {
    const dropped = events.filter((row) => fenced.has(row[EVENT_ROW_AT.session] as string));
    const remove = this.db.prepare('DELETE FROM events WHERE id = ?');
    writePulled(this.db, () => {
      for (const row of dropped) remove.run(row[EVENT_ROW_AT.id]);
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
