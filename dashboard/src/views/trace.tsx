import { useMemo, useState } from 'preact/hooks';
import type { StoredEvent } from '../api.js';
import { duration } from '../format.js';
import { offline, usePolled } from '../hooks.js';
import type { Report } from '../report.js';
import { go, hrefOf, type Place } from '../router.js';
import { causalTree, domainOf, spanLabel, spans, type TreeNode } from '../trace-model.js';
import { NoSuchSession } from './no-such-session.js';

type Tab = 'events' | 'tree' | 'timeline';
interface Filters {
  domain: string;
  type: string;
  actor: string;
  sensitivity: string;
}
const ANY = '';

/**
 * Every stored event of a session and its workers: a filterable list, the causal tree along
 * `parent_event_id`, a timeline of turn → model calls → tools, and the payload of the chosen event.
 */
export function TraceView({ place, report }: { place: Extract<Place, { view: 'trace' }>; report: Report }) {
  const { sessionId, eventId } = place;
  const { data, error } = usePolled<{ events: StoredEvent[]; has_more: boolean }>(
    `/sessions/${encodeURIComponent(sessionId)}/trace?include_worker_sessions=true`,
    3000,
    report,
  );
  const [tab, setTab] = useState<Tab>('events');
  const [filters, setFilters] = useState<Filters>({ domain: ANY, type: ANY, actor: ANY, sensitivity: ANY });
  const events = data?.events ?? [];
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
  return (
    <section class="trace" aria-labelledby="trace-title">
      <div class="toolbar">
        <h1 id="trace-title">Trace of {sessionId}</h1>
        <a href={hrefOf({ view: 'session', sessionId, focus: null })}>Conversation</a>
      </div>
      {offline(error) && (
        <p class="banner warn" role="status">
          {offline(error)}
        </p>
      )}
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
          {shown.length} of {events.length} events{data?.has_more ? ' (the first ones; more are stored)' : ''}
        </span>
      </div>
      <div role="tablist" class="tabs" aria-label="Trace views">
        {(['events', 'tree', 'timeline'] as const).map((name) => (
          <button
            key={name}
            type="button"
            role="tab"
            aria-selected={tab === name}
            onClick={() => setTab(name)}
          >
            {name === 'events' ? 'Events' : name === 'tree' ? 'Causal tree' : 'Timeline'}
          </button>
        ))}
      </div>
      <div class="trace-body">
        <div class="trace-main" role="tabpanel">
          {tab === 'events' && <EventList events={shown} selected={eventId} choose={choose} />}
          {tab === 'tree' && (
            <ul class="tree" data-testid="causal-tree">
              {causalTree(shown).map((node) => (
                <TreeItem key={node.event.id} node={node} selected={eventId} choose={choose} />
              ))}
            </ul>
          )}
          {tab === 'timeline' && <Timeline events={shown} choose={choose} />}
        </div>
        <aside class="payload" aria-label="Event payload">
          {selected === null ? (
            <p class="muted">Choose an event to see its payload.</p>
          ) : (
            <EventDetail event={selected} />
          )}
        </aside>
      </div>
    </section>
  );
}

function EventList({
  events,
  selected,
  choose,
}: {
  events: StoredEvent[];
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
          <th scope="col">Session</th>
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
            </td>
            <td>{event.actor}</td>
            <td class="muted">{event.session_id}</td>
            <td>{event.sensitivity}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function TreeItem({
  node,
  selected,
  choose,
}: {
  node: TreeNode;
  selected: string | null;
  choose: (e: StoredEvent) => void;
}) {
  const label = (
    <button
      type="button"
      class={`link${node.event.id === selected ? ' selected' : ''}`}
      onClick={() => choose(node.event)}
      data-event-type={node.event.type}
    >
      {node.event.type}
      <span class="muted"> {node.event.session_id}</span>
    </button>
  );
  if (node.children.length === 0) return <li>{label}</li>;
  return (
    <li>
      <details open>
        <summary>{label}</summary>
        <ul>
          {node.children.map((child) => (
            <TreeItem key={child.event.id} node={child} selected={selected} choose={choose} />
          ))}
        </ul>
      </details>
    </li>
  );
}

function Timeline({ events, choose }: { events: StoredEvent[]; choose: (e: StoredEvent) => void }) {
  const list = spans(events);
  if (list.length === 0) return <p class="muted">No turns, model calls or tool calls among these events.</p>;
  const first = Math.min(...list.map((span) => span.startMs));
  const last = Math.max(...list.map((span) => span.endMs ?? span.startMs), first + 1);
  const labelWidth = 220;
  const barsWidth = 480;
  const scale = (ms: number) => ((ms - first) / (last - first)) * barsWidth;
  const rowHeight = 22;
  return (
    <figure class="timeline-figure">
      <svg
        class="timeline"
        viewBox={`0 0 ${labelWidth + barsWidth + 80} ${list.length * rowHeight + 4}`}
        role="img"
        aria-label="Timeline of turns, model calls and tools"
      >
        {list.map((span, index) => {
          const x = labelWidth + scale(span.startMs);
          const end = labelWidth + scale(span.endMs ?? last);
          const y = index * rowHeight + 2;
          const took = span.endMs === null ? 'not ended' : duration(span.endMs - span.startMs);
          return (
            // biome-ignore lint/a11y/useSemanticElements: an SVG group cannot be a <button>; role and tabIndex make it one for the keyboard
            <g
              key={span.start.id}
              class={`span ${span.start.type.split('.')[0]}`}
              role="button"
              tabIndex={0}
              aria-label={`${spanLabel(span)}, ${took}`}
              onClick={() => choose(span.start)}
              onKeyDown={(event) => {
                if (event.key === 'Enter' || event.key === ' ') choose(span.start);
              }}
            >
              <text x={span.depth * 14} y={y + 15}>
                {spanLabel(span)}
              </text>
              <rect x={x} y={y + 3} width={Math.max(2, end - x)} height={rowHeight - 6} rx={3}>
                <title>
                  {span.start.type}: {took}
                </title>
              </rect>
              <text x={Math.max(2, end - x) + x + 4} y={y + 15} class="took">
                {took}
              </text>
            </g>
          );
        })}
      </svg>
      <figcaption class="muted">{duration(last - first)} from the first start to the last end</figcaption>
    </figure>
  );
}

function EventDetail({ event }: { event: StoredEvent }) {
  return (
    <div data-testid="event-detail">
      <h2>{event.type}</h2>
      <dl>
        <dt>id</dt>
        <dd>{event.id}</dd>
        <dt>time</dt>
        <dd>{event.timestamp}</dd>
        <dt>session</dt>
        <dd>{event.session_id}</dd>
        <dt>turn</dt>
        <dd>{event.turn_id ?? '–'}</dd>
        <dt>parent</dt>
        <dd>{event.parent_event_id ?? '–'}</dd>
        <dt>actor · sensitivity</dt>
        <dd>
          {event.actor} · {event.sensitivity}
        </dd>
      </dl>
      {event.turn_id && (
        <p>
          <a href={hrefOf({ view: 'session', sessionId: event.session_id, focus: event.turn_id })}>
            See it in the conversation
          </a>
        </p>
      )}
      <pre>{JSON.stringify(event.payload, null, 2)}</pre>
    </div>
  );
}
