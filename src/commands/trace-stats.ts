import { SYSTEM_SESSION_ID } from '../core/events/envelope.js';
import { postgresTraceStats } from '../core/store/postgres/pg-inspect.js';
import { type TraceStats, traceStats } from '../core/store/stats.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { storeUrlFrom } from './store-option.js';

export interface TraceStatsOptions extends DatabaseOptions {
  json?: boolean;
  store?: string;
}

const TOP_SESSIONS = 20;

function table(rows: readonly (readonly [string, number])[]): string[] {
  const width = Math.max(0, ...rows.map(([name]) => name.length));
  return rows.map(([name, count]) => `  ${name.padEnd(width)}  ${count}`);
}

function printHuman(stats: TraceStats): void {
  const lines = [
    `database: ${stats.db_path}`,
    `schema version: ${stats.schema_version}`,
    `file size: ${stats.file_bytes} bytes`,
    `wal size: ${stats.wal_bytes} bytes`,
    `events: ${stats.event_count}`,
    `sessions: ${sessionsLine(stats.by_session)}`,
    `oldest event: ${stats.oldest_event_timestamp ?? 'none'}`,
    `newest event: ${stats.newest_event_timestamp ?? 'none'}`,
    '',
    'events by type:',
    ...table(stats.by_type.map((t) => [t.type, t.count] as const)),
    '',
    stats.session_count > TOP_SESSIONS
      ? `events by session (top ${TOP_SESSIONS} of ${stats.session_count}; --json lists all):`
      : 'events by session:',
    ...table(stats.by_session.slice(0, TOP_SESSIONS).map((s) => [s.session_id, s.count] as const)),
  ];
  console.log(lines.join('\n'));
}

export async function traceStatsCommand(options: TraceStatsOptions): Promise<void> {
  const url = await storeUrlFrom(options);
  const stats =
    url === null ? traceStats((await databaseFrom(options)).dbPath) : await postgresTraceStats(url);
  if (options.json) console.log(JSON.stringify(stats, null, 2));
  else printHuman(stats);
}

/** The session count a user means: their sessions, with the `system` session named apart. */
function sessionsLine(bySession: readonly { session_id: string }[]): string {
  const system = bySession.some((s) => s.session_id === SYSTEM_SESSION_ID);
  return `${bySession.length - (system ? 1 : 0)}${system ? ' (plus the system session)' : ''}`;
}
