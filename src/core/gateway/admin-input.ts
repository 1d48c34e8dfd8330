import { MetisError } from '../errors.js';
import type { IssueOptions } from './key-admin.js';

/** What `metis gateway issue-key` is given, as typed. */
export interface IssueFlags {
  readonly name?: string;
  readonly models?: string;
  readonly dailyUsd?: string;
  readonly monthlyUsd?: string;
  readonly user?: string;
  readonly team?: string;
  readonly workspace?: string;
}

const MODEL = /^[a-z0-9][a-z0-9_-]*:.+$/;
const IDENTITY = /^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$/;
const USD = /^\d{1,9}(\.\d{1,8})?$/;
const KEY_ID = /^gk_[0-9A-Z]{26}$/;
const DURATION = /^(\d{1,9})(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

function bad(flag: string, problem: string): MetisError {
  return new MetisError('METIS_ERR_INVALID_ARGUMENT', `${flag}: ${problem}`);
}

/** Checks every flag of issue-key; the error names the flag and what is wrong with it. */
export function issueOptionsOf(flags: IssueFlags, cwd = process.cwd()): IssueOptions {
  const name = (flags.name ?? '').trim();
  if (name === '' || name.length > 200) throw bad('--name', 'must be 1-200 characters');
  return {
    name,
    workspacePath: flags.workspace ?? cwd,
    models: modelsOf(flags.models),
    dailyUsd: usdOf('--daily-usd', flags.dailyUsd),
    monthlyUsd: usdOf('--monthly-usd', flags.monthlyUsd),
    userId: identityOf('--user', flags.user),
    teamId: identityOf('--team', flags.team),
  };
}

function modelsOf(list: string | undefined): string[] | null {
  if (list === undefined) return null;
  const models = list
    .split(',')
    .map((model) => model.trim())
    .filter((model) => model !== '');
  if (models.length === 0) throw bad('--models', 'must name at least one model');
  const wrong = models.find((model) => !MODEL.test(model));
  if (wrong !== undefined) throw bad('--models', `"${wrong}" is not provider:name or provider:*`);
  return [...new Set(models)];
}

function usdOf(flag: string, value: string | undefined): string | null {
  if (value === undefined) return null;
  const trimmed = value.trim();
  if (!USD.test(trimmed) || Number(trimmed) <= 0)
    throw bad(flag, `"${value}" is not a positive amount in USD like 5 or 0.25`);
  return trimmed;
}

function identityOf(flag: string, value: string | undefined): string | null {
  if (value === undefined) return null;
  if (!IDENTITY.test(value))
    throw bad(flag, `"${value}" must be 1-128 letters, digits or _ . : @ -, starting with a letter or digit`);
  return value;
}

export function keyIdOf(value: string): string {
  if (!KEY_ID.test(value)) throw bad('key_id', `"${value}" is not a gateway key id (gk_ and 26 characters)`);
  return value;
}

/** A grace period: `0`, or a whole number with ms, s, m, h or d. */
export function graceMsOf(value: string): number {
  if (value.trim() === '0') return 0;
  const match = DURATION.exec(value.trim());
  if (match === null) throw bad('--grace', `"${value}" is not a duration like 0, 90s, 30m, 24h or 7d`);
  return Number(match[1]) * UNIT_MS[match[2]!]!;
}
