import { useMemo, useState } from 'preact/hooks';
import { api, type StoredEvent } from '../api.js';
import { usd } from '../format.js';
import { offline } from '../hooks.js';
import type { Report } from '../report.js';
import { go, hrefOf, type Place } from '../router.js';
import { useTraceFeed } from '../trace-feed.js';
import { domainOf, type SpanNode, spanForest } from '../trace-model.js';
import { markSummary } from './content.js';
import { NoSuchSession } from './no-such-session.js';
import { Detail } from './span-detail.js';
import { SpanTree } from './span-tree.js';
import { Waterfall } from './waterfall.js';

type Tab = 'spans' | 'waterfall' | 'events';
const TAB_NAMES: Record<Tab, string> = { spans: 'Span tree', waterfall: 'Waterfall', events: 'Events' };
interface Filters {
  domain: string;
  type: string;
  actor: string;
  sensitivity: string;
}
const ANY = '';

/**
 * A session and its workers as spans: each turn's tree (turn → model calls → tools → delegated
 * turns) with what was said beside each node, a per-turn waterfall, and the raw events, filterable;
 * the chosen span's words (or event's payload) in a panel beside them.
 */
export function TraceView({ place, report }: { place: Extract<Place, { view: 'trace' }>; report: Report }) {
  const { sessionId, eventId } = place;
  const { events, content, loading, error, refresh } = useTraceFeed(sessionId, 3000, report);
  const [tab, setTab] = useState<Tab>('spans');
  const [filters, setFilters] = useState<Filters>({ domain: ANY, type: ANY, actor: ANY, sensitivity: ANY });
  const turns = useMemo(() => spanForest(events), [events]);
  const spansById = useMemo(() => indexSpans(turns), [turns]);
  const shown = useMemo(
    () =>
      events.filter(
        (event) =>
          (filters.domain === ANY || domainOf(event.type) === filters.domain) &&
          (filters.type === ANY || event.type === filters.type) &&
          (filters.actor === ANY || event.actor === filters.actor) &&
          (filters.sensitivity === ANY || event.sensitivity === filters.sensitivity),
      ),
    [events, filters],
  );
  const selected = events.find((event) => event.id === eventId) ?? null;
  const choose = (event: StoredEvent) => go({ view: 'trace', sessionId, eventId: event.id });
  const rate = (turnId: string, rating: 'thumbs_up' | 'thumbs_down') => {
    api('POST', `/sessions/${encodeURIComponent(sessionId)}/feedback`, { turn_id: turnId, rating })
      .then(refresh)
      .catch(report);
  };
  if (error?.status === 404) return <NoSuchSession sessionId={sessionId} />;
  const values = (pick: (event: StoredEvent) => string) => [...new Set(events.map(pick))].sort();
  const select = (key: keyof Filters, label: string, options: string[]) => (
    <label>
      {label}{' '}
      <select
        value={filters[key]}
        onChange={(event) => setFilters({ ...filters, [key]: event.currentTarget.value })}
      >
        <option value={ANY}>any</option>
        {options.map((option) => (
          <option key={option} value={option}>
            {option}
          </option>
        ))}
      </select>
    </label>
  );
  const sessionScores = events.filter(
    (event) =>
      (event.type === 'feedback.explicit' && event.payload.scope === 'session') ||
      (event.type === 'eval.completed' && event.payload.subject_kind === 'session'),
  );
  const cost = turns.reduce((sum, turn) => sum + Number(turn.end?.payload.total_cost_usd ?? 0), 0);
  return (
    <section class="trace" aria-labelledby="trace-title">
      <div class="toolbar">
        <h1 id="trace-title">
          Trace <span class="muted">{sessionId}</span>
        </h1>
        <a href={hrefOf({ view: 'session', sessionId, focus: null })}>Conversation</a>
      </div>
      {offline(error) && (
        <p class="banner warn" role="status">
          {offline(error)}
        </p>
      )}
      <p class="summary-line" data-testid="trace-summary">
        {turns.length} {turns.length === 1 ? 'turn' : 'turns'} · {usd(cost)}
        {sessionScores.map((score) => (
          <span key={score.id} class="pill score" data-score={score.type}>
            session {markSummary(score)}
          </span>
        ))}
        {loading !== null && (
          <span class="muted" data-testid="trace-loading">
            {' '}
            · loading events… {loading.toLocaleString('en-US')}
          </span>
        )}
      </p>
      <div role="tablist" class="tabs" aria-label="Trace views">
        {(['spans', 'waterfall', 'events'] as const).map((name) => (
          <button
            key={name}
            type="button"
            role="tab"
            aria-selected={tab === name}
            onClick={() => setTab(name)}
          >
            {TAB_NAMES[name]}
          </button>
        ))}
      </div>
      <div class={`trace-body${selected ? ' with-detail' : ''}`}>
        <div class="trace-main" role="tabpanel">
          {tab === 'spans' && (
            <SpanTree
              turns={turns}
              content={content}
              sessionId={sessionId}
              selected={eventId}
              choose={choose}
              rate={rate}
            />
          )}
          {tab === 'waterfall' && <Waterfall turns={turns} content={content} choose={choose} />}
          {tab === 'events' && (
            <>
              <div class="filters">
                {select(
                  'domain',
                  'Domain',
                  values((event) => domainOf(event.type)),
                )}
                {select(
                  'type',
                  'Type',
                  values((event) => event.type),
                )}
                {select(
                  'actor',
                  'Actor',
                  values((event) => event.actor),
                )}
                {select(
                  'sensitivity',
                  'Sensitivity',
                  values((event) => event.sensitivity),
                )}
                <span class="muted">
                  {shown.length} of {events.length} events
                </span>
              </div>
              <EventList events={shown} sessionId={sessionId} selected={eventId} choose={choose} />
            </>
          )}
        </div>
        <aside class="payload" aria-label="Details">
          {selected === null ? (
            <p class="muted">Choose a span or an event to read it here.</p>
          ) : (
            <>
              <button
                type="button"
                class="close"
                aria-label="Close the details"
                onClick={() => go({ view: 'trace', sessionId, eventId: null })}
              >
                ×
              </button>
              <Detail event={selected} span={spansById.get(selected.id) ?? null} content={content} />
            </>
          )}
        </aside>
      </div>
    </section>
  );
}

function indexSpans(turns: readonly SpanNode[]): Map<string, SpanNode> {
  const found = new Map<string, SpanNode>();
  const visit = (span: SpanNode) => {
    found.set(span.start.id, span);
    span.children.forEach(visit);
  };
  turns.forEach(visit);
  return found;
}

function EventList({
  events,
  sessionId,
  selected,
  choose,
}: {
  events: readonly StoredEvent[];
  sessionId: string;
  selected: string | null;
  choose: (e: StoredEvent) => void;
}) {
  return (
    <table class="events">
      <thead>
        <tr>
          <th scope="col">Time</th>
          <th scope="col">Type</th>
          <th scope="col">Actor</th>
          <th scope="col">Sensitivity</th>
        </tr>
      </thead>
      <tbody>
        {events.map((event) => (
          <tr key={event.id} class={event.id === selected ? 'selected' : undefined}>
            <td>{event.timestamp.slice(11, 23)}</td>
            <td>
              <button type="button" class="link" onClick={() => choose(event)} data-event-type={event.type}>
                {event.type}
              </button>
              {event.session_id !== sessionId && (
                <span class="pill worker" title={event.session_id}>
                  worker …{event.session_id.slice(-6)}
                </span>
              )}
            </td>
            <td>{event.actor}</td>
            <td>{event.sensitivity}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
