/**
 * A count and its noun, singular for exactly one: `plural(1, 'turn')` is "1 turn", `plural(2, 'turn')`
 * "2 turns", `plural(2, 'retry')` "2 retries" (the nouns metis counts are all regular). The count is
 * written the en-US way (1,234) whatever the machine's locale, so output reads the same everywhere.
 * It lives in the client, the lowest place that prints counts, so the commands can use it too.
 */
export function plural(count: number, word: string): string {
  if (count === 1) return `${count.toLocaleString('en-US')} ${word}`;
  const words = /[^aeiou]y$/.test(word) ? `${word.slice(0, -1)}ies` : `${word}s`;
  return `${count.toLocaleString('en-US')} ${words}`;
}
