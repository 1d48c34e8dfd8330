/**
 * SQLite's `sum()` of doubles (Kahan-Babuska-Neumaier, since 3.43), so a cost summed here is the same
 * double `SessionStore.storedCost` answers: a numeric or float8 sum in PostgreSQL can differ in the
 * last bit (0.1 + 0.2), and the runtime seeds its running cost from this figure.
 */
function sqliteSum(values: readonly number[]): number {
  let sum = 0;
  let error = 0;
  for (const value of values) {
    const next = sum + value;
    error += Math.abs(sum) > Math.abs(value) ? sum - next + value : value - next + sum;
    sum = next;
  }
  return Number.isNaN(error) ? sum : sum + error;
}

/** What SQLite's `CAST(text AS REAL)` makes of a text: its longest numeric prefix, else 0. */
const textAsReal = (text: string): number => {
  const value = Number.parseFloat(text);
  return Number.isNaN(value) ? 0 : value;
};

/**
 * What SessionStore.storedCost answers for a session's cost events (each one's type and the amount its
 * payload holds as JSON text, in id order): as json_extract then sum(), a missing amount counts nothing
 * and a worker's is text cast to REAL.
 */
export function costOfAmounts(rows: readonly { type: string; amount: string | null }[]): number {
  return sqliteSum(
    rows
      .filter((row) => row.amount !== null)
      .map((row) => (row.type === 'llm.call_completed' ? Number(row.amount) : textAsReal(row.amount!))),
  );
}
