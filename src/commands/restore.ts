import { plural } from '../client/plural.js';
import { restorePostgres } from '../core/store/postgres/pg-backup.js';
import { restoreDatabase } from '../core/store/restore.js';
import { printRecord } from './backup.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { withSpinner } from './progress.js';
import { storeUrlFrom } from './store-option.js';

export interface RestoreOptions extends DatabaseOptions {
  force?: boolean;
  json?: boolean;
  store?: string;
}

export async function restoreCommand(src: string, options: RestoreOptions): Promise<void> {
  const url = await storeUrlFrom(options);
  if (url !== null) {
    const result = await withSpinner(
      `checking ${src} and restoring it into PostgreSQL`,
      () => restorePostgres({ src, url, force: options.force ?? false }),
      (done) => `restored ${plural(done.event_count, 'event')} into ${done.target}`,
    );
    printRecord(result, options.json);
    return;
  }
  const { dbPath } = await databaseFrom(options);
  const result = await withSpinner(
    `checking ${src} and restoring it`,
    () => restoreDatabase({ src, dbPath, force: options.force ?? false }),
    () => `restored ${dbPath}`,
  );
  printRecord(result, options.json);
}
