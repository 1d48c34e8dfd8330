/**
 * What schema version 8 (issue 31, budgets) added, dropped again: tests that set a database's version
 * back by hand drop it with what they undo, as a metis before it would have left the file.
 */
export const DROP_BUDGET_COLUMNS = `ALTER TABLE sessions DROP COLUMN budget_caps_json;
  ALTER TABLE sessions DROP COLUMN spent_usd; ALTER TABLE sessions DROP COLUMN spent_tokens;`;
