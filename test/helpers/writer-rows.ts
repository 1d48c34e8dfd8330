import type { RowWrite } from '../../src/core/store/batch-committer.js';
import type { RowChange } from '../../src/core/store/row-change.js';

/** A row write that records how it settled. */
export function recorded(change: RowChange, log: string[], name: string = change.kind): RowWrite {
  return { what: name, change, settled: (committed) => log.push(`${name}:${committed}`) };
}

export function message(id: string, sessionId: string, role: string, content: string): RowChange {
  return {
    kind: 'message.upsert',
    id,
    sessionId,
    turnId: 'turn_1',
    role,
    contentJson: JSON.stringify(content),
    status: 'complete',
    model: null,
    usageJson: null,
    createdAtUs: 1,
  };
}

/** A spend of `usd` on the session: a row that adds, so that writing it twice shows. */
export function spend(sessionId: string, usd: number): RowWrite {
  return { what: 'spend', change: { kind: 'budget.spend', sessionId, usd, tokens: 10 } };
}
