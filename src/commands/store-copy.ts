import { plural } from '../client/plural.js';
import { copyStore } from '../core/store/store-copy.js';
import { printRecord } from './backup.js';
import { withSpinner } from './progress.js';

export interface StoreCopyOptions {
  from: string;
  to: string;
  json?: boolean;
}

/**
 * `metis store copy --from <file|url> --to <file|url>`: a whole trace store into a new one, SQLite or
 * PostgreSQL either way, verified table by table and session by session. On a terminal the spinner
 * names the table being copied and its rows so far.
 */
export async function storeCopyCommand(options: StoreCopyOptions): Promise<void> {
  let setLabel: (text: string) => void = () => {};
  const report = await withSpinner(
    'copying',
    () =>
      copyStore({
        from: options.from,
        to: options.to,
        onProgress: ({ table, rows }) => setLabel(`copying ${table}: ${plural(rows, 'row')}`),
      }),
    (done) => `copied ${plural(sumRows(done.tables), 'row')}, ${plural(done.sessions, 'session')} verified`,
    process.stderr,
    (update) => {
      setLabel = update;
    },
  );
  if (options.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }
  printRecord({ from: report.from, to: report.to, sessions_verified: report.sessions }, false);
  for (const table of report.tables) console.log(`  ${table.name}: ${plural(table.rows, 'row')}`);
}

function sumRows(tables: readonly { readonly rows: number }[]): number {
  return tables.reduce((sum, table) => sum + table.rows, 0);
}
