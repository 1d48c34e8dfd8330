import { createWriteStream, existsSync } from 'node:fs';
import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import { finished } from 'node:stream/promises';
import { MetisError } from '../core/errors.js';
import { openDatabase } from '../core/store/database.js';
import { type ExportFormat, writeEventRows } from '../core/store/export.js';
import { recordSystemEvents } from '../core/store/system-handoff.js';
import { forgetUser, userEventRows } from '../core/store/user-data.js';
import { type DatabaseOptions, databaseFrom } from './database-option.js';
import { storeUrlFrom } from './store-option.js';

export interface UserDataOptions extends DatabaseOptions {
  format?: string;
  out?: string;
  yes?: boolean;
  json?: boolean;
  store?: string;
}

const USER_ID = /^[A-Za-z0-9_.:@-]{1,200}$/;

function checkedUserId(userId: string): string {
  if (!USER_ID.test(userId))
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `<user_id>: "${userId}" is not a user id (letters, digits and _ . : @ -, 1-200 characters, e.g. usr_alice)`,
    );
  return userId;
}

/** The SQLite file to act on; a PostgreSQL store is refused by name (not supported yet). */
async function sqliteStore(options: UserDataOptions): Promise<string> {
  if ((await storeUrlFrom(options)) !== null)
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      '--store: metis user export|forget work on a SQLite store only for now; back the store up to a file (metis backup --store …), or export its events with metis export --store',
    );
  const { dbPath } = await databaseFrom(options);
  if (!existsSync(dbPath))
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `--db: no database at ${dbPath}`);
  return dbPath;
}

/** Who asked, for the audit event: the account running the command. */
function requestedBy(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * `metis user export <user_id>`: every stored event of the user's sessions and every other event naming
 * them (data-subject access), as `metis export` writes events; records `analytics.user_exported`.
 */
export async function userExportCommand(rawUserId: string, options: UserDataOptions): Promise<void> {
  const userId = checkedUserId(rawUserId);
  const format = (options.format ?? 'jsonl') as ExportFormat;
  if (format !== 'jsonl' && format !== 'csv')
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--format must be jsonl or csv, got "${options.format}"`,
    );
  const dbPath = await sqliteStore(options);
  const db = openDatabase(dbPath, { readonly: true });
  let count: number;
  try {
    if (options.out === undefined) {
      count = await writeEventRows(userEventRows(db, userId), format, process.stdout);
    } else {
      const out = createWriteStream(resolve(options.out), { flags: 'wx', mode: 0o600 });
      count = await writeEventRows(userEventRows(db, userId), format, out);
      out.end();
      await finished(out);
    }
  } finally {
    db.close();
  }
  const recorded = await recordSystemEvents(dbPath, [
    {
      type: 'analytics.user_exported',
      payload: { user_id: userId, exported_event_count: count, format, requested_by: requestedBy() },
    },
  ]);
  if (options.out !== undefined)
    console.error(
      `exported ${count} event${count === 1 ? '' : 's'} of ${userId} to ${resolve(options.out)}; analytics.user_exported recorded${recorded.by === 'server' ? ` by the running server (pid ${recorded.pid})` : ''}`,
    );
}

/**
 * `metis user forget <user_id> --yes`: deletes what the store holds of the user (right to be
 * forgotten; audit events kept) and records `analytics.user_forgotten`.
 */
export async function userForgetCommand(rawUserId: string, options: UserDataOptions): Promise<void> {
  const userId = checkedUserId(rawUserId);
  if (options.yes !== true)
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `metis user forget deletes every event, message and tool call of ${userId} for good; pass --yes to do it`,
    );
  const dbPath = await sqliteStore(options);
  const db = openDatabase(dbPath, { create: false });
  let result: ReturnType<typeof forgetUser>;
  try {
    result = forgetUser(db, userId);
  } finally {
    db.close();
  }
  const recorded = await recordSystemEvents(dbPath, [
    {
      type: 'analytics.user_forgotten',
      payload: { user_id: userId, events_deleted: result.events_deleted, requested_by: requestedBy() },
    },
  ]);
  if (options.json) {
    console.log(JSON.stringify({ user_id: userId, ...result, recorded_by: recorded }, null, 2));
    return;
  }
  console.log(
    `forgot ${userId}: ${result.events_deleted} events, ${result.messages_deleted} messages and ${result.tool_calls_deleted} tool calls of ${result.sessions} sessions deleted; ${result.audit_events_kept} audit events kept (audit types are never deleted)`,
  );
  console.log(
    `analytics.user_forgotten recorded${recorded.by === 'server' ? ` by the running server (pid ${recorded.pid})` : ''}`,
  );
}
