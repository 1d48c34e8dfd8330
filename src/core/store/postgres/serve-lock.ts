import type pg from 'pg';
import type { Logger } from 'pino';
import { MetisError } from '../../errors.js';
import { postgresClient } from './connect.js';
import { migratePostgres, SERVE_LOCK_SQL } from './schema.js';

/** The serve lock's statement: one server alone, or one node of several. */
export function serveLockSql(cluster: boolean): string {
  return `SELECT ${cluster ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock'}(${SERVE_LOCK_SQL}) AS free`;
}

/**
 * A new connection to the store, its schema brought up to date, holding the serve lock (shared by the
 * nodes of a cluster). Ended again when a step fails.
 * @throws MetisError METIS_ERR_DB_LOCKED naming `setting` when another server (or a copy, restore or
 *   prune) holds the lock; the driver's or the migration's error otherwise, for the caller to name.
 */
export async function connectHoldingServeLock(
  url: string,
  setting: string,
  label: string,
  cluster: boolean,
): Promise<pg.Client> {
  const client = postgresClient(url, 'serve-lock');
  try {
    await client.connect();
    await migratePostgres(client);
    const locked = await client.query<{ free: boolean }>(serveLockSql(cluster));
    if (!locked.rows[0]!.free)
      throw new MetisError(
        'METIS_ERR_DB_LOCKED',
        `${setting}: another metis serve (or a copy, restore or prune) is using ${label}`,
        { hint: 'Stop the other process first, or point this server at another database.' },
      );
    return client;
  } catch (error) {
    await client.end().catch(() => {});
    throw error;
  }
}

/** Pause between attempts to take the lock again after its connection was lost. */
const RETAKE_MS = 1_000;

/**
 * The advisory lock a server holds on its PostgreSQL store (no second server, copy, restore or prune
 * beside it). The lock lives as long as its connection: when a restart or a network cut ends that, it
 * is taken again on a new connection as soon as the store answers. Should another process have taken it
 * meanwhile, this server keeps trying and says so; its shipments are fenced by its registration anyway
 * (working-copy.ts), so the two never write over each other.
 */
export class ServeLock {
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private taken = true;

  constructor(
    private holder: pg.Client,
    private readonly url: string,
    private readonly label: string,
    private readonly logger: Logger,
    /** A node of a cluster holds it shared with the other nodes. */
    private readonly cluster = false,
  ) {
    this.watch(holder);
  }

  /** Whether this server holds the lock now. */
  get held(): boolean {
    return this.taken;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    // Released by query before the connection ends: the server frees a session's locks only when its
    // backend has exited, after end() has returned, and a server started right after this one would
    // meet the lock still held.
    if (this.taken) await this.holder.query('SELECT pg_advisory_unlock_all()').catch(() => {});
    await this.holder.end().catch(() => {});
  }

  private watch(client: pg.Client): void {
    client.on('error', () => {});
    client.once('end', () => {
      if (this.closed || client !== this.holder) return;
      this.taken = false;
      this.logger.warn(
        { store: this.label },
        'lost the connection that holds the PostgreSQL store for this server; taking it again',
      );
      this.retakeLater();
    });
  }

  private retakeLater(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => void this.retake(), RETAKE_MS);
    this.timer.unref();
  }

  private async retake(): Promise<void> {
    const client = postgresClient(this.url, 'serve-lock');
    try {
      await client.connect();
      const free = (await client.query<{ free: boolean }>(serveLockSql(this.cluster))).rows[0]!.free;
      if (this.closed || !free) {
        await client.end().catch(() => {});
        if (!free && !this.closed)
          this.logger.error(
            { store: this.label },
            'another process holds the PostgreSQL store this server ran on; this server keeps trying (its shipments are refused if that process registered its own working copy)',
          );
        this.retakeLater();
        return;
      }
      this.holder = client;
      this.taken = true;
      this.watch(client);
      this.logger.info({ store: this.label }, 'holds the PostgreSQL store again');
    } catch {
      await client.end().catch(() => {});
      this.retakeLater();
    }
  }
}
