import { restoreDatabase } from '../core/store/restore.js';
import { printRecord } from './backup.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';

export interface RestoreOptions extends DatabaseOptions {
  force?: boolean;
  json?: boolean;
}

export async function restoreCommand(src: string, options: RestoreOptions): Promise<void> {
  const result = restoreDatabase({
    src,
    dbPath: (await databaseFrom(options)).dbPath,
    force: options.force ?? false,
  });
  printRecord(result, options.json);
}
