import { backupDatabase } from '../core/store/backup.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';

export interface BackupOptions extends DatabaseOptions {
  json?: boolean;
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
  printRecord(backupDatabase({ dbPath: (await databaseFrom(options)).dbPath, dest }), options.json);
}
