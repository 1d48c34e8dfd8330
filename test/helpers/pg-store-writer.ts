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
