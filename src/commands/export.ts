import { exportDatabase, exportRows, parseExportFlags } from '../core/store/export.js';
import { postgresExportRows } from '../core/store/postgres/pg-inspect.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { stderrProgress } from './progress.js';
import { storeUrlFrom } from './store-option.js';

export interface ExportOptions extends DatabaseOptions {
  session?: string;
  type?: string[];
  since?: string;
  until?: string;
  maxSensitivity?: string;
  audit?: boolean;
  format?: string;
  out?: string;
  store?: string;
}

export async function exportCommand(options: ExportOptions): Promise<void> {
  const query = parseExportFlags(options);
  const url = await storeUrlFrom(options);
  // A PostgreSQL store's rows go through the same encoder: the same events export the same bytes.
  const run =
    url === null
      ? async (target: Omit<Parameters<typeof exportDatabase>[0], 'dbPath' | 'query'>) =>
          exportDatabase({ dbPath: (await databaseFrom(options)).dbPath, query, ...target })
      : (target: Omit<Parameters<typeof exportDatabase>[0], 'dbPath' | 'query'>) =>
          exportRows(() => postgresExportRows(url, query), { query, ...target });
  if (options.out === undefined) {
    try {
      await run({ stream: process.stdout });
    } catch (error) {
      // The reader went away (`metis export | head`): that is not a failure of the export.
      if ((error as NodeJS.ErrnoException).code !== 'EPIPE') throw error;
    }
    return;
  }
  const progress = stderrProgress('exporting events');
  const { count, path } = await run({
    outPath: options.out,
    onProgress: ({ exported }) => progress.update(exported),
  }).catch((error: unknown) => {
    progress.fail('export stopped');
    throw error;
  });
  progress.finish();
  console.error(`exported ${count} event${count === 1 ? '' : 's'} to ${path}`);
}
