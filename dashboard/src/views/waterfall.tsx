import { useState } from 'preact/hooks';
import type { StoredEvent, TraceContent, TraceContentEntry } from '../api-types.js';
import { duration } from '../format.js';
import { flatten, type SpanNode, spanLabel, spanMs } from '../trace-model.js';
import { foldedAxis, type TimeWindow, zoomed } from '../waterfall-model.js';
import { contentOf, markSummary, preview } from './content.js';

const LABEL_WIDTH = 250;
const BARS_WIDTH = 620;
const ROW_HEIGHT = 22;
const AXIS_HEIGHT = 20;

/**
 * One turn as a waterfall: its spans on a time axis that spans the turn (not the session), idle
 * stretches folded, with zoom and pan for the short bars.
 */
export function Waterfall({
  turns,
  content,
  choose,
}: {
  turns: readonly SpanNode[];
  content: TraceContent | undefined;
  choose: (event: StoredEvent) => void;
}) {
  const [chosenTurn, setChosenTurn] = useState<string | null>(null);
  const turn = turns.find((t) => t.start.id === chosenTurn) ?? turns.at(-1);
  if (turn === undefined) return <p class="muted">No turns in this session yet.</p>;
  return (
    <div class="waterfall-view">
      <label>
        Turn to draw{' '}
        <select value={turn.start.id} onChange={(event) => setChosenTurn(event.currentTarget.value)}>
          {turns.map((t, index) => (
            <option key={t.start.id} value={t.start.id}>
              #{index + 1} {turnTitle(contentOf(content, t)) ?? t.start.turn_id} ({t.status})
            </option>
          ))}
        </select>
      </label>
      <TurnWaterfall key={turn.start.id} turn={turn} choose={choose} />
    </div>
  );
}

function boundsOf(turn: SpanNode, rows: { span: SpanNode }[]): TimeWindow {
  const ends = rows.map(({ span }) => span.endMs ?? span.startMs);
  return { fromMs: turn.startMs, toMs: Math.max(turn.startMs + 1, turn.endMs ?? 0, ...ends) };
}

function TurnWaterfall({ turn, choose }: { turn: SpanNode; choose: (event: StoredEvent) => void }) {
  const rows = flatten(turn);
  const bounds = boundsOf(turn, rows);
  const [window, setWindow] = useState<TimeWindow>(bounds);
  const [folding, setFolding] = useState(true);
  const busy = rows
    .filter(({ depth }) => depth > 0)
    .map(({ span }) => ({ fromMs: span.startMs, toMs: span.endMs ?? bounds.toMs }));
  const axis = folding ? foldedAxis(window, busy) : foldedAxis(window, [], 2);
  const center = (window.fromMs + window.toMs) / 2;
  const zoomedIn = window.toMs - window.fromMs < bounds.toMs - bounds.fromMs;
  const pan = (share: number) => {
    const width = window.toMs - window.fromMs;
    setWindow(zoomed(bounds, window, 1, center + width * share));
  };
  const height = rows.length * ROW_HEIGHT + AXIS_HEIGHT + 4;
  const xOf = (ms: number) => LABEL_WIDTH + axis.x(ms) * BARS_WIDTH;
  const ticks: number[] = [];
  // Evenly in time, but never two labels on top of each other where a gap is folded.
  for (const share of [0, 0.25, 0.5, 0.75, 1]) {
    const ms = window.fromMs + share * (window.toMs - window.fromMs);
    const last = ticks.at(-1);
    if (last === undefined || xOf(ms) - xOf(last) > 70) ticks.push(ms);
  }
  return (
    <figure class="timeline-figure" data-testid="waterfall">
      <fieldset class="zoom">
        <legend class="visually-hidden">Zoom</legend>
        <button type="button" onClick={() => setWindow(zoomed(bounds, window, 2, center))}>
          Zoom in
        </button>
        <button
          type="button"
          disabled={!zoomedIn}
          onClick={() => setWindow(zoomed(bounds, window, 0.5, center))}
        >
          Zoom out
        </button>
        <button type="button" disabled={!zoomedIn} onClick={() => pan(-0.5)} aria-label="Earlier">
          ◀
        </button>
        <button type="button" disabled={!zoomedIn} onClick={() => pan(0.5)} aria-label="Later">
          ▶
        </button>
        <button type="button" disabled={!zoomedIn} onClick={() => setWindow(bounds)}>
          Whole turn
        </button>
        <label>
          <input
            type="checkbox"
            checked={folding}
            onChange={(event) => setFolding(event.currentTarget.checked)}
          />{' '}
          fold idle gaps
        </label>
      </fieldset>
      <svg
        class="timeline"
        viewBox={`0 0 ${LABEL_WIDTH + BARS_WIDTH + 70} ${height}`}
        role="img"
        aria-label="Waterfall of the turn's model calls and tools"
        data-window={`${Math.round(window.fromMs)}-${Math.round(window.toMs)}`}
      >
        {ticks.map((ms) => (
          <text key={ms} class="tick" x={xOf(ms)} y={12} text-anchor="middle">
            +{duration(ms - bounds.fromMs)}
          </text>
        ))}
        {axis.gaps.map((gap) => (
          <g key={gap.fromMs} class="gap">
            <rect
              x={xOf(gap.fromMs)}
              y={AXIS_HEIGHT}
              width={Math.max(2, xOf(gap.toMs) - xOf(gap.fromMs))}
              height={height - AXIS_HEIGHT}
            >
              <title>{duration(gap.toMs - gap.fromMs)} with nothing running, folded</title>
            </rect>
          </g>
        ))}
        {rows.map(({ span, depth }, index) => {
          const y = AXIS_HEIGHT + index * ROW_HEIGHT;
          const took = spanMs(span);
          const endMs = span.endMs ?? bounds.toMs;
          const x = xOf(span.startMs);
          const width = Math.max(2, xOf(endMs) - x);
          const tookText = took === null ? 'running' : duration(took);
          const visible = endMs >= window.fromMs && span.startMs <= window.toMs;
          return (
            // biome-ignore lint/a11y/useSemanticElements: an SVG group cannot be a <button>; role and tabIndex make it one for the keyboard
            <g
              key={span.start.id}
              class={`span ${span.kind} ${span.status}`}
              data-span-id={span.start.id}
              role="button"
              tabIndex={0}
              aria-label={`${spanLabel(span)}, ${span.status}, ${tookText}`}
              onClick={() => choose(span.start)}
              onKeyDown={(event) => {
                if (event.key === 'Enter' || event.key === ' ') choose(span.start);
              }}
            >
              <text x={Math.min(depth, 6) * 12} y={y + 15}>
                {clip(
                  `${spanLabel(span)}${span.kind === 'turn' && depth > 0 ? ' (worker)' : ''}`,
                  34 - Math.min(depth, 6) * 2,
                )}
              </text>
              {visible && (
                <rect x={x} y={y + 4} width={width} height={ROW_HEIGHT - 8} rx={3}>
                  <title>
                    {spanLabel(span)}: {span.status}, {tookText}
                  </title>
                </rect>
              )}
              {span.marks
                .filter((mark) => /^(skill|memory)\./.test(mark.type))
                .map((mark) => {
                  const at = Date.parse(mark.timestamp);
                  if (at < window.fromMs || at > window.toMs) return null;
                  const cx = xOf(at);
                  const cy = y + ROW_HEIGHT / 2;
                  return (
                    <path
                      key={mark.id}
                      class="mark-point"
                      data-mark={mark.type}
                      d={`M${cx} ${cy - 6}L${cx + 6} ${cy}L${cx} ${cy + 6}L${cx - 6} ${cy}Z`}
                    >
                      <title>{markSummary(mark)}</title>
                    </path>
                  );
                })}
              {visible && (
                <text x={Math.min(x + width + 4, LABEL_WIDTH + BARS_WIDTH + 4)} y={y + 15} class="took">
                  {tookText}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <figcaption class="muted">
        {duration(bounds.toMs - bounds.fromMs)} for the whole turn
        {axis.gaps.length > 0 &&
          `; ${axis.gaps.length} idle ${axis.gaps.length === 1 ? 'gap' : 'gaps'} folded (shaded)`}
      </figcaption>
    </figure>
  );
}

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function turnTitle(entry: TraceContentEntry | undefined): string | null {
  return entry?.kind === 'turn' ? preview(entry.user_message, 60) : null;
}
