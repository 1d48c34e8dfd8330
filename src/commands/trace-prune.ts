import { plural } from '../client/plural.js';
import { purgePostgres } from '../core/store/postgres/pg-prune.js';
import {
  type PurgeProgress,
  type PurgeResult,
  parseRetentionDays,
  purgeOldEvents,
  retentionCutoffUs,
} from '../core/store/retention.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { stderrProgress } from './progress.js';
import { storeFrom } from './store-option.js';

export interface TracePruneOptions extends DatabaseOptions {
  days?: string;
  dryRun?: boolean;
  json?: boolean;
  store?: string;
}

const events = (n: number) => `${n} event${n === 1 ? '' : 's'}`;

function printHuman(result: PurgeResult, days: number, isPostgres: boolean): void {
  const older = `older than ${result.cutoff_timestamp} (${days} day${days === 1 ? '' : 's'})`;
  if (result.dry_run) {
    console.log(`dry run: would delete ${events(result.rows_deleted)} ${older}; nothing was changed`);
    const rows = Object.entries(result.by_type).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    const width = Math.max(0, ...rows.map(([type]) => type.length));
    for (const [type, count] of rows) console.log(`  ${type.padEnd(width)}  ${count}`);
  } else {
    const batches = `${result.batches} batch${result.batches === 1 ? '' : 'es'}`;
    console.log(`deleted ${events(result.rows_deleted)} ${older} in ${batches}`);
  }
  const keep = result.dry_run ? 'would keep' : 'kept';
  console.log(
    `${keep} ${result.rows_audit_exempt} audit events older than the cutoff (audit types are never pruned)`,
  );
  console.log(`oldest event kept: ${result.oldest_kept_timestamp ?? 'none'}`);
  if (result.handed_to_server_pid !== null) {
    // Only the owner of a session writes into it: the running server stamps the record of this sweep.
    console.log(
      `trace.swept handed to the running server (pid ${result.handed_to_server_pid}), which records it in the system session`,
    );
  }
  if (result.recorded_by_server !== undefined) {
    console.log(
      result.recorded_by_server === null
        ? 'trace.swept handed to the servers using the store; none has recorded it yet (the next to look does)'
        : `trace.swept recorded by the server ${result.recorded_by_server}, which also pruned its working copy`,
    );
  }
  if (!result.dry_run && result.rows_deleted > 0 && !isPostgres) {
    // Users look at the file size next and wonder why it did not move.
    console.log(
      'the file keeps its size: SQLite reuses the freed pages for new events (`metis backup` writes a compact copy)',
    );
  }
}

/** Rows per DELETE on PostgreSQL: each batch is its own short statement, writers wait for one at most. */
const POSTGRES_BATCH = 5_000;

export async function tracePruneCommand(options: TracePruneOptions): Promise<void> {
  const { dbPath, config } = await databaseFrom(options);
  const days = parseRetentionDays(options.days ?? config.storage.retention_days);
  const store = await storeFrom(options);
  const url = store?.url ?? null;
  const progress = stderrProgress('deleting events');
  const onProgress = ({ deleted, total }: PurgeProgress) => progress.update(deleted, total);
  const dryRun = options.dryRun ?? false;
  const result = await (url === null
    ? purgeOldEvents({ dbPath, days, dryRun, onProgress })
    : purgePostgres({
        url,
        setting: store!.setting,
        cutoffUs: retentionCutoffUs(days),
        dryRun,
        batchSize: POSTGRES_BATCH,
        onProgress,
      })
  ).catch((error: unknown) => {
    progress.fail('prune stopped');
    throw error;
  });
  progress.finish(`deleted ${plural(result.rows_deleted, 'event')}`);
  if (options.json) console.log(JSON.stringify(result, null, 2));
  else printHuman(result, days, url !== null);
}
