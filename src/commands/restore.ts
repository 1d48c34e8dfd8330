import { resolveDbPath } from '../core/store/paths.js';
import { restoreDatabase } from '../core/store/restore.js';
import { printRecord } from './backup.js';

export interface RestoreOptions {
  db?: string;
  force?: boolean;
  json?: boolean;
}

export async function restoreCommand(src: string, options: RestoreOptions): Promise<void> {
  const result = restoreDatabase({ src, dbPath: resolveDbPath(options.db), force: options.force ?? false });
  printRecord(result, options.json);
}
