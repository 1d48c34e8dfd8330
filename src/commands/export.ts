import { exportDatabase, parseExportFlags } from '../core/store/export.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { stderrProgress } from './progress.js';

export interface ExportOptions extends DatabaseOptions {
  session?: string;
  type?: string[];
  since?: string;
  until?: string;
  maxSensitivity?: string;
  audit?: boolean;
  format?: string;
  out?: string;
}

export async function exportCommand(options: ExportOptions): Promise<void> {
  const query = parseExportFlags(options);
  const { dbPath } = await databaseFrom(options);
  if (options.out === undefined) {
    try {
      await exportDatabase({ dbPath, query, stream: process.stdout });
    } catch (error) {
      // The reader went away (`metis export | head`): that is not a failure of the export.
      if ((error as NodeJS.ErrnoException).code !== 'EPIPE') throw error;
    }
    return;
  }
  const progress = stderrProgress('exporting events');
  const { count, path } = await exportDatabase({
    dbPath,
    query,
    outPath: options.out,
    onProgress: ({ exported }) => progress.update(exported),
  }).catch((error: unknown) => {
    progress.fail('export stopped');
    throw error;
  });
  progress.finish();
  console.error(`exported ${count} event${count === 1 ? '' : 's'} to ${path}`);
}
