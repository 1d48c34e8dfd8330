import { plural } from '../client/plural.js';
import { backupDatabase } from '../core/store/backup.js';
import { backupPostgres } from '../core/store/postgres/pg-backup.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { withSpinner } from './progress.js';
import { storeUrlFrom } from './store-option.js';

export interface BackupOptions extends DatabaseOptions {
  json?: boolean;
  store?: string;
}

/** Prints an object as `key: value` lines (null as `none`), or as JSON. */
export function printRecord(record: object, json: boolean | undefined): void {
  if (json) {
    console.log(JSON.stringify(record, null, 2));
    return;
  }
  for (const [key, value] of Object.entries(record)) console.log(`${key}: ${value ?? 'none'}`);
}

export async function backupCommand(dest: string, options: BackupOptions): Promise<void> {
  const url = await storeUrlFrom(options);
  if (url !== null) {
    const result = await withSpinner(
      'backing up the PostgreSQL store',
      () => backupPostgres({ url, dest }),
      (done) => `backed up ${plural(done.event_count, 'event')} (${megabytes(done.bytes)})`,
    );
    printRecord(result, options.json);
    return;
  }
  const { dbPath } = await databaseFrom(options);
  const result = await withSpinner(
    `backing up ${dbPath}`,
    () => backupDatabase({ dbPath, dest }),
    (done) => `backed up ${plural(done.event_count, 'event')} (${megabytes(done.bytes)})`,
  );
  printRecord(result, options.json);
}

function megabytes(bytes: number): string {
  return `${(bytes / 1_048_576).toFixed(1)} MB`;
}
