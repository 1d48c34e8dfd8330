import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import { type ErrorCode, MetisError } from '../errors.js';

/**
 * The storage failures that pass by themselves: another process's write lock (busy), a full disk
 * (full), and an I/O error (io). The trace writer retries these until storage comes back; every other
 * SQLite error belongs to one row (a constraint, a trigger) and is isolated instead.
 */
export type StorageFailure = 'busy' | 'full' | 'io';

const CODES: Record<StorageFailure, ErrorCode> = {
  busy: 'METIS_ERR_STORAGE_BUSY',
  full: 'METIS_ERR_STORAGE_FULL',
  io: 'METIS_ERR_STORAGE_IO',
};

/** Below this much free space an I/O error is read as a full disk: SQLite reports some ENOSPC as IOERR. */
const NEARLY_FULL_BYTES = 1024 * 1024;

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

/**
 * Which transient storage failure `error` is, or null for anything else. SQLite codes come from
 * better-sqlite3 (`SQLITE_BUSY_SNAPSHOT`, `SQLITE_IOERR_WRITE`, ...), errno codes from node:fs.
 * @param path the database (or any file beside it): an I/O error on a nearly full disk counts as full.
 */
export function storageFailureOf(error: unknown, path?: string): StorageFailure | null {
  if (error instanceof MetisError) {
    for (const [failure, code] of Object.entries(CODES))
      if (code === error.code) return failure as StorageFailure;
    return null;
  }
  const code = codeOf(error);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return 'busy';
  if (code === 'SQLITE_FULL' || code === 'ENOSPC' || code === 'EDQUOT') return 'full';
  if (code.startsWith('SQLITE_IOERR') || code === 'EIO') {
    return path !== undefined && freeBytes(path) < NEARLY_FULL_BYTES ? 'full' : 'io';
  }
  return null;
}

function freeBytes(path: string): number {
  try {
    const stats = statfsSync(dirname(path));
    return stats.bavail * stats.bsize;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/** The message an operator reads for each failure: what happened and where, never "internal error". */
export function storageError(failure: StorageFailure, path: string | null, cause?: unknown): MetisError {
  const where = path ?? 'the database';
  const detail = cause instanceof Error ? ` (${cause.message})` : '';
  const message =
    failure === 'busy'
      ? `database locked by another process for too long: ${where}`
      : failure === 'full'
        ? `disk full at ${path === null ? 'the database folder' : dirname(path)}: cannot write ${where}${detail}`
        : `disk I/O error on ${where}${detail}`;
  return new MetisError(CODES[failure], message, { cause });
}

/**
 * `error` as a storage MetisError when it is a storage failure, otherwise `error` unchanged. For the
 * edges that report to a person: the CLI, start-up, HTTP. node:fs errors carry their own path.
 */
export function asStorageError(error: unknown, path: string | null = null): unknown {
  if (error instanceof MetisError) return error;
  const where = path ?? ((error as { path?: unknown } | null)?.path as string | undefined) ?? null;
  const failure = storageFailureOf(error, where ?? undefined);
  return failure === null ? error : storageError(failure, where, error);
}
