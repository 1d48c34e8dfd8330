import { useState } from 'preact/hooks';
import { api, type SessionListAnswer, type SessionSummary } from '../api.js';
import { ago, duration, usd } from '../format.js';
import { offline, usePolled } from '../hooks.js';
import type { Report } from '../report.js';
import { go, hrefOf } from '../router.js';
import { SessionRow } from './session-row.js';

/** Polled this often: the list follows the sessions as their events arrive. */
const REFRESH_MS = 1500;
const PAGE_SIZE = 50;

export interface ListFilters {
  q: string;
  status: string;
  turn_status: string;
  model: string;
  min_cost_usd: string;
  max_cost_usd: string;
  min_latency_p95_ms: string;
  max_latency_p95_ms: string;
  from: string;
  to: string;
  include_conformance: boolean;
}

const NO_FILTERS: ListFilters = {
  q: '',
  status: '',
  turn_status: '',
  model: '',
  min_cost_usd: '',
  max_cost_usd: '',
  min_latency_p95_ms: '',
  max_latency_p95_ms: '',
  from: '',
  to: '',
  include_conformance: false,
};

const FILTER_KEYS = Object.keys(NO_FILTERS) as (keyof ListFilters)[];

/** The filters as the address keeps them: only those set. */
export function filterQuery(filters: ListFilters): string {
  const query = new URLSearchParams();
  for (const key of FILTER_KEYS) {
    const value = filters[key];
    if (value !== NO_FILTERS[key]) query.set(key, String(value));
  }
  return query.toString();
}

export function filtersFrom(query: string): ListFilters {
  const params = new URLSearchParams(query);
  const filters: Record<string, string | boolean> = { ...NO_FILTERS };
  for (const key of FILTER_KEYS) {
    const value = params.get(key);
    if (value !== null) filters[key] = key === 'include_conformance' ? value === 'true' : value;
  }
  return filters as unknown as ListFilters;
}

/** The GET /sessions query for a page: every filter is the server's to apply (docs/http-api.md). */
export function listPath(filters: ListFilters, cursor: string | null): string {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  const passed = [
    'q',
    'status',
    'turn_status',
    'model',
    'min_cost_usd',
    'max_cost_usd',
    'min_latency_p95_ms',
    'max_latency_p95_ms',
  ] as const;
  for (const key of passed) {
    const value = filters[key].trim();
    if (value !== '') query.set(key, value);
  }
  // A date box gives a day; the server compares instants: the day's start, and the next day's start.
  if (filters.from !== '') query.set('from', new Date(`${filters.from}T00:00:00`).toISOString());
  if (filters.to !== '')
    query.set('to', new Date(Date.parse(`${filters.to}T00:00:00`) + 86_400_000).toISOString());
  if (filters.include_conformance) query.set('include_conformance', 'true');
  if (cursor !== null) query.set('cursor', cursor);
  return `/sessions?${query}`;
}

/** Sessions to find and compare: titles, a text search, filters and pages, all answered by the server. */
export function SessionsView({ report, query }: { report: Report; query: string }) {
  const [filters, setFilters] = useState<ListFilters>(() => filtersFrom(query));
  const [typed, setTyped] = useState(filters.q);
  // The cursors of the pages before this one, for "Previous"; the last is this page's.
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors.at(-1) ?? null;
  const { data, error, refresh } = usePolled<SessionListAnswer>(
    listPath(filters, cursor),
    REFRESH_MS,
    report,
  );
  const [creating, setCreating] = useState<string | null>(null);
  const change = (patch: Partial<ListFilters>) => {
    const next = { ...filters, ...patch };
    setFilters(next);
    setCursors([null]);
    // In the address, without a navigation: a reload or a copied link lands on the same list.
    history.replaceState(null, '', hrefOf({ view: 'sessions', query: filterQuery(next) }));
  };
  const create = async () => {
    setCreating('creating…');
    try {
      const session = await api<{ session_id: string }>('POST', '/sessions', {});
      go({ view: 'session', sessionId: session.session_id, focus: null });
    } catch (failure) {
      report(failure);
      setCreating(`could not create a session: ${(failure as Error).message}`);
    }
  };
  const sessions = data?.sessions ?? [];
  const rows = nest(sessions);
  const models = [...new Set(sessions.map((s) => s.model ?? s.active_model).filter((m): m is string => !!m))];
  const filtered = JSON.stringify(filters) !== JSON.stringify(NO_FILTERS);
  const select = (key: 'status' | 'turn_status', label: string, options: string[]) => (
    <label>
      {label}{' '}
      <select value={filters[key]} onChange={(event) => change({ [key]: event.currentTarget.value })}>
        <option value="">any</option>
        {options.map((option) => (
          <option key={option} value={option}>
            {option}
          </option>
        ))}
      </select>
    </label>
  );
  const box = (
    key: keyof ListFilters,
    label: string,
    type: 'text' | 'number' | 'date',
    extra: Record<string, string> = {},
  ) => (
    <FilterBox
      label={label}
      type={type}
      extra={extra}
      value={filters[key] as string}
      apply={(value) => change({ [key]: value })}
    />
  );
  return (
    <section aria-labelledby="sessions-title">
      <div class="toolbar">
        <h1 id="sessions-title">Sessions</h1>
        <form
          class="search"
          onSubmit={(event) => {
            event.preventDefault();
            const text = typed.trim();
            // An id opens its session (the session view says "no such session" if there is none).
            if (/^sess_[0-9A-Z]{26}$/i.test(text)) go({ view: 'session', sessionId: text, focus: null });
            else change({ q: text });
          }}
        >
          <label for="session-search">Search</label>
          <input
            id="session-search"
            type="search"
            value={typed}
            placeholder="words, or a session id"
            onInput={(event) => setTyped(event.currentTarget.value)}
          />
          <button type="submit">Search</button>
        </form>
        <button type="button" class="primary" onClick={create} data-testid="new-session">
          New session
        </button>
      </div>
      <fieldset class="filters" data-testid="session-filters">
        <legend class="visually-hidden">Filters</legend>
        {select('status', 'Status', ['open', 'ended'])}
        {select('turn_status', 'Last turn', ['running', 'completed', 'failed', 'cancelled'])}
        {box('model', 'Model', 'text', { list: 'known-models', placeholder: 'any', size: '14' })}
        <datalist id="known-models">
          {models.map((model) => (
            <option key={model} value={model} />
          ))}
        </datalist>
        {box('min_cost_usd', 'Cost ≥ $', 'number', { min: '0', step: 'any', placeholder: '0' })}
        {box('max_cost_usd', '≤ $', 'number', { min: '0', step: 'any', placeholder: 'any' })}
        {box('min_latency_p95_ms', 'Latency p95 ≥ ms', 'number', { min: '0', step: 'any', placeholder: '0' })}
        {box('max_latency_p95_ms', '≤ ms', 'number', { min: '0', step: 'any', placeholder: 'any' })}
        {box('from', 'From', 'date')}
        {box('to', 'To', 'date')}
        <label>
          <input
            type="checkbox"
            checked={filters.include_conformance}
            onChange={(event) => change({ include_conformance: event.currentTarget.checked })}
          />{' '}
          show conformance
        </label>
        {filtered && (
          <button
            type="button"
            onClick={() => {
              setTyped('');
              change(NO_FILTERS);
            }}
          >
            Clear
          </button>
        )}
      </fieldset>
      {creating && <p role="status">{creating}</p>}
      {offline(error) && (
        <p class="banner warn" role="status">
          {offline(error)}
        </p>
      )}
      {error !== null && error.status === 400 && (
        <p class="banner error" role="alert">
          {error.message}
        </p>
      )}
      {data === null && error === null && <p>Loading…</p>}
      {data !== null && sessions.length === 0 && (
        <p>
          {filtered || cursor !== null
            ? 'No session matches.'
            : 'No sessions yet: start one with “New session”.'}
        </p>
      )}
      {rows.length > 0 && (
        <table class="sessions">
          <thead>
            <tr>
              <th scope="col">Session</th>
              <th scope="col">Status</th>
              <th scope="col">Model</th>
              <th scope="col" class="num">
                Turns
              </th>
              <th scope="col" class="num wide">
                Tokens
              </th>
              <th scope="col" class="num wide">
                Latency p50 / p95
              </th>
              <th scope="col" class="num">
                Cost
              </th>
              <th scope="col">Last activity</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(({ session, depth }) => (
              <SessionRow key={session.id} session={session} depth={depth} report={report} saved={refresh}>
                <td>{session.model ?? session.active_model ?? '–'}</td>
                <td class="num">{session.turn_count}</td>
                <td class="num wide">
                  {session.tokens
                    ? `${session.tokens.input.toLocaleString()} / ${session.tokens.output.toLocaleString()}`
                    : '–'}
                </td>
                <td class="num wide">
                  {session.latency_ms
                    ? `${duration(session.latency_ms.p50)} / ${duration(session.latency_ms.p95)}`
                    : '–'}
                </td>
                <td class="num">{usd(session.cost_usd)}</td>
                <td class="when">{ago(session.last_activity_at)}</td>
              </SessionRow>
            ))}
          </tbody>
        </table>
      )}
      <nav class="pages" aria-label="Pages">
        <button type="button" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>
          ← Previous
        </button>
        <span class="muted">page {cursors.length}</span>
        <button
          type="button"
          disabled={!data?.next_cursor}
          onClick={() => data?.next_cursor && setCursors([...cursors, data.next_cursor])}
        >
          Next →
        </button>
      </nav>
    </section>
  );
}

/**
 * A filter box that keeps what is being typed: the list re-renders at each poll, which would put a
 * controlled input back to the applied value mid-typing. The filter applies on change (Enter, leaving
 * the box, a date picked).
 */
function FilterBox({
  label,
  type,
  extra,
  value,
  apply,
}: {
  label: string;
  type: 'text' | 'number' | 'date';
  extra: Record<string, string>;
  value: string;
  apply: (value: string) => void;
}) {
  const [draft, setDraft] = useState(value);
  const [applied, setApplied] = useState(value);
  // Cleared or changed from outside ("Clear"): what is shown follows.
  if (value !== applied) {
    setApplied(value);
    setDraft(value);
  }
  return (
    <label>
      {label}{' '}
      <input
        // Spread: Preact's typings tie each input type to its own attributes.
        {...({ type, ...extra } as object)}
        value={draft}
        class={`filter-${type}`}
        onInput={(event) => setDraft(event.currentTarget.value)}
        onChange={(event) => apply(event.currentTarget.value)}
      />
    </label>
  );
}

/** Planners first (in the server's order), each followed by its workers, depth-first. */
function nest(sessions: readonly SessionSummary[]): { session: SessionSummary; depth: number }[] {
  const ids = new Set(sessions.map((s) => s.id));
  const children = new Map<string, SessionSummary[]>();
  for (const session of sessions) {
    const parent = session.parent_session_id;
    if (parent !== null && ids.has(parent)) children.set(parent, [...(children.get(parent) ?? []), session]);
  }
  const rows: { session: SessionSummary; depth: number }[] = [];
  const visit = (session: SessionSummary, depth: number) => {
    rows.push({ session, depth });
    for (const child of children.get(session.id) ?? []) visit(child, depth + 1);
  };
  for (const session of sessions)
    if (session.parent_session_id === null || !ids.has(session.parent_session_id)) visit(session, 0);
  return rows;
}
