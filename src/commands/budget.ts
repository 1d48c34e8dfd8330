import { visibleJson, visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface BudgetOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
  usd?: string;
  tokens?: string;
  /** Cap the session's delegation tree (it and its workers) rather than the session alone. */
  tree?: boolean;
}

interface Caps {
  readonly usd: number | null;
  readonly tokens: number | null;
}

interface Paused {
  readonly session_id: string;
  readonly turn_id: string;
  readonly scope: string;
  readonly measure: string;
  readonly spent: number;
  readonly cap: number;
}

/**
 * `metis budget <session> [--usd N] [--tokens N] [--tree]`: sets or raises a cap (`POST
 * /sessions/{id}/budget`), which resumes a turn paused at it; without a cap, shows the budget.
 */
export async function budgetCommand(sessionId: string, options: BudgetOptions): Promise<void> {
  const usd = amount('--usd', options.usd, false);
  const tokens = amount('--tokens', options.tokens, true);
  const target = await serverTarget(options);
  const path = `/sessions/${encodeURIComponent(sessionId)}/budget`;
  const body = {
    ...(usd === undefined ? {} : { usd }),
    ...(tokens === undefined ? {} : { tokens }),
    ...(options.tree ? { scope: 'tree' } : {}),
  };
  const answer =
    usd === undefined && tokens === undefined
      ? await apiRequest(target, 'GET', path)
      : await apiRequest(target, 'POST', path, body);
  if (options.json) {
    console.log(visibleJson(JSON.stringify(answer)));
    return;
  }
  console.log(describe(answer));
}

function amount(flag: string, value: string | undefined, integer: boolean): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === 'none') return null;
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed < 0 || (integer && !Number.isInteger(parsed)))
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${flag}: "${visibleText(value)}" is not a ${integer ? 'whole number' : 'number'} ≥ 0 (or none to lift the cap)`,
    );
  return parsed;
}

function capText(caps: Caps, spentUsd: number, spentTokens: number): string {
  const usd = caps.usd === null ? `$${spentUsd} (no cap)` : `$${spentUsd} of $${caps.usd}`;
  const tokens =
    caps.tokens === null ? `${spentTokens} tokens (no cap)` : `${spentTokens} of ${caps.tokens} tokens`;
  return `${usd}, ${tokens}`;
}

function describe(answer: Record<string, any>): string {
  const lines = [
    `session ${visibleText(answer.session_id)}: ${capText(answer.session.caps, answer.session.spent_usd, answer.session.spent_tokens)}`,
    `tree of ${visibleText(answer.tree.root_session_id)}: ${capText(answer.tree.caps, answer.tree.spent_usd, answer.tree.spent_tokens)}`,
  ];
  const paused = answer.paused as Paused[];
  if (paused.length === 0) lines.push('no turn is paused');
  for (const p of paused)
    lines.push(
      `paused: turn ${visibleText(p.turn_id)} of ${visibleText(p.session_id)} at the ${p.scope} ${p.measure} cap ` +
        `(${p.spent} of ${p.cap}); raise it with: metis budget ${visibleText(answer.tree.root_session_id)}` +
        `${p.scope === 'tree' ? ' --tree' : ''} --${p.measure} <more>`,
    );
  return lines.join('\n');
}
