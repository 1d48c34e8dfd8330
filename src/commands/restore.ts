import { restoreDatabase } from '../core/store/restore.js';
import { printRecord } from './backup.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { withSpinner } from './progress.js';

export interface RestoreOptions extends DatabaseOptions {
  force?: boolean;
  json?: boolean;
}

export async function restoreCommand(src: string, options: RestoreOptions): Promise<void> {
  const { dbPath } = await databaseFrom(options);
  const result = await withSpinner(
    `checking ${src} and restoring it`,
    () => restoreDatabase({ src, dbPath, force: options.force ?? false }),
    () => `restored ${dbPath}`,
  );
  printRecord(result, options.json);
}
