import { once } from 'node:events';
import { createWriteStream, existsSync, rmSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import { MetisError } from '../errors.js';
import { AUDIT_EVENT_TYPES, CATALOG } from '../events/catalog/index.js';
import { microsToIso } from '../events/clock.js';
import { EventIdSchema, isMorePrivate, SENSITIVITIES, type Sensitivity } from '../events/envelope.js';
import { STREAMING_TYPES } from '../events/streaming.js';
import { fsyncDir, fsyncFile, publishNoClobber, tempPathNextTo } from './backup.js';
import { type Db, openDatabase } from './database.js';
import { EVENT_COLUMNS, type EventRow, rowToJson } from './event-rows.js';
import { eventIdBound } from './retention.js';

export type ExportFormat = 'jsonl' | 'csv';

/** Flags of `metis export` as typed by the user. */
export interface ExportFlags {
  readonly session?: string;
  readonly type?: readonly string[];
  readonly since?: string;
  readonly until?: string;
  readonly maxSensitivity?: string;
  readonly audit?: boolean;
  readonly format?: string;
}

/** A validated export query. Time bounds are unix microseconds, both inclusive. */
export interface ExportQuery {
  readonly sessionId: string | null;
  readonly types: readonly string[] | null;
  readonly afterId: string | null;
  readonly sinceUs: number | null;
  readonly untilUs: number | null;
  readonly sensitivities: readonly Sensitivity[];
  readonly format: ExportFormat;
}

export interface ExportProgress {
  readonly exported: number;
}

const ISO_PATTERN = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.(\d{1,9}))?)?(?:Z|[+-]\d{2}:?\d{2}))?$/;
/** Ids and timestamps are stamped by two clocks; time filters read this much extra id range around them. */
const CLOCK_SLACK_MS = 60_000;
export const CSV_HEADER =
  'id,timestamp,session_id,turn_id,parent_event_id,type,actor,sensitivity,seq,payload_json';

function invalid(message: string): MetisError {
  return new MetisError('METIS_ERR_INVALID_ARGUMENT', message);
}

/** Parses an ISO 8601 timestamp with a zone (or a date, meaning UTC midnight) to unix microseconds. */
export function parseIsoFlag(flag: string, value: string): number {
  const match = ISO_PATTERN.exec(value);
  const ms = match ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(ms)) {
    throw invalid(
      `${flag} must be an ISO 8601 timestamp with a zone, e.g. 2026-05-01T12:00:00Z, got "${value}"`,
    );
  }
  const micros = Number((match?.[1] ?? '').slice(3, 6).padEnd(3, '0'));
  return ms * 1000 + micros;
}

/** Validates every flag of `metis export`. @throws MetisError naming the flag and the problem. */
export function parseExportFlags(flags: ExportFlags): ExportQuery {
  const format = flags.format ?? 'jsonl';
  if (format !== 'jsonl' && format !== 'csv') throw invalid(`--format must be jsonl or csv, got "${format}"`);
  if (flags.session !== undefined && flags.session.trim() === '')
    throw invalid('--session must not be empty');
  let types: string[] | null = null;
  if (flags.type !== undefined) {
    types = flags.type.flatMap((t) => t.split(',')).filter((t) => t !== '');
    const live = types.filter((t) => STREAMING_TYPES.has(t));
    if (live.length > 0) {
      throw invalid(
        `--type: ${live.join(', ')} ${live.length === 1 ? 'is' : 'are'} streaming-only and never stored`,
      );
    }
    const unknown = types.filter((t) => !CATALOG.has(t));
    if (unknown.length > 0) {
      throw new MetisError(
        'METIS_ERR_UNKNOWN_EVENT_TYPE',
        `--type: unknown event type ${unknown.map((t) => `"${t}"`).join(', ')}`,
      );
    }
  }
  if (flags.audit) types = (types ?? [...AUDIT_EVENT_TYPES]).filter((t) => AUDIT_EVENT_TYPES.has(t));
  let afterId: string | null = null;
  let sinceUs: number | null = null;
  if (flags.since !== undefined) {
    if (flags.since.startsWith('evt_')) {
      if (!EventIdSchema.safeParse(flags.since).success)
        throw invalid(`--since: "${flags.since}" is not an event id`);
      afterId = flags.since;
    } else {
      sinceUs = parseIsoFlag('--since', flags.since);
    }
  }
  const untilUs = flags.until === undefined ? null : parseIsoFlag('--until', flags.until);
  let sensitivities = SENSITIVITIES;
  if (flags.maxSensitivity !== undefined) {
    const level = flags.maxSensitivity as Sensitivity;
    if (!SENSITIVITIES.includes(level)) {
      throw invalid(
        `--max-sensitivity must be one of ${SENSITIVITIES.join(', ')}, got "${flags.maxSensitivity}"`,
      );
    }
    sensitivities = SENSITIVITIES.filter((s) => !isMorePrivate(s, level));
  }
  return { sessionId: flags.session ?? null, types, afterId, sinceUs, untilUs, sensitivities, format };
}

/** The SELECT for a query, in id order; parameters are named. Without a session it walks the id index. */
function buildSelect(query: ExportQuery): { sql: string; params: Record<string, unknown> } {
  const where: string[] = [];
  const params: Record<string, unknown> = {};
  if (query.sessionId !== null) {
    where.push('session_id = @session');
    params.session = query.sessionId;
  }
  if (query.types !== null) {
    where.push('type IN (SELECT value FROM json_each(@types))');
    params.types = JSON.stringify(query.types);
  }
  if (query.afterId !== null) {
    where.push('id > @after');
    params.after = query.afterId;
  }
  if (query.sinceUs !== null) {
    where.push('id >= @sinceId AND timestamp_us >= @since');
    params.sinceId = eventIdBound(query.sinceUs / 1000 - CLOCK_SLACK_MS);
    params.since = query.sinceUs;
  }
  if (query.untilUs !== null) {
    where.push('id < @untilId AND timestamp_us <= @until');
    params.untilId = eventIdBound(query.untilUs / 1000 + CLOCK_SLACK_MS + 1);
    params.until = query.untilUs;
  }
  if (query.sensitivities.length < SENSITIVITIES.length) {
    where.push('sensitivity IN (SELECT value FROM json_each(@sensitivities))');
    params.sensitivities = JSON.stringify(query.sensitivities);
  }
  const from = query.sessionId === null ? 'events INDEXED BY idx_events_id' : 'events';
  const filter = where.length === 0 ? '' : `WHERE ${where.join(' AND ')}`;
  return { sql: `SELECT ${EVENT_COLUMNS} FROM ${from} ${filter} ORDER BY id`, params };
}

function csvField(value: string | number | null): string {
  if (value === null) return '';
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** One CSV record (RFC 4180 quoting) in CSV_HEADER order; null is an empty field. */
export function rowToCsv(row: EventRow): string {
  const fields = [
    row[0],
    microsToIso(row[1]),
    row[2],
    row[3],
    row[4],
    row[5],
    row[6],
    row[7],
    row[9],
    row[8],
  ];
  return fields.map(csvField).join(',');
}

/**
 * Streams the matching events to `out` in id order, in constant memory: rows come from an iterating
 * statement, lines are written in ~64 KiB chunks and each full buffer waits for 'drain'. The read is
 * one transaction, so the export is a consistent snapshot even while a server writes.
 * @returns the number of events written.
 */
export async function writeExport(
  db: Db,
  query: ExportQuery,
  out: Writable,
  onProgress?: (progress: ExportProgress) => void,
): Promise<number> {
  return writeEventRows(sqliteRows(db, query), query.format, out, onProgress);
}

/** The matching rows of a SQLite store, from one iterating statement (one read transaction). */
function sqliteRows(db: Db, query: ExportQuery): IterableIterator<EventRow> {
  const { sql, params } = buildSelect(query);
  return db.prepare(sql).raw().iterate(params) as IterableIterator<EventRow>;
}

/**
 * Streams rows to `out` as JSONL or CSV, in constant memory: lines are written in ~64 KiB chunks and
 * each full buffer waits for 'drain'. Every backend's rows go through here, so their exports are the
 * same bytes for the same events.
 * @returns the number of events written.
 */
export async function writeEventRows(
  rows: Iterable<EventRow> | AsyncIterable<EventRow>,
  format: ExportFormat,
  out: Writable,
  onProgress?: (progress: ExportProgress) => void,
): Promise<number> {
  const [encode, eol] = format === 'csv' ? [rowToCsv, '\r\n'] : [rowToJson, '\n'];
  let failure: unknown = null;
  const onError = (error: unknown) => {
    failure = error;
  };
  out.on('error', onError);
  let chunk = format === 'csv' ? CSV_HEADER + eol : '';
  let count = 0;
  const flush = async () => {
    if (failure !== null) throw failure;
    const ok = out.write(chunk);
    chunk = '';
    if (!ok) await once(out, 'drain');
    onProgress?.({ exported: count });
  };
  const iterator =
    Symbol.asyncIterator in rows
      ? rows[Symbol.asyncIterator]()
      : (rows as Iterable<EventRow>)[Symbol.iterator]();
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done) break;
      chunk += encode(next.value) + eol;
      count += 1;
      if (chunk.length >= 65_536) await flush();
    }
    if (chunk !== '') await flush();
  } finally {
    await iterator.return?.();
    out.off('error', onError);
  }
  return count;
}

/**
 * Writes an export to a new file: a private (0600) temp file next to it, fsynced, then given its name.
 * Refuses an existing file; a failed export leaves nothing behind.
 */
export function exportToFile(
  db: Db,
  query: ExportQuery,
  path: string,
  onProgress?: (progress: ExportProgress) => void,
): Promise<{ count: number; path: string }> {
  return exportRowsToFile(() => sqliteRows(db, query), query.format, path, onProgress);
}

/** As exportToFile, for rows from any backend; `rows` is called once the file may be written. */
export async function exportRowsToFile(
  rows: () => Iterable<EventRow> | AsyncIterable<EventRow>,
  format: ExportFormat,
  path: string,
  onProgress?: (progress: ExportProgress) => void,
): Promise<{ count: number; path: string }> {
  const dest = resolve(path);
  if (existsSync(dest)) {
    throw new MetisError(
      'METIS_ERR_DEST_EXISTS',
      statSync(dest).isDirectory()
        ? `--out: ${dest} is a folder; name the file to create in it`
        : `${dest} already exists; export never overwrites a file`,
    );
  }
  if (!existsSync(dirname(dest))) throw invalid(`--out: the folder ${dirname(dest)} does not exist`);
  const tmp = tempPathNextTo(dest, 'export');
  const stream = createWriteStream(tmp, { flags: 'wx', mode: 0o600 });
  try {
    await once(stream, 'open');
    const count = await writeEventRows(rows(), format, stream, onProgress);
    stream.end();
    await once(stream, 'close');
    fsyncFile(tmp);
    publishNoClobber(tmp, dest);
    fsyncDir(dirname(dest));
    return { count, path: dest };
  } finally {
    stream.destroy();
    rmSync(tmp, { force: true });
  }
}

export interface ExportDatabaseOptions {
  readonly dbPath: string;
  readonly query: ExportQuery;
  /** Write to this new file; otherwise to `stream`. */
  readonly outPath?: string;
  readonly stream?: Writable;
  readonly onProgress?: (progress: ExportProgress) => void;
}

/** Opens the database read-only and exports to a new file or a stream. */
export async function exportDatabase(
  options: ExportDatabaseOptions,
): Promise<{ count: number; path: string | null }> {
  const db = openDatabase(options.dbPath, { readonly: true });
  try {
    // An unknown --session would export nothing and look like an empty session: say which it is.
    const session = options.query.sessionId;
    if (session !== null && db.prepare('SELECT 1 FROM sessions WHERE id = ?').get(session) === undefined) {
      throw new MetisError(
        'METIS_ERR_SESSION_NOT_FOUND',
        `--session: no session ${session} in ${options.dbPath}`,
        {
          hint: 'List the sessions with `metis trace stats` (or `metis sessions` on a running server).',
        },
      );
    }
    return await exportRows(() => sqliteRows(db, options.query), options);
  } finally {
    db.close();
  }
}

/** Writes rows where the options say: a new file, or a stream. */
export async function exportRows(
  rows: () => Iterable<EventRow> | AsyncIterable<EventRow>,
  options: Omit<ExportDatabaseOptions, 'dbPath'>,
): Promise<{ count: number; path: string | null }> {
  if (options.outPath !== undefined)
    return await exportRowsToFile(rows, options.query.format, options.outPath, options.onProgress);
  if (options.stream === undefined) throw new TypeError('an export needs outPath or stream');
  return {
    count: await writeEventRows(rows(), options.query.format, options.stream, options.onProgress),
    path: null,
  };
}

/** The SELECT's filters, for a backend that builds its own statement (PostgreSQL). */
export function exportBounds(query: ExportQuery): {
  readonly sinceId: string | null;
  readonly untilId: string | null;
} {
  return {
    sinceId: query.sinceUs === null ? null : eventIdBound(query.sinceUs / 1000 - CLOCK_SLACK_MS),
    untilId: query.untilUs === null ? null : eventIdBound(query.untilUs / 1000 + CLOCK_SLACK_MS + 1),
  };
}
