import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { PgStoreWriter, type WriterFence } from '../../src/core/store/postgres/pg-store-writer.js';
import { checkOut } from '../../src/core/store/postgres/pg-util.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { freshDatabase, type PostgresServer } from '../../test/helpers/postgres.js';
import { BATCH, events, rawCopy } from './pg-bench-events.js';
import { type Figure, figure } from './stats.js';

const SESSIONS = 50;
/** One message row a this many events: the mix docs/plans/store-port.md §4 measured the fence with. */
const EVENTS_PER_MESSAGE = 25;

interface Variant {
  readonly name: string;
  readonly fence: boolean;
  seconds: number;
}

/**
 * PgStoreWriter's group commit (docs/plans/store-port.md §4): BATCH events a transaction, each batch
 * with a message row per EVENTS_PER_MESSAGE events and awaited (as a busy bus hands them over), once
 * without and once with the lease fence (every family this node's own), against raw COPY of as many
 * events a transaction. Runs alternate to share the noise; target ≥ 0.8× of raw.
 */
export async function benchWriterCommit(server: PostgresServer, total: number): Promise<Figure[]> {
  const rawUrl = freshDatabase(server);
  const raw = new pg.Client({ connectionString: rawUrl });
  await raw.connect();
  await migratePostgres(raw);
  const variants: Variant[] = [
    { name: 'rows', fence: false, seconds: 0 },
    { name: 'rows and fence', fence: true, seconds: 0 },
  ];
  const writers = await Promise.all(variants.map((variant) => openWriter(server, variant.fence)));
  let rawSeconds = 0;
  let rawEvents = 0;
  try {
    for (let round = 0; round < 2; round += 1) {
      for (const [i, variant] of variants.entries()) {
        variant.seconds += await writeThrough(writers[i]!.writer, events(total / 2, SESSIONS));
        const theirs = events(total / 2, SESSIONS);
        const began = performance.now();
        await rawCopy(raw, theirs);
        rawSeconds += (performance.now() - began) / 1000;
        rawEvents += theirs.length;
      }
    }
  } finally {
    await raw.end();
    for (const { writer } of writers) await writer.shutdown();
  }
  const rawRate = rawEvents / rawSeconds;
  return variants.map((variant) =>
    figure({
      name: `PostgreSQL group commit with ${variant.name} (PgStoreWriter, a message a ${EVENTS_PER_MESSAGE} events)`,
      value: total / variant.seconds,
      unit: 'events/s',
      baseline: { name: `raw COPY, ${BATCH} rows a transaction`, value: rawRate },
      target: { op: '>=', value: Math.round(0.8 * rawRate) },
    }),
  );
}

/** A writer on a fresh store whose sessions exist (and are leased to it, with `fence`). */
async function openWriter(server: PostgresServer, fenced: boolean): Promise<{ writer: PgStoreWriter }> {
  const pool = postgresPool(freshDatabase(server), 'serve', 2);
  const { client, release } = await checkOut(pool);
  try {
    await migratePostgres(client);
    await client.query(
      `INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us, token)
       SELECT 'sess_bench_' || n, 'bench', 0, n FROM generate_series(0, $1 - 1) n`,
      [SESSIONS],
    );
  } finally {
    release();
  }
  const fence: WriterFence = {
    nodeId: 'bench',
    leaseOf: (sessionId) => ({ root: sessionId, token: Number(sessionId.slice('sess_bench_'.length)) }),
  };
  const writer = new PgStoreWriter({ pool, label: 'bench', ownsPool: true, ...(fenced ? { fence } : {}) });
  for (let n = 0; n < SESSIONS; n += 1)
    writer.writeRow({
      what: 'session',
      change: {
        kind: 'session.create',
        sessionId: `sess_bench_${n}`,
        parentSessionId: null,
        workspacePath: '/w',
        workspaceHash: 'h',
        activeModel: 'm',
        stickyModel: null,
        atUs: 0,
      },
    });
  await writer.idle();
  return { writer };
}

/** Seconds to commit `all` through `writer`, BATCH events and their messages at a time, each awaited. */
async function writeThrough(writer: PgStoreWriter, all: readonly MetisEvent[]): Promise<number> {
  const began = performance.now();
  for (let i = 0; i < all.length; i += BATCH) {
    const batch = all.slice(i, i + BATCH);
    writer.write(batch);
    for (let k = 0; k < batch.length; k += EVENTS_PER_MESSAGE) {
      const event = batch[k]!;
      writer.writeRow({
        what: 'message',
        change: {
          kind: 'message.upsert',
          id: `msg_${event.id}`,
          sessionId: event.session_id,
          turnId: event.turn_id,
          role: 'assistant',
          contentJson: '[{"type":"text","text":"hello there"}]',
          status: 'complete',
          model: 'm',
          usageJson: '{"input_tokens":10,"output_tokens":20}',
          createdAtUs: 1,
        },
      });
    }
    await writer.whenCommitted(batch.at(-1)!.id);
  }
  return (performance.now() - began) / 1000;
}
