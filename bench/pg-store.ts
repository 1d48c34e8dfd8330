/**
 * The pg-store suite (issue 19): the PostgreSQL event log beside its raw-driver baselines, on a real
 * server started for the run (test/helpers/postgres.ts; skipped, saying why, without one).
 *
 * - group commit: events appended through PgEventStore (500 per append, each awaited, as a busy bus
 *   hands them over) against raw `COPY` of the same rows 500 per transaction with the same driver;
 *   target ≥ 0.8× of raw.
 * - group commit with rows (and fence): PgStoreWriter, the writer of a server with no working copy,
 *   500 events and 20 message rows a transaction (bench/lib/pg-writer-commit.ts); target ≥ 0.8× of raw.
 * - serve path: what `metis serve` on PostgreSQL alone does with a turn's writes: events emitted on its
 *   context's bus and the turn's rows through its sink, group committed by PgStoreWriter, rounds of a
 *   turn per session each awaited, against the raw driver's COPY of the same rows in their final state
 *   (bench/lib/pg-serve-path.ts); target ≥ 0.8× of raw.
 * - replay: one session's 10,000 events out of 1,000,000 stored (100 sessions, 100 days old: the
 *   cluster bench's loadOldEvents), warm, median of 7;
 *   target ≤ 50 ms. Twice: as events (PgEventStore.replay), and as the frames a subscription sends
 *   (pgStreamReads.replayJson, what a server with no working copy replays; issue 35).
 * - start-up: a real `metis serve --store` child on the replay's store and on one of a tenth of its
 *   events, until `/healthz` answers (median of 5 each), and its data folder after it stopped
 *   (bench/lib/pg-serve-start.ts); targets ≤ 3 s, within ±20 % of the small store's, no file
 *   growing with the store.
 * - prune: the whole large store pruned (purgePostgres, 30-day retention) while one such server runs
 *   turns one after another, each timed until its 202 (`turn.started` committed by the writer):
 *   p99 ≤ 50 ms and no failed request (bench/lib/cluster-prune.ts, as the cluster suite runs it).
 * - row changes: a writer tick's 1,000 row changes of 50 sessions in one transaction, grouped by
 *   PostgreSQL's row applier, beside one statement per change (no target: what grouping saves).
 */

import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { PgEventStore } from '../src/core/store/postgres/pg-event-store.js';
import { pgStreamReads } from '../src/core/store/postgres/pg-stream-reads.js';
import { NO_UNSETTLED_MESSAGES } from '../src/core/store/unsettled-messages.js';
import { loadOldEvents } from '../test/helpers/pg-old-events.js';
import { freshDatabase, PG_BIN, startPostgres } from '../test/helpers/postgres.js';
import { benchPruneWhileServing } from './lib/cluster-prune.js';
import { BATCH, events, rawCopy } from './lib/pg-bench-events.js';
import { benchRowBatch } from './lib/pg-row-batch.js';
import { benchServePath } from './lib/pg-serve-path.js';
import { benchServeStart, startServe } from './lib/pg-serve-start.js';
import { benchWriterCommit } from './lib/pg-writer-commit.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

export async function benchPgStore(opts: SuiteOptions): Promise<Figure[]> {
  if (PG_BIN === null) {
    console.log('  pg-store skipped: no PostgreSQL server binaries (see test/helpers/postgres.ts)');
    return [];
  }
  const server = await startPostgres();
  try {
    const total = opts.quick ? 5_000 : 100_000;
    // Group commit against raw COPY, same rows, same batch size, alternating to share the noise.
    const store = await PgEventStore.open({ url: freshDatabase(server) });
    const rawUrl = freshDatabase(server);
    await (await PgEventStore.open({ url: rawUrl })).close(); // the same schema for the raw run
    const raw = new pg.Client({ connectionString: rawUrl });
    await raw.connect();
    let storeSeconds = 0;
    let rawSeconds = 0;
    for (let round = 0; round < 2; round += 1) {
      const mine = events(total / 2, 50);
      let began = performance.now();
      for (let i = 0; i < mine.length; i += BATCH) await store.append(mine.slice(i, i + BATCH));
      storeSeconds += (performance.now() - began) / 1000;
      const theirs = events(total / 2, 50);
      began = performance.now();
      await rawCopy(raw, theirs);
      rawSeconds += (performance.now() - began) / 1000;
    }
    await store.close();
    const writerCommits = await benchWriterCommit(server, total);
    const servePath = await benchServePath(server, total);

    // Replay: one session's events among many.
    const stored = opts.quick ? 50_000 : 1_000_000;
    const replayUrl = freshDatabase(server);
    const loadBegan = performance.now();
    await loadOldEvents(replayUrl, stored);
    console.log(
      `  (stored ${stored.toLocaleString()} events in ${((performance.now() - loadBegan) / 1000).toFixed(1)} s)`,
    );
    const reader = await PgEventStore.open({ url: replayUrl });
    const query = { sessionIds: ['sess_old_7'], afterId: null, limit: 10_000 };
    const first = await reader.replay(query);
    const times: number[] = [];
    for (let i = 0; i < 7; i += 1) {
      const began = performance.now();
      await reader.replay(query);
      times.push(performance.now() - began);
    }
    await reader.close();
    // The same replay as a subscription asks it of PostgreSQL (no working copy): frames, not events.
    const pool = new pg.Pool({ connectionString: replayUrl, max: 2 });
    const reads = pgStreamReads(pool, NO_UNSETTLED_MESSAGES);
    const frames = await reads.replayJson(query);
    const frameTimes: number[] = [];
    for (let i = 0; i < 7; i += 1) {
      const began = performance.now();
      await reads.replayJson(query);
      frameTimes.push(performance.now() - began);
    }
    await pool.end();
    // The raw driver's read of the same rows: the baseline of the replay.
    const plain = new pg.Client({ connectionString: replayUrl });
    await plain.connect();
    const rawTimes: number[] = [];
    for (let i = 0; i < 7; i += 1) {
      const began = performance.now();
      await plain.query({
        text: 'SELECT id, timestamp_us, session_id, turn_id, parent_event_id, type, actor, sensitivity, payload_json, seq FROM events WHERE session_id = $1 ORDER BY id LIMIT 10000',
        values: ['sess_old_7'],
        rowMode: 'array',
      });
      rawTimes.push(performance.now() - began);
    }
    await plain.end();
    await raw.end();
    // Start-up of a real `metis serve` on the replay's store and on one of a tenth, built the same way.
    const smallUrl = freshDatabase(server);
    await loadOldEvents(smallUrl, stored / 10);
    const starts = await benchServeStart(
      { url: replayUrl, events: stored },
      { url: smallUrl, events: stored / 10 },
      opts.quick ? 1 : 5,
    );
    // Retention of the whole store (its events are 100 days old) while a server serves turns on it.
    const serving = await startServe(replayUrl);
    const pruned = await benchPruneWhileServing(opts, replayUrl, [serving], 0).finally(() => serving.stop());
    const rowsClient = new pg.Client({ connectionString: freshDatabase(server) });
    await rowsClient.connect();
    const rows = await benchRowBatch(rowsClient, opts.quick);
    await rowsClient.end();
    const median = (list: number[]) =>
      percentile(
        [...list].sort((a, b) => a - b),
        50,
      );
    console.log(
      `  ${total.toLocaleString()} events appended ${BATCH} at a time; replay of ${first.events.length.toLocaleString()} events`,
    );
    return [
      figure({
        name: 'PostgreSQL group commit (PgEventStore.append)',
        value: total / storeSeconds,
        unit: 'events/s',
        baseline: { name: `raw COPY, ${BATCH} rows a transaction`, value: total / rawSeconds },
        target: { op: '>=', value: Math.round((0.8 * total) / rawSeconds) },
      }),
      ...writerCommits,
      servePath,
      figure({
        name: `PostgreSQL replay, 10,000 of ${stored.toLocaleString()} events (warm, median)`,
        value: median(times),
        unit: 'ms',
        baseline: { name: 'the raw driver reading the same rows', value: median(rawTimes) },
        target: { op: '<=', value: 50 },
      }),
      figure({
        name: `pgStreamReads.replayJson, ${frames.rows.length.toLocaleString()} of ${stored.toLocaleString()} events as frames (warm, median)`,
        value: median(frameTimes),
        unit: 'ms',
        baseline: { name: 'the raw driver reading the same rows', value: median(rawTimes) },
        target: { op: '<=', value: 50 },
      }),
      ...starts,
      ...pruned,
      rows,
    ];
  } finally {
    await server.destroy();
  }
}
