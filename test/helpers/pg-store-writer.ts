import type pg from 'pg';
import { onTestFinished } from 'vitest';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { PgStoreWriter, type PgStoreWriterOptions } from '../../src/core/store/postgres/pg-store-writer.js';
import { checkOut } from '../../src/core/store/postgres/pg-util.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { redactUrl } from '../../src/core/store/store-copy.js';
import { freshDatabase, type PostgresServer } from './postgres.js';

export interface PgWriterUnderTest {
  readonly url: string;
  readonly bus: EventBus;
  readonly writer: PgStoreWriter;
  /** The pool the writer writes through (its own unless `pool` was given). */
  readonly pool: pg.Pool;
  /** Waits until everything emitted is dispatched and committed. */
  flush(): Promise<void>;
}

/**
 * A PgStoreWriter on a fresh, migrated database of `server` (or on `url`), attached to a bus of its own;
 * stopped and its pool ended when the test finishes. Retries are quick (10-100 ms) for outage tests.
 */
export async function openPgWriter(
  server: PostgresServer,
  options: Partial<PgStoreWriterOptions> & { url?: string } = {},
): Promise<PgWriterUnderTest> {
  const url = options.url ?? freshDatabase(server);
  const own = postgresPool(url, 'serve', 4);
  const { client, release } = await checkOut(own);
  try {
    await migratePostgres(client);
  } finally {
    release();
  }
  const pool = options.pool ?? own;
  const writer = new PgStoreWriter({
    label: redactUrl(url),
    retryDelayMs: 10,
    retryMaxDelayMs: 100,
    ...options,
    pool,
  });
  const bus = new EventBus({ validation: 'strict' });
  writer.attach(bus);
  onTestFinished(async () => {
    await writer.shutdown();
    await own.end();
  });
  return {
    url,
    bus,
    writer,
    pool: own,
    flush: async () => {
      await bus.flush();
      await writer.idle();
    },
  };
}

/** A client's own `query`, sending a query on to the server. */
export type SendQuery = (text: unknown, ...rest: unknown[]) => any;

/**
 * `real` as a pool whose clients' queries go through `through` first, with the client's own `query` to
 * send them on: a test holds, watches or answers one. A client the pool hands out again is wrapped once.
 */
export function poolQueryingThrough(
  real: pg.Pool,
  through: (send: SendQuery, text: unknown, rest: unknown[]) => unknown,
): pg.Pool {
  const wrapped = new WeakSet<pg.PoolClient>();
  return {
    query: real.query.bind(real),
    on: real.on.bind(real),
    connect: async () => {
      const client = await real.connect();
      if (wrapped.has(client)) return client;
      wrapped.add(client);
      const send = client.query.bind(client) as SendQuery;
      (client as unknown as { query: SendQuery }).query = (text, ...rest) => through(send, text, rest);
      return client;
    },
  } as unknown as pg.Pool;
}

/** A query object of pg-batch-query.ts: the statements, and the callback its answer settles. */
export interface BatchSubmission {
  readonly text: string;
  callback(error: Error | null): void;
}

export function isBatchSubmission(query: unknown): query is BatchSubmission {
  return typeof query === 'object' && query !== null && 'submit' in query && 'text' in query;
}

/**
 * `real`, except that once armed, the next batch query with a COPY (pg-batch-query.ts) has its COPY
 * data held back until `release` is called: the transaction is in flight on the server, past its fence
 * and short of COMMIT, which rides in the same query.
 */
export function holdCopy(real: pg.Pool): { pool: pg.Pool; arm(): void; held(): boolean; release(): void } {
  let next = false;
  let release: (() => void) | null = null;
  const pool = poolQueryingThrough(real, (query, text, rest) => {
    if (!next || !isBatchSubmission(text) || !text.text.includes('COPY events')) return query(text, ...rest);
    next = false;
    const copy = text as unknown as { handleCopyInResponse(connection: unknown): void };
    const send = copy.handleCopyInResponse.bind(copy);
    copy.handleCopyInResponse = (connection) => {
      release = () => send(connection);
    };
    return query(text, ...rest);
  });
  return {
    pool,
    arm: () => (next = true),
    held: () => release !== null,
    release: () => release?.(),
  };
}
