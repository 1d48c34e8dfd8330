import type { StoredEvent, TraceContent, TraceContentEntry } from '../api-types.js';
import { duration, usd } from '../format.js';
import { type SpanNode, spanLabel, spanMs } from '../trace-model.js';
import { contentOf, markSummary, preview, shownMark } from './content.js';

interface TreeProps {
  readonly content: TraceContent | undefined;
  readonly sessionId: string;
  readonly selected: string | null;
  readonly choose: (event: StoredEvent) => void;
  /** Rates a turn of this session (feedback.explicit); its score then shows beside the turn. */
  readonly rate: (turnId: string, rating: 'thumbs_up' | 'thumbs_down') => void;
}

/** The span tree of each turn: turn → model calls → tools → delegations → the worker's turns. */
export function SpanTree({ turns, ...props }: TreeProps & { turns: readonly SpanNode[] }) {
  if (turns.length === 0) return <p class="muted">No turns in this session yet.</p>;
  return (
    <ol class="span-tree" data-testid="span-tree">
      {turns.map((turn, index) => (
        <SpanItem key={turn.start.id} span={turn} number={index + 1} {...props} />
      ))}
    </ol>
  );
}

function SpanItem({ span, number, ...props }: TreeProps & { span: SpanNode; number?: number }) {
  const { content, sessionId, selected, choose, rate } = props;
  const took = spanMs(span);
  const marks = span.marks.filter(shownMark);
  const worker = span.start.session_id !== sessionId;
  return (
    <li
      class={`span-node span-${span.kind} ${span.status}`}
      data-span-kind={span.kind}
      data-span-id={span.start.id}
      data-status={span.status}
    >
      <div class={`span-row${span.start.id === selected ? ' selected' : ''}`}>
        <button type="button" class="span-label" onClick={() => choose(span.start)}>
          {number !== undefined && <span class="muted">#{number} </span>}
          {spanLabel(span)}
          {worker && span.kind === 'turn' && <span class="muted"> (worker)</span>}
        </button>
        <span class={`pill ${span.status}`}>{span.status}</span>
        <span class="took">{took === null ? 'running' : duration(took)}</span>
        <Figures span={span} />
        {span.kind === 'turn' && !worker && span.status !== 'running' && span.start.turn_id !== null && (
          <fieldset class="rate">
            <legend class="visually-hidden">Rate this turn</legend>
            <button type="button" onClick={() => rate(span.start.turn_id!, 'thumbs_up')}>
              Good
            </button>
            <button type="button" onClick={() => rate(span.start.turn_id!, 'thumbs_down')}>
              Bad
            </button>
          </fieldset>
        )}
        <Beside entry={contentOf(content, span)} />
      </div>
      {marks.length > 0 && (
        <ul class="marks">
          {marks.map((mark) => (
            <li key={mark.id} class={`mark ${mark.type.split('.')[0]}`} data-mark={mark.type}>
              <button type="button" class="link" onClick={() => choose(mark)}>
                {markSummary(mark)}
              </button>
              {mark.type === 'route.decided' && <span class="muted"> {alternatives(mark)}</span>}
            </li>
          ))}
        </ul>
      )}
      {span.children.length > 0 && (
        <ul class="span-children">
          {span.children.map((child) => (
            <SpanItem key={child.start.id} span={child} {...props} />
          ))}
        </ul>
      )}
    </li>
  );
}

/** Tokens, cost and retries: what a model call, a turn or a delegation cost. */
function Figures({ span }: { span: SpanNode }) {
  const end = span.end?.payload ?? {};
  const parts: string[] = [];
  if (span.kind === 'model') {
    if (typeof end.input_tokens === 'number') parts.push(`${end.input_tokens} in / ${end.output_tokens} out`);
    if (typeof end.cost_usd === 'number') parts.push(usd(end.cost_usd));
    if (typeof end.retry_count === 'number' && end.retry_count > 0)
      parts.push(`${end.retry_count} ${end.retry_count === 1 ? 'retry' : 'retries'}`);
    if (typeof end.error_class === 'string') parts.push(`failed: ${end.error_class}`);
  }
  if (span.kind === 'turn') {
    if (typeof end.total_input_tokens === 'number')
      parts.push(`${end.total_input_tokens} in / ${end.total_output_tokens} out`);
    if (typeof end.total_cost_usd === 'number') parts.push(usd(end.total_cost_usd));
    if (span.end?.type === 'turn.cancelled') parts.push(`cancelled: ${String(end.reason).replace('_', ' ')}`);
  }
  if (span.kind === 'delegate' && end.worker_total_cost_usd !== undefined)
    parts.push(usd(Number(end.worker_total_cost_usd)));
  if (span.kind === 'tool' && typeof end.error_class === 'string') parts.push(`failed: ${end.error_class}`);
  if (span.kind === 'approval' && typeof end.decision === 'string') parts.push(end.decision);
  if (parts.length === 0) return null;
  return <span class="figures-inline">{parts.join(' · ')}</span>;
}

/** The words beside a span: what a person reads it for, in one line each. */
function Beside({ entry }: { entry: TraceContentEntry | undefined }) {
  const lines: [string, string | null][] =
    entry?.kind === 'turn'
      ? [['user', preview(entry.user_message)]]
      : entry?.kind === 'model_call'
        ? [
            ['thinking', preview(entry.output.thinking)],
            ['text', preview(entry.output.text)],
            ['error', preview(entry.error_message)],
          ]
        : entry?.kind === 'tool_call'
          ? [
              ['input', preview(entry.input)],
              ['output', preview(entry.output ?? entry.error_message)],
            ]
          : [];
  const shown = lines.filter((line): line is [string, string] => line[1] !== null);
  if (shown.length === 0) return null;
  return (
    <div class="beside">
      {shown.map(([name, text]) => (
        <p key={name} class={`said ${name}`} data-said={name}>
          <span class="said-label">{name}</span> {text}
        </p>
      ))}
    </div>
  );
}

/** The route's other candidates: what else the chain considered, and why it did not win. */
export function alternatives(decided: StoredEvent): string {
  const chain = (decided.payload.chain ?? []) as {
    policy: string;
    verdict: string;
    candidate_model: string | null;
    pattern_alternatives?: { model: string; score: number }[] | null;
  }[];
  const winner = chain.find((step) => step.verdict === 'chose');
  const others = chain
    .filter((step) => step.candidate_model !== null && step.verdict !== 'chose')
    .map((step) => `${step.policy}: ${step.candidate_model} ${step.verdict}`);
  for (const step of chain)
    for (const alt of step.pattern_alternatives ?? [])
      others.push(`${alt.model} scored ${alt.score.toFixed(2)}`);
  return `by ${winner?.policy.replace(/_/g, ' ') ?? 'the chain'}${others.length > 0 ? `; also ${others.join(', ')}` : ''}`;
}
