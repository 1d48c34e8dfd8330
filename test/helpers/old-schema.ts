/**
 * What schema versions 8 and 9 (issue 31: budgets, queued messages) added, dropped again: tests that set a database's version
 * back by hand drop it with what they undo, as a metis before it would have left the file.
 */
export const DROP_BUDGET_COLUMNS = `ALTER TABLE sessions DROP COLUMN budget_caps_json;
  ALTER TABLE sessions DROP COLUMN spent_usd; ALTER TABLE sessions DROP COLUMN spent_tokens;
  ALTER TABLE sessions DROP COLUMN queue_json;`;
