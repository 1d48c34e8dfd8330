import { MetisError } from '../core/errors.js';

/** The longest `--timeout` taken: a day; a longer wait is a mistake in the unit more likely than not. */
const MAX_SECONDS = 86_400;

/**
 * Parses a follower's `--timeout`: seconds, as `90`, `1.5`, `90s`, `5m` or `1h`. Returns milliseconds,
 * or undefined when the flag was not given.
 * @throws MetisError METIS_ERR_INVALID_ARGUMENT naming the flag and what it got.
 */
export function parseFollowTimeout(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const match = /^(\d+(?:\.\d+)?)(s|m|h)?$/.exec(raw.trim());
  const seconds = match
    ? Number(match[1]) * { s: 1, m: 60, h: 3_600 }[(match[2] as 's' | 'm' | 'h') ?? 's']
    : Number.NaN;
  if (!(seconds > 0 && seconds <= MAX_SECONDS)) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--timeout must be a duration above 0 and at most a day, as 90, 90s, 5m or 1h; got "${raw}"`,
    );
  }
  return Math.round(seconds * 1000);
}
