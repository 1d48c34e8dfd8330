import type { Db } from './database.js';

/** Row ids a cluster node may hand out: its block, kept from start to start (node-registry.ts). */
export const ROW_ID_BLOCK = 2 ** 32;
/** Blocks below this keep every id an exact JavaScript number (2^21 starts). */
export const MAX_ROW_ID_BLOCKS = 2 ** 21;

const blocks = new WeakMap<Db, { next: number }>();

/**
 * Makes the integer keys this connection writes (tool calls, pattern outcomes) come from `block`: two
 * nodes of a cluster each take their own block at start, so their rows never share a key in the store
 * they both ship to. Without a block SQLite picks the next key itself (one writer per store).
 */
export function useRowIdBlock(
  db: Db,
  block: number,
  /** The highest key of the block the store holds, which this copy may lack (node-registry.ts). */
  usedInStore: number | null = null,
): void {
  if (!Number.isInteger(block) || block < 1 || block >= MAX_ROW_ID_BLOCKS)
    throw new RangeError(`row id block ${block} is outside 1..${MAX_ROW_ID_BLOCKS - 1}`);
  const first = block * ROW_ID_BLOCK;
  // A block kept from an earlier start continues after the keys that start handed out (the copy holds
  // them: brought from the store, or written here and not shipped yet).
  const used = db
    .prepare(
      `SELECT max(id) FROM (
         SELECT max(row_id) AS id FROM tool_calls WHERE row_id > ? AND row_id < ?
         UNION ALL SELECT max(id) FROM pattern_outcomes WHERE id > ? AND id < ?)`,
    )
    .pluck()
    .get(first, first + ROW_ID_BLOCK, first, first + ROW_ID_BLOCK) as number | null;
  blocks.set(db, { next: Math.max(used ?? first, usedInStore ?? first) + 1 });
}

/** The next key for a row this connection inserts, or null to let SQLite choose. */
export function nextRowId(db: Db): number | null {
  const block = blocks.get(db);
  if (block === undefined) return null;
  const id = block.next;
  block.next += 1;
  return id;
}
