import { useState } from 'preact/hooks';
import type { BudgetAnswer, BudgetPause } from '../api.js';
import { usd as formatUsd } from '../format.js';

export interface BudgetRaise {
  readonly scope: 'session' | 'tree';
  readonly measure: 'usd' | 'tokens';
  readonly cap: number;
}

const amount = (measure: 'usd' | 'tokens', value: number) =>
  measure === 'usd' ? formatUsd(value) : `${value.toLocaleString('en')} tokens`;

/**
 * The session's caps and spend (`GET /sessions/{id}/budget`), shown once a cap is set; a turn held at a
 * cap says which cap, how much was spent, and offers a raise (`POST .../budget`) that lets it go on.
 */
export function Budget({
  budget,
  raise,
}: {
  budget: BudgetAnswer | null;
  raise: (change: BudgetRaise) => void;
}) {
  if (budget === null) return null;
  const capped = [budget.session, budget.tree].some((b) => b.caps.usd !== null || b.caps.tokens !== null);
  if (!capped && budget.paused.length === 0) return null;
  return (
    <section class="budget" aria-label="Budget" data-testid="budget">
      <p class="muted">
        {caps('session', budget.session)}
        {budget.tree.root_session_id !== budget.session_id ||
        budget.tree.caps.usd !== null ||
        budget.tree.caps.tokens !== null
          ? ` · ${caps('tree', budget.tree)}`
          : ''}
      </p>
      {budget.paused.map((pause) => (
        <Paused key={pause.turn_id} pause={pause} raise={raise} />
      ))}
    </section>
  );
}

function caps(scope: string, spend: BudgetAnswer['session']): string {
  const parts = [
    `${formatUsd(spend.spent_usd)} of ${spend.caps.usd === null ? 'no cap' : formatUsd(spend.caps.usd)}`,
  ];
  if (spend.caps.tokens !== null)
    parts.push(`${amount('tokens', spend.spent_tokens)} of ${amount('tokens', spend.caps.tokens)}`);
  return `${scope}: ${parts.join(', ')}`;
}

function Paused({ pause, raise }: { pause: BudgetPause; raise: (change: BudgetRaise) => void }) {
  const [cap, setCap] = useState(
    String(pause.measure === 'usd' ? Math.max(pause.cap * 2, pause.spent * 2) : pause.cap * 2),
  );
  const value = Number(cap);
  const valid = cap.trim() !== '' && Number.isFinite(value) && value > pause.spent;
  return (
    <form
      class="banner warn paused"
      aria-live="assertive"
      data-paused={pause.turn_id}
      onSubmit={(event) => {
        event.preventDefault();
        if (valid) raise({ scope: pause.scope, measure: pause.measure, cap: value });
      }}
    >
      <span>
        Paused before its next model call: {pause.scope === 'tree' ? 'the delegation tree' : 'this session'}{' '}
        spent {amount(pause.measure, pause.spent)} of its {amount(pause.measure, pause.cap)} cap.
      </span>
      <label>
        New cap ({pause.measure === 'usd' ? 'USD' : 'tokens'})
        <input
          type="number"
          min={0}
          step="any"
          value={cap}
          onInput={(event) => setCap(event.currentTarget.value)}
        />
      </label>
      <button type="submit" class="primary" disabled={!valid}>
        Raise and go on
      </button>
    </form>
  );
}
