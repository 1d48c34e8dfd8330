import type pg from 'pg';
import type { RowChange, RowChangeKind } from '../row-change.js';
import { PG_ROW_RENDERINGS, type PgStatement } from './pg-row-statements.js';

/**
 * Applies `RowChange`s to a PostgreSQL store: the twin of SqliteRowApplier, with the same effect on the
 * same tables (test/store/row-applier-contract.test.ts holds the two side by side). It runs inside the
 * caller's transaction and opens none: the writer's group commit decides what commits together.
 *
 * Every statement is a round trip, and a writer commits many changes at once, so consecutive changes
 * of one kind go in one statement (the values as arrays, `unnest`ed), except where one statement could
 * not do what applying them one after the other does (pg-row-statements.ts says where and why).
 */
export async function applyRowChanges(
  client: pg.ClientBase,
  changes: readonly RowChange[],
): Promise<PgRowsApplied> {
  for (const change of changes) {
    if (change.kind === 'handoff.settle')
      throw new Error(
        'handoff.settle is a SQLite change: a PostgreSQL store has no owner_handoffs queue ' +
          '(its sweeps record themselves; see docs/decisions.md)',
      );
  }
  let statements = 0;
  for (const statement of renderRowChanges(changes)) {
    await client.query({ name: statement.name, text: statement.text, values: [...statement.values] });
    statements += 1;
  }
  return { statements };
}

/** What applying a batch cost; no kind PostgreSQL applies has an outcome its producer waits for. */
export interface PgRowsApplied {
  /** Round trips made: one per statement. */
  readonly statements: number;
}

/** The statements of `changes`, in order. Exported for tests that look at how a batch is grouped. */
export function renderRowChanges(changes: readonly RowChange[]): PgStatement[] {
  const statements: PgStatement[] = [];
  for (const run of runsOf(changes)) {
    const rendering = PG_ROW_RENDERINGS[run[0]!.kind as Exclude<RowChangeKind, 'handoff.settle'>];
    statements.push(...rendering.render(run as never));
  }
  return statements;
}

/**
 * Splits `changes` into runs that one statement may apply: consecutive, of one kind, and (for a kind
 * whose statement writes a row once per key) no two of a run sharing a key, since one statement cannot
 * write a row twice as two changes applied in turn would.
 */
function runsOf(changes: readonly RowChange[]): RowChange[][] {
  const runs: RowChange[][] = [];
  let run: RowChange[] = [];
  let keys = new Set<string>();
  for (const change of changes) {
    const rendering = PG_ROW_RENDERINGS[change.kind as Exclude<RowChangeKind, 'handoff.settle'>];
    const key = rendering.keyOf?.(change as never);
    const joins =
      run.length > 0 &&
      run[0]!.kind === change.kind &&
      rendering.alone !== true &&
      (key === undefined || !keys.has(key));
    if (!joins) {
      if (run.length > 0) runs.push(run);
      run = [];
      keys = new Set();
    }
    run.push(change);
    if (key !== undefined) keys.add(key);
  }
  if (run.length > 0) runs.push(run);
  return runs;
}
