import type pg from 'pg';
import type { RowChange, RowChangeKind } from '../row-change.js';
import { scheduleRowChanges } from './pg-row-schedule.js';
import { PG_ROW_RENDERINGS, type PgStatement } from './pg-row-statements.js';

/**
 * Applies `RowChange`s to a PostgreSQL store: the twin of SqliteRowApplier, with the same effect on the
 * same tables (test/store/row-applier-contract.test.ts holds the two side by side). It runs inside the
 * caller's transaction and opens none: the writer's group commit decides what commits together.
 *
 * Every statement is a round trip, and a writer commits many changes at once, so changes of one kind
 * go in one statement (the values as arrays, `unnest`ed) wherever that has the effect of applying them
 * in queue order: pg-row-schedule.ts groups them, pg-row-statements.ts renders each group.
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

/** The statements of `changes`, in the order they run. Exported for tests of how a batch is grouped. */
export function renderRowChanges(changes: readonly RowChange[]): PgStatement[] {
  return scheduleRowChanges(changes).flatMap((group) =>
    PG_ROW_RENDERINGS[group[0]!.kind as Exclude<RowChangeKind, 'handoff.settle'>].render(group as never),
  );
}
