import type pg from 'pg';
import type { Db } from '../database.js';
import { COPIED_TABLES } from '../store-copy.js';
import { leasedTo } from './session-leases.js';
import { readStoredSession, writeStoredSession } from './session-pull.js';
import { writePulled } from './working-copy.js';

/** Rows read per round trip of a table brought in whole. */
const PAGE_ROWS = 5_000;
/** What every node routes with, whichever sessions taught it: brought in whole, by its key's type. */
const SHARED_TABLES = [
  [COPIED_TABLES.find((table) => table.name === 'pattern_fingerprints')!, 'text'],
  [COPIED_TABLES.find((table) => table.name === 'pattern_outcomes')!, 'bigint'],
] as const;

/**
 * What a cluster node's new working copy starts with (docs/scale-out.md "How it works"): the learned
 * patterns every node routes with, and the sessions whose lease names this node (what a restart
 * recovers), each with its workers. Not the other sessions of the store: a node brings a session in
 * when it first runs, reads or follows it, so its start does not grow with the store. Written as pulled
 * (working-copy.ts `writePulled`): the store has all of it. Returns how many sessions came in.
 */
export async function fillNodeCopy(db: Db, client: pg.ClientBase, nodeId: string): Promise<number> {
  for (const [table, keyType] of SHARED_TABLES) {
    const insert = db.prepare(
      `INSERT OR IGNORE INTO ${table.name} (${table.columns.join(', ')}) VALUES (${table.columns.map(() => '?').join(', ')})`,
    );
    let after: unknown = null;
    for (;;) {
      const page = await client.query({
        text: `SELECT ${table.columns.join(', ')} FROM ${table.name}
                WHERE $1::${keyType} IS NULL OR ${table.key} > $1::${keyType} ORDER BY ${table.key} LIMIT ${PAGE_ROWS}`,
        values: [after],
        rowMode: 'array',
      });
      const rows = page.rows as unknown[][];
      writePulled(db, () => {
        for (const row of rows) insert.run(row);
      });
      if (rows.length < PAGE_ROWS) break;
      after = rows.at(-1)![0];
    }
  }
  const leased = await leasedTo(client, nodeId);
  for (const sessionId of leased) writeStoredSession(db, await readStoredSession(client, sessionId));
  return leased.length;
}
